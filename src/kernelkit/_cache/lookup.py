"""``compile_cached``: memory, then disk, then bundles, then compile (once per key across threads
and processes), writing what was compiled to disk. ``recompile_refused``: the way back when the
backend cannot load what a bundle or the disk cache served. ``get_product``: a backend's build
product (``products``) from the disk cache, built once when missing or damaged."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from pathlib import Path

from .._backends.registry import backend_call
from .._records import Artifact, CompileRequest
from ..backend import Backend
from . import bundles, disk, files, memory, products, stats
from .keys import CacheKey, cache_key

__all__ = ["compile_cached", "get_product", "recompile_refused"]

# key digest -> the artifact the disk cache served for it (weak: gone with the artifact), so a
# load failure of what was read from disk is told from one of what was compiled here
_from_disk: weakref.WeakValueDictionary[str, Artifact] = weakref.WeakValueDictionary()


def compile_cached(backend: Backend, request: CompileRequest) -> Artifact:
    """The artifact for ``request``: from memory, disk or a bundle, else compiled once."""
    with backend_call(backend, "compiler identity"):
        identity = backend.compiler_identity()
    key = cache_key(request, identity, backend.version)
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
    bundles.loaded()  # opens KERNELKIT_BUNDLE_PATH now, so a wrong path warns at the first kernel
    cache = disk.current()
    if cache is not None:
        found = cache.read(key.digest)
        if found is not None:
            _from_disk[key.digest] = found
            return found
    found = bundles.find(key, backend.bundle_portable_parts)
    if found is not None:
        return found
    if cache is None:
        return _compile(backend, request, None)
    with cache.lock(key.digest):
        found = cache.read(key.digest, report=False)  # another process may have just written it
        if found is not None:
            _from_disk[key.digest] = found
            return found
        artifact = _compile(backend, request, str(cache.root))
        cache.write(key, request.kernel, request.backend, artifact)
    return artifact


def recompile_refused(
    backend: Backend, request: CompileRequest, artifact: Artifact, error: BaseException
) -> Artifact:
    """Call when ``backend.load`` failed with ``error`` on ``artifact`` (what ``compile_cached``
    returned for ``request``). When a bundle served it: warn, stop serving that bundle entry in
    this process, and return the request compiled here (through the disk cache). When the disk
    cache holds it (its checksums held, but it does not load here: built against another C++
    runtime, or copied from another machine): warn, remove the entry, and return the request
    compiled again and stored. Otherwise raise ``error`` again; a caller that loads the returned
    artifact and fails again gets that error (each key is rebuilt once, never in a loop).

    Example (the load stage)::

        artifact = compile_cached(backend, request)
        try:
            program = backend.load(artifact, target)
        except KernelkitError as e:
            artifact = recompile_refused(backend, request, artifact, e)
            program = backend.load(artifact, target)
    """
    with backend_call(backend, "compiler identity"):
        identity = backend.compiler_identity()
    key = cache_key(request, identity, backend.version)
    with memory.flight(key.digest):
        held = memory.get(key.digest)
        if held is not None and held is not artifact:
            return held  # another thread has already replaced it
        if bundles.refuse(key.digest, error):
            memory.drop(key.digest)
            fresh = _load_or_compile(backend, request, key)
        else:
            cache = disk.current()
            if cache is None or _from_disk.get(key.digest) is not artifact:
                raise error  # compiled here: compiling again would give the same binary
            memory.drop(key.digest)
            fresh = _replace_on_disk(backend, request, key, cache, error)
        memory.put(key.digest, fresh)
    return fresh


def _replace_on_disk(
    backend: Backend,
    request: CompileRequest,
    key: CacheKey,
    cache: disk.DiskCache,
    error: BaseException,
) -> Artifact:
    """Remove the disk entry that did not load, compile the request again and store it."""
    path = cache.path(key.digest)
    warnings.warn(
        f"kernelkit: [{request.kernel}] cache entry {path} passed its checksums but could not "
        f"be loaded ({type(error).__name__}: {error}); it is removed and compiled again",
        RuntimeWarning,
        stacklevel=4,
    )
    stats.record("corrupt", str(cache.root))
    with cache.lock(key.digest):
        files.unlink(path)
        artifact = _compile(backend, request, str(cache.root))
        cache.write(key, request.kernel, request.backend, artifact)
    return artifact


def _compile(backend: Backend, request: CompileRequest, directory: str | None) -> Artifact:
    stats.record("misses", directory)
    with backend_call(backend, "compile"):  # the plugin's failures name it; ours don't
        artifact = backend.compile(request)
    stats.record("compiles", directory)
    return artifact


def get_product(
    area: str, name: str, build: Callable[[Path], bool], in_process: bool = True
) -> Path | None:
    """The checked directory of product ``name`` in ``area``, built by ``build(directory)`` (which
    writes the files into ``directory`` and returns whether it succeeded) when missing or damaged.
    In the disk cache when it is on and writable, else (``in_process``) in this process's
    temporary directory; None when the build fails or has nowhere to go."""
    products.check_name("area", area)
    products.check_name("name", name)
    cache = disk.current()
    if cache is not None:
        found = _cached_product(cache, cache.root / area, name, build)
        if found is not None:
            return found
    return products.build_in_process(area, name, build) if in_process else None


def _cached_product(
    cache: disk.DiskCache, where: Path, name: str, build: Callable[[Path], bool]
) -> Path | None:
    target = where / name
    if products.usable(target):
        return target
    if cache.write_error is not None:
        return None
    with cache.lock_named(f"product-{where.name}-{name}"):
        if products.usable(target):  # another process built it while this one waited
            return target
        if not products.build_into(where, name, build):
            return None
        if products.size_bytes(target) > cache.max_bytes:  # alone it would push every entry out
            products.discard(target)
            return None
        cache.evict(keep=str(target))
        return target
