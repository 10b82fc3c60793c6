"""The rules of ``matmul``'s gemv, gemv_tc, and tiled implementations (match, grid,
heuristic, configs), and ``cuda_cc`` that every tensor-core rule asks first. The other kernels'
rules are in ``_matmul_slab``, ``_matmul_slab_tc``, ``_matmul_wgmma`` and
``_matmul_mma``; the kernels and their registration in ``_matmul_impls``.

``gemv``: the decode-shape kernel (M <= 16, weight as [N, K]). Reading the weight once is
the whole cost, so each block owns ROWS output columns (weight rows) and its WARPS warps split K
between them: every warp streams its slice of those rows with 16-byte loads (the lanes of a warp
cover 512 contiguous bytes), keeps ROWS x M float accumulators in registers (each x vector is
loaded once and used for all ROWS rows), then the warps' partial sums are added in shared memory
in a fixed order: deterministic, no atomics, no workspace. N / ROWS blocks keep every SM busy.

``gemv_tc``: the same decode shapes on the tensor cores (mma.sync, sm_80+, float16/bfloat16),
operands loaded straight from global memory with 16-byte loads (gemv_tc.cuh says how).

``tiled``: the generic kernel for any shape, dtype and layout, and the CPU backend: a BM x BN
output tile per block, K in steps of BK staged through shared memory, float accumulation.
"""

from __future__ import annotations

import re

from .._records import Problem, Target
from .._select.records import Config

_CUDA_ARCH = re.compile(r"(?:sm|compute)_(\d+)[af]?")


def cuda_cc(arch: str) -> int | None:
    """The compute capability in a CUDA target's arch (``sm_90a`` -> 90), None for other
    backends' archs (the tensor-core kernels' match rules ask it first)."""
    found = _CUDA_ARCH.fullmatch(arch)
    return int(found[1]) if found else None


GEMV_MAX_M = 16


# --- gemv --------------------------------------------------------------------------------------

GEMV_CONFIGS = tuple(
    Config({"ROWS": r, "WARPS": w, "U": u}, (32 * w,))
    for r in (1, 2, 4, 8)
    for w in (2, 4, 8)
    for u in (1, 2, 4)
)


def gemv_match(p: Problem, t: Target) -> str | None:
    if p.attr("M") > GEMV_MAX_M:
        return f"M = {p.attr('M')} > {GEMV_MAX_M}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    vec = 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[p.arg("x").dtype]
    if p.attr("K") % vec:
        return f"K = {p.attr('K')} is not a multiple of {vec} (16-byte rows)"
    return None


