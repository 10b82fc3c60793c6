"""``matmul/midm``'s kernel text (``matmul/kernels/midm.cuh``: tile order, K slices, the mma main
loop, the fp32 tile, the cluster's ordered sums, the epilogue) run on the CPU backend, with the
sm_80 instructions replaced by the ``mma`` kernel test's emulation (``mma.sync``, ``ldmatrix``,
``cp.async`` landing only at its ``wait_group``, bank conflicts trapping) and the four cluster
helpers (``midm_cluster.cuh``) by a cooperative launch: every block of the grid is live, a
cluster is SPLIT consecutive blocks, ``mapa`` maps into the other block's shared memory, and the
cluster barrier is a grid barrier (stronger than the GPU's, so it can hide no missing one; a
read of a tile before its owner wrote it gives a wrong sum). Tile shapes, warp layouts, stage
counts, SPLIT 1, 2, 4 and 8, both dtypes and layouts of ``b``, M = 17, 33, 100, 256 with N and K
not multiples of the tile, empty K slices, bias and activations, out= poisoned with NaN,
against a float64 reference. What it cannot show: the hardware's timing and DSMEM itself (the
GPU test and compute-sanitizer cover them)."""

from __future__ import annotations

import pytest
from test_ops_matmul_mma_emulated import ACT, EMULATION, MMA_SYNC_EMULATION, reference

import kernelkit
from kernelkit._records import ArgFacts, Problem
from kernelkit.ops import _matmul_midm as MID
from kernelkit.ops._matmul_kernels import EPILOGUE
from kernelkit.ops._matmul_mma import MMA_KERNEL

torch = pytest.importorskip("torch")

CLUSTER_EMULATION = r"""
#include <cooperative_groups.h>
// Every block's dynamic shared memory (a cooperative launch: all blocks live at once).
static unsigned char* kk_emu_cluster_smem[256];
template <int SPLIT>
__device__ inline void kk_midm_cluster_init(void* p) {
  if (blockIdx.x >= 256) __trap();
  if (threadIdx.x == 0) kk_emu_cluster_smem[blockIdx.x] = (unsigned char*)p;
}
template <int SPLIT>
__device__ inline unsigned kk_midm_rank() { return blockIdx.x % SPLIT; }
template <int SPLIT>
__device__ inline const float* kk_midm_map(const float* p, unsigned rank) {
  if (rank >= (unsigned)SPLIT) __trap();  // outside the cluster
  const unsigned first = blockIdx.x - blockIdx.x % SPLIT;
  const long long off = (const unsigned char*)p - kk_emu_cluster_smem[blockIdx.x];
  return (const float*)(kk_emu_cluster_smem[first + rank] + off);
}
template <int SPLIT>
__device__ inline void kk_midm_cluster_sync() {
  if (SPLIT == 1) __syncthreads();
  else cooperative_groups::this_grid().sync();
}
"""

_EMULATED = kernelkit.kernel(
    "ops_matmul_midm_emulated",
    ["x", "w", "bias"],
    ["y"],
    MID.MIDM_BODY,
    header=EPILOGUE + EMULATION + MMA_SYNC_EMULATION + MMA_KERNEL + CLUSTER_EMULATION
    + MID.MIDM_KERNEL,
    optional_inputs={"bias": "float32"},
    cooperative=True,
    backend="cpu",
)  # fmt: skip


def problem(m, n, k, transpose_b):
    return Problem("matmul", (ArgFacts("x", "array", "float16", (m, k)),),
                   (("M", m), ("N", n), ("K", k), ("transpose_b", transpose_b)))  # fmt: skip


def run(config, a, w, bias, activation, transpose_b, out=None):
    """The emulated kernel on torch CPU tensors, launched as matmul/midm launches it."""
    m, k = a.shape
    n = w.shape[0] if transpose_b else w.shape[1]
    p = problem(m, n, k, transpose_b)
    assert MID.midm_fits(p, config) is None
    dtype = str(a.dtype).split(".")[-1]
    template = [*config.template, ("T", dtype), ("TB", "float32" if bias is None else
                str(bias.dtype).split(".")[-1]), ("TY", dtype), ("ACT", ACT[activation]),
                ("HAS_BIAS", bias is not None), ("W_KN", not transpose_b)]  # fmt: skip
    kw = {"out": [out]} if out is not None else {"output_shapes": [(m, n)],
                                                 "output_dtypes": [dtype]}  # fmt: skip
    (y,) = _EMULATED(
        [a, w, bias],
        grid=MID.midm_grid(p, config),
        threadgroup=config.threadgroup,
        template=template,
        shared_memory=config.shared_memory,
        **kw,
    )
    return y


