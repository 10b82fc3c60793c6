"""NVRTC: compile a CompileRequest to a cubin (or PTX for a device newer than this NVRTC)."""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from pathlib import Path

from ..._errors import BackendError, CompileError
from ..._records import Artifact, CompileRequest
from . import deps

_HEADERS = {  # need -> (headers to include, in order)
    "fp16": ("cuda_fp16.h",),
    "bf16": ("cuda_bf16.h",),
    "cg": ("cooperative_groups.h", "cooperative_groups/reduce.h"),
    # the standard library as the CPU backend's C++ prelude gives it without an include (libcu++
    # through include/std), after kernelkit's prelude: where a body's own #include would put it
    "limits": ("limits",),
    "std": ("cmath", "cstdint", "cstddef", "limits", "type_traits", "utility", "algorithm",
            "array", "tuple", "functional"),
}  # fmt: skip
_STD_NEEDS = ("std", "limits")


@functools.cache
def nvrtc():
    return deps.require("cuda.bindings.nvrtc")


def check(result: tuple, what: str) -> tuple:
    err = result[0]
    if int(err) != 0:
        raise BackendError(f"[backend cuda] {what} failed: {err!r}")
    return result[1:]


@functools.cache
def version() -> tuple[int, int]:
    """NVRTC's (major, minor)."""
    major, minor = check(nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def supported_archs() -> tuple[int, ...]:
    (archs,) = check(nvrtc().nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


# Where include_dirs() comes from once per process: a recorded answer of an earlier process
# (``nvrtc_identity`` installs its reader here at import: a warm start imports no cuda.pathfinder,
# 35-75 ms on an H100 host), else ``found_include_dirs``.
INCLUDE_DIRS: list[Callable[[], tuple[str, ...]]] = []


@functools.cache
def include_dirs() -> tuple[str, ...]:
    """CUDA header directories (CCCL for libcu++, CUB and cooperative groups; cudart for
    cuda_fp16.h etc.). CCCL comes first: a toolkit's include directory may hold an older libcu++
    than the CCCL that kernelkit depends on, and the first directory with a header wins."""
    return INCLUDE_DIRS[0]() if INCLUDE_DIRS else found_include_dirs()


def found_include_dirs() -> tuple[str, ...]:
    """``include_dirs`` as cuda-pathfinder finds them now."""
    pathfinder = deps.require("cuda.pathfinder")

    dirs = []
    for name in ("cccl", "cudart"):
        try:
            found = pathfinder.find_nvidia_header_directory(name)
        except Exception:  # noqa: BLE001 - pathfinder raises several kinds; missing is enough
            found = None
        if found:
            dirs.append(str(found))
    return tuple(dirs)


# kernelkit's standard headers for NVRTC (<cmath>, <cstdint>, ...: each includes libcu++'s
# cuda/std/... and makes its names std::...); searched before the CUDA toolkit's directories.
STD_DIR = Path(__file__).parent / "include" / "std"
# A body that includes a header may reach these; their bytes (and CCCL's version) join the key.
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b", re.M)


@functools.cache
def std_digest() -> tuple[tuple[str, str], ...]:
    """("std/", sha256) over kernelkit's standard headers and CCCL's version header."""
    digest = hashlib.sha256()
    for p in sorted(STD_DIR.rglob("*")):
        if p.is_file():
            digest.update(p.relative_to(STD_DIR).as_posix().encode() + b"\0" + p.read_bytes())
    version = _find_header("cuda/std/__cccl/version.h")
    digest.update(version.read_bytes() if version else b"no CCCL")
    return (("std/", digest.hexdigest()),)


def includes_anything(text: str) -> bool:
    """Whether a kernel's text has an #include (and may reach kernelkit's standard headers)."""
    return _INCLUDE.search(text) is not None


@functools.cache
def version_macros() -> tuple[str, ...]:
    """``-DCUDA_VERSION=...`` and ``-DCUDART_VERSION=...`` as the CUDA headers at hand define them
    (the same tokens, so including cuda.h after them is no redefinition), so that version tests
    such as ``#if CUDA_VERSION >= 9000`` hold without including cuda.h, as under nvcc. NVRTC's
    own version is the fallback only: rendering a cached kernel must not load NVRTC."""
    out = []
    for macro, header in (("CUDA_VERSION", "cuda.h"), ("CUDART_VERSION", "cuda_runtime_api.h")):
        p = _find_header(header)
        value = _define(p, macro) if p else None
        if value is None:
            major, minor = version()
            value = str(major * 1000 + minor * 10)
        out.append(f"-D{macro}={value}")
    return tuple(out)


_HEAD_BYTES = 64 << 10  # the version macros sit in the first few KiB of cuda.h (1.2 MB in all)
_HEADER_LIMIT = 16 << 20


def _define(path: Path, macro: str) -> str | None:
    """The digits of a line ``#define MACRO <digits>`` in ``path``: its head first (a cold first
    call reads 64 KiB, not the whole header), then the rest (bounded)."""
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
        found = _define_value(head, macro)
        if found is None and len(head) == _HEAD_BYTES:
            found = _define_value(head + f.read(_HEADER_LIMIT), macro)
    return found


def _define_value(text: bytes, macro: str) -> str | None:
    """The digits of the first line of ``text`` that is ``#define MACRO <digits>`` (whitespace
    between and after), else None. Found by byte search: compiling a regular expression for it
    cost a cold first call ~0.2 ms."""
    name, start = macro.encode(), 0
    while (at := text.find(name, start)) >= 0:
        start = at + len(name)
        line_start = text.rfind(b"\n", 0, at) + 1
        line_end = text.find(b"\n", at)
        line = text[line_start : None if line_end < 0 else line_end]
        fields = line.split()
        if (
            line.startswith(b"#define")
            and len(fields) == 3
            and fields[:2] == [b"#define", name]
            and fields[2].isdigit()
        ):
            return fields[2].decode()
    return None


@functools.cache
def library_path() -> str:
    try:
        pathfinder = deps.require("cuda.pathfinder")
        return pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path or "?"
    except Exception as e:  # noqa: BLE001
        return f"not found ({e})"


def _find_header(name: str) -> Path | None:
    for d in (str(STD_DIR), *include_dirs()):  # the compile's -I order
        p = Path(d) / name
        if p.is_file():
            return p
    return None


@functools.cache
def header_digests(needs: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """(header, sha256) of the top-level headers a kernel includes: new CUDA headers miss."""
    out = []
    for need in sorted(needs):
        for name in _HEADERS.get(need, ()):
            p = _find_header(name)
            if p is None:
                raise BackendError(
                    f"[backend cuda] header {name} not found in {list(include_dirs())}; "
                    "install nvidia-cuda-runtime and nvidia-cuda-cccl"
                )
            digest = hashlib.sha256(p.read_bytes())
            hpp = p.with_suffix(".hpp")  # cuda_fp16.h keeps its code in cuda_fp16.hpp
            if hpp.is_file():
                digest.update(hpp.read_bytes())
            out.append((name, digest.hexdigest()))
    return tuple(out)


def includes_for(needs: frozenset[str]) -> str:
    """The CUDA headers a kernel needs, ahead of kernelkit's prelude."""
    lines = []
    for need in ("fp16", "bf16", "cg"):
        if need in needs:
            lines += [f"#include <{h}>" for h in _HEADERS[need]]
    return "\n".join(lines)


def std_includes(needs: frozenset[str]) -> str:
    """The standard headers a kernel names without including them, after the prelude."""
    names = dict.fromkeys(h for need in _STD_NEEDS if need in needs for h in _HEADERS[need])
    return "\n".join(f"#include <{h}>" for h in names)


def _output(prog, what: str) -> bytearray:
    """NVRTC's ``nvrtcGet<what>`` result, written into a buffer kernelkit owns.

    Never a ``bytes`` object: NVRTC writes into the buffer, and CPython shares small ``bytes``
    (``b" " * 1`` is the interpreter's one cached ``b" "``), so writing into one corrupts them
    process-wide."""
    mod = nvrtc()
    (size,) = check(getattr(mod, f"nvrtcGet{what}Size")(prog), f"nvrtcGet{what}Size")
    buf = bytearray(size)
    check(getattr(mod, f"nvrtcGet{what}")(prog, buf), f"nvrtcGet{what}")
    return buf


def _log(prog) -> str:
    return _output(prog, "ProgramLog").rstrip(b"\x00").decode(errors="replace")


def compile_request(request: CompileRequest) -> Artifact:
    """Run NVRTC; CompileError with the log (user line numbers via #line) on failure."""
    mod = nvrtc()
    # Inputs are only read (const char*); cuda-bindings takes them as bytes. Outputs: _output.
    (prog,) = check(
        mod.nvrtcCreateProgram(request.source.encode(), f"{request.kernel}.cu".encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        options = [o.encode() for o in request.options]
        options += [f"-I{d}".encode() for d in (str(STD_DIR), *include_dirs())]
        (result,) = (mod.nvrtcCompileProgram(prog, len(options), options)[0],)
        log = _log(prog)
        if int(result) != 0:
            raise CompileError(request.kernel, log, request.source, request.options)
        sass = request.arch.startswith("sm_")
        binary = _output(prog, "CUBIN" if sass else "PTX")
        return Artifact(
            kind="cubin" if sass else "ptx",
            binary=bytes(binary),
            entry=request.entry,  # extern "C": the lowered name is the name
            arch=request.arch,
            metadata={"nvrtc": "%d.%d" % version()},
            log=log,
        )
    finally:
        mod.nvrtcDestroyProgram(prog)
