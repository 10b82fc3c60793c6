"""What a generated hot path (``launch.generate_run``) calls when a call is wrong or needs
a framework only known per call: the errors that name the argument, ``init_value``'s fill,
and the pointer and layout of an output allocated through another framework."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Sequence
from typing import Any

from .._arrays import Adapter
from .._arrays.lookup import adapter_for
from .._errors import ArgumentError, ArgumentTypeError, LaunchError
from .._records import MAX_NDIM

__all__ = [
    "LookupAdapter",
    "contiguity_error",
    "filler",
    "launch_error",
    "ndim_error",
    "output_pointer_any",
    "shape_check",
    "shape_error",
]


def ndim_error(what: str) -> Callable[[int], None]:
    def fail(ndim: int) -> None:
        raise ArgumentError(
            f"{what} has {ndim} dimensions; shape/strides support at most {MAX_NDIM}"
        )

    return fail


def output_pointer_any(what: str) -> Callable[[Any], int]:
    def pointer(x: Any) -> int:
        return adapter_for(x, what).output_pointer(what)(x)

    return pointer


class LookupAdapter(Adapter):
    """Layout of an array whose framework is only known per call."""

    shape_attribute = False

    def layout(self, x: Any) -> Any:
        return adapter_for(x, "output").layout(x)


def filler(kernel: str) -> Callable[[tuple, Any], None]:
    def fill(arrays: tuple, value: Any) -> None:
        if value.__class__ is bool or not isinstance(value, numbers.Real):  # NumPy's too
            raise ArgumentTypeError(
                f"[{kernel}] init_value must be a number (int or float) or None, got {value!r}"
            )
        for a in arrays:
            adapter_for(a, "output").fill(a, value)

    return fill


def _valid_shape(shape: Any) -> bool:
    try:
        return all(
            not isinstance(d, bool) and isinstance(d, int) and d >= 0 for d in shape
        ) and not isinstance(shape, str)
    except TypeError:
        return False


def shape_error(kernel: str, n: int, framework: str) -> Callable[[Any, Exception | None], None]:
    """Why allocating the outputs failed: bad ``output_shapes``, or the framework's allocator
    (out of memory, CUDA used in a forked child, a framework that cannot allocate there)."""

    def fail(shapes: Any, error: Exception | None) -> None:
        if (
            error is not None
            and isinstance(shapes, list | tuple)
            and len(shapes) == n
            and all(_valid_shape(s) for s in shapes)
        ):
            hint = ""
            if "fork" in str(error):
                hint = (
                    " (CUDA cannot be used in a process forked after CUDA was initialized: "
                    "start workers with the 'spawn' method)"
                )
            raise LaunchError(
                f"[{kernel}] allocating the outputs with {framework} failed{hint}: "
                f"{type(error).__name__}: {error}"
            ) from error
        detail = f": {error}" if error else ""
        raise ArgumentError(
            f"[{kernel}] output_shapes must be a list of {n} valid shapes, got {shapes!r}{detail}"
        )

    return fail


def shape_check(kernel: str) -> Callable[[Any, Any], None]:
    def check(out: Any, shapes: Any) -> None:
        if len(shapes) != len(out):
            raise ArgumentError(
                f"[{kernel}] output_shapes has {len(shapes)} shapes for {len(out)} outputs"
            )
        for i, (o, shape) in enumerate(zip(out, shapes)):
            if tuple(o.shape) != tuple(shape):
                raise ArgumentError(
                    f"[{kernel}] out[{i}] has shape {tuple(o.shape)}, but "
                    f"output_shapes[{i}] is {tuple(shape)}"
                )

    return check


def launch_error(kernel: str, backend: str) -> Callable[[Exception], None]:
    def fail(error: Exception) -> None:
        raise LaunchError(
            f"[{kernel}] backend {backend!r} failed to launch: {type(error).__name__}: {error}"
        ) from error

    return fail


def contiguity_error(outs: Sequence[Any]) -> Callable[[int], None]:
    def fail(j: int) -> None:
        name = outs[j].what
        raise ArgumentError(f"{name} must be row-contiguous (or the body must read its strides)")

    return fail