def gemv_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    blocks = -(-p.attr("N") // c.values["ROWS"])
    return (blocks * c.threadgroup[0], 1, 1)


def gemv_first(p: Problem, t: Target) -> str | None:
    """Why the rules run gemv ahead of cuBLAS (for torch tensors) and the other decode kernels
    on ``p``, or None: M = 1, 16-bit, a weight [N, K] on 16-byte boundaries, on sm_90. Measured
    on an H100 (``benchmarks/decode_sweep.py --ms 1 --sweep gemv``, 8 weights none of whose
    K x N a table row had: K from 2048 to 28672): the best of gemv's 36 configs read the weight
    at 82-105% of the copy rate, 1.08-1.21x faster than cuBLAS, and faster than or level with
    gemv_slab where it ran (10240x8192: 54.9 against 57.8 us; gemv_slab_tc's heuristic config
    0.91-1.12x cuBLAS); the heuristic's config (2 rows a block, 4 warps, one 16-byte load a lane
    in flight) within 1.5% of each problem's best (geomean), and within 1.07x of the exhaustive
    sweep's best over all implementations on held-out Llama-3-70B and Qwen2-7B weights
    (``benchmarks/tables_vs_sweep.py``; geomean 1.029). The fp16 sweep over Llama-3-8B's weights
    picked gemv at M = 1 too."""
    cc = cuda_cc(t.arch)
    if cc != 90 or int(p.attr("M")) != 1 or not p.attr("aligned16"):  # (measured on sm_90)
        return None
    if p.arg("x").dtype not in ("float16", "bfloat16") or gemv_match(p, t) is not None:
        return None
    return "M = 1: gemv reads the weight faster (held-out sweep on an H100)"


def gemv_heuristic(p: Problem, t: Target) -> Config:
    # M = 1 (``gemv_first``'s sweep, bf16 on an H100; assumed for float32, other GPUs and the CPU
    # backend, which no sweep covered): 2 rows, 4 warps, U = 1; the earlier config (4 rows, 8
    # warps, U = 2) ran at 0.35-0.49x cuBLAS there. Up to 8 rows of x, 8 rows per block reuse
    # each x vector; beyond, x's traffic from L2 dominates and one row per block is best (an
    # earlier sweep of the 36 configs on an H100, benchmarks/ops.py --only matmul --sweep)
    m = p.attr("M")
    if m == 1:
        return Config({"ROWS": 2, "WARPS": 4, "U": 1}, (128,))
    if m <= 8:
        return Config({"ROWS": 8, "WARPS": 4, "U": 1}, (128,))
    return Config({"ROWS": 1, "WARPS": 4, "U": 2}, (128,))


# --- gemv on the tensor cores -------------------------------------------------------------------


def gemv_tc_config(nt: int, warps: int, u: int, stages: int) -> Config:
    ring = warps * stages * (nt + 2) * 512  # per warp and stage: NT weight + 2 x words per lane
    return Config({"NT": nt, "WARPS": warps, "U": u, "STAGES": stages}, (32 * warps,), ring)


GEMV_TC_CONFIGS = tuple(
    gemv_tc_config(nt, w, u, 0) for nt in (1, 2, 4) for w in (4, 8) for u in (1, 2, 4)
) + tuple(gemv_tc_config(nt, w, 1, st) for nt in (1, 2, 4) for w in (4, 8) for st in (4, 8))


def gemv_tc_match(p: Problem, t: Target) -> str | None:
    if p.attr("M") > GEMV_MAX_M:
        return f"M = {p.attr('M')} > {GEMV_MAX_M}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"tensor cores take float16/bfloat16, not {p.arg('x').dtype}"
    if p.attr("K") % 8:
        return f"K = {p.attr('K')} is not a multiple of 8 (16-byte rows)"
    return None


def gemv_tc_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    blocks = -(-p.attr("N") // (8 * c.values["NT"]))
    return (blocks * c.threadgroup[0], 1, 1)


def gemv_tc_heuristic(p: Problem, t: Target) -> Config:
    # from a sweep of the 30 configs on an H100 (benchmarks/ops.py --only matmul --sweep): with
    # N >= 8192, 4 n-tiles per warp, 8 warps and 2 steps of loads in flight were within 3% of
    # the best at M = 1-16; narrower tiles keep every SM busy when N is smaller
    n = p.attr("N")
    nt = 4 if n >= 8192 else 2 if n >= 2048 else 1
    return gemv_tc_config(nt, 8, 2, 0)


# --- tiled -------------------------------------------------------------------------------------

TILED_CONFIGS = tuple(
    Config({"BM": bm, "BN": bn, "BK": 16, "TM": tm, "TN": tn}, ((bm // tm) * (bn // tn),))
    for bm, bn, tm, tn in ((64, 64, 4, 4), (32, 32, 2, 2), (128, 64, 8, 4), (16, 64, 1, 4))
)


def tiled_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """Every BM x BN tile on grid.x (the kernel splits the index; grid.y stops at 65535)."""
    v = c.values
    tiles = -(-p.attr("N") // v["BN"]) * -(-p.attr("M") // v["BM"])
    return (tiles * c.threadgroup[0], 1, 1)
