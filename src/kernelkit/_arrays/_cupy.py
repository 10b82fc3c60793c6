"""CuPy arrays (strides are in bytes there; kernelkit passes elements)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy

from .._dtypes import DType
from . import DLPACK_CUDA
from ._numpy import NumpyAdapter, numpy_dtype


class CupyAdapter(NumpyAdapter):
    """CuPy arrays: NumPy's layout rules (byte strides, flags), in CUDA memory."""

    framework = "cupy"
    key_fields = ("{x}.dtype", "{x}.device.id", "{x}.ndim == 0")
    pointer_expr = "{x}.data.ptr"

    def signer(self, tp: type) -> Callable[[tuple], Any] | None:
        return cupy_signature if issubclass(tp, cupy.ndarray) else None

    def device(self, x: Any) -> tuple[int, int]:
        return DLPACK_CUDA, x.device.id

    def pointer(self, x: cupy.ndarray) -> int:
        return x.data.ptr

    def output_pointer(self, what: str) -> Callable[[Any], int]:
        return self.pointer  # CuPy arrays are always writable

    def contiguous(self, x: cupy.ndarray) -> cupy.ndarray:
        return cupy.ascontiguousarray(x)

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        np_dtype = numpy_dtype(dtype)

        def empty(shape: Any) -> cupy.ndarray:
            with cupy.cuda.Device(device_index):
                return cupy.empty(shape, dtype=np_dtype)

        return empty

    def stream(self, device_index: int) -> int:
        with cupy.cuda.Device(device_index):
            return cupy.cuda.get_current_stream().ptr


def cupy_signature(arrays: tuple) -> tuple:
    """CuPy arrays (or None): class, dtype, shape, strides (bytes) and device, for the built-in
    ops' prepared calls (``Adapter.signer``)."""
    sig = []
    for a in arrays:
        sig.append(
            None if a is None else (a.__class__, a.dtype, a.shape, a.strides, a.data.device_id)
        )
    return tuple(sig)
