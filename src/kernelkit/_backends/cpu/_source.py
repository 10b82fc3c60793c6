"""Render: assemble the C++ translation unit of one CPU kernel.

Layout: the prelude include (precompiled), the user header, the kernel as a per-thread function
whose parameters ``threadIdx``/``blockIdx``/``blockDim``/``gridDim`` shadow the prelude's
thread-locals, one block runner (a plain loop, or fibers when the code synchronizes), and an
``extern "C"`` launch entry that unpacks CUDA's ``void*[]`` kernel parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..._abi import (
    extent_param,
    launch_bounds,
    prelude_undefs,
    signature,
    template_args,
    template_head,
)
from ..._dtypes import DTYPES
from ..._errors import BackendError
from ..._records import KernelSource, Param

__all__ = ["RenderedKernel", "launch_symbol", "needs_fibers", "render_source"]

PRELUDE = "kk_cpu.h"

# Anything that must rendezvous with other threads of the block makes the kernel run as fibers
# (tests/unit/test_cpu_fiber_detection.py checks this lists every rendezvous of the headers).
_FIBER_RE = re.compile(
    r"__sync|__shfl|__ballot|__any_sync|__all_sync|__activemask|__reduce_\w+_sync|__match_\w+_sync|"
    r"\bcoalesced_threads\b|\b(?:labeled|binary)_partition\b|\bthread_group\b|"
    r"\bsync\s*\(|\bshfl\w*\s*\(|\breduce\s*\(|_scan\s*\(|\bballot\s*\(|\bany\s*\(|\ball\s*\(|"
    r"\bmatch_any\s*\(|\bmap_shared_rank\b|"  # another block's memory: after a cluster barrier
    r"#\s*include\s*[<\"]cub/|\bcub::"  # CUB's collectives wait at barriers and shuffles
)
# Helpers that read the thread index through the prelude's thread-locals (not the kernel's
# parameters), so the loop runner must keep them current.
_TLS_RE = re.compile(r"\bthreadIdx\b|kk_linear_tid|\bcg\b|cooperative_groups|__activemask")
_EXTERN_SHARED_RE = re.compile(
    r"\bextern\s+__shared__\s+([^;\[\]{}()]*(?:\([^)]*\)[^;\[\]{}()]*)*?)\b([A-Za-z_]\w*)\s*\[\s*\]\s*;"
)
_FIBER_SYNC = (
    "kk_block* const kk_blk, ",
    "#define __syncthreads() kk_syncthreads_in(kk_blk, __FILE__, __LINE__)",
    "#undef __syncthreads",
)
# A GPU refuses more static shared memory per block than this (ptxas "uses too much shared data").
STATIC_SHARED_LIMIT_BYTES = 48 * 1024
# Comments and literals (skipped), braces (scopes), `__shared__ ... ;` declarations.
_SHARED_SCAN_RE = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|([{}])|"
    r"\b__shared__\b([^;{}]*);",
    re.S,
)
# Checked-mode rewrite: what follows or precedes an array name.
_INDEX_NEXT_RE = re.compile(r"\s*\[")
_MOVE_NEXT_RE = re.compile(r"\s*(?:\+\+|--|[-+]=|=(?!=))")
_DEREF_BEFORE_RE = re.compile(r"(?:[(\[,=;{}?:!&|+\-*/%<>~^]|\breturn)\s*\*\s*$")
_AUTO_BEFORE_RE = re.compile(r"\bauto\s+(?:const\s+)?[A-Za-z_]\w*\s*=\s*$")
_ALIGN_RE = re.compile(r"(__align__|alignas)\s*\([^)]*\)")
_ASM_KEYWORDS = frozenset({"asm", "__asm__", "__asm"})
# What follows `asm` in an empty asm statement (a compiler barrier, valid on the host too).
_EMPTY_ASM_RE = re.compile(r"(?:\s+(?:volatile|__volatile__|inline|goto)\b)*\s*\(\s*\"\"\s*[:)]")
# Comments and literals (kept as they are), or an identifier.
_TOKEN_RE = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|(?<![\w.])(?<!->)(?<!::)([A-Za-z_]\w*)",
    re.S,
)


@dataclass(frozen=True)
class RenderedKernel:
    """The generated translation unit and the facts the loader needs."""

    text: str
    symbol: str
    fibers: bool


def launch_symbol(source: KernelSource) -> str:
    """The exported C symbol of a kernel's launch entry."""
    return f"kk_launch_{source.entry}"


