"""The row-op family's configs, grid and heuristic (no kernel runs): several rows per block only
for short rows, the grid covering a part-empty last block, every config fitting a block."""

from __future__ import annotations

import pytest

from kernelkit._records import ArgFacts, Problem, Target
from kernelkit.ops import _rowops

TARGET = Target("cuda", 0, "sm_90", "H100", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
                49152, 232448)  # fmt: skip


def problem(rows: int, n: int, dtype: str = "bfloat16") -> Problem:
    args = (ArgFacts("x", "array", dtype, (rows, n), (n, 1)),)
    return Problem("softmax", args, (("N", n), ("rows", rows)))


def test_every_config_is_one_block_of_at_most_1024_threads():
    for c in _rowops.CONFIGS:
        v = c.values
        assert c.threadgroup == (v["BLOCK"] * v["ROWS"], 1, 1) and c.threadgroup[0] <= 1024
        assert v["ROWS"] == 1 or (v["BLOCK"] <= 128 and v["ITEMS"] > 0)
    assert len({c.describe() for c in _rowops.CONFIGS}) == len(_rowops.CONFIGS)


@pytest.mark.parametrize("rows", [1, 3, 4, 1001])
def test_the_grid_covers_every_row_with_whole_blocks(rows):
    for c in _rowops.CONFIGS:
        threads = _rowops.grid(problem(rows, 1024), c)[0]
        per_block = c.threadgroup[0]
        assert threads % per_block == 0
        assert (
            (threads // per_block) * c.values["ROWS"]
            >= rows
            > (threads // per_block - 1) * c.values["ROWS"]
        )


def test_the_heuristic_packs_short_rows_and_keeps_long_ones_alone():
    short = _rowops.heuristic(problem(16384, 1024), TARGET)  # 128 bf16 vectors per row
    assert short is not None and short.values["BLOCK"] == 32 and short.values["ROWS"] == 4
    assert _rowops.fits(problem(16384, 1024), short) is None
    few = _rowops.heuristic(problem(8, 1024), TARGET)  # few rows: one per block, more blocks
    assert few is not None and few.values["ROWS"] == 1
    long = _rowops.heuristic(problem(8192, 8192), TARGET)
    assert long is not None and long.values == {"BLOCK": 256, "ITEMS": 4, "ROWS": 1}
    huge = _rowops.heuristic(problem(4, 1 << 20), TARGET)
    assert huge is not None and huge.values["ITEMS"] == 0


@pytest.mark.parametrize(("n", "block"), [(4096, 256), (8192, 512), (3584, 256), (1024, 64)])
def test_fewer_rows_than_multiprocessors_spread_a_row_over_more_threads(n, block):
    from dataclasses import replace

    h100 = replace(TARGET, multiprocessor_count=132)
    for rows in (1, 16, 131):
        c = _rowops.heuristic(problem(rows, n), h100)
        assert c is not None and c.values == {"BLOCK": block, "ITEMS": 2, "ROWS": 1}, rows
        assert _rowops.fits(problem(rows, n), c) is None
    many = _rowops.heuristic(problem(132, n), h100)  # a row per multiprocessor and more: 4 each
    assert many is not None and (many.values["BLOCK"], many.values["ITEMS"]) == (block // 2, 4)


def test_a_forced_config_without_rows_means_one_row_per_block():
    from kernelkit._select.records import Config

    c = Config({"BLOCK": 64, "ITEMS": 2}, (64,))
    assert _rowops.grid(problem(5, 1024), c) == (5 * 64, 1, 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_heuristic_only_picks_shipped_configs_that_hold_the_row(dtype):
    shipped = {c.describe() for c in _rowops.CONFIGS}
    for n in (1, 7, 100, 1000, 1024, 4096, 5000, 8192, 16384, 32768, 65536, 10**6):
        for rows in (1, 5000):
            p = problem(rows, n, dtype)
            c = _rowops.heuristic(p, TARGET)
            assert c is not None and c.describe() in shipped, (n, rows)
            assert _rowops.fits(p, c) is None


@pytest.mark.parametrize(
    ("n", "dtype", "want"),
    [(8, "bfloat16", (1, 1, 128)), (4, "float32", (1, 1, 128)), (16, "bfloat16", (2, 1, 64)),
     (8, "float32", (2, 1, 64)), (32, "bfloat16", (2, 2, 64)), (64, "bfloat16", (4, 2, 32)),
     (128, "bfloat16", (4, 4, 32)), (64, "float32", (4, 4, 32)), (128, "float32", (8, 4, 8))],
)  # fmt: skip
def test_short_rows_take_one_to_eight_threads_a_row_as_the_sweep_found(n, dtype, want):
    """The H200 sweep's best (or within 6% of it) at 65536 rows: a router's 8 bf16 experts a
    thread a row (2.2 µs; 8 threads a row took 6.9), two vectors a thread up to 8 vectors."""
    p = problem(65536, n, dtype)
    c = _rowops.heuristic(p, TARGET)
    assert c is not None and (c.values["BLOCK"], c.values["ITEMS"], c.values["ROWS"]) == want
    assert _rowops.fits(p, c) is None
    few = problem(16, n, dtype)  # a decode step's few rows
    c = _rowops.heuristic(few, TARGET)
    assert c is not None and _rowops.fits(few, c) is None


@pytest.mark.parametrize(
    ("rows", "n", "dtype", "want"),
    [(4096, 128, "bfloat16", (16, 1, 8)), (1024, 128, "bfloat16", (16, 1, 8)),
     (4096, 64, "bfloat16", (8, 1, 8)), (4096, 64, "float32", (8, 2, 8)),
     (4096, 32, "float32", (4, 2, 32)), (16384, 64, "bfloat16", (4, 2, 32))],
)  # fmt: skip
def test_fewer_short_rows_take_eight_elements_a_thread(rows, n, dtype, want):
    """The H200 sweep at 1024-16384 rows of 32-128 elements: 8 elements a thread and 64-128
    threads a block below 8192 rows (a decode step's heads), the many-rows rule from there."""
    p = problem(rows, n, dtype)
    c = _rowops.heuristic(p, TARGET)
    assert c is not None and (c.values["BLOCK"], c.values["ITEMS"], c.values["ROWS"]) == want
    assert _rowops.fits(p, c) is None
