"""NumPy arrays (host memory)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import DType, normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from . import DLPACK_CPU, Adapter, ArrayInfo


def numpy_dtype(dtype: DType) -> Any:
    """The numpy dtype for a kernelkit dtype (bfloat16 through ml_dtypes when installed)."""
    if dtype.name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ArgumentTypeError(
                "[kernel] a NumPy bfloat16 array needs the ml_dtypes package"
            ) from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(dtype.name)


class NumpyAdapter(Adapter):
    framework = "numpy"
    strides_in_signature = True
    key_fields = ("{x}.dtype", "-1", "{x}.ndim == 0")  # dtype, device (host), 0-d
    pointer_expr = "{x}.__array_interface__['data'][0]"

    def device(self, x: Any) -> tuple[int, int]:
        """(DLPack device type, index) of the array's memory."""
        return DLPACK_CPU, 0

    def info(self, x: Any, what: str) -> ArrayInfo:
        """NumPy-style arrays (NumPy, CuPy) keep strides in bytes; kernels get elements."""
        item = x.itemsize
        if not x.dtype.isnative:  # kernels read the machine's byte order
            raise ArgumentTypeError(
                f"{what} has non-native byte order (dtype {x.dtype.str}); pass "
                "x.astype(x.dtype.newbyteorder('='))"
            )
        if any(s % item for s in x.strides):
            raise ArgumentError(f"{what} has strides {x.strides} not a multiple of its itemsize")
        device_type, device_index = self.device(x)
        return ArrayInfo(
            dtype=normalize_dtype(x.dtype, what),
            shape=tuple(x.shape),
            strides=tuple(s // item for s in x.strides),
            device_type=device_type,
            device_index=device_index,
            contiguous=bool(x.flags.c_contiguous),
        )

    def pointer(self, x: np.ndarray) -> int:
        return x.__array_interface__["data"][0]

    def output_pointer(self, what: str) -> Callable[[Any], int]:
        def pointer(x: np.ndarray) -> int:
            address, read_only = x.__array_interface__["data"]
            if read_only:
                raise ArgumentError(
                    f"{what} is read-only (its writeable flag is off); pass a writable array"
                )
            return address

        return pointer

    def layout(self, x: Any) -> tuple[Any, Any]:
        return x.shape, [s // x.itemsize for s in x.strides]

    # no Python frame on the hot path
    is_contiguous = staticmethod(operator.attrgetter("flags.c_contiguous"))  # type: ignore[assignment]

    def contiguous(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x)

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        return functools.partial(np.empty, dtype=numpy_dtype(dtype))

    def fill(self, x: np.ndarray, value: Any) -> None:
        x.fill(value)
