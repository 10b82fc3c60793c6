"""The row-wise op family (softmax, rms_norm, layer_norm) on the selection stage: one generic
implementation, ``rows``, whose configs are (BLOCK threads per row, ITEMS vector loads per
thread kept in registers, ITEMS=0 looping over long rows; ROWS rows per block, so that short
rows still fill blocks of 128 threads or more)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._api import kernel
from .._errors import ArgumentError, ArgumentTypeError
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from . import _rows, _rows_long
from ._common import FLOAT_DTYPES, OpRunner, empty, one_output_launch, run_prepared, vec_width

__all__ = ["CONFIGS", "make_row_op"]

BLOCKS = (32, 64, 128, 256, 512, 1024)
ITEMS = (0, 1, 2, 4, 8)


def config(block: int, items: int, rows: int = 1) -> Config:
    """BLOCK threads per row, ITEMS vectors per thread, ROWS rows per block."""
    return Config({"BLOCK": block, "ITEMS": items, "ROWS": rows}, (block * rows,))


# Several rows per block only for short rows in registers; at most 2048 vectors per block, so
# that every config's registers fit a block (layer_norm's 1024 x 4 took 72 registers a thread,
# more than the 64 a block of 1024 threads may have: the launch was refused).
CONFIGS = tuple(
    config(b, i, r)
    for b in BLOCKS
    for i in ITEMS
    for r in (1, 2, 4)
    if (r == 1 or (b <= 128 and i > 0)) and b * r * i <= 2048
)
DTYPES = ("float16", "bfloat16", "float32")


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _rows_per_block(config: Config) -> int:
    return int(config.values.get("ROWS", 1))  # forced configs may omit it


def grid(problem: Problem, config: Config) -> tuple[int, int, int]:
    """One block of BLOCK * ROWS threads per ROWS rows."""
    rows, per = max(1, problem.attr("rows")), _rows_per_block(config)
    return (-(-rows // per) * per * config.values["BLOCK"], 1, 1)


def fits(problem: Problem, config: Config) -> str | None:
    """A register-resident config must hold the whole row."""
    items, block = config.values["ITEMS"], config.values["BLOCK"]
    if items == 0:
        return None
    cap = block * items * vec_width(problem.arg("x").dtype)  # type: ignore[operator]
    n = problem.attr("N")
    return None if n <= cap else f"a row of {n} elements does not fit {cap} in registers"


def heuristic(problem: Problem, target: Target) -> Config | None:
    """The smallest block that keeps the row in at most 8 vectors per thread, at least 4 per
    thread where the row allows (fewer, wider threads reduce faster), with rows sharing a block
    up to 128 threads when there are thousands of rows; else the loop."""
    vectors = -(-problem.attr("N") // vec_width(problem.arg("x").dtype))
    block = min(1024, max(32, _pow2_at_least(-(-vectors // 4))))
    items = _pow2_at_least(-(-vectors // block))
    if block * items > 2048:  # more than a block's registers hold (see CONFIGS)
        return config(1024, 0)
    rows = 1
    while block * rows < 128 and rows < 4 and problem.attr("rows") >= 1024 * rows:
        rows *= 2
    return config(block, items, rows)


def match(problem: Problem, target: Target) -> str | None:
    dtype = problem.arg("x").dtype
    if dtype not in DTYPES:
        return f"dtype {dtype} is not one of {', '.join(DTYPES)}"
    return None


def make_row_op(
    name: str,
    inputs: Sequence[str],
    row_call: str,
    source: str,
    template: Any,
    aligned: tuple[str, ...] = (),
    names: tuple[str, ...] = (),
) -> tuple[Op, OpRunner]:
    """An op over rows of ``x``'s last dimension. ``row_call`` calls the row function (with
    ``VECTOR``), ``source`` defines it, ``template(problem)`` gives the dtype template values;
    ``names``: the inputs as the op's caller names them, for messages."""
    k = kernel(
        f"ops_{name}",
        list(inputs),
        ["y"],
        _rows.body(row_call, aligned),
        header=_rows.HEADER + source,
    )

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
                *template(problem),
            ),
        }
        return one_output_launch(k, kw, shape, output_dtype)

    run = run_prepared(prepare)

    op = Op(name, key=["x.dtype", "N", "rows:pow2"])
    op.register(
        Implementation(
            "rows",
            run=run,
            prepare=prepare,
            grid=grid,
            configs=CONFIGS,
            default=config(256, 0),
            heuristic=heuristic,
            match=match,
            fits=fits,
        )
    )
    _rows_long.register(op, name, inputs, template, aligned)

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
