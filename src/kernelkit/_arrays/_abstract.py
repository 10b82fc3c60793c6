"""Abstract arrays: a shape, a dtype and a device, no memory. A kernel is specialized on them when
only that much is known (``Kernel.as_jax_callable`` while XLA lowers a traced computation); the
plan they make is compiled and loaded like any other, and never run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._dtypes import normalize_dtype
from .._errors import ArgumentTypeError
from . import CLASS, Adapter, ArrayInfo


@dataclass(frozen=True)
class AbstractArray:
    """What a traced array says about itself: shape, dtype (any spelling ``normalize_dtype``
    takes) and where it will live (DLPack device type and index)."""

    shape: tuple[int, ...]
    dtype: Any
    device_type: int
    device_index: int

    @property
    def ndim(self) -> int:
        return len(self.shape)


class AbstractAdapter(Adapter):
    framework = "abstract"
    # the class keeps these plans apart from any real array's of the same dtype and device
    key_fields = (CLASS, "{x}.dtype", "{x}.device_type", "{x}.device_index", "{x}.ndim == 0")

    def info(self, x: AbstractArray, what: str) -> ArrayInfo:
        strides, acc = [], 1
        for n in reversed(x.shape):
            strides.append(acc)
            acc *= n
        return ArrayInfo(
            normalize_dtype(x.dtype, what),
            tuple(x.shape),
            tuple(reversed(strides)),
            x.device_type,
            x.device_index,
            True,
        )

    def pointer(self, x: Any) -> int:
        raise ArgumentTypeError("[kernel] an abstract array has no memory to launch on")

    def is_contiguous(self, x: Any) -> bool:
        return True

    def contiguous(self, x: Any) -> Any:
        return x
