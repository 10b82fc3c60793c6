"""Outputs that share memory with an input or with each other, refused per call.

An ``out=`` array that partially overlaps an input (``out=[b[1:]]`` with input ``b[:-1]``) or
another output gives a result that depends on the order blocks run in (a race on a GPU). The
byte range of each array is its pointer plus the extreme offsets its shape and strides reach;
two arrays meet when their ranges intersect. An input given again as an output, with the same
pointer and layout, is the in-place case and stays allowed. Ranges are a sound over-estimate
(interleaved views such as ``a[::2]`` and ``a[1::2]`` are refused though they never touch).

Only calls with ``out=`` pay for it (kernelkit's own outputs are fresh memory): one layout read
and a few additions per array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._arrays import Adapter
from .._errors import ArgumentError

__all__ = ["overlap_check"]

Span = tuple[int, int, Any, Any]  # lowest byte, one past the highest, layout getter, array


def _span(ptr: int, layout: Callable[[Any], Any], x: Any, itemsize: int) -> Span | None:
    shape, strides = layout(x)
    lo = hi = 0
    for n, st in zip(shape, strides):
        if n == 0:
            return None
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return ptr + lo * itemsize, ptr + (hi + 1) * itemsize, layout, x


def overlap_check(
    kernel: str,
    inputs: Sequence[tuple[str, Adapter, int, bool]],
    outputs: Sequence[tuple[str, Adapter, int, bool]],
) -> Callable[[tuple, tuple, tuple, tuple], None]:
    """``check(input_arrays, input_pointers, out_arrays, out_pointers)``, raising
    ``ArgumentError`` naming both arguments when an output meets an input (other than being it,
    in place) or another output. ``inputs``/``outputs`` give (name, adapter, itemsize, row-
    contiguous when launched) in the order the arrays are passed; a row-contiguous array's range
    is its pointer plus ``nbytes`` (no layout to read)."""
    in_rows = tuple((name, a.layout, size, c) for name, a, size, c in inputs)
    out_rows = tuple((name, a.layout, size, c) for name, a, size, c in outputs)

    def span(row: tuple, x: Any, p: int) -> Span | None:
        n = getattr(x, "nbytes", None) if row[3] else None
        if n is not None:
            return (p, p + n, row[1], x) if n else None
        return _span(p, row[1], x, row[2])

    def check(ins: tuple, in_ptrs: tuple, outs: tuple, out_ptrs: tuple) -> None:
        in_spans = [(row, span(row, x, p)) for row, x, p in zip(in_rows, ins, in_ptrs) if p]
        for j, (row, o, p) in enumerate(zip(out_rows, outs, out_ptrs)):
            mine = span(row, o, p)
            if mine is None:
                continue
            lo, hi = mine[0], mine[1]
            for k in range(j):
                other = span(out_rows[k], outs[k], out_ptrs[k])
                if other is not None and other[0] < hi and lo < other[1]:
                    raise ArgumentError(
                        f"[{kernel}] {row[0]} and {out_rows[k][0]} share memory; each output "
                        "needs its own"
                    )
            for irow, other in in_spans:
                if other is None or not (other[0] < hi and lo < other[1]):
                    continue
                if other[0] == lo and _same_layout(other, mine):
                    continue  # the input itself: in place, each element read before written
                raise ArgumentError(
                    f"[{kernel}] {row[0]} overlaps {irow[0]} without being it (the result "
                    "would depend on the order blocks run in); pass a separate array or the "
                    "input itself"
                )

    return check


def _same_layout(a: Span, b: Span) -> bool:
    """The same shape and strides (read only now: overlaps are rare)."""
    la, lb = a[2](a[3]), b[2](b[3])
    return tuple(la[0]) == tuple(lb[0]) and tuple(la[1]) == tuple(lb[1])
