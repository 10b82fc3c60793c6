"""The Metal dialect: an ``mx.fast.metal_kernel`` body (Metal Shading Language) -> a CUDA body.

A stage of its own before render (DESIGN.md, "Source dialects"): what it returns is a body and a
header in kernelkit's CUDA dialect, plus hidden scalar inputs, so signatures, keys, caches and
backends never see Metal. The rewrite works on tokens and keeps every newline, so line ``n`` of
the CUDA body is line ``n`` of the user's Metal body (compile errors point at the Metal source);
line 1 also carries the thread attribute locals, the grid guard and the 0-d input bindings.

What it rewrites: address spaces (``device``/``constant``/``thread`` go, ``threadgroup T x[n]``
becomes ``__shared__``), ``threadgroup_barrier(...)`` -> ``__syncthreads()``, Metal library
names -> ``metal::`` (vector types, math, simd_*, atomics, ``numeric_limits``, ``as_type``;
functions only where called), ``fast::``/``precise::`` -> ``metal::``, swizzles ``.xy`` ->
``.template kk_swz<0, 1>()`` (``kk_swr`` when assigned to), ``1.5h`` -> ``half(1.5f)``. The
library itself is ``include/kk_metal.h``, shared by every backend. DESIGN.md beside this file
says why a token rewrite and not a parser.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from .._errors import ArgumentError
from .metal_tokens import Tok, cast_conditionals, check_balanced, tokens

__all__ = [
    "ATTRIBUTES",
    "GRID_INPUTS",
    "MetalTranslation",
    "attributes_used",
    "prelude",
    "translate",
]

GRID_INPUTS = ("kk_metal_grid_x", "kk_metal_grid_y", "kk_metal_grid_z")  # hidden scalar inputs
_GX, _GY, _GZ = GRID_INPUTS
_POS = "blockIdx.{0} * blockDim.{0} + threadIdx.{0}"
_TPT = "metal::min((unsigned)blockDim.{0}, (unsigned){1} - blockIdx.{0} * blockDim.{0})"
_TG_THREADS = " * ".join(_TPT.format(a, g) for a, g in zip("xyz", GRID_INPUTS))
_BLOCK_THREADS = "blockDim.x * blockDim.y * blockDim.z"


def _u3(x: str, y: str, z: str) -> str:
    return f"metal::uint3({x}, {y}, {z})"


# MLX's table (mlx/backend/common/metal_kernel.cpp): attribute -> (Metal type, CUDA value).
# The grid is MLX's dispatchThreads grid (threads, not rounded up to whole threadgroups).
ATTRIBUTES: dict[str, tuple[str, str]] = {
    "dispatch_quadgroups_per_threadgroup": ("uint", f"({_BLOCK_THREADS} + 3) / 4"),
    "dispatch_simdgroups_per_threadgroup": ("uint", f"({_BLOCK_THREADS} + 31) / 32"),
    "dispatch_threads_per_threadgroup": ("uint3", _u3("blockDim.x", "blockDim.y", "blockDim.z")),
    "grid_origin": ("uint3", _u3("0", "0", "0")),
    "grid_size": ("uint3", _u3(_GX, _GY, _GZ)),
    "quadgroup_index_in_threadgroup": ("uint", "kk_linear_tid() / 4"),
    "quadgroups_per_threadgroup": ("uint", f"({_TG_THREADS} + 3) / 4"),
    "simdgroup_index_in_threadgroup": ("uint", "kk_linear_tid() / 32"),
    "simdgroups_per_threadgroup": ("uint", f"({_TG_THREADS} + 31) / 32"),
    "thread_execution_width": ("uint", "32"),
    "thread_index_in_quadgroup": ("uint", "kk_linear_tid() % 4"),
    "thread_index_in_simdgroup": ("uint", "kk_linear_tid() % 32"),
    "thread_index_in_threadgroup": ("uint", "kk_linear_tid()"),
    "thread_position_in_grid": ("uint3", _u3(*(_POS.format(a) for a in "xyz"))),
    "thread_position_in_threadgroup": (
        "uint3",
        _u3("threadIdx.x", "threadIdx.y", "threadIdx.z"),
    ),
    "threadgroup_position_in_grid": ("uint3", _u3("blockIdx.x", "blockIdx.y", "blockIdx.z")),
    "threadgroups_per_grid": ("uint3", _u3("gridDim.x", "gridDim.y", "gridDim.z")),
    "threads_per_grid": ("uint3", _u3(_GX, _GY, _GZ)),
    "threads_per_simdgroup": ("uint", "32"),
    "threads_per_threadgroup": (
        "uint3",
        _u3(*(_TPT.format(a, g) for a, g in zip("xyz", GRID_INPUTS))),
    ),
}
_ATTR_RE = re.compile(r"\b(" + "|".join(ATTRIBUTES) + r")\b")

# Constructs with no counterpart here: (pattern over identifiers, what to call them, why).
_REFUSED = [
    (
        re.compile(
            r"simdgroup_(?:matrix\w*|(?:float|half|bfloat)\d+x\d+|load|store|multiply\w*)"
            r"|make_filled_simdgroup_matrix"
        ),
        "simdgroup matrices",
        "there is no portable counterpart of Apple's 8x8 SIMD-group matrix unit; write the "
        "product with threadgroup memory and simd_shuffle, or use kernelkit.kernel with CUDA "
        "(mma) for tensor cores",
    ),
    (
        re.compile(r"(?:texture|depth)(?:1d|2d|3d|cube)\w*|texture_buffer|access"),
        "textures",
        "kernelkit passes arrays only; read the data through a device pointer",
    ),
    (re.compile(r"sampler|sample_compare|filter|address"), "samplers", "kernelkit has no textures"),
    (re.compile(r"imageblock\w*|threadgroup_imageblock"), "imageblocks", "tile memory is Apple's"),
    (
        re.compile(
            r"quad_(?:sum|product|max|min|and|or|xor|shuffle\w*|broadcast\w*|prefix_\w+|any|all"
            r"|ballot|active_threads_mask|is_first)"
        ),
        "quad-group functions",
        "only SIMD-group functions are translated",
    ),
    (
        re.compile(r"(?:float|half|bfloat)[234]x[234]"),
        "matrix types",
        "write the matrix as vectors or arrays",
    ),
]
# `access::read` / `filter::linear` / `address::clamp_to_edge` are texture/sampler enums; plain
# identifiers of those names are fine, so they are refused only when followed by `::`.
_SCOPED_ONLY = {"access", "filter", "address"}

_SCALARS = (
    "float",
    "half",
    "bfloat",
    "int",
    "uint",
    "short",
    "ushort",
    "char",
    "uchar",
    "bool",
    "long",
    "ulong",
)
_VECTOR_TYPES = {f"{p}{s}{n}" for s in _SCALARS for n in (2, 3, 4) for p in ("", "packed_")}
_TYPES = _VECTOR_TYPES | {
    "numeric_limits", "as_type", "mem_flags", "memory_order", "memory_order_relaxed",
    "memory_order_acquire", "memory_order_release", "memory_order_acq_rel",
    "memory_order_seq_cst", "simd_vote", "atomic", "atomic_int", "atomic_uint", "atomic_bool",
    "atomic_float",
}  # fmt: skip
_FUNCTIONS = set(
    """abs acos asin atan atan2 ceil clamp copysign cos cosh cross distance divide dot erf exp exp2
    exp10 fabs floor fma fmax fmin fmod fract isfinite isinf isnan length length_squared log log2
    log10 max min mix normalize pow powr precise_divide rint round rsqrt saturate select sign
    signbit sin sinh smoothstep sqrt step tan tanh trunc all any simd_sum simd_product simd_max
    simd_min simd_and simd_or simd_xor simd_prefix_inclusive_sum simd_prefix_exclusive_sum
    simd_prefix_inclusive_product simd_prefix_exclusive_product simd_shuffle simd_broadcast
    simd_broadcast_first simd_shuffle_xor simd_shuffle_up simd_shuffle_down
    simd_shuffle_rotate_up simd_shuffle_rotate_down simd_ballot simd_any simd_all
    simd_active_threads_mask simd_is_first simd_is_helper_thread simdgroup_barrier
    atomic_fetch_add_explicit atomic_fetch_sub_explicit atomic_fetch_max_explicit
    atomic_fetch_min_explicit atomic_fetch_and_explicit atomic_fetch_or_explicit
    atomic_fetch_xor_explicit atomic_exchange_explicit atomic_store_explicit atomic_load_explicit
    atomic_compare_exchange_weak_explicit""".split()
)
_SWIZZLE_RE = re.compile(r"[xyzw]{2,4}|[rgba]{2,4}")
_SWIZZLE_INDEX = {c: i for i, c in enumerate("xyzw")} | {c: i for i, c in enumerate("rgba")}
_ASSIGN_OPS = {"=", "+=", "-=", "*=", "/="}

_LEADING_DIRECTIVE_RE = re.compile(r"[ \t]*#")
_METAL_INCLUDE_RE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<metal_\w+>")
_USING_METAL_RE = re.compile(r"\busing\s+namespace\s+metal\s*;")
_HEADER_DEFS_RE = re.compile(
    r"\b(?:struct|class|union|enum|typedef[^;]*?|using)\s+([A-Za-z_]\w*)"
    r"|\b([A-Za-z_]\w*)\s*(?:<[^<>;{}]*>)?\s*\([^;{}]*\)\s*(?:const\s*)?\{"
)


@dataclass(frozen=True)
class MetalTranslation:
    """One Metal kernel in kernelkit's CUDA dialect.

    ``body`` has the Metal body's line count (line 1 starts with the attribute locals and the
    grid guard); ``header`` is the Metal library sections the kernel needs, then the translated
    user header after ``#line 1 "<name>.header"``; ``attributes`` the thread attributes bound.
    """

    body: str
    header: str
    attributes: tuple[str, ...]


@functools.cache
def _sections() -> dict[str, str]:
    text = (Path(__file__).parent / "include" / "kk_metal.h").read_text()
    parts = re.split(r"^//@ (\w+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def prelude(metal_text: str) -> str:
    """The sections of ``kk_metal.h`` that Metal code ``metal_text`` needs, with a #line."""
    want = ["core"]
    for section, rx in (
        ("vote", r"\b(?:all|any)\s*\("),
        ("half", r"\bhalf\w*\b|\d(?:\.\d*)?[hH]\b"),
        ("bfloat", r"\bbfloat\w*\b"),
        ("simd", r"\bsimd_\w+|\bsimdgroup_barrier\b"),
        ("atomic", r"\batomic\w*"),
    ):
        if re.search(rx, metal_text):
            want.append(section)
    sections = _sections()
    return '#line 1 "kk_metal.h"\n' + "".join(sections[s] for s in want)


