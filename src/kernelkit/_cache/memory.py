"""In-process cache with single flight per key: concurrent askers of one kernel compile it once."""

from __future__ import annotations

import threading
from collections import Counter

from .._records import Artifact, CompileRequest
from ..backend import Backend
from .keys import cache_key

_artifacts: dict[str, Artifact] = {}
_inflight: dict[str, threading.Lock] = {}
_lock = threading.Lock()
_stats: Counter[str] = Counter()


def compile_cached(backend: Backend, request: CompileRequest) -> Artifact:
    """The artifact for ``request``: from memory, else compiled (once per key per process)."""
    key = cache_key(request, backend.compiler_identity()).digest
    found = _artifacts.get(key)
    if found is not None:
        _stats["memory_hits"] += 1
        return found
    with _lock:
        flight = _inflight.setdefault(key, threading.Lock())
    with flight:
        found = _artifacts.get(key)
        if found is not None:
            _stats["memory_hits"] += 1
            return found
        _stats["compiles"] += 1
        artifact = backend.compile(request)
        _artifacts[key] = artifact
    with _lock:
        _inflight.pop(key, None)
    return artifact


def cache_stats() -> dict[str, int]:
    """Counts of memory hits and compiles in this process."""
    return {"memory_hits": _stats["memory_hits"], "compiles": _stats["compiles"]}


def clear_memory() -> None:
    """Forget every compiled artifact held in this process."""
    with _lock:
        _artifacts.clear()
