"""CuPy arrays (strides are in bytes there; kernelkit passes elements)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cupy

from .._dtypes import DType, normalize_dtype
from . import DLPACK_CUDA, Adapter, ArrayInfo
from ._numpy import numpy_dtype


class CupyAdapter(Adapter):
    framework = "cupy"

    def key(self, x: cupy.ndarray) -> Any:
        return (x.dtype, x.device.id, x.ndim == 0)

    def info(self, x: cupy.ndarray, what: str) -> ArrayInfo:
        item = x.itemsize
        if any(s % item for s in x.strides):
            raise ValueError(f"{what} has strides {x.strides} not a multiple of its itemsize")
        return ArrayInfo(
            dtype=normalize_dtype(x.dtype, what),
            shape=tuple(x.shape),
            strides=tuple(s // item for s in x.strides),
            device_type=DLPACK_CUDA,
            device_index=x.device.id,
            contiguous=bool(x.flags.c_contiguous),
        )

    def pointer(self, x: cupy.ndarray) -> int:
        return x.data.ptr

    def layout(self, x: Any) -> tuple[Any, Any]:
        return x.shape, [s // x.itemsize for s in x.strides]

    def is_contiguous(self, x: cupy.ndarray) -> bool:
        return x.flags.c_contiguous

    def contiguous(self, x: cupy.ndarray) -> cupy.ndarray:
        return cupy.ascontiguousarray(x)

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        np_dtype = numpy_dtype(dtype)

        def empty(shape: Any) -> cupy.ndarray:
            with cupy.cuda.Device(device_index):
                return cupy.empty(shape, dtype=np_dtype)

        return empty

    def fill(self, x: cupy.ndarray, value: Any) -> None:
        x.fill(value)

    def stream(self, device_index: int) -> int:
        with cupy.cuda.Device(device_index):
            return cupy.cuda.get_current_stream().ptr
