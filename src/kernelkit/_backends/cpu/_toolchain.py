"""The host C++ toolchain: find the compiler, name it, precompile the prelude, build a .so."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
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
    files = sorted(p for p in INCLUDE_DIR.rglob("*.h") if p.is_file())
    return tuple(
        (p.relative_to(INCLUDE_DIR).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest())
        for p in files
    )


def precompiled_header_dir(cxx: str, options: tuple[str, ...]) -> Path | None:
    """A directory holding ``kk_cpu.h.gch`` for these options, built on first use; None if the
    compiler cannot build one (compiling then simply parses the prelude)."""
    key = (cxx, options)
    with _lock:
        if key in _pch_dirs:
            return _pch_dirs[key]
    digest = hashlib.sha256(
        repr((compiler_identity(cxx), options, header_hashes())).encode()
    ).hexdigest()[:24]
    found = None
    for base in _cache_bases():
        target = base / "cpu-pch" / digest
        if _is_file(target / "kk_cpu.h.gch") or _build_pch(cxx, options, target):
            found = target
            break
    with _lock:
        _pch_dirs[key] = found
    return found


def _cache_bases() -> list[Path]:
    bases = []
    if _config.config.cache_dir:
        bases.append(Path(_config.config.cache_dir))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    bases.append(Path(xdg) / "kernelkit")
    bases.append(Path(tempfile.gettempdir()) / f"kernelkit-{os.getuid()}")
    return bases


def _is_file(path: Path) -> bool:
    """Path.is_file, but an unreadable directory (EACCES) counts as "no" instead of raising."""
    try:
        return path.is_file()
    except OSError:
        return False


def _build_pch(cxx: str, options: tuple[str, ...], target: Path) -> bool:
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target, suffix=".gch.tmp")
        os.close(fd)
    except OSError:
        return False
    flags = [o for o in options if o != "-shared"]
    cmd = [
        cxx,
        *flags,
        *_include_flags(),
        "-x",
        "c++-header",
        str(INCLUDE_DIR / "kk_cpu.h"),
        "-o",
        tmp,
    ]
    try:
        ok = subprocess.run(cmd, capture_output=True, timeout=300).returncode == 0
        if ok:
            os.replace(tmp, target / "kk_cpu.h.gch")  # atomic: concurrent builders agree
        return ok
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:  # already renamed into place, or the directory went away
            pass


def _include_flags() -> list[str]:
    return ["-I", str(INCLUDE_DIR), "-I", str(INCLUDE_DIR / "compat")]


def build_shared_object(
    cxx: str, source: str, options: tuple[str, ...], file_stem: str
) -> tuple[bytes | None, str]:
    """Compile ``source`` to a shared object: (its bytes or None on failure, compiler log)."""
    pch = precompiled_header_dir(cxx, options)
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
