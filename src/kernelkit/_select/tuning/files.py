"""The tuning database's file handling: bounded reads of regular files only (through the cache's
reader) and finding the temp files of writers that died; records are written by the cache's
atomic writer (``_cache.files.write_atomic``).

A temp file is named ``.<final name>.<pid>.<token>.tmp`` beside its final name. It is stale
(its writer is gone) when its pid is not alive on this host or it is older than
``STALE_TMP_S``: writing a record takes milliseconds.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from ..._cache import files as cache_files

__all__ = ["STALE_TMP_S", "NotRegular", "names", "read_regular", "stale_temps"]

STALE_TMP_S = 300.0


class NotRegular(OSError):
    """A path that is not a regular file (a FIFO, a device, a directory, a symbolic link)."""


def read_regular(path: Path, limit: int, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them, through the cache's
    reader (never blocks on a FIFO; ``follow=False`` refuses a symbolic link). In the errors the
    tuning database handles: ``FileNotFoundError`` when there is none, ``ValueError`` when it is
    larger, ``NotRegular`` for anything else the cache's reader refuses."""
    try:
        return cache_files.read_regular(path, limit, trust=False, follow=follow)
    except cache_files.Unreadable as e:
        why = str(e)
        if why == "missing":
            raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from None
        if why.startswith("larger than"):
            raise ValueError(why) from None
        raise NotRegular(0, why) from None


def names(folder: Path) -> list[str]:
    """The names in ``folder`` ([] when it cannot be listed)."""
    try:
        with os.scandir(folder) as it:
            return [d.name for d in it]
    except OSError:
        return []


def stale_temps(folder: Path, max_age_s: float = STALE_TMP_S) -> list[Path]:
    """The temp files in ``folder`` whose writer is gone (dead pid, or older than
    ``max_age_s``); links and directories are never listed."""
    out, now = [], time.time()
    for name in names(folder):
        parts = name.split(".")
        if not (name.startswith(".") and name.endswith(".tmp") and len(parts) >= 5):
            continue
        path = folder / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        pid = int(parts[-3]) if parts[-3].isdigit() and len(parts[-3]) < 10 else 0
        if now - st.st_mtime > max_age_s or (pid > 0 and not cache_files.pid_alive(pid)):
            out.append(path)
    return out