def check(y, a, w, bias, activation, transpose_b):
    ref = reference(
        a.double().numpy(),
        w.double().numpy(),
        None if bias is None else bias.double().numpy(),
        activation,
        transpose_b,
    )
    got = y.double().numpy()
    assert not torch.isnan(y).any()
    err = abs(got - ref).max() / max(abs(ref).max(), 1e-6)
    assert err <= 1e-2, err


def inputs(m, n, k, dtype, transpose_b):
    a = torch.randn(m, k).to(dtype)
    w = torch.randn(n, k).to(dtype) if transpose_b else torch.randn(k, n).to(dtype)
    return a, w


C = MID.midm_config
# (config, M, N, K): each tile shape, warp layout and SPLIT once, M tiles past BM, ragged N
# and K (K % 64 != 0: a partial last k tile, zero-filled), more k tiles than stages
CASES = [
    (C(32, 32, 2, 2, 4, 1), 17, 72, 264),
    (C(32, 64, 1, 4, 3, 2), 33, 136, 520),
    (C(64, 64, 2, 2, 4, 4), 100, 200, 776),
    (C(64, 128, 2, 4, 6, 2), 17, 264, 456),
    (C(128, 64, 2, 2, 3, 4), 100, 72, 1032),
    (C(128, 128, 2, 4, 4, 1), 256, 136, 392),
    (C(32, 128, 1, 4, 6, 4), 256, 120, 200),
    (C(64, 32, 2, 2, 4, 2), 256, 40, 136),
    (C(64, 256, 2, 4, 3, 8), 33, 264, 520),
]


@pytest.mark.parametrize(("config", "m", "n", "k"), CASES, ids=lambda v: str(v).split(" ")[0])
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "b_KN"])
def test_shapes_splits_and_layouts(config, m, n, k, transpose_b):
    if not transpose_b and config.values["BN"] < 64:
        pytest.skip("b as [K, N] needs BN >= 64 (midm_fits refuses it; tested in tests/unit)")
    dtype = torch.bfloat16 if (m + k) % 2 else torch.float16
    if not transpose_b:
        n = -(-n // 8) * 8  # b [K, N] is copied in 16-byte rows: N % 8 == 0 (the match rule)
    a, w = inputs(m, n, k, dtype, transpose_b)
    out = torch.full((m, n), float("nan")).to(dtype)  # poisoned: every element is written
    y = run(config, a, w, None, None, transpose_b, out=out)
    assert y is out
    check(out, a, w, None, None, transpose_b)


@pytest.mark.parametrize("split", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_split_k_agrees_with_no_split_bit_for_bit_in_order(split, dtype):
    """The cluster's sums are added in rank order: the same inputs give the same bits on every
    run, and split or not, the result is the reference's within rounding."""
    a, w = inputs(33, 104, 640, dtype, True)
    config = C(64, 64, 2, 2, 4, split)
    first = run(config, a, w, None, None, True)
    check(first, a, w, None, None, True)
    assert torch.equal(first, run(config, a, w, None, None, True))


@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_bias_and_activation(activation, dtype):
    a, w = inputs(40, 67, 136, dtype, True)  # odd N: element stores, no pairs
    bias = torch.randn(67).to(dtype if activation != "gelu" else torch.float32)
    check(run(C(64, 64, 2, 2, 3, 2), a, w, bias, activation, True), a, w, bias, activation, True)


def test_empty_k_slices_and_k_zero():
    """K = 8 is one k tile: with SPLIT = 4, three blocks of each cluster take no tile and add
    zeros; K = 0 gives the bias alone."""
    a, w = inputs(17, 64, 8, torch.float16, True)
    check(run(C(32, 64, 1, 4, 4, 4), a, w, None, None, True), a, w, None, None, True)
    a, w = torch.zeros(17, 0).to(torch.float16), torch.zeros(40, 0).to(torch.float16)
    bias = torch.arange(40, dtype=torch.float32)
    y = run(C(32, 32, 2, 2, 4, 2), a, w, bias, None, True)
    assert y.float().tolist() == [list(range(40))] * 17