def attributes_used(source: str) -> tuple[str, ...]:
    """The thread attributes ``source`` refers to, in MLX's table order."""
    found = set(_ATTR_RE.findall(source))
    return tuple(a for a in ATTRIBUTES if a in found)


def translate(
    name: str,
    source: str,
    header: str = "",
    zero_d_inputs: tuple[tuple[str, str], ...] = (),
) -> MetalTranslation:
    """Metal body and header -> CUDA body and header (see the module docstring).

    ``zero_d_inputs`` lists (input name, C type) of the inputs given as 0-d arrays, which Metal
    reads as ``const constant T&`` values: the body sees them as references to element 0.
    """
    user_defs = {a or b for a, b in _HEADER_DEFS_RE.findall(_strip(header))}
    user_defs -= _TYPES  # a header cannot redefine Metal's types (it may overload functions)
    cuda_header = _rewrite(name, header, "header", user_defs, header=True)
    cuda_body = _rewrite(name, source, "source", user_defs, header=False)
    attrs = attributes_used(source)
    lead = [f"const {ATTRIBUTES[a][0]} {a} = {ATTRIBUTES[a][1]};" for a in attrs]
    lead = [ln.replace("const uint3 ", "const metal::uint3 ") for ln in lead]
    guard = " || ".join(f"{_POS.format(a)} >= (unsigned){g}" for a, g in zip("xyz", GRID_INPUTS))
    lead.insert(0, f"if ({guard}) return;")  # Metal launches exactly the grid's threads
    tail = ""
    if zero_d_inputs:
        lead += [f"const {t}& kk_0d_{n} = {n}[0];" for n, t in zero_d_inputs]
        lead.append("{ " + " ".join(f"const {t}& {n} = kk_0d_{n};" for n, t in zero_d_inputs))
        tail = "\n}"
    full_header = prelude(header + "\n" + source) + f'#line 1 "{name}.header"\n' + cuda_header
    if _LEADING_DIRECTIVE_RE.match(source):  # `#define X` on line 1: a directive starts a line
        return MetalTranslation(
            " ".join(lead) + f'\n#line 1 "{name}"\n' + cuda_body + tail, full_header, attrs
        )
    return MetalTranslation(" ".join(lead) + " " + cuda_body + tail, full_header, attrs)