def needs_fibers(source: KernelSource) -> bool:
    """Whether the kernel's code may wait for other threads (barrier, warp operation)."""
    return bool(_FIBER_RE.search("\n".join((source.header, source.preamble, source.body))))


def render_source(source: KernelSource, check: bool) -> RenderedKernel:
    """The complete C++ source of one kernel specialization."""
    fibers = needs_fibers(source)
    tls = check or fibers or bool(_TLS_RE.search(source.header)) or "cg" in source.needs
    tls = tls or "__trap" in source.body  # its fault message names the thread
    arrays = [p for p in source.params if p.kind == "array"]
    extents = _extent_params(source, arrays) if check else {}
    members = [
        (p, _member_type(p, check)) for p in source.params if not (check and p.kind == "extent")
    ]
    header = _limit_static_shared(_rewrite_extern_shared(_refuse_asm(source.header)))
    body = _limit_static_shared(_rewrite_extern_shared(_refuse_asm(source.body)))
    if check:
        body = _rewrite_array_uses(body, {p.name for p in arrays})
    name = source.kernel
    kernel_params = ", ".join(f"{t} {p.name}" for p, t in members)
    call_args = ", ".join(f"a.{p.name}" for p, _ in members)
    targs = template_args(source)
    inline = "inline __attribute__((always_inline))" if not fibers else "__attribute__((noinline))"
    # Fiber mode: the body's __syncthreads() uses the block passed in (no TLS lookup per barrier).
    no_sync = ("", "", "")
    block_param, sync_def, sync_undef = _FIBER_SYNC if fibers else no_sync
    head = [f'#include "{PRELUDE}"', prelude_undefs(source), f'#line 1 "{name}.header"', header]
    lines = [
        '#line {LINE} "{FILE}"',
        "namespace {",
        "struct kk_args {",
        *(f"  {t} {p.name};" for p, t in members),
        "};",
        template_head(source),  # template values: kk_thread is a function template
        f"static {inline} void {launch_bounds(source)}kk_thread({block_param}"
        "const uint3 threadIdx, const uint3 blockIdx,",
        f"    const dim3 blockDim, const dim3 gridDim{_lead(kernel_params)}) {{",
        sync_def,
        source.preamble,
        f'#line 1 "{name}"',
        body,
        "\n}",
        sync_undef,
        '#line {LINE} "{FILE}"',
        *(_fiber_runner(call_args, targs) if fibers else _loop_runner(call_args, tls, targs)),
        "}  // namespace",
        *_entry(source, members, extents, fibers),
    ]
    text = _number_lines("\n".join(head) + "\n" + "\n".join(lines) + "\n", f"{name}.kk.cpp")
    return RenderedKernel(text=text, symbol=launch_symbol(source), fibers=fibers)


def _member_type(p: Param, check: bool) -> str:
    if p.kind == "array":
        ctype = DTYPES[p.dtype].ctype  # type: ignore[index]
        ctype = ctype if p.is_output else f"const {ctype}"
        return f"kk_checked_ptr<{ctype}>" if check else f"{ctype}*"
    if p.kind == "extent":
        return "long long"
    if p.kind == "scalar_array":  # a pointer to const: the member itself stays assignable
        return f"const {DTYPES[p.dtype].ctype}*"  # type: ignore[index]
    # the standard spelling, minus its leading "const " and the name
    return signature((p,)).removeprefix("const ").rsplit(" ", 1)[0]


