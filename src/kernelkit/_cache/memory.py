"""In-process layer with single flight per key: concurrent askers of one kernel compile it once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from .._records import Artifact

__all__ = ["clear_memory", "drop", "flight", "get", "put"]

# Least recently used first. Bounded, so a process that makes kernels for ever keeps the
# binaries of the recent ones only (a loaded program needs no artifact; the disk has the rest).
MAX_ARTIFACTS = 1024
MAX_ARTIFACT_BYTES = 256 * 2**20
_artifacts: OrderedDict[str, Artifact] = OrderedDict()
_bytes = 0
_inflight: dict[str, threading.Lock] = {}
_lock = threading.Lock()


def get(digest: str) -> Artifact | None:
    """The artifact held for ``digest`` (now the most recently used)."""
    found = _artifacts.get(digest)
    if found is not None:
        with _lock:
            if digest in _artifacts:
                _artifacts.move_to_end(digest)
    return found


def put(digest: str, artifact: Artifact) -> None:
    """Keep an artifact, forgetting the least recently used past ``MAX_ARTIFACTS`` or
    ``MAX_ARTIFACT_BYTES`` (or until ``clear_memory``)."""
    global _bytes
    with _lock:
        old = _artifacts.pop(digest, None)
        if old is not None:
            _bytes -= len(old.binary)
        _artifacts[digest] = artifact
        _bytes += len(artifact.binary)
        while len(_artifacts) > 1 and (
            len(_artifacts) > MAX_ARTIFACTS or _bytes > MAX_ARTIFACT_BYTES
        ):
            _bytes -= len(_artifacts.popitem(last=False)[1].binary)


def drop(digest: str) -> None:
    """Forget one artifact (its backend could not load it)."""
    global _bytes
    with _lock:
        old = _artifacts.pop(digest, None)
        if old is not None:
            _bytes -= len(old.binary)


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
    global _bytes
    with _lock:
        _artifacts.clear()
        _bytes = 0
