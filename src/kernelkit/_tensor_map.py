"""Tensor maps: an array described for the Hopper tensor-memory accelerator (TMA), passed to a
kernel by value as a 128-byte ``const __grid_constant__ kk_tensor_map`` parameter.

``tensor_map(array, box)`` checks the array and the box, has the array's backend encode the
map (CUDA: ``cuTensorMapEncodeTiled``) and returns a ``TensorMap``; passing that as an input of
a kernel gives the body a parameter of that name, for ``cp.async.bulk.tensor`` copies of
``box``-shaped tiles (zero-filled past the array's edges). Maps are kept per (array type,
dtype, device, address, shape, strides, box, swizzle), so a repeated call costs the adapter's
cheap reads and a dictionary lookup; a map names memory, and does not keep the array alive.
"""

from __future__ import annotations

import ctypes
import numbers
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._arrays import CLASS, Adapter, register
from ._arrays.lookup import adapter_for
from ._backends.registry import backend_call, backend_for_device_type
from ._errors import ArgumentError, ArgumentTypeError
from ._records import MAP_BYTES, TensorMapRequest

__all__ = ["MAP_BYTES", "SWIZZLES", "TensorMap", "TensorMapAdapter", "tensor_map"]

SWIZZLES = (0, 32, 64, 128)  # shared-memory swizzle spans in bytes (0: none)
MAX_RANK = 5
MAX_BOX = 256  # elements per box dimension
MAX_DIM = 2**32  # elements per array dimension
MAX_STRIDE_BYTES = 2**40
_CACHE_SIZE = 256


@dataclass(frozen=True, eq=False)
class TensorMap:
    """An encoded tensor map of one array (made by ``tensor_map``): its 128 bytes, and the
    facts it was made from. Like a pointer, it names the array's memory without keeping the
    array alive: pass the array to the same call (or keep it) while kernels use the map."""

    array_dtype: str  # (not ``dtype``/``shape``: a map must not pass for an array)
    array_shape: tuple[int, ...]
    array_strides: tuple[int, ...]  # in elements
    box: tuple[int, ...]  # elements per dimension, in the array's order (last: contiguous)
    swizzle: int
    device_type: int
    device_index: int
    words: Any = field(repr=False)  # ctypes c_uint64 * 16: kernelkit's own copy of the map

    @property
    def address(self) -> int:
        """Where the 128 bytes are, for a launch's argument pack."""
        return ctypes.addressof(self.words)


class TensorMapAdapter(Adapter):
    """``TensorMap`` inputs: passed by value (their 128 bytes), keyed by their array's dtype
    and device (a plan's guard then holds a map of another device's memory out); as an array
    (an output, a map of a map, an op's operand) they are refused by name."""

    framework = "tensor map"
    key_fields = (CLASS, "{x}.array_dtype", "{x}.device_type", "{x}.device_index")

    def info(self, x: Any, what: str) -> Any:
        raise ArgumentTypeError(f"{what} is a tensor map, not an array (pass it as an input)")

    def pointer(self, x: Any) -> int:
        raise ArgumentTypeError("a tensor map is not an array: it has no data pointer")

    def layout(self, x: Any) -> Any:
        raise ArgumentTypeError("a tensor map is not an array: it has no shape or strides")


ADAPTER = TensorMapAdapter()
register(TensorMap, ADAPTER)

_lock = threading.Lock()
_made: dict[tuple, TensorMap] = {}  # the call's cheap facts -> its map, oldest first


