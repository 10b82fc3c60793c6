"""Long rows streamed through persistent clusters (softmax, rms_norm, layer_norm):
``rows_stream``. ``rows_cluster`` gives each row its own cluster, whose blocks load their
slices, combine the statistics and store, one phase after the other: with a few blocks an SM,
the GPU reads and writes by turns (64 rows of 262144 float32 reached 63-73% of the copy rate).
Here each cluster takes every G-th row (G clusters in the grid, about R rows each) through two
shared-memory slices a block: the next row's slice is read while this row's is written. On
sm_90 the slices move by bulk copies (TMA): one thread starts the next row's load, the threads
compute in shared memory only, and one bulk copy stores the output, so no thread holds a load
in flight. x is read from DRAM once, as in ``rows_cluster``.

Kernel source: ``rows/kernels/rows_stream.cuh`` (on ``rows_smem.cuh`` and the matmul family's
``bulk_ptx.cuh``); configs are (BLOCK threads a block, CL blocks a row, R rows a cluster).
``listed_only``: a table, the tuning database or ``kernelkit.force`` names it; the rules keep
the other row kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._api import kernel
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from ._common import empty, one_output_launch, run_prepared
from ._kernel_files import source
from ._rows_long import (
    _ARGS,
    _ITEMSIZE,
    _KIND,
    CLUSTER_SIZES,
    SHARED_LIMIT,
    STATIC_SHARED,
    block_refusal,
    room,
    slice_bytes,
)

__all__ = ["CONFIGS", "config", "register"]

HEADER = (
    source("rows", "rows", "softmax", "rows_smem")
    + source("matmul", "bulk_ptx")
    + source("rows", "rows_stream")
)
_BODY = source("rows", "stream_body")  # ARGS, KIND, EXTRA_ALIGN filled per op
SIZES = (1, *CLUSTER_SIZES)
BLOCKS = (256, 512, 1024)
# rows a cluster (about: the grid has ceil(rows / R) clusters, which should be what the GPU
# holds at once); R = 1 is a cluster a row (one slice a block, moved by bulk copies)
ROWS = (1, 2, 3, 4, 6, 8, 12, 16)


def config(block: int, cl: int, r: int) -> Config:
    """BLOCK threads a block, CL blocks a row, about R rows a cluster."""
    return Config({"BLOCK": block, "CL": cl, "R": r}, (block,))


# not 1024 threads in clusters of 16 (as rows_cluster: layer_norm's combine does not launch)
CONFIGS = tuple(
    config(b, cl, r) for cl in SIZES for b in BLOCKS for r in ROWS if (b, cl) != (1024, 16)
)


def _dims(p: Problem) -> tuple[int, int, str]:
    return int(p.attr("N")), int(p.attr("rows")), p.arg("x").dtype


def shared_bytes(n: int, cl: int, dtype: str, r: int = 2) -> int:
    """Dynamic shared memory of one block: two slices of a row of ``n`` over ``cl`` blocks (one
    where each cluster takes one row, R = 1)."""
    return (1 if r == 1 else 2) * slice_bytes(n, cl, dtype)


def match(p: Problem, t: Target) -> str | None:
    n, _, dtype = _dims(p)
    if dtype not in _ITEMSIZE:
        return f"dtype {dtype} is not one of float16, bfloat16, float32"
    if shared_bytes(n, SIZES[-1], dtype, 1) > room(t):
        return f"a slice of a row of {n} {dtype} over {SIZES[-1]} blocks exceeds shared memory"
    return None


def fits(p: Problem, c: Config) -> str | None:
    refused = block_refusal(c)
    if refused:
        return refused
    cl, r = int(c.values.get("CL", 0)), int(c.values.get("R", 0))
    if cl not in SIZES or r not in ROWS:
        return f"CL = {cl}, R = {r}: CL one of {SIZES}, R one of {ROWS}"
    n, rows, dtype = _dims(p)
    need = shared_bytes(n, cl, dtype, r)
    if need > SHARED_LIMIT - STATIC_SHARED:
        return f"{need} bytes of slices (a row of {n} over {cl}, R = {r}) > {SHARED_LIMIT}"
    if -(-max(rows, 1) // r) * cl > 2**31 - 1:
        return f"{rows} rows in clusters of {cl} is more blocks than a grid has"
    return None


def grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """ceil(rows / R) clusters of CL blocks of BLOCK threads."""
    rows, r = max(1, int(p.attr("rows"))), int(c.values["R"])
    return (-(-rows // r) * int(c.values["CL"]) * int(c.values["BLOCK"]), 1, 1)


def _kernels(name: str, inputs: Sequence[str], aligned: tuple[str, ...]) -> dict[int, Any]:
    extra = "".join(f" && kk_aligned16({a})" for a in aligned)
    body = (
        _BODY.replace(" EXTRA_ALIGN", extra)
        .replace("KIND", str(_KIND[name]))
        .replace("ARGS", _ARGS[name].replace(", r, n)", ", rows, n)"))
    )
    return {
        cl: kernel(f"ops_{name}_stream{cl}", list(inputs), ["y"], body, header=HEADER,
                   cluster_dims=cl if cl > 1 else None)
        for cl in SIZES
    }  # fmt: skip


def register(
    op: Op,
    name: str,
    inputs: Sequence[str],
    template: Callable[[Problem], Any],
    aligned: tuple[str, ...] = (),
) -> None:
    """Register ``rows_stream`` on the row op ``op`` (``name``: softmax, rms_norm or layer_norm;
    ``template(problem)``: its dtype template values)."""
    kernels = _kernels(name, inputs, aligned)

    def prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
        """``launch(arrays, out)`` with the kernel, template, geometry and output fixed once."""
        shape, dtype = problem.arg("x").shape, problem.arg("x").dtype
        if problem.attr("rows") == 0 or problem.attr("N") == 0:  # nothing to launch
            return lambda arrays, out: out if out is not None else empty(arrays[0], shape)
        cl, r = int(choice.config.values["CL"]), int(choice.config.values["R"])
        values = dict(template(problem))
        kw: dict[str, Any] = {
            "grid": choice.grid,
            "threadgroup": choice.config.threadgroup,
            "template": (
                ("BLOCK", choice.config.values["BLOCK"]),
                ("CL", cl),
                ("ND", len(shape)),
                ("T", dtype),
                ("WT", values.get("WT", dtype)),
            ),
            "shared_memory": shared_bytes(int(problem.attr("N")), cl, dtype, r),
        }
        return one_output_launch(kernels[cl], kw, shape, output_dtype)

    op.register(
        Implementation(
            "rows_stream",
            run=run_prepared(prepare),
            prepare=prepare,
            grid=grid,
            configs=CONFIGS,
            default=config(512, 8, 4),
            requires=frozenset({"clusters"}),
            match=match,
            fits=fits,
            listed_only=True,
        )
    )