def _extent_params(source: KernelSource, arrays: list[Param]) -> dict[str, int]:
    index = {p.name: i for i, p in enumerate(source.params) if p.kind == "extent"}
    found = {}
    for p in arrays:
        i = index.get(extent_param(p.name))
        if i is None:
            raise BackendError(
                f"[{source.kernel}] cpu: checked mode needs an extent param "
                f"{extent_param(p.name)!r} "
                f"for array {p.name!r}; got params {[q.name for q in source.params]}"
            )
        found[p.name] = i
    return found


def _loop_runner(call_args: str, tls: bool, targs: str) -> list[str]:
    set_tls = "threadIdx = tid; " if tls else ""
    return [
        "void kk_run_block(const kk_launch& L, const uint3 bid) {",
        "  const kk_args& a = *static_cast<const kk_args*>(L.args);",
        "  const dim3 bd = L.block, gd = L.grid;",
        "  for (unsigned z = 0; z < bd.z; ++z)",
        "    for (unsigned y = 0; y < bd.y; ++y)",
        "      for (unsigned x = 0; x < bd.x; ++x) {",
        "        const uint3 tid = make_uint3(x, y, z);",
        f"        {set_tls}kk_thread{targs}(tid, bid, bd, gd{_lead(call_args)});",
        "      }",
        "}",
        "void kk_run_thread(const void*, uint3, kk_block*) {}",
    ]


def _fiber_runner(call_args: str, targs: str) -> list[str]:
    return [
        "void kk_run_block(const kk_launch& L, const uint3) { kk_run_fibers(L); }",
        "void kk_run_thread(const void* p, const uint3 tid, kk_block* b) {",
        "  const kk_args& a = *static_cast<const kk_args*>(p);",
        f"  kk_thread{targs}(b, tid, blockIdx, blockDim, gridDim{_lead(call_args)});",
        "}",
    ]


def _lead(args: str) -> str:
    return f", {args}" if args else ""


def _entry(
    source: KernelSource, members: list[tuple[Param, str]], extents: dict[str, int], fibers: bool
) -> list[str]:
    index = {p.name: i for i, p in enumerate(source.params)}
    unpack = []
    for p, ctype in members:
        i = index[p.name]
        if ctype.startswith("kk_checked_ptr<"):
            inner = ctype[len("kk_checked_ptr<") : -1]
            unpack.append(
                f"  {{ {inner}* raw; long long ext; memcpy(&raw, params[{i}], sizeof raw); "
                f"memcpy(&ext, params[{extents[p.name]}], sizeof ext); "
                f'a.{p.name} = {ctype}{{raw, 0, ext, "{p.name}", "?", 0}}; }}'
            )
        else:
            unpack.append(f"  memcpy(&a.{p.name}, params[{i}], sizeof(a.{p.name}));")
    mode = ("fibers" if fibers else "loop") + (" cooperative" if source.cooperative else "")
    export = 'extern "C" __attribute__((visibility("default")))'
    return [
        f"{export} int {launch_symbol(source)}(void** params, long long gx, long long gy,",
        "    long long gz, long long bx, long long by, long long bz, long long shmem,",
        "    int nthreads) {",
        "  kk_args a;",
        *unpack,
        "  return kk_launch_grid(&a, kk_run_block, kk_run_thread, gx, gy, gz, bx, by, bz, shmem,",
        f"                        nthreads, {'true' if source.cooperative else 'false'}, "
        f"{', '.join(str(c) for c in _cluster(source))});",
        "}",
        f"{export} const char* kk_fault_text() {{ return kk_last_fault; }}",
        f'{export} const char* kk_kernel_info() {{ return "{source.kernel}\\t{mode}"; }}',
    ]


def _cluster(source: KernelSource) -> tuple[int, int, int]:
    """The kernel's cluster shape (1, 1, 1 without clusters): kk_run_clusters runs each."""
    dims = tuple(source.cluster_dims or ())
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _number_lines(text: str, file: str) -> str:
    """Fill each ``#line {LINE} "{FILE}"`` with its own position (after the user's text)."""
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        if line == '#line {LINE} "{FILE}"':
            line = f'#line {n + 1} "{file}"'
        out.append(line)
    return "\n".join(out)


