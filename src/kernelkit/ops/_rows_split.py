"""Long rows over many blocks in two kernels (softmax, rms_norm, layer_norm): ``rows_split``.
A few long rows give the one-block-a-row kernels fewer blocks than SMs and the cluster kernel
more shared memory than one wave of the GPU holds (64 rows of 262144 float32 are 64 MiB); here
every row is cut into chunks of BLOCK * U 16-byte vectors, one block a chunk, and a first kernel
writes each chunk's statistics (three floats), a second combines a row's and writes the output.
x is read twice (HINT = 1 asks L2 to keep it between the kernels: 1.1-1.2x faster than plain
loads on an H100, but the second read is not served from L2 the way the design hoped). No
clusters: any CUDA arch and the CPU backend.

Measured on an H100 (``benchmarks/long_rows.py --sweep``, inputs read from DRAM): level with
``rows_cluster`` at 64 rows of 262144 float32, 1.1-1.5x slower elsewhere, so where clusters run
the rules keep them; against the register kernel ``rows`` (what a target without clusters runs
once a row outgrows a block's shared memory: two reads, one block a row) faster at 64 rows of
262144: 1.40-1.47x for softmax, 2.1-3.5x for the norms. ``heuristic`` takes that case: no
clusters, a row that no block's shared memory holds, fewer rows than SMs. With clusters it takes
1-4 rows of 192 KiB or more (a vocabulary's logits at decode): a cluster of 8 a row is 8-32
blocks on 132 SMs, where the chunks fill the GPU (fourteenth session's sweep, both GPUs).

Kernel source: ``rows/kernels/rows_split.cuh``; configs are (BLOCK, U, HINT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._api import kernel
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from ._common import empty, kernel_caller, run_prepared, vec_width
from ._kernel_files import source
from ._rowops import layouts, rows_apart
from ._rows_long import REGISTER_VECTORS, block_refusal, room, slice_bytes

__all__ = ["CONFIGS", "chunks", "config", "heuristic", "register"]

HEADER = source("rows", "rows", "softmax", "rows_smem", "rows_split")
_STATS = source("rows", "split_stats_body")
_APPLY = source("rows", "split_apply_body")  # ARGS, KIND, EXTRA_ALIGN filled per op
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_KIND = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}
_ARGS = {
    "softmax": "(xr, y, (const T*)0, (const T*)0, part, 0.0f, n, S, r, s)",
    "rms_norm": "(xr, y, w, w, part, eps, n, S, r, s)",
    "layer_norm": "(xr, y, w, b, part, eps, n, S, r, s)",
}
BLOCKS = (256, 512)
UNROLLS = (2, 4, 8)  # 16-byte vectors a thread holds
# where a GPU with clusters still splits rows over many blocks (the heuristic): at most this
# many rows, each of at least this many bytes (measured: 192 KiB and up split faster, 160 KiB
# and less not)
FEW_ROWS = 4
FEW_ROW_BYTES = 192 * 1024


def config(block: int, u: int, hint: int = 1) -> Config:
    """BLOCK threads a chunk, U vectors a thread, HINT (1: keep x in L2 between the kernels)."""
    return Config({"BLOCK": block, "U": u, "HINT": hint}, (block,))


CONFIGS = tuple(config(b, u, h) for h in (1, 0) for b in BLOCKS for u in UNROLLS)


def chunks(n: int, dtype: str, c: Config) -> int:
    """Chunks (blocks) a row of ``n`` elements takes under config ``c``."""
    chunk = int(c.values["BLOCK"]) * int(c.values["U"]) * vec_width(dtype)
    return max(1, -(-n // chunk))


def _dims(p: Problem) -> tuple[int, int, str]:
    return int(p.attr("N")), int(p.attr("rows")), p.arg("x").dtype


def match(p: Problem, t: Target) -> str | None:
    n, rows, dtype = _dims(p)
    if dtype not in _ITEMSIZE:
        return f"dtype {dtype} is not one of float16, bfloat16, float32"
    if max(rows, 1) * chunks(n, dtype, CONFIGS[0]) > 2**31 - 1:
        return f"{rows} rows of {n} is more chunks than a grid has"
    return None


def fits(p: Problem, c: Config) -> str | None:
    refused, u = block_refusal(c), int(c.values["U"])
    if refused:
        return refused
    if u not in UNROLLS or c.values.get("HINT") not in (0, 1):
        return f"U = {u}, HINT = {c.values.get('HINT')}: U one of {UNROLLS}, HINT 0 or 1"
    n, rows, dtype = _dims(p)
    if max(rows, 1) * chunks(n, dtype, c) > 2**31 - 1:
        return f"{rows} rows x {chunks(n, dtype, c)} chunks is more blocks than a grid has"
    return None


def heuristic(p: Problem, t: Target) -> Config | None:
    """Where rows_split runs by rule, and its config:

    - on a target without clusters, a row too long for one block's shared memory (and the
      registers), with fewer rows than SMs: BLOCK 256, U = 2 (16-bit) or 4 (float32), HINT = 1
      (the best of the H100 sweep at 64 rows of 262144 in each dtype);
    - on a GPU with clusters, at most FEW_ROWS rows of at least FEW_ROW_BYTES each, where a
      cluster a row leaves most SMs idle: BLOCK 256, U = 2, HINT = 1. Measured (every config
      forced, the three ops, an H100 and an H200, fourteenth session): at 1-4 rows of
      98304-262144 elements the best rows_split config was 1.05-1.97x faster than the rules'
      CL = 8 in all but four bfloat16 rms_norm cells (their best CL = 16, 3-6% ahead of CL = 8);
      at 8 rows 1.00-1.15x; at rows of 128 KiB or less the clusters were best. Re-timed on the
      H200 (fifteenth session, float32 and float16): rows of 160 KiB (1 x 40960 float32, 1 x
      81920 float16) kept their clusters within 0-10% of the best config; in the rule's cells
      U = 4 in float32 was 1.00-1.22x the best, U = 2 1.00-1.06x, so U = 2 in every dtype.

    Elsewhere None."""
    n, rows, dtype = _dims(p)
    if dtype not in _ITEMSIZE or not 0 < rows < t.multiprocessor_count:
        return None
    if "clusters" in t.features:
        few = rows <= FEW_ROWS and n * _ITEMSIZE[dtype] >= FEW_ROW_BYTES
        if "cpu" in t.features or not few:  # (the CPU backend emulates clusters: not a GPU)
            return None
        return config(256, 2)
    if -(-n // vec_width(dtype)) <= REGISTER_VECTORS:
        return None
    if slice_bytes(n, 1, dtype) <= room(t):
        return None  # rows_smem: one read
    return config(256, 4 if _ITEMSIZE[dtype] == 4 else 2)


def grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """A block of BLOCK threads a chunk of every row."""
    n, rows, dtype = _dims(p)
    return (max(1, rows) * chunks(n, dtype, c) * int(c.values["BLOCK"]), 1, 1)


def _kernels(name: str, inputs: Sequence[str], aligned: tuple[str, ...]) -> tuple[Any, Any]:
    kind = str(_KIND[name])
    extra = "".join(f" && kk_aligned16({a})" for a in aligned)
    apply_body = (
        _APPLY.replace(" EXTRA_ALIGN", extra).replace("KIND", kind).replace("ARGS", _ARGS[name])
    )
    stats = kernel(f"ops_{name}_split_stats", ["x"], ["part"], _STATS.replace("KIND", kind),
                   header=HEADER)  # fmt: skip
    apply = kernel(f"ops_{name}_split_apply", [*inputs, "part"], ["y"], apply_body, header=HEADER)
    return layouts(stats), layouts(apply)


def register(
    op: Op,
    name: str,
    inputs: Sequence[str],
    template: Callable[[Problem], Any],
    aligned: tuple[str, ...] = (),
) -> None:
    """Register ``rows_split`` on the row op ``op`` (``name``: softmax, rms_norm or layer_norm;
    ``template(problem)``: its dtype template values)."""
    stats, apply = _kernels(name, inputs, aligned)

    def prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
        """``launch(arrays, out)``: the statistics kernel into a new float32 [rows, S, 3], then
        the output kernel."""
        shape, dtype = problem.arg("x").shape, problem.arg("x").dtype
        n, rows, _ = _dims(problem)
        if rows == 0 or n == 0:  # nothing to launch
            return lambda arrays, out: out if out is not None else empty(arrays[0], shape)
        c = choice.config
        xs = rows_apart(problem)
        common = (("BLOCK", c.values["BLOCK"]), ("HINT", c.values["HINT"]), ("ND", len(shape)),
                  ("T", dtype), ("U", c.values["U"]), ("XS", xs))  # fmt: skip
        wt = dict(template(problem)).get("WT", dtype)
        kw = {"grid": choice.grid, "threadgroup": c.threadgroup}
        first = kernel_caller(stats[xs], {**kw, "template": common})
        second = kernel_caller(apply[xs], {**kw, "template": (*common, ("WT", wt))})
        part_shapes, part_dtypes = [(rows, chunks(n, dtype, c), 3)], ["float32"]
        shapes, dtypes = [shape], [output_dtype]

        def launch(arrays: Any, out: Any) -> Any:
            part = first(arrays[:1], part_shapes, part_dtypes, None)[0]
            if out is not None:
                second([*arrays, part], None, None, [out])
                return out
            return second([*arrays, part], shapes, dtypes, None)[0]

        return launch

    op.register(
        Implementation(
            "rows_split",
            run=run_prepared(prepare),
            prepare=prepare,
            grid=grid,
            configs=CONFIGS,
            default=config(512, 4),
            heuristic=heuristic,
            match=match,
            fits=fits,
            priority=2,  # asked before rows_smem/rows_cluster: its heuristic steps aside
        )
    )
