"""``compile_cached``: memory, then disk, then bundles, then compile (once per key across threads
and processes), writing what was compiled to disk."""

from __future__ import annotations

from .._records import Artifact, CompileRequest
from ..backend import Backend
from . import bundles, disk, memory, stats
from .keys import CacheKey, cache_key

__all__ = ["compile_cached"]


def compile_cached(backend: Backend, request: CompileRequest) -> Artifact:
    """The artifact for ``request``: from memory, disk or a bundle, else compiled once."""
    key = cache_key(request, backend.compiler_identity(), backend.version)
    found = memory.get(key.digest)
    if found is not None:
        stats.record("memory_hits")
        return found
    with memory.flight(key.digest):
        found = memory.get(key.digest)
        if found is not None:
            stats.record("memory_hits")
            return found
        artifact = _load_or_compile(backend, request, key)
        memory.put(key.digest, artifact)
    return artifact


def _load_or_compile(backend: Backend, request: CompileRequest, key: CacheKey) -> Artifact:
    cache = disk.current()
    if cache is not None:
        found = cache.read(key.digest)
        if found is not None:
            return found
    found = bundles.find(key.digest)
    if found is not None:
        return found
    if cache is None:
        return _compile(backend, request, None)
    with cache.lock(key.digest):
        found = cache.read(key.digest, report=False)  # another process may have just written it
        if found is not None:
            return found
        artifact = _compile(backend, request, str(cache.root))
        cache.write(key, request.kernel, request.backend, artifact)
    return artifact


def _compile(backend: Backend, request: CompileRequest, directory: str | None) -> Artifact:
    stats.record("misses", directory)
    artifact = backend.compile(request)
    stats.record("compiles", directory)
    return artifact
