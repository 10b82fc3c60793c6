"""In-process layer with single flight per key: concurrent askers of one kernel compile it once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._records import Artifact

__all__ = ["clear_memory", "drop", "flight", "get", "put"]

_artifacts: dict[str, Artifact] = {}
_inflight: dict[str, threading.Lock] = {}
_lock = threading.Lock()


def get(digest: str) -> Artifact | None:
    """The artifact held for ``digest`` (a plain dict lookup, safe without the lock)."""
    return _artifacts.get(digest)


def put(digest: str, artifact: Artifact) -> None:
    """Keep an artifact for the rest of the process (or until ``clear_memory``)."""
    _artifacts[digest] = artifact


def drop(digest: str) -> None:
    """Forget one artifact (its backend could not load it)."""
    _artifacts.pop(digest, None)


@contextmanager
def flight(digest: str) -> Iterator[None]:
    """Hold the per-key lock: the first thread in compiles, the others then find its result."""
    with _lock:
        held = _inflight.setdefault(digest, threading.Lock())
    with held:
        yield
    with _lock:
        if _inflight.get(digest) is held:
            del _inflight[digest]


def clear_memory() -> None:
    """Forget every compiled artifact held in this process."""
    with _lock:
        _artifacts.clear()
