"""``matmul``'s arguments: what a call may pass (checked once per argument signature by
``_matmul.eager_matmul``) and the problem options they give the selection stage."""

from __future__ import annotations

from typing import Any

from .._errors import ArgumentError
from . import _matmul_mma as MMA
from ._common import float_array, row_contiguous

__all__ = ["ACTIVATIONS", "check_out", "prepare"]

ACTIVATIONS = {None: 0, "relu": 1, "silu": 2, "gelu": 3}


def prepare(a: Any, b: Any, bias: Any, activation: Any, transpose_b: Any) -> tuple:
    """``(x, lead, n, options)``: ``a`` as 2-D rows ``x``, its leading dims, N and the
    problem options; ArgumentError/ArgumentTypeError naming what is wrong."""
    dtype = float_array(a, "matmul", "a")
    if float_array(b, "matmul", "b") != dtype:
        raise ArgumentError(f"[matmul] a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if bias is not None:
        float_array(bias, "matmul", "bias")
    if not isinstance(activation, str | None) or activation not in ACTIVATIONS:
        raise ArgumentError(
            f"[matmul] activation must be one of {list(ACTIVATIONS)}, got {activation!r}"
        )
    if not isinstance(transpose_b, bool):
        raise ArgumentError(f"[matmul] transpose_b must be True or False, got {transpose_b!r}")
    if len(b.shape) != 2:
        raise ArgumentError(f"[matmul] b must be 2-D, got shape {tuple(b.shape)}")
    if len(a.shape) not in (2, 3):
        raise ArgumentError(f"[matmul] a must be 2-D or 3-D (batched), got shape {tuple(a.shape)}")
    k = a.shape[-1]
    bk, n = (b.shape[1], b.shape[0]) if transpose_b else (b.shape[0], b.shape[1])
    if bk != k:
        layout = "[N, K]" if transpose_b else "[K, N]"
        raise ArgumentError(
            f"[matmul] a has K = {k} but b {tuple(b.shape)} as {layout} has K = {bk}"
        )
    if bias is not None and tuple(bias.shape) != (n,):
        raise ArgumentError(f"[matmul] bias must have shape ({n},), got {tuple(bias.shape)}")
    lead = tuple(a.shape[:-1])
    # explicit rows: reshape(-1, 0) cannot infer them when K is 0
    x = a.reshape(a.shape[0] * a.shape[1], k) if len(a.shape) == 3 else a
    options = {
        "transpose_b": transpose_b,
        "activation": activation,
        "bias": None if bias is None else str(bias.dtype).split(".")[-1],
        "framework": type(a).__module__.split(".")[0],
        # mma's 16-byte copies: read per call from the pointers by the prepared run (a view's
        # offset is in no signature; never here, where a tracer may be running): False until
        # then; None where mma cannot run anyway (other dtypes), so those calls read none
        "aligned16": False if dtype in MMA.MMA_DTYPES else None,
    }
    return x, lead, n, options


def check_out(out: Any, shape: tuple) -> None:
    """ArgumentError unless ``out`` has ``shape`` and, when batched, is row-contiguous (it is
    written as rows). Overlap with the inputs is ``OpRunner``'s per-call check."""
    if not hasattr(out, "shape") or tuple(out.shape) != shape:
        got = tuple(out.shape) if hasattr(out, "shape") else type(out).__name__
        raise ArgumentError(f"[matmul] out must have shape {shape}, got {got}")
    if len(shape) == 3 and not row_contiguous(out):
        raise ArgumentError(
            f"[matmul] a 3-D out must be row-contiguous (it is written as "
            f"[{shape[0] * shape[1]}, {shape[2]}]), got strides {_strides(out)}"
        )


def _strides(x: Any) -> tuple:
    return tuple(x.stride()) if hasattr(x, "stride") else tuple(getattr(x, "strides", ()))
