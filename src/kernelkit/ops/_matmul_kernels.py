"""Kernel sources for ``matmul`` (``y[M, N] = x[M, K] @ w[N, K]^T``, or ``w`` given as [K, N]).

``GEMV``: the decode-shape microkernel (M <= 16, weight as [N, K]). Reading the weight once is
the whole cost, so each block owns ROWS output columns (weight rows) and its WARPS warps split K
between them: every warp streams its slice of those rows with 16-byte loads (the lanes of a warp
cover 512 contiguous bytes), keeps ROWS x M float accumulators in registers (each x vector is
loaded once and used for all ROWS rows), then the warps' partial sums are added in shared memory
in a fixed order: deterministic, no atomics, no workspace. N / ROWS blocks keep every SM busy.

``GEMV_TC``: the same decode shapes on the tensor cores (mma.sync, sm_80+, float16/bfloat16),
operands loaded straight from global memory with 16-byte loads (its comment block says how).

``TILED``: the generic kernel for any shape, dtype and layout, and the CPU backend: a BM x BN
output tile per block, K in steps of BK staged through shared memory, float accumulation.
"""

from __future__ import annotations

import re

from ._kernel_files import source

_CUDA_ARCH = re.compile(r"(?:sm|compute)_(\d+)[af]?")


def cuda_cc(arch: str) -> int | None:
    """The compute capability in a CUDA target's arch (``sm_90a`` -> 90), None for other
    backends' archs (the tensor-core kernels' match rules ask it first)."""
    found = _CUDA_ARCH.fullmatch(arch)
    return int(found[1]) if found else None


# Epilogue shared by both kernels: bias (per column) and activation, in float.
EPILOGUE = source("matmul", "epilogue")

GEMV = source("matmul", "epilogue", "gemv")

GEMV_BODY = source("matmul", "gemv_body")

TILED = source("matmul", "epilogue", "tiled")

TILED_BODY = source("matmul", "tiled_body")

# The sm_80+ instructions both tensor-core kernels use (gemv_tc and _matmul_mma's tiles), through
# inline PTX; the CPU emulation test of the mma kernel replaces this block.
MMA_PTX = source("matmul", "mma_ptx")

# ``GEMV_TC``: decode shapes (M <= 16) on the tensor cores, sm_80+, float16/bfloat16, weight
# [N, K]. Reading the weight once is still the whole cost; the tensor cores only take the
# arithmetic off the FMA pipes, which is what limits the FMA GEMV at M = 8-16 (each weight
# element feeds M multiply-adds). Each warp computes a 16 x 8*NT tile of y over its slice of K
# with mma.sync.m16n8k16 (rows of x past M are zeros), and loads both operands straight from
# global memory with 16-byte loads, no shared-memory staging:
#
#   Lane t (g = t / 4, q = t % 4) loads 8 consecutive k of each row it needs, at k0 + 8q of a
#   32-wide step of K: the weight row n0 + 8j + g (one per n-tile j), and x rows g and g + 8.
#   m16n8k16 wants lane t to hold k = 2q, 2q+1 (first register) and 2q+8, 2q+9 (second) of its
#   rows; a dot product does not care in which order k is summed as long as both operands use
#   the same order, so the 16 k of mma step s in {0, 1} are taken to be the loaded
#   k0 + 8q + 4s + {0, 1} (as 2q, 2q+1) and k0 + 8q + 4s + {2, 3} (as 2q+8, 2q+9): 32-bit words
#   2s and 2s+1 of each 16-byte load are the registers as they are, for A and B alike.
#   Accumulator c of n-tile j holds y[g][n0+8j+2q+{0,1}] (c0, c1), y[g+8][...] (c2, c3).
#
# With STAGES > 0 the loads go through a cp.async ring in shared memory (many more bytes in flight
# per SM than registers can hold), else straight into registers, U steps at a time.
# The block's WARPS warps split K, and their tiles are summed in shared memory in a fixed order:
# deterministic, no atomics. A tail of K (K % 32) is loaded as zeros (K % 8 == 0: match rule).
#
# One 32-wide step of K on the tensor cores, from each lane's 16-byte words (the k order above):
# gemv_tc's and gemv_cluster's inner step.
TC_STEP = source("matmul", "tc_step")

GEMV_TC = source("matmul", "epilogue", "mma_ptx", "tc_step", "gemv_tc")

GEMV_TC_BODY = source("matmul", "gemv_tc_body")