def _strip(code: str) -> str:
    """``code`` without comments and string literals (newlines kept)."""
    return re.sub(
        r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"",
        lambda m: re.sub(r"[^\n]", " ", m.group()),
        code,
        flags=re.S,
    )


def _refuse(kernel: str, tok: Tok, nxt: str, where: str) -> None:
    if tok.text in _SCOPED_ONLY and nxt != "::":
        return
    for rx, what, why in _REFUSED:
        if rx.fullmatch(tok.text):
            raise ArgumentError(
                f"[{kernel}] Metal {what} are not supported: {tok.text!r} at line {tok.line} of "
                f"the {where}; {why}"
            )


def _rewrite(kernel: str, code: str, where: str, user_defs: set[str], header: bool) -> str:
    """One token pass over ``code`` (see the module docstring); newlines are kept."""
    code = "\n".join(
        "" if _METAL_INCLUDE_RE.match(ln) else _USING_METAL_RE.sub("", ln)
        for ln in code.split("\n")
    )
    toks = tokens(code)
    check_balanced(kernel, code, where, toks)  # the user's line numbers: newlines are kept
    sig = [i for i, t in enumerate(toks) if t.kind not in ("skip", "pp")]  # significant tokens

    def at(k: int) -> str:
        return toks[sig[k]].text if 0 <= k < len(sig) else ""

    out = [t.text for t in toks]
    scopes: list[str] = []  # "ns" for namespace braces, "blk" for the others
    parens = 0
    drop_until = -1
    for k, i in enumerate(sig):
        t = toks[i]
        if i <= drop_until:
            out[i] = ""
            continue
        prev, nxt = at(k - 1), at(k + 1)
        if t.kind == "op":
            if t.text == "{":
                scopes.append("ns" if "namespace" in (at(k - 1), at(k - 2)) else "blk")
            elif t.text == "}" and scopes:
                scopes.pop()
            elif t.text in ("(", ")"):
                parens += 1 if t.text == "(" else -1
            continue
        if t.kind == "num":
            m = re.fullmatch(r"((?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[hH]", t.text)
            if m:
                out[i] = f"half({m.group(1)}f)"
            continue
        if t.kind != "id":
            continue
        _refuse(kernel, t, nxt, where)
        if prev in (".", "->"):
            if _SWIZZLE_RE.fullmatch(t.text):
                idx = ", ".join(str(_SWIZZLE_INDEX[c]) for c in t.text)
                fn = "kk_swr" if nxt in _ASSIGN_OPS else "kk_swz"
                out[i] = f"template {fn}<{idx}>()"
            continue
        text = t.text
        if text in ("fast", "precise") and nxt == "::":  # fast::exp, metal::fast::exp -> metal::exp
            out[i] = "metal" if prev != "::" else ""
            if prev == "::":
                out[sig[k + 1]] = ""
            continue
        if prev == "::":
            continue
        if text in ("device", "thread"):
            out[i] = ""
        elif text == "constant":
            at_namespace_scope = header and "blk" not in scopes and parens == 0
            stmt = _statement(sig, toks, k)
            if at_namespace_scope:
                out[i] = "" if "constexpr" in stmt else "__constant__"
            else:  # `constant T&` / `constant T*` are read-only: keep that as const
                out[i] = "" if _has_const(sig, toks, k) else "const"
        elif text == "threadgroup":
            out[i] = "" if _declares_pointer(sig, toks, k + 1) else "__shared__"
        elif text == "threadgroup_barrier" and nxt == "(":
            end = _matching(sig, toks, k + 1)
            out[i] = "__syncthreads()"
            drop_until = sig[end]
        elif (text in _TYPES or (text in _FUNCTIONS and nxt == "(")) and text not in user_defs:
            out[i] = f"metal::{text}"
    cast_conditionals(toks, sig, out)
    return "".join(out)


