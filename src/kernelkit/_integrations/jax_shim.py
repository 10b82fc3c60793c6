"""The C++ shim that XLA calls (``jax_ffi_shim.cc``): built once from jaxlib's FFI headers with
the CPU backend's C++ compiler, kept as a cache product (``<cache dir>/jax-ffi/``), loaded, and
its two handlers registered with XLA: ``CPU_TARGET`` for platform "cpu" and ``CUDA_TARGET`` for
"CUDA". The CUDA handler finds the driver with dlopen when it first runs, so the shim builds,
loads and registers on machines without a GPU (XLA keeps a registration for a platform it does
not have until that platform appears, and never calls it)."""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import sys
import threading
from pathlib import Path

from .._errors import BackendError

__all__ = ["CPU_TARGET", "CUDA_TARGET", "ensure_registered", "problem"]

CPU_TARGET = "kernelkit_cpu_launch"
CUDA_TARGET = "kernelkit_cuda_launch"
SHIM_SOURCE = Path(__file__).with_name("jax_ffi_shim.cc")
AREA = "jax-ffi"  # the shim's cache-product area
_HANDLERS = ((CPU_TARGET, "kk_jax_cpu_launch", "cpu"), (CUDA_TARGET, "kk_jax_cuda_launch", "CUDA"))
_FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC")
_LIBS = ("-ldl",) if sys.platform.startswith("linux") else ()  # dlopen before glibc 2.34
_lock = threading.Lock()
_registered = False
_failure: str | None = None  # why the shim cannot be built or loaded (set once, kept)
_shim: ctypes.CDLL | None = None


def _build_shim(include: str, directory: Path) -> bool:
    from .._backends.cpu._toolchain import find_compiler

    cmd = [
        find_compiler(),
        *_FLAGS,
        "-I",
        include,
        str(SHIM_SOURCE),
        "-o",
        str(directory / "shim.so"),
        *_LIBS,
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # noqa: S603 - our compiler, a list
    except (OSError, subprocess.SubprocessError) as e:
        raise BackendError(f"[jax] cannot build the XLA FFI shim: {e}") from None
    if done.returncode != 0:
        raise BackendError(
            f"[jax] building the XLA FFI shim failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}"
        )
    return True


def _shim_name(include: str) -> str:
    """The product's name: a digest of everything the binary depends on."""
    from .._backends.cpu._toolchain import compiler_identity, find_compiler

    digest = hashlib.sha256()
    for part in (
        SHIM_SOURCE.read_bytes(),
        Path(include, "xla", "ffi", "api", "ffi.h").read_bytes(),
        Path(include, "xla", "ffi", "api", "api.h").read_bytes(),
        compiler_identity(find_compiler()).encode(),
        repr((_FLAGS, _LIBS)).encode(),
    ):
        digest.update(part)
    return digest.hexdigest()[:24]


def ensure_registered() -> None:
    """Build (once, cached) and load the shim, and register both handlers with XLA (once per
    process). BackendError saying why when it cannot; the same error every later time."""
    global _registered, _shim, _failure
    with _lock:
        if _registered:
            return
        if _failure is not None:
            raise BackendError(_failure)
        import jax

        from .._cache.lookup import get_product

        try:
            include = jax.ffi.include_dir()
            found = get_product(AREA, _shim_name(include), lambda d: _build_shim(include, d))
            if found is None:
                raise BackendError("[jax] the XLA FFI shim could not be built or stored")
            shim = ctypes.CDLL(str(found / "shim.so"))
        except (BackendError, OSError) as e:
            _failure = str(e)
            raise BackendError(_failure) from None
        for target, symbol, platform in _HANDLERS:
            handler = jax.ffi.pycapsule(getattr(shim, symbol))
            jax.ffi.register_ffi_target(target, handler, platform=platform)
        _shim = shim
        _registered = True


def problem() -> str | None:
    """None when the shim is built and registered (building it now if needed), else why not."""
    try:
        ensure_registered()
    except BackendError as e:
        return str(e)
    return None
