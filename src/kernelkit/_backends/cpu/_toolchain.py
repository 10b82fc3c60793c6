"""The host C++ toolchain: find the compiler, name it, precompile the prelude, build a .so."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ... import _config
from ..._errors import BackendError

__all__ = [
    "INCLUDE_DIR",
    "build_shared_object",
    "compiler_identity",
    "find_compiler",
    "header_hashes",
    "precompiled_header_dir",
]

INCLUDE_DIR = Path(__file__).parent / "include"
PRELUDE = "kk_cpu.h"
PCH_AREA = "cpu-pch"  # <cache dir>/cpu-pch/<digest>/kk_cpu.h.gch
PCH_FILE = PRELUDE + ".gch"
_log = logging.getLogger("kernelkit")
_announced = False  # the first build of a precompiled header in this process is said once
_INSTALL_HINT = "install a C++17 compiler (e.g. `apt install g++`) or set KERNELKIT_CXX"
_lock = threading.Lock()
_identities: dict[str, str] = {}
_pch_dirs: dict[tuple[str, tuple[str, ...]], Path | None] = {}


def find_compiler() -> str:
    """Absolute path of the C++ compiler: KERNELKIT_CXX, else $CXX, else g++, else clang++."""
    wanted = _config.config.cxx or os.environ.get("CXX", "")
    if wanted:
        found = shutil.which(wanted)
        if found is None:
            source = "KERNELKIT_CXX" if _config.config.cxx else "CXX"
            raise BackendError(f"[cpu] {source}={wanted!r} is not an executable; {_INSTALL_HINT}")
        return found
    for name in ("g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise BackendError(f"[cpu] no C++ compiler found (looked for g++ and clang++); {_INSTALL_HINT}")


def compiler_identity(cxx: str) -> str:
    """``<path> <first line of --version>``, cached per compiler path."""
    with _lock:
        known = _identities.get(cxx)
    if known is not None:
        return known
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BackendError(f"[cpu] cannot run {cxx!r} --version: {e}; {_INSTALL_HINT}") from None
    first = (out.stdout or out.stderr).strip().splitlines()
    identity = f"{cxx} {first[0] if first else '(unknown version)'}"
    with _lock:
        _identities[cxx] = identity
    return identity


@functools.cache
def header_hashes() -> tuple[tuple[str, str], ...]:
    """(relative path, sha256) of every prelude header, sorted: part of the cache key.
    Read once per process (the installed headers do not change under a running process)."""
    files = sorted(p for p in INCLUDE_DIR.rglob("*") if p.is_file())  # .h, .cuh, <cuda/std/X>
    return tuple(
        (p.relative_to(INCLUDE_DIR).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in files
    )


def precompiled_header_dir(cxx: str, options: tuple[str, ...]) -> Path | None:
    """A directory holding ``kk_cpu.h.gch`` for these options, built on first use; None if the
    compiler cannot build one (compiling then simply parses the prelude).

    It is a build product of the cache (``_cache/products.py``): published whole by a rename,
    checked against its checksums once per process, counted in the cache's size cap; with the
    cache off it lives in a temporary directory of this process.
    """
    key = (cxx, options)
    with _lock:
        if key in _pch_dirs:
            known = _pch_dirs[key]
            if known is None or _is_file(known / PCH_FILE):
                return known
            del _pch_dirs[key]  # removed since (cache clear, eviction): build it again
    from ..._cache.lookup import get_product

    name = hashlib.sha256(
        repr((compiler_identity(cxx), options, header_hashes())).encode()
    ).hexdigest()[:24]
    found = get_product(PCH_AREA, name, lambda d: _build_pch_once(cxx, options, d / PCH_FILE))
    with _lock:
        _pch_dirs[key] = found
    return found


def _forget_pch(cxx: str, options: tuple[str, ...], directory: Path) -> None:
    """A compile could not use this PCH: remove it; the next compile builds a new one."""
    from ..._cache import products

    with _lock:
        _pch_dirs.pop((cxx, options), None)
    products.discard(directory)


def _build_pch_once(cxx: str, options: tuple[str, ...], out: Path) -> bool:
    """``_build_pch``, saying (once per process, through the ``kernelkit`` logger) that the
    first compile builds the precompiled prelude, how big it is and how long it took."""
    global _announced
    start = time.perf_counter()
    built = _build_pch(cxx, options, out)
    with _lock:
        first, _announced = not _announced and built, _announced or built
    if first:
        _log.warning(
            "kernelkit: the CPU backend built its precompiled prelude header (%.0f MB, %.1f s); "
            "later compiles with the same compiler and options reuse it",
            out.stat().st_size / 1e6,
            time.perf_counter() - start,
        )
    return built


def _build_pch(cxx: str, options: tuple[str, ...], out: Path) -> bool:
    flags = [o for o in options if o != "-shared"]
    cmd = [cxx, *flags, *_include_flags(), "-x", "c++-header", str(INCLUDE_DIR / PRELUDE), "-o"]
    try:
        done = subprocess.run([*cmd, str(out)], capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and _is_file(out)


def _is_file(path: Path) -> bool:
    """Path.is_file, but an unreadable directory (EACCES) counts as "no" instead of raising."""
    try:
        return path.is_file()
    except OSError:
        return False


def _include_flags() -> list[str]:
    return ["-I", str(INCLUDE_DIR), "-I", str(INCLUDE_DIR / "compat")]


def build_shared_object(
    cxx: str, source: str, options: tuple[str, ...], file_stem: str
) -> tuple[bytes | None, str]:
    """Compile ``source`` to a shared object: (its bytes or None on failure, compiler log).

    A compile that fails over the precompiled prelude is retried without it, and when that one
    succeeds the PCH is removed (damaged in a way its checksums cannot see) and built again later.
    """
    pch = precompiled_header_dir(cxx, options)
    binary, log = _build(cxx, source, options, file_stem, pch)
    if binary is None and pch is not None and _mentions_pch(log):
        binary, log = _build(cxx, source, options, file_stem, None)
        if binary is not None:
            _forget_pch(cxx, options, pch)
    return binary, log


def _mentions_pch(log: str) -> bool:
    low = log.lower()
    return ".gch" in low or "pch" in low or "precompiled header" in low


def _build(
    cxx: str, source: str, options: tuple[str, ...], file_stem: str, pch: Path | None
) -> tuple[bytes | None, str]:
    includes = (["-I", str(pch)] if pch else []) + _include_flags()
    with tempfile.TemporaryDirectory(prefix="kernelkit-cpu-") as tmp:
        src = Path(tmp) / f"{file_stem}.cpp"
        out = Path(tmp) / f"{file_stem}.so"
        src.write_text(source)
        cmd = [cxx, *options, *includes, str(src), "-o", str(out)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except OSError as e:
            raise BackendError(f"[cpu] cannot run {cxx!r}: {e}; {_INSTALL_HINT}") from None
        log = (proc.stdout + proc.stderr).replace(str(src), f"{file_stem}.cpp")
        if proc.returncode != 0 or not out.is_file():
            return None, log
        return out.read_bytes(), log
