"""NVRTC's version and supported archs, and the CUDA include directories, without loading NVRTC
or importing cuda-pathfinder, for a cold start from a warm cache.

The cache key needs the compiler's identity and the device probe needs the archs it targets;
asking NVRTC loads its library (tens of milliseconds), though a warm cache compiles nothing. So
the first process that loads NVRTC records them beside the disk cache, in ``nvrtc-identity.json``
with the library file's identity (path, size, mtime) and what chose that file (the Python
prefix, the NVIDIA wheels on ``sys.path``, the CUDA path variables). A later
process trusts the record while all of them are the same, and otherwise asks NVRTC and rewrites
it. The record is read like any file from disk: a regular file, bounded, every field checked;
anything wrong is warned about, discarded and rebuilt.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
import warnings
from pathlib import Path
from typing import Any

from ... import _config
from ..._cache.files import write_atomic
from . import nvrtc

__all__ = ["include_dirs", "supported_archs", "version"]

RECORD = "nvrtc-identity.json"
_MAX_BYTES = 64 * 1024
_SCHEMA = 2  # 2: include_dirs
_MAX_DIRS = 16


def version() -> tuple[int, int]:
    """NVRTC's (major, minor), from the record when it holds."""
    return _facts()[0]


def supported_archs() -> tuple[int, ...]:
    """The archs NVRTC compiles for, from the record when it holds."""
    return _facts()[1]


def include_dirs() -> tuple[str, ...]:
    """The CUDA include directories (``nvrtc.found_include_dirs``), from the record when it
    holds and every directory still exists (no record: found now, without loading NVRTC)."""
    found = _recorded()
    if found is not None and all(os.path.isdir(d) for d in found[2]):
        return found[2]
    return nvrtc.found_include_dirs()


Facts = tuple[tuple[int, int], tuple[int, ...], tuple[str, ...]]


@functools.cache
def _recorded() -> Facts | None:
    """The record's facts while it holds for this process's environment, else None."""
    path = _record_path()
    return None if path is None else _read(path, _environment())


@functools.cache
def _facts() -> Facts:
    found = _recorded()
    if found is not None:
        return found
    path = _record_path()
    env = _environment()
    v, archs = nvrtc.version(), nvrtc.supported_archs()  # loads NVRTC
    dirs = nvrtc.found_include_dirs()
    if path is not None:
        _write(path, env, (v, archs, dirs))
    return v, archs, dirs


def _record_path() -> Path | None:
    """Beside the disk cache (None when the disk cache is off)."""
    config = _config.config
    if not config.cache:
        return None
    if config.cache_dir:
        return Path(config.cache_dir).expanduser() / RECORD
    import platformdirs

    return Path(platformdirs.user_cache_dir("kernelkit")) / RECORD


def _environment() -> dict[str, Any]:
    """What decides which NVRTC library loads, short of loading it: the Python prefix, the
    NVIDIA wheels' directories on ``sys.path`` (a wheel added beside the recorded one), and the
    variables that point at a CUDA toolkit. (A wheel replaced in place changes the library
    file itself.) A few directory listings: far cheaper than loading NVRTC."""
    wheels = []
    for entry in sys.path:
        try:
            with os.scandir(os.path.join(entry or ".", "nvidia")) as it:
                wheels += sorted(os.path.join(entry, "nvidia", e.name) for e in it if e.is_dir())
        except OSError:
            continue
    keys = ("CUDA_HOME", "CUDA_PATH", "CONDA_PREFIX", "LD_LIBRARY_PATH")
    return {"prefix": sys.prefix, "wheels": wheels,
            "vars": {k: os.environ.get(k, "") for k in keys}}  # fmt: skip


def _library_identity(path: str) -> list[Any] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def _read(path: Path, env: dict[str, Any]) -> Facts | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None  # no record yet
    except OSError as e:  # a symlink (O_NOFOLLOW), unreadable
        warnings.warn(f"kernelkit: discarding {path} ({e}); NVRTC is asked again", stacklevel=4)
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = os.read(fd, _MAX_BYTES + 1)
        if len(data) > _MAX_BYTES:
            raise ValueError("too large")
        rec = json.loads(data)
        if not isinstance(rec, dict) or rec.get("schema") != _SCHEMA:
            raise ValueError("unknown schema")
        major, minor = rec["version"]
        archs = rec["archs"]
        lib = rec["library"]
        ints = [major, minor, *archs]
        if not all(type(i) is int and 0 <= i < 10000 for i in ints) or not archs:
            raise ValueError("bad version or archs")
        if not isinstance(lib, list) or len(lib) != 3 or not isinstance(lib[0], str):
            raise ValueError("bad library identity")
        dirs = rec["include_dirs"]
        if (
            not isinstance(dirs, list)
            or len(dirs) > _MAX_DIRS
            or not all(isinstance(d, str) and os.path.isabs(d) for d in dirs)
        ):
            raise ValueError("bad include directories")
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(f"kernelkit: discarding {path} ({e}); NVRTC is asked again", stacklevel=4)
        return None
    finally:
        os.close(fd)
    if rec.get("environment") != env or _library_identity(lib[0]) != lib:
        return None  # another NVRTC may load now: ask it (and rewrite the record)
    return (major, minor), tuple(archs), tuple(dirs)


def _write(path: Path, env: dict[str, Any], facts: Facts) -> None:
    """Atomically (temporary file, rename); a failure to write only costs the next start."""
    lib = _library_identity(nvrtc.library_path())
    if lib is None:
        return
    (v, archs, dirs) = facts
    rec = {"schema": _SCHEMA, "version": list(v), "archs": list(archs), "library": lib,
           "include_dirs": list(dirs), "environment": env}  # fmt: skip
    try:
        write_atomic(path, json.dumps(rec).encode())
    except OSError:
        pass


nvrtc.INCLUDE_DIRS.append(include_dirs)  # nvrtc.include_dirs() asks the record first