def _statement(sig: list[int], toks: list[Tok], k: int) -> set[str]:
    """The identifiers of the statement around significant token ``k``."""
    words = set()
    for step in (-1, 1):
        j = k
        while 0 <= j < len(sig) and toks[sig[j]].text not in (";", "{", "}"):
            words.add(toks[sig[j]].text)
            j += step
    return words


def _has_const(sig: list[int], toks: list[Tok], k: int) -> bool:
    """Whether the declarator around significant token ``k`` already says ``const``."""
    for step, stops in ((-1, {"(", ",", ";", "{", "}", "<"}), (1, {"*", "&", ",", ")", ";", "="})):
        j = k + step
        while 0 <= j < len(sig) and toks[sig[j]].text not in stops:
            if toks[sig[j]].text == "const":
                return True
            j += step
    return False


def _declares_pointer(sig: list[int], toks: list[Tok], k: int) -> bool:
    """Whether the type starting at significant token ``k`` is followed by ``*`` or ``&``."""
    depth = 0
    while k < len(sig):
        text = toks[sig[k]].text
        if text == "<":
            depth += 1
        elif text == ">":
            depth -= 1
        elif depth == 0 and text in ("*", "&", "&&"):
            return True
        elif depth == 0 and not (toks[sig[k]].kind == "id" or text == "::"):
            return False
        elif depth == 0 and toks[sig[k]].kind == "id" and k > 0:  # noqa: SIM102 - reads apart
            # two identifiers in a row: the second is the declared name
            if toks[sig[k - 1]].kind == "id" and toks[sig[k - 1]].text not in (
                "const", "volatile", "unsigned", "signed", "long", "short", "threadgroup",
                "device", "constant", "thread",
            ):  # fmt: skip
                return False
        k += 1
    return False


def _matching(sig: list[int], toks: list[Tok], k: int) -> int:
    """The significant index of the ``)`` closing the ``(`` at significant index ``k``."""
    depth = 0
    for j in range(k, len(sig)):
        text = toks[sig[j]].text
        depth += text == "("
        depth -= text == ")"
        if depth == 0:
            return j
    raise ArgumentError(f"unbalanced parentheses after token {toks[sig[k]].text!r}")