def tensor_map(array: Any, box: Sequence[int], *, swizzle: int = 128) -> TensorMap:
    """Describe ``array`` for TMA copies of ``box``-shaped tiles (elements per dimension, in the
    array's order). ``swizzle`` (0, 32, 64 or 128 bytes) is the shared-memory layout the copies
    write: with 128, 16-byte chunk c of a box row r lands at c ^ (r % 8), as wgmma's 128-byte
    swizzled operands want, and a box row may be at most 128 bytes. The array's last dimension
    must be contiguous, its other strides multiples of 16 bytes, its start 16-byte aligned.

    Pass the result as a kernel input: the body gets ``const __grid_constant__ kk_tensor_map``.

    >>> import numpy as np, kernelkit
    >>> try:  # host memory has no TMA: the error names the backend
    ...     kernelkit.tensor_map(np.zeros((64, 64), np.float32), (8, 32))
    ... except kernelkit.BackendError as e:
    ...     print("no TMA here")
    no TMA here
    """
    what = "[tensor_map] array"
    if array.__class__ is TensorMap:
        raise ArgumentTypeError(f"{what} is already a tensor map; pass the array it describes")
    adapter = adapter_for(array, what)
    key = None
    if not adapter.synchronous and swizzle.__class__ is int:  # no prepare step: the kept maps
        try:
            if all(b.__class__ is int for b in box):  # (8.0, 32) would hash as (8, 32)
                shape, strides = adapter.layout(array)
                key = (array.__class__, adapter.key(array), adapter.pointer(array), tuple(shape),
                       tuple(strides), tuple(box), swizzle)  # fmt: skip
                made = _made.get(key)
                if made is not None:
                    return made
        except TypeError:  # an unhashable or non-sequence box: checked below
            key = None
    array = adapter.prepare(array)
    info = adapter.info(array, what)
    box_t = _check_box(box, info.shape)
    if swizzle.__class__ is not int or swizzle not in SWIZZLES:
        raise ArgumentError(
            f"[tensor_map] swizzle must be one of {SWIZZLES} bytes, got {swizzle!r}"
        )
    item = info.dtype.itemsize
    if swizzle and box_t[-1] * item > swizzle:
        raise ArgumentError(
            f"[tensor_map] box {box_t}: a box row of {box_t[-1] * item} bytes exceeds the "
            f"{swizzle}-byte swizzle"
        )
    if box_t[-1] * item % 16:
        raise ArgumentError(
            f"[tensor_map] box {box_t}: a box row must be a multiple of 16 bytes, "
            f"got {box_t[-1] * item}"
        )
    if info.strides[-1] != 1 and info.shape[-1] != 1:
        raise ArgumentError(
            f"[tensor_map] array's last dimension must be contiguous, strides {info.strides}"
        )
    bad = [s for s in info.strides[:-1] if s * item % 16 or s <= 0]
    if bad:
        raise ArgumentError(
            f"[tensor_map] array's strides {info.strides} (elements of {item} bytes) must be "
            "positive multiples of 16 bytes, except the last"
        )
    if max(info.shape) > MAX_DIM or max(s * item for s in info.strides) >= MAX_STRIDE_BYTES:
        raise ArgumentError(
            f"[tensor_map] array's shape {info.shape} or strides {info.strides} exceed TMA's "
            f"limits ({MAX_DIM} elements a dimension, strides below {MAX_STRIDE_BYTES} bytes)"
        )
    pointer = adapter.pointer(array)
    if pointer % 16:
        raise ArgumentError("[tensor_map] array must start on a 16-byte boundary")
    backend = backend_for_device_type(info.device_type, what)
    with backend_call(backend, "encoding a tensor map"):
        raw = backend.encode_tensor_map(TensorMapRequest(
            info.device_index, pointer, info.dtype.name, info.shape,
            tuple(s * item for s in info.strides), box_t, swizzle,
        ))  # fmt: skip
    if len(raw) != MAP_BYTES:
        raise ArgumentError(f"[tensor_map] backend {backend.name!r} gave {len(raw)} bytes")
    words = (ctypes.c_uint64 * (MAP_BYTES // 8)).from_buffer_copy(bytearray(raw))
    made = TensorMap(
        info.dtype.name, info.shape, info.strides, box_t, swizzle, info.device_type,
        info.device_index, words,
    )  # fmt: skip
    if key is not None:
        with _lock:
            _made[key] = made
            while len(_made) > _CACHE_SIZE:
                del _made[next(iter(_made))]
    return made


def _check_box(box: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    if not 1 <= len(shape) <= MAX_RANK:
        raise ArgumentError(f"[tensor_map] array must have 1 to {MAX_RANK} dimensions, got {shape}")
    if not all(shape):
        raise ArgumentError(f"[tensor_map] array has no elements (shape {shape})")
    try:
        items = () if isinstance(box, str) else tuple(box)
    except TypeError:
        items = ()
    if not items:
        raise ArgumentTypeError(f"[tensor_map] box must be a sequence of ints, got {box!r}")
    ints = tuple(_int_or_none(b) for b in items)
    if len(ints) != len(shape) or not all(b is not None and 1 <= b <= MAX_BOX for b in ints):
        raise ArgumentError(
            f"[tensor_map] box must give 1 to {MAX_BOX} elements for each of the array's "
            f"{len(shape)} dimensions (shape {shape}), got {items!r}"
        )
    return ints  # type: ignore[return-value]


def _int_or_none(b: Any) -> int | None:
    """An integer (Python's or NumPy's, never a bool or a float) as an int, else None."""
    if isinstance(b, bool) or not isinstance(b, numbers.Integral):
        return None
    return int(b)
