"""Struct inputs: a POD C++ type from ``header=`` passed by value (``kernelkit.struct``).

A call passes the value's bytes: a NumPy structured scalar (or 0-d structured array), ``bytes``,
``bytearray``, a ``ctypes.Structure``, anything with the buffer protocol. Only its type is in the
specialization key (a structured scalar's dtype); its size is checked on every call against the
declared size, and the compiler checks the C++ type's ``sizeof`` against the same number.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from .._arrays import BY_TYPE, CLASS, Adapter, register
from .._errors import ArgumentError, ArgumentTypeError

__all__ = ["STRUCT_ADAPTER", "StructAdapter", "key_struct_type", "struct_copier"]


class StructAdapter(Adapter):
    """Byte containers (``bytes``, ``ctypes`` structures, ...) as struct inputs: keyed by their
    class; as arrays (an input not declared in ``structs=``) refused by name."""

    framework = "struct"
    key_fields = (CLASS,)

    def info(self, x: Any, what: str) -> Any:
        raise ArgumentTypeError(
            f"{what} is {type(x).__name__}, which only an input declared in "
            "kernel(..., structs={...}) takes (by value)"
        )

    def pointer(self, x: Any) -> int:
        raise ArgumentTypeError("a struct value is not an array: it has no data pointer")

    def layout(self, x: Any) -> Any:
        raise ArgumentTypeError("a struct value is not an array: it has no shape or strides")


STRUCT_ADAPTER = StructAdapter()
for _tp in (bytes, bytearray, memoryview):
    register(_tp, STRUCT_ADAPTER)


def key_struct_type(x: Any) -> None:
    """Give ``x``'s type a specialization key (its class) unless it already has one (NumPy
    types: their dtype), so that a call passing it takes the hot path's lookup."""
    if type(x) not in BY_TYPE:
        register(type(x), STRUCT_ADAPTER)


def struct_copier(what: str, nbytes: int) -> Callable[[Any, Any], None]:
    """A function copying a value's ``nbytes`` bytes into an argument slot; errors name
    ``what`` (wrong size, or not a bytes-like value)."""
    memmove = ctypes.memmove

    def copy(slot: Any, x: Any) -> None:
        if x.__class__ is bytes and len(x) == nbytes:
            memmove(slot, x, nbytes)
            return
        try:
            view = memoryview(x)
        except TypeError:
            raise ArgumentTypeError(
                f"{what} is a struct input: pass a NumPy structured scalar, bytes or a ctypes "
                f"structure of {nbytes} bytes, got {type(x).__name__}"
            ) from None
        if view.nbytes != nbytes:
            raise ArgumentError(
                f"{what} must be {nbytes} bytes (its kernelkit.struct size), got {view.nbytes}"
            )
        memmove(slot, view.tobytes(), nbytes)

    return copy
