"""CuPy arrays (strides are in bytes there; kernelkit passes elements)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import cupy

from .._dtypes import DType
from . import CHECKERS, DLPACK_CUDA, attribute_checker
from ._numpy import NumpyAdapter, numpy_dtype

# what the exact class and these attributes say of a CuPy array: all a signature says
# (``cupy_signature``), so a check of them in C (``kk_launch.Guards``) stands in for it
GUARD_FIELDS = (("dtype",), ("shape",), ("strides",), ("data", "device_id"))


class CupyAdapter(NumpyAdapter):
    """CuPy arrays: NumPy's layout rules (byte strides, flags), in CUDA memory."""

    framework = "cupy"
    key_fields = ("{x}.dtype", "{x}.device.id", "{x}.ndim == 0")
    pointer_expr = "{x}.data.ptr"

    def signer(self, tp: type) -> Callable[[tuple], Any] | None:
        return cupy_signature if issubclass(tp, cupy.ndarray) else None

    def device(self, x: Any) -> tuple[int, int]:
        return DLPACK_CUDA, x.device.id

    # x.data.ptr without a Python frame (the calls repeated in C read it per call)
    pointer = operator.attrgetter("data.ptr")  # type: ignore[assignment]

    def output_pointer(self, what: str) -> Callable[[Any], int]:
        return self.pointer  # CuPy arrays are always writable

    def contiguous(self, x: cupy.ndarray) -> cupy.ndarray:
        return cupy.ascontiguousarray(x)

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        np_dtype = numpy_dtype(dtype)

        make, current = cupy.ndarray, cupy.cuda.runtime.getDevice

        def empty(shape: Any) -> cupy.ndarray:
            if current() == device_index:  # (``cupy.empty`` is ``cupy.ndarray`` on this device)
                return make(shape, np_dtype)
            with cupy.cuda.Device(device_index):
                return make(shape, np_dtype)

        return empty

    def stream(self, device_index: int) -> int:
        with cupy.cuda.Device(device_index):
            return cupy.cuda.get_current_stream().ptr

    def stream_getter(self, device_type: int, device_index: int) -> Callable[[], int]:
        get = cupy.cuda.get_current_stream
        try:  # CuPy 13+ takes the device (no switch of the current device a call)
            get(device_index)
        except TypeError:
            return super().stream_getter(device_type, device_index)
        return lambda: get(device_index).ptr


def cupy_signature(arrays: tuple) -> tuple:
    """CuPy arrays (or None): class, dtype, shape, strides (bytes) and device, for the built-in
    ops' prepared calls (``Adapter.signer``)."""
    sig = []
    for a in arrays:
        sig.append(
            None if a is None else (a.__class__, a.dtype, a.shape, a.strides, a.data.device_id)
        )
    return tuple(sig)


CHECKERS[cupy.ndarray] = attribute_checker(GUARD_FIELDS)
