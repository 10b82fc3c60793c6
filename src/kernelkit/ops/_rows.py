"""Row-wise kernels (softmax, rms_norm, layer_norm) over the last dimension: their C++
(``rows/kernels/*.cuh``) and ``make_row_op``, which makes each op's kernel and registers its
implementation with the rules of ``_rowops``. The public ops are in ``_softmax`` and ``_norms``.

An aligned row that fits in registers is read once with 16-byte vector loads and written once:
the bandwidth minimum. A longer or unaligned row is read twice (statistics, then the output),
with an online max/sum for softmax. Statistics are in float32 whatever the input dtype.
Template values: ``T`` (element type), ``BLOCK`` (threads per row), ``ITEMS`` (vector loads
each thread keeps in registers; 0: the long-row loop), ``ROWS`` (rows per block), ``ND`` (x's
rank), ``XS`` (1: x's rows at any strides, read in place: ``_rowops.rows_apart``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._api import kernel
from .._errors import ArgumentError, ArgumentTypeError
from .._records import Problem
from .._select.records import KernelChoice
from .._select.registry import Implementation, Op
from . import _rowops as rules
from . import _rows_long, _rows_split
from ._common import FLOAT_DTYPES, OpRunner, empty, one_output_launch, run_prepared
from ._kernel_files import source

__all__ = ["HEADER", "NORM", "SOFTMAX", "body", "make_row_op"]

# Shared device helpers (the elementwise op uses them too). A 16-byte vector holds 8 bf16/fp16
# elements or 4 fp32; kk_vec is it as a struct of T (for memory), kk_words as four 32-bit words
# (for registers).
HEADER = source("rows", "rows")

# The body of every row kernel: each block takes ROWS rows of BLOCK threads each; a row past
# the end (the last block's padding) loads and stores nothing but still meets the barriers.
# The vector path needs every row aligned: the same test for the whole block ({vector} is
# filled with true/false).
_ROW = source("rows", "row_body")

SOFTMAX = source("rows", "softmax")

# rms_norm: y = x / sqrt(mean(x^2) + eps) * w ; layer_norm: (x - mean) / sqrt(var + eps) * w + b
NORM = source("rows", "norm")


def body(call: str, aligned: tuple[str, ...] = ()) -> str:
    """The kernel body calling a row function: ``call`` uses ``VECTOR`` for its vector flag,
    e.g. ``"kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, nr, t, kk_red)"``; the vector path
    also needs the pointers named in ``aligned`` (e.g. a weight) 16-byte aligned."""
    extra = "".join(f" && kk_aligned16({p})" for p in aligned)
    text = _ROW.replace(" EXTRA_ALIGN", extra)
    return text.replace("CALL_ROW(true)", call.replace("VECTOR", "true")).replace(
        "CALL_ROW(false)", call.replace("VECTOR", "false")
    )


def make_row_op(
    name: str,
    inputs: Sequence[str],
    row_call: str,
    code: str,
    template: Any,
    aligned: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
) -> tuple[Op, OpRunner]:
    """An op over rows of ``x``'s last dimension. ``row_call`` calls the row function (with
    ``VECTOR``), ``code`` defines it, ``template(problem)`` gives the dtype template values;
    ``names``: the inputs as the op's caller names them, for messages."""
    k = kernel(
        f"ops_{name}",
        list(inputs),
        ["y"],
        body(row_call, aligned),
        header=HEADER + code,
    )
    by_layout = rules.layouts(k)  # XS: 0 copies x to row-contiguous, 1 reads its rows in place

    def prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
        """``launch(arrays, out)`` with the template, geometry and output fixed once."""
        shape = problem.arg("x").shape
        if problem.attr("rows") == 0 or problem.attr("N") == 0:  # nothing to launch
            return lambda arrays, out: out if out is not None else empty(arrays[0], shape)
        kw: dict[str, Any] = {
            "grid": choice.grid,
            "threadgroup": choice.config.threadgroup,
            "template": (
                *choice.config.template,
                *((("ROWS", 1),) if "ROWS" not in choice.config.values else ()),
                ("ND", len(shape)),
                ("XS", xs := rules.rows_apart(problem)),
                *template(problem),
            ),
        }
        return one_output_launch(by_layout[xs], kw, shape, output_dtype)

    run = run_prepared(prepare)

    op = Op(name, key=["x.dtype", "N", "rows:pow2"])
    op.register(
        Implementation(
            "rows",
            run=run,
            prepare=prepare,
            grid=rules.grid,
            configs=rules.CONFIGS,
            default=rules.config(256, 0),
            heuristic=rules.heuristic,
            match=rules.match,
            fits=rules.fits,
        )
    )
    _rows_long.register(op, name, inputs, template, aligned)
    _rows_split.register(op, name, inputs, template, aligned)

    def attrs(problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
        shape, dtype = problem.arg("x").shape, problem.arg("x").dtype
        if dtype not in FLOAT_DTYPES:
            raise ArgumentTypeError(f"[{name}] x must be float16, bfloat16 or float32, got {dtype}")
        if len(shape) == 0:
            raise ArgumentError(f"[{name}] x must have at least one dimension, got a 0-d array")
        rows = 1
        for d in shape[:-1]:
            rows *= d
        return {"rows": rows, "N": shape[-1], **options}

    return op, OpRunner(op, k.spec, attrs, out_shape=lambda p: p.arg("x").shape, names=tuple(names))
