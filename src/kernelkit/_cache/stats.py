"""Cache counters: per process (``kernelkit.cache_stats()``) and, for disk caches, summed over
every process that used the directory (``stats.json`` there, merged at interpreter exit so the
hit path never writes a file)."""

from __future__ import annotations

import atexit
import json
import threading
from collections import Counter
from pathlib import Path

from .files import Unreadable, read_regular, write_atomic

__all__ = ["NAMES", "STATS_FILE", "cache_stats", "flush", "lifetime", "record"]

NAMES = (
    "memory_hits",
    "disk_hits",
    "bundle_hits",
    "misses",
    "compiles",
    "writes",
    "corrupt",
    "evictions",
    "write_errors",
    "lock_timeouts",
)
STATS_FILE = "stats.json"
_MAX_STATS_BYTES = 1 << 20  # a dozen counters

_lock = threading.Lock()
_process: Counter[str] = Counter()
_pending: dict[str, Counter[str]] = {}  # cache dir -> counts not yet merged into its stats.json
_hooked = False


def record(name: str, directory: str | None = None, n: int = 1) -> None:
    """Count one event; ``directory`` is the disk cache it concerns (merged into it at exit)."""
    global _hooked
    with _lock:
        _process[name] += n
        if directory is None:
            return
        _pending.setdefault(directory, Counter())[name] += n
        if not _hooked:
            atexit.register(flush)
            _hooked = True


def cache_stats() -> dict[str, int]:
    """This process's counts: memory, disk and bundle hits, misses, compiles, writes, corrupt
    entries, evictions, failed writes and lock timeouts.

    Example::

        >>> import kernelkit
        >>> sorted(kernelkit.cache_stats())[:3]
        ['bundle_hits', 'compiles', 'corrupt']
    """
    with _lock:
        return {name: _process[name] for name in NAMES}


def reset() -> None:
    """Zero this process's counts (tests)."""
    with _lock:
        _process.clear()
        _pending.clear()


def _read(path: Path) -> Counter[str]:
    try:
        data = json.loads(read_regular(path, _MAX_STATS_BYTES, trust=False))
        return Counter({k: int(v) for k, v in data.items() if k in NAMES})
    except (Unreadable, ValueError, AttributeError, TypeError, RecursionError):
        return Counter()  # counts are a report, never code: a bad file only loses them


def lifetime(directory: str) -> dict[str, int]:
    """Counts of every process that used ``directory``, this one included."""
    total = _read(Path(directory) / STATS_FILE)
    with _lock:
        total.update(_pending.get(directory, Counter()))
    return {name: total[name] for name in NAMES}


def flush() -> None:
    """Merge pending counts into each directory's ``stats.json`` (atomically, under a lock)."""
    with _lock:
        pending = {d: c for d, c in _pending.items() if c}
        _pending.clear()
    for directory, counts in pending.items():
        path = Path(directory) / STATS_FILE
        if not path.parent.is_dir():
            continue
        try:
            from filelock import FileLock, Timeout

            with FileLock(str(path) + ".lock", timeout=5):
                total = _read(path)
                total.update(counts)
                write_atomic(path, json.dumps(dict(total), sort_keys=True).encode())
        except (OSError, Timeout):
            continue  # a read-only or vanished directory keeps no lifetime counts
