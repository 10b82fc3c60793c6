"""Finding backends: the ``kernelkit.backends`` entry-point group, filtered by KERNELKIT_BACKENDS.

A plugin that fails to import, to construct, or that reports another ``api_version`` is skipped
with one warning naming it (an error with KERNELKIT_BACKENDS_STRICT=1); the others keep working.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

from .. import _config
from .._errors import BackendError, KernelkitError
from ..backend import BACKEND_API_VERSION, Backend

__all__ = [
    "backend_call",
    "backend_for_device_type",
    "backends",
    "get_backend",
    "registered",
    "reset",
]

# Used only when kernelkit runs from a source tree without installed metadata (PYTHONPATH=src);
# an installed kernelkit finds these two through its own entry points like any other plugin.
_BUILTIN = {
    "cuda": "kernelkit._backends.cuda:CUDABackend",
    "cpu": "kernelkit._backends.cpu:CPUBackend",
}

# The DLPack device types of the built-ins' ``dlpack_devices`` (a test checks they agree), so that
# picking a backend for an array does not import the others.
_BUILTIN_DEVICES = {"cuda": frozenset({2, 3, 13}), "cpu": frozenset({1})}

_lock = threading.RLock()
_loaded: dict[str, Backend] = {}
_failed: dict[str, str] = {}
_specs: dict[str, str] | None = None


def registered() -> dict[str, str]:
    """name -> 'module:attr' of every backend the configuration allows (not yet imported)."""
    global _specs
    with _lock:
        if _specs is None:
            from importlib.metadata import entry_points  # ~15 ms: not at import time

            found = {ep.name: ep.value for ep in entry_points(group="kernelkit.backends")}
            specs = {**_BUILTIN, **found}
            wanted = _config.config.backends
            include = [n for n in wanted if not n.startswith("-")]
            exclude = {n[1:] for n in wanted if n.startswith("-")}
            if include:
                unknown = [n for n in include if n not in specs]
                if unknown:
                    _problem(
                        unknown[0],
                        f"KERNELKIT_BACKENDS names {unknown[0]!r}, "
                        f"which is not installed (installed: {', '.join(sorted(specs))})",
                    )
                specs = {n: specs[n] for n in include if n in specs}
            _specs = {n: v for n, v in specs.items() if n not in exclude}
        return _specs


def _problem(name: str, message: str) -> None:
    _failed[name] = message
    if _config.config.backends_strict:
        raise BackendError(f"[backend {name}] {message}")
    warnings.warn(f"kernelkit: backend {name!r} skipped: {message}", RuntimeWarning, stacklevel=4)


def _load(name: str, spec: str) -> Backend | None:
    try:
        module_name, _, attr = spec.partition(":")
        cls: Any = getattr(import_module(module_name), attr)
        version = getattr(cls, "api_version", None)
        if version != BACKEND_API_VERSION:
            _problem(
                name,
                f"it implements backend API version {version}, kernelkit needs "
                f"{BACKEND_API_VERSION}",
            )
            return None
        backend = cls()
        if not isinstance(backend, Backend):
            _problem(name, f"{spec} is not a kernelkit.backend.Backend")
            return None
        return backend
    except BackendError:
        raise
    except Exception as e:  # noqa: BLE001 - a broken plugin must not take the others down
        _problem(name, f"import failed: {type(e).__name__}: {e}")
        return None


def _allowed(name: str) -> bool:
    wanted = _config.config.backends
    include = [n for n in wanted if not n.startswith("-")]
    return (not include or name in include) and f"-{name}" not in wanted


def get_backend(name: str) -> Backend:
    """The backend called ``name``; BackendError naming it if unknown or broken."""
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    with _lock:
        if name in _loaded:
            return _loaded[name]
        # built-in names need no entry-point scan (it costs ~15 ms on a first call)
        specs = {name: _BUILTIN[name]} if name in _BUILTIN and _allowed(name) else registered()
        if name not in specs:
            raise BackendError(
                f"[kernel] backend {name!r} is not available "
                f"(available: {', '.join(sorted(specs)) or 'none'})"
            )
        if name in _failed:
            raise BackendError(f"[backend {name}] unavailable: {_failed[name]}")
        backend = _load(name, specs[name])
        if backend is None:
            raise BackendError(f"[backend {name}] unavailable: {_failed[name]}")
        _loaded[name] = backend
        return backend


def backends() -> dict[str, Backend]:
    """Every backend that loads, by name (importing them)."""
    out = {}
    for name in registered():
        try:
            out[name] = get_backend(name)
        except BackendError:
            if _config.config.backends_strict:
                raise
    return out


def backend_for_device_type(device_type: int, what: str) -> Backend:
    """The first loadable backend (built-ins first, then plugins in registration order) that
    runs on this DLPack device type."""

    def candidates() -> Iterator[str]:  # plugins are scanned only if no built-in fits
        # a built-in that cannot run there is not even imported (host arrays never load CUDA)
        yield from (n for n in _BUILTIN if _allowed(n) and device_type in _BUILTIN_DEVICES[n])
        yield from (n for n in registered() if n not in _BUILTIN)

    for name in candidates():
        try:
            backend = get_backend(name)
        except BackendError:
            continue
        if device_type in backend.dlpack_devices:
            return backend
    raise BackendError(
        f"[kernel] no backend runs on the memory of {what} (DLPack device type {device_type}); "
        f"loaded: {', '.join(sorted(_loaded)) or 'none'}"
    )


def preload() -> None:
    """Import the CUDA backend's Python modules and cuda-bindings' driver module, without
    touching a device, when they are installed and the backend is allowed (``KERNELKIT_PRELOAD``):
    about 25 ms that a first kernel call would otherwise pay. A failure here is not reported:
    the first call on a CUDA array imports again and names the cause."""
    if not _config.config.preload or not _allowed("cuda"):
        return
    from importlib.util import find_spec

    try:
        if find_spec("cuda.bindings") is None:
            return
        import_module(_BUILTIN["cuda"].partition(":")[0]).driver.drv()
    except Exception:  # noqa: BLE001, S110 - reported by the first call that needs the backend
        pass


def failures() -> dict[str, str]:
    """Backends that failed to load, with why."""
    return dict(_failed)


def reset() -> None:
    """Forget loaded backends and re-read the configuration (tests)."""
    global _specs
    with _lock:
        _specs = None
        _loaded.clear()
        _failed.clear()


@contextmanager
def backend_call(backend: Backend, stage: str) -> Iterator[None]:
    """Turn a plugin's unexpected exception into a BackendError naming the backend and stage."""
    try:
        yield
    except KernelkitError:
        raise
    except NotImplementedError as e:
        raise BackendError(f"[backend {backend.name}] {e}") from e
    except Exception as e:
        raise BackendError(
            f"[backend {backend.name}] {stage} failed: {type(e).__name__}: {e}"
        ) from e
