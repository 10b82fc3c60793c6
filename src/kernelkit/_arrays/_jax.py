"""JAX arrays. JAX does not share its stream. Eager calls on JAX CUDA arrays therefore run
through XLA's FFI, on XLA's stream, when kernelkit's FFI shim is available (``run_for``, see
``_integrations/jax_eager.py``). The direct path, kept for what that route cannot take: inputs
are waited for, outputs are allocated by torch or CuPy (whichever is installed), written on
that framework's stream, synchronized, and handed to JAX through DLPack without a copy. JAX
arrays are immutable, so ``out=`` is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from .._dtypes import DType, normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from . import DLPACK_CPU, DLPACK_CUDA, RUNS_FOR, Adapter, ArrayInfo, row_strides


def _allocator(device_type: int) -> Adapter:
    try:
        from ._torch import TorchAdapter

        return TorchAdapter()
    except ImportError:
        pass
    if device_type == DLPACK_CUDA:
        try:
            from ._cupy import CupyAdapter

            return CupyAdapter()
        except ImportError:
            raise ArgumentTypeError(
                "[kernel] outputs for JAX CUDA arrays need torch or cupy installed"
            ) from None
    from ._numpy import NumpyAdapter

    return NumpyAdapter()


def _device(x: Any) -> tuple[int, int]:
    devices = x.devices()
    if len(devices) != 1:
        raise ArgumentError("[kernel] a JAX array sharded over several devices is not supported")
    d = next(iter(devices))
    kind = DLPACK_CPU if d.platform == "cpu" else DLPACK_CUDA
    return kind, getattr(d, "local_hardware_id", None) or 0


class JaxAdapter(Adapter):
    framework = "jax"
    synchronous = True

    def __init__(self) -> None:
        self._alloc: Adapter | None = None

    def key(self, x: Any) -> Any:
        return (x.dtype, _device(x), x.ndim == 0)

    def signer(self, tp: type) -> Callable[[tuple], Any] | None:
        # concrete arrays only: a tracer (inside jax.jit) is never prepared
        concrete = issubclass(tp, jax.Array) and not issubclass(tp, jax.core.Tracer)
        return jax_signature if concrete else None

    def info(self, x: Any, what: str) -> ArrayInfo:
        kind, index = _device(x)
        shape = tuple(x.shape)
        return ArrayInfo(
            normalize_dtype(x.dtype, what), shape, row_strides(shape), kind, index, True
        )

    def prepare(self, x: Any) -> Any:
        return x.block_until_ready()

    def pointer(self, x: Any) -> int:
        return x.unsafe_buffer_pointer()

    def is_contiguous(self, x: Any) -> bool:
        return True

    def contiguous(self, x: Any) -> Any:
        return x

    def _allocator(self, device_type: int) -> Adapter:
        if self._alloc is None:
            self._alloc = _allocator(device_type)
        return self._alloc

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        return self._allocator(device_type).allocator(dtype, device_type, device_index)

    def fill(self, x: Any, value: Any) -> None:
        self._allocator(DLPACK_CUDA).fill(x, value)

    def stream(self, device_index: int) -> int:
        return self._allocator(DLPACK_CUDA).stream(device_index)

    def wrap(self, x: Any) -> Any:
        return jax.dlpack.from_dlpack(x)

    def run_for(self, plan: Any, bound: Any, guard: Any) -> Callable[..., Any]:
        """On CUDA, through XLA's FFI on XLA's stream when it can: the route an integration
        installed (``RUNS_FOR``, ``jax_eager``), else the plan's own run."""
        route = RUNS_FOR.get("jax")
        return plan.run if route is None else route(plan, bound, guard)


def jax_signature(arrays: tuple) -> tuple:
    """Concrete JAX arrays (or None): class, dtype, shape, weak type and sharding (its device),
    for the built-in ops' prepared calls (``Adapter.signer``). Read through the array's
    abstract value (``aval``, an attribute in C), whose fields ``dtype``, ``shape`` and
    ``weak_type`` are what the array's Python properties of those names return: 0.4 µs for two
    arrays against 0.9 through the properties (2-core VM)."""
    sig: list[tuple | None] = []
    for a in arrays:
        if a is None:
            sig.append(None)
        else:
            v = a.aval
            sig.append((a.__class__, v.dtype, v.shape, v.weak_type, a.sharding))
    return tuple(sig)
