"""Array adapters: one per framework, found by the array's type with one dictionary lookup.

An adapter answers, for arrays of its framework: a small hashable key for the specialization
(dtype, device, 0-d), full facts (shape, strides in elements, device) on the slow path, the data
pointer on the hot path, allocation of outputs, and the framework's current stream.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._dtypes import DType
from .._errors import ArgumentTypeError

__all__ = ["NULL", "Adapter", "ArrayInfo", "DLPACK_CPU", "DLPACK_CUDA", "adapter_for"]

DLPACK_CPU = 1
DLPACK_CUDA = 2


@dataclass(frozen=True)
class ArrayInfo:
    """Facts about one array, gathered once per specialization (slow path)."""

    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device_type: int  # DLPack device type
    device_index: int
    contiguous: bool


class Adapter:
    """Base adapter; subclasses implement one framework. Methods take the array first."""

    framework: str = "?"
    synchronous: bool = False  # the framework cannot share a stream: sync after launch
    shape_attribute: bool = True  # arrays have a ``.shape`` tuple (cheaper than ``layout``)

    def key(self, x: Any) -> Any:
        raise NotImplementedError

    def info(self, x: Any, what: str) -> ArrayInfo:
        raise NotImplementedError

    def guard(self, var: str, key: Any, tag: str) -> tuple[str, dict[str, Any]]:
        """A Python expression, true exactly when ``self.key(var) == key``, for the generated
        hot path; names it needs are returned in a namespace, each starting with ``tag``."""
        return f"{tag}kf({var}) == {tag}k", {f"{tag}kf": self.key, f"{tag}k": key}

    def pointer(self, x: Any) -> int:
        raise NotImplementedError

    def output_pointer(self, what: str) -> Callable[[Any], int]:
        """Like ``pointer``, for an array the kernel writes: refuses read-only memory with an
        ArgumentError naming ``what`` (default: the framework's arrays are always writable)."""
        return self.pointer

    def layout(self, x: Any) -> tuple[Sequence[int], Sequence[int]]:
        """(shape, strides in elements), cheaply: used per call when the body reads them."""
        info = self.info(x, "array")
        return info.shape, info.strides

    def is_contiguous(self, x: Any) -> bool:
        raise NotImplementedError

    def contiguous(self, x: Any) -> Any:
        raise NotImplementedError

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        """A callable ``shape -> new uninitialized array`` (prepared once per specialization)."""
        raise NotImplementedError

    def fill(self, x: Any, value: Any) -> None:
        raise NotImplementedError

    def stream(self, device_index: int) -> int:
        """The framework's current stream on this device, as an int handle (0: default)."""
        return 0

    def stream_getter(self, device_type: int, device_index: int) -> Callable[[], int]:
        """A no-argument callable returning ``stream(device_index)``, prepared once per plan;
        host memory has no stream (and must not touch the framework's GPU runtime: a CPU-only
        torch build has none)."""
        if device_type == DLPACK_CPU:
            return _no_stream
        return functools.partial(self.stream, device_index)

    def prepare(self, x: Any) -> Any:
        """Make the array safe to read from another stream (e.g. wait for JAX); default: as is."""
        return x

    def wrap(self, x: Any) -> Any:
        """Turn an array this adapter allocated into what the user gets back."""
        return x


def _no_stream() -> int:
    return 0


class ScalarAdapter(Adapter):
    """Python and NumPy scalars: passed by value; only their type (or dtype) is in the key."""

    framework = "scalar"

    def key(self, x: Any) -> Any:
        return getattr(x, "dtype", type(x))

    def guard(self, var: str, key: Any, tag: str) -> tuple[str, dict[str, Any]]:
        if isinstance(key, type):  # Python scalars: the (already checked) type is the whole key
            return "True", {}
        return super().guard(var, key, tag)


class NullAdapter(Adapter):
    """``None`` for an input declared in ``optional_inputs``: a null pointer, no elements."""

    framework = "none"
    shape_attribute = False

    def key(self, x: Any) -> Any:
        return None

    def pointer(self, x: Any) -> int:
        return 0

    def layout(self, x: Any) -> tuple[Sequence[int], Sequence[int]]:
        return (0,), (1,)

    def is_contiguous(self, x: Any) -> bool:
        return True


NULL = NullAdapter()

_BY_TYPE: dict[type, Adapter] = {
    type(None): NULL,
    bool: ScalarAdapter(),
    int: ScalarAdapter(),
    float: ScalarAdapter(),
}


# type -> adapter.key, for the hot path's one-call-per-argument key (no bound-method creation)
_KEY_FN: dict[type, Callable[[Any], Any]] = {t: a.key for t, a in _BY_TYPE.items()}


def adapter_for(x: Any, what: str) -> Adapter:
    """The adapter for ``x``'s type (cached per type); TypeError naming ``what`` if none fits."""
    adapter = _BY_TYPE.get(type(x))
    if adapter is None:
        adapter = _resolve(type(x), x, what)
        _BY_TYPE[type(x)] = adapter
        _KEY_FN[type(x)] = adapter.key
    return adapter


def _is_numpy_scalar(x: Any) -> bool:
    import numpy as np

    return isinstance(x, np.generic)


def _resolve(tp: type, x: Any, what: str) -> Adapter:
    module = tp.__module__.split(".")[0]
    if _is_numpy_scalar(x):
        return ScalarAdapter()
    if module == "torch":
        from ._torch import TorchAdapter

        return TorchAdapter()
    if module == "cupy":
        from ._cupy import CupyAdapter

        return CupyAdapter()
    if module in ("jax", "jaxlib"):
        from ._jax import JaxAdapter

        return JaxAdapter()
    import numpy as np

    if issubclass(tp, np.ndarray):
        from ._numpy import NumpyAdapter

        return NumpyAdapter()
    if (
        hasattr(x, "__cuda_array_interface__")
        or hasattr(x, "__dlpack__")
        or hasattr(x, "__array_interface__")
    ):
        from ._generic import GenericAdapter

        return GenericAdapter()
    raise ArgumentTypeError(
        f"{what} has type {tp.__module__}.{tp.__qualname__}, which is not an array "
        "kernelkit understands (torch, CuPy, JAX, NumPy, or anything with __dlpack__, "
        "__cuda_array_interface__ or __array_interface__)"
    )
