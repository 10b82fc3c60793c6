"""The rules of the row-wise op family (softmax, rms_norm, layer_norm): match, fits, grid,
heuristic and the configs of its one generic implementation, ``rows`` (registered by
``_rows.make_row_op``), whose configs are (BLOCK threads per row, ITEMS vector loads per
thread kept in registers, ITEMS=0 looping over long rows; ROWS rows per block, so that short
rows still fill blocks of 128 threads or more)."""

from __future__ import annotations

import dataclasses

from .._api import Kernel
from .._records import Problem, Target
from .._select.records import Config
from ._common import vec_width

__all__ = ["CONFIGS", "config", "fits", "grid", "heuristic", "layouts", "match", "rows_apart"]

BLOCKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
ITEMS = (0, 1, 2, 4, 8)
ROWS = (1, 2, 4, 8, 16, 32, 64, 128)


def config(block: int, items: int, rows: int = 1) -> Config:
    """BLOCK threads per row, ITEMS vectors per thread, ROWS rows per block."""
    return Config({"BLOCK": block, "ITEMS": items, "ROWS": rows}, (block * rows,))


# Several rows per block only for short rows in registers; at most 2048 vectors per block, so
# that every config's registers fit a block (layer_norm's 1024 x 4 took 72 registers a thread,
# more than the 64 a block of 1024 threads may have: the launch was refused). Fewer than 32
# threads a row (8 or 16: a head's 64-256 elements, a router's 8-64 experts) only in registers
# and with whole warps a block (their reductions are shuffles among all 32 lanes); 8 rows a
# block only for those. Fewer than 8 threads a row (1, 2 or 4: rows of one to a few vectors, a
# router's 8 experts, where 8 threads a row left 7 idle) in blocks of 32, 64 or 128 threads.
CONFIGS = tuple(
    config(b, i, r)
    for b in BLOCKS
    for i in ITEMS
    for r in ROWS
    if (r == 1 or (b <= 128 and i > 0))
    and b * r * i <= 2048
    and (b >= 32 or (i > 0 and b * r >= 32))
    and (r < 8 or b < 32)
    and (r < 16 or b < 8)
    and (b >= 8 or b * r in (32, 64, 128))
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
    """A register-resident config must hold the whole row; BLOCK a power of two and the
    threadgroup BLOCK * ROWS threads (the reductions pair lanes and warps by halving); fewer
    than 32 threads a row only in registers and with whole warps a block (``CONFIGS`` are all
    of these: a forced config may be anything)."""
    items, block = config.values["ITEMS"], int(config.values["BLOCK"])
    rows = _rows_per_block(config)
    if block < 1 or block & (block - 1) or config.threadgroup != (block * rows, 1, 1):
        got = f"BLOCK={block}, threadgroup {config.threadgroup}"
        return f"BLOCK must be a power of two and the threadgroup BLOCK * ROWS threads, got {got}"
    if block < 32 and (items == 0 or (block * rows) % 32):
        return f"{block} threads a row need ITEMS > 0 and ROWS * BLOCK a multiple of 32"
    if items == 0:
        return None
    cap = block * items * vec_width(problem.arg("x").dtype)
    n = problem.attr("N")
    return None if n <= cap else f"a row of {n} elements does not fit {cap} in registers"


def heuristic(problem: Problem, target: Target) -> Config | None:
    """The smallest block that keeps the row in few vectors per thread: one a thread for rows of
    one or two vectors, two up to 8 vectors, four beyond (fewer, wider threads reduce faster),
    two where there are fewer rows than multiprocessors (each row's latency is then the op's:
    more threads share it); rows sharing a block up to 128 threads when there are thousands of
    rows; else the loop.

    The 2 for few rows comes from an exhaustive sweep on an H100
    (``benchmarks/tables_vs_sweep.py``): at 1-128 rows of 3584-8192 bf16 elements layer_norm's
    best kept 2 vectors a thread in 9 of 12 problems, and 4 a thread was 1.03-1.32x the best;
    from 2048 rows on, 4 was the best. The short rows from sweeps of every register config on
    an H200 (65536 rows of 4-128 elements, rms_norm and softmax, bf16 and float32): a thread a
    row for one vector (a router's 8 experts: 2.2 µs where 8 threads a row took 6.9), two
    threads of one vector each for two, two vectors a thread up to 8, four from 16 (at 16, two
    a thread measured level in bf16 and 8% slower in float32), 128 threads a block; each the
    best or within 6% of it. Fewer than 8192 such rows (a decode step's heads: 1024-4096 rows
    of 128) did best with 8 elements a thread and 64-128 threads a block (the same sweep at
    1024-16384 rows: bf16 4096x128 16x1x8 2.40-2.68 µs where 4x4x8 took 2.58-2.89, 1024x128
    2.18-2.34 against 2.46-2.81)."""
    count, vec = problem.attr("rows"), vec_width(problem.arg("x").dtype)
    few = count < target.multiprocessor_count
    vectors = -(-problem.attr("N") // vec)
    if vectors <= 2:
        per = 1
    elif vectors <= 16 and count < 8192:  # short rows, not many: 8 elements a thread
        per = max(1, 8 // vec)
    else:
        per = 2 if few or vectors <= 8 else 4
    block = min(1024, _pow2_at_least(-(-vectors // per)))
    items = _pow2_at_least(-(-vectors // block))
    if block * items > 2048:  # more than a block's registers hold (see CONFIGS)
        return config(1024, 0)
    rows = max(1, 32 // block)
    most = 128 // block if block < 8 else 8 if block < 32 else 4
    enough = 256 if block < 32 else 1024  # rows a block's share must leave to the others
    while block * rows < 128 and rows < most and count >= enough * rows:
        rows *= 2
    return config(block, items, rows)


def match(problem: Problem, target: Target) -> str | None:
    dtype = problem.arg("x").dtype
    if dtype not in DTYPES:
        return f"dtype {dtype} is not one of {', '.join(DTYPES)}"
    return None


def rows_apart(problem: Problem) -> int:
    """The row kernels' XS: 1 where x is read where it is, rows at any strides (a slice of a
    wider array, the heads of a fused QKV projection: ``kk_row_at``), because x is not
    row-contiguous but its last dimension is and every other input is row-contiguous (the
    kernels read weights as vectors); else 0, the kernel's call making a row-contiguous copy of
    any input that is not (a row that is not contiguous itself, a strided weight)."""
    x = problem.args[0]
    if x.contiguous or not x.shape or (x.shape[-1] > 1 and x.strides[-1] != 1):
        return 0
    others = problem.args[1 : len(problem.args)]
    return int(all(a.contiguous for a in others if a.kind == "array" and not a.is_output))


def layouts(k: Kernel) -> tuple[Kernel, Kernel]:
    """A row kernel by its XS: (copies inputs to row-contiguous, takes x's rows where they are)."""
    return k, Kernel(dataclasses.replace(k.spec, ensure_row_contiguous=False))
