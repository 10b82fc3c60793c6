"""Argument packing in CUDA's kernelParams layout: a void*[n], entry i -> value of parameter i.

One ``ArgPack`` per (plan, thread): its slots are ctypes objects that keep stable addresses, so a
call only assigns values and hands the same address to the launcher.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

from .._records import MAP_BYTES, MAX_NDIM, Param

_SCALAR_CTYPES: dict[str, Any] = {
    "bool": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float16": ctypes.c_uint16,
    "bfloat16": ctypes.c_uint16,  # raw bits
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}
Dims = ctypes.c_int64 * MAX_NDIM


def _slot(p: Param) -> Any:
    if p.kind in ("array", "scalar_array"):
        return ctypes.c_uint64()
    if p.kind == "scalar":
        return _SCALAR_CTYPES[p.dtype]()  # type: ignore[index]
    if p.kind == "dims":
        return Dims()
    if p.kind == "ndim":
        return ctypes.c_int32()
    if p.kind == "tensor_map":
        return (ctypes.c_uint64 * (MAP_BYTES // 8))()  # the map's bytes, copied in per call
    if p.kind == "struct":  # the value's bytes, copied in per call (8-byte aligned storage)
        return (ctypes.c_uint64 * ((p.nbytes + 7) // 8))()
    return ctypes.c_int64()  # extent


class ArgPack:
    """Stable storage for one launch's arguments."""

    __slots__ = ("address", "pointers", "slots")

    def __init__(self, params: Sequence[Param]) -> None:
        self.slots = [_slot(p) for p in params]
        self.pointers = (ctypes.c_void_p * max(1, len(self.slots)))(
            *[ctypes.addressof(s) for s in self.slots]
        )
        self.address = ctypes.addressof(self.pointers)


def scalar_bits(value: Any, dtype: str) -> Any:
    """A Python scalar as the slot expects it (half and bfloat16 as their raw 16 bits)."""
    if dtype == "float16":
        return struct.unpack("<H", struct.pack("<e", float(value)))[0]
    if dtype == "bfloat16":
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF  # round to nearest even
    return value