def _refuse_asm(code: str) -> str:
    """Each ``asm`` with an instruction (PTX) -> ``KK_PTX_ASM``, which the compiler refuses at
    that line unless the preprocessor drops it; empty asm statements (barriers) are kept."""

    def repl(m: re.Match[str]) -> str:
        if m.group(1) in _ASM_KEYWORDS and not _EMPTY_ASM_RE.match(code, m.end()):
            return "KK_PTX_ASM"
        return m.group(0)

    return _TOKEN_RE.sub(repl, code) if "asm" in code else code


def _rewrite_extern_shared(code: str) -> str:
    """``extern __shared__ T name[];`` -> a pointer to this block's dynamic shared memory."""

    def repl(m: re.Match[str]) -> str:
        ctype = " ".join(_ALIGN_RE.sub(" ", m.group(1)).split())
        newlines = "\n" * m.group(0).count("\n")  # keep the user's line numbers
        return f"{ctype}* const {m.group(2)} = static_cast<{ctype}*>(kk_dynamic_smem());{newlines}"

    return _EXTERN_SHARED_RE.sub(repl, code)


def _limit_static_shared(code: str) -> str:
    """After each ``__shared__`` declaration, a static_assert that the static shared memory in
    scope there fits the GPU's 48 KB: a kernel the GPU refuses fails on the CPU too. (Arrays in
    sibling scopes, or in the header and the body, are not added up.)"""
    out, pos, scopes, next_scope = [], 0, [0], 1
    seen: list[tuple[tuple[int, ...], str]] = []  # (scope path, name) of earlier declarations
    for m in _SHARED_SCAN_RE.finditer(code):
        if m.group(1) == "{":
            scopes.append(next_scope)
            next_scope += 1
        elif m.group(1) == "}" and len(scopes) > 1:
            scopes.pop()
        elif m.group(2) is not None:
            path = tuple(scopes)
            seen.extend((path, n) for n in _declared_names(m.group(2)))
            visible = [n for p, n in seen if path[: len(p)] == p]
            if visible:
                total = " + ".join(f"sizeof({n})" for n in visible)
                out.append(code[pos : m.end()])
                out.append(
                    f' static_assert({total} <= {STATIC_SHARED_LIMIT_BYTES}, "kernelkit: more '
                    f"than 48 KB ({STATIC_SHARED_LIMIT_BYTES} bytes) of static __shared__ memory "
                    f'per block, which no GPU compiles; use extern __shared__ (dynamic) memory");'
                )
                pos = m.end()
    out.append(code[pos:])
    return "".join(out)


def _declared_names(declaration: str) -> list[str]:
    """The variable names of ``float a[N], b`` (text after ``__shared__``, before ``;``)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = angle = 0
    for ch in declaration:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and ch in "<>":
            angle += 1 if ch == "<" else -1
        elif ch == "," and depth == 0 and angle == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    names = []
    for part in parts:
        part = re.sub(r"\[[^\]]*\]|=.*", " ", part.split("=")[0])
        idents = re.findall(r"[A-Za-z_]\w*", _ALIGN_RE.sub(" ", part))
        if idents and idents[-1] not in ("const", "volatile"):
            names.append(idents[-1])
    return names


def _rewrite_array_uses(body: str, names: set[str]) -> str:
    """Checked mode: rewrite each use of an array parameter by how it is used (see
    kk_cpu_checked.h): element accesses are checked and tagged with their line, moves of the
    pointer keep the checked pointer, every other use gets the plain pointer."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None or name not in names:
            return m.group(0)
        start = max(0, m.start() - 80)
        before = (";" if start == 0 else "") + body[start : m.start()]
        checked = f"kk_at({name}, __FILE__, __LINE__)"
        if _INDEX_NEXT_RE.match(body, m.end()) or _DEREF_BEFORE_RE.search(before):
            return checked
        if _MOVE_NEXT_RE.match(body, m.end()) or before.rstrip().endswith(("++", "--")):
            return name
        if _AUTO_BEFORE_RE.search(before):  # `auto p = x + n;`: p stays a checked pointer
            return checked
        return f"kk_raw({name})"

    return _TOKEN_RE.sub(repl, body)
