"""``matmul/mma``'s kernel text (``_matmul_mma.MMA_KERNEL``: tiling, swizzle, pipeline, fragment
addressing, epilogue) run on the CPU backend, with its five sm_80 instructions replaced by an
emulation written from the PTX ISA: ``ldmatrix`` (.x4, .trans) and ``mma.sync`` m16n8k16 as
warp shuffles, ``cp.async`` as a per-thread queue performed only when ``cp.async.wait_group``
retires its group (as late as the PTX allows: a missing wait reads stale shared memory); every
ldmatrix and cp.async is checked to be free of shared-memory bank conflicts (the swizzle). Every
shipped config, both layouts of ``b``, both dtypes, bias and activation, ragged M/N/K, against a
float64 reference. What it cannot show: the hardware's own timing (the GPU tests do)."""

from __future__ import annotations

from math import erf

import numpy as np
import pytest

import kernelkit
from kernelkit._records import ArgFacts, Problem
from kernelkit.ops import _matmul_mma as MMA
from kernelkit.ops._kernel_files import source

torch = pytest.importorskip("torch")

# The PTX helpers of MMA_PTX, emulated: same names and signatures, the PTX ISA's semantics.
EMULATION = r"""
#include <cstring>
#define KK_HAS_CP_ASYNC 1  // the CPU prelude does not define it: run the kernel text here

static thread_local unsigned char* kk_emu_smem;  // this block's dynamic shared memory
struct kk_emu_copy { unsigned dst; const void* src; bool full; };
struct kk_emu_queue {  // one thread's cp.async groups: a ring, the open group last
  kk_emu_copy q[8][32];
  int n[8], oldest, committed;
};
static thread_local kk_emu_queue kk_emu_q[256];

static inline int kk_emu_lane() { return (int)(kk_linear_tid() & 31); }
// Shared memory serves a warp's 16-byte accesses 8 at a time (lanes 8q .. 8q + 7): they are
// conflict-free when they fall in 8 different 16-byte bank groups. The swizzle promises that for
// every ldmatrix and cp.async; a conflict traps (the test fails).
static inline void kk_emu_no_conflict(unsigned addr) {
  const int l = kk_emu_lane();
  unsigned seen = 0;
  for (int j = 0; j < 8; ++j) {
    seen |= 1u << ((__shfl_sync(0xffffffffu, addr, (l & ~7) + j) >> 4) & 7);
  }
  if (seen != 0xffu) __trap();
}

__device__ inline unsigned kk_mma_smem_u32(const void* p) {
  kk_emu_smem = (unsigned char*)p;
  kk_emu_queue& t = kk_emu_q[kk_linear_tid()];  // a new block: nothing pending
  t.oldest = t.committed = 0;
  t.n[0] = 0;
  return 0;  // shared addresses are offsets from the block's dynamic shared memory
}
__device__ inline void kk_mma_cp16(unsigned dst, const void* src, bool full) {
  kk_emu_no_conflict(dst);
  kk_emu_queue& t = kk_emu_q[kk_linear_tid()];
  const int g = (t.oldest + t.committed) % 8;
  if (t.n[g] == 32) __trap();
  t.q[g][t.n[g]++] = kk_emu_copy{dst, src, full};
}
__device__ inline void kk_mma_commit() {
  kk_emu_queue& t = kk_emu_q[kk_linear_tid()];
  if (++t.committed == 8) __trap();
  t.n[(t.oldest + t.committed) % 8] = 0;
}
template <int N>
__device__ inline void kk_mma_wait() {  // all but the newest N committed groups land now
  kk_emu_queue& t = kk_emu_q[kk_linear_tid()];
  while (t.committed > N) {
    for (int i = 0; i < t.n[t.oldest]; ++i) {
      const kk_emu_copy& c = t.q[t.oldest][i];
      if (c.full) std::memcpy(kk_emu_smem + c.dst, c.src, 16);
      else std::memset(kk_emu_smem + c.dst, 0, 16);
    }
    t.oldest = (t.oldest + 1) % 8;
    --t.committed;
  }
}
// ldmatrix .x4: lane l addresses row l % 8 of matrix l / 8; register i of lane l gets matrix i's
// row l / 4, 16-bit elements 2 (l % 4) and 2 (l % 4) + 1 (the lower one in the low half).
__device__ inline void kk_mma_ldsm(unsigned (&r)[4], unsigned addr) {
  kk_emu_no_conflict(addr);
  const int l = kk_emu_lane();
  for (int i = 0; i < 4; ++i) {
    const unsigned row = __shfl_sync(0xffffffffu, addr, 8 * i + l / 4);
    std::memcpy(&r[i], kk_emu_smem + row + 4 * (l % 4), 4);
  }
}
// .trans: register i of lane l gets the transposed matrix's row l / 4, i.e. stored rows 2 (l % 4)
// and 2 (l % 4) + 1 at column l / 4.
__device__ inline void kk_mma_ldsm_t(unsigned (&r)[4], unsigned addr) {
  kk_emu_no_conflict(addr);
  const int l = kk_emu_lane();
  for (int i = 0; i < 4; ++i) {
    const unsigned r0 = __shfl_sync(0xffffffffu, addr, 8 * i + 2 * (l % 4));
    const unsigned r1 = __shfl_sync(0xffffffffu, addr, 8 * i + 2 * (l % 4) + 1);
    unsigned short lo, hi;
    std::memcpy(&lo, kk_emu_smem + r0 + 2 * (l / 4), 2);
    std::memcpy(&hi, kk_emu_smem + r1 + 2 * (l / 4), 2);
    r[i] = lo | (unsigned)hi << 16;
  }
}
"""

# mma.sync, emulated: also used by the other emulated kernels' tests.
MMA_SYNC_EMULATION = r"""
// mma.sync m16n8k16 .row.col, f32 += T * T (g = lane / 4, t = lane % 4):
//   a0 = A[g][2t..], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   b0 = B[2t..][g], b1 = B[2t+8..][g];  c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
template <class T> struct kk_mma_op {
  static inline float f(unsigned reg, int half) {
    const unsigned short bits = half ? (unsigned short)(reg >> 16) : (unsigned short)reg;
    T v;
    std::memcpy(&v, &bits, 2);
    return (float)v;
  }
  static inline void run(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    const int l = kk_emu_lane(), g = l / 4, t = l % 4;
    const unsigned F = 0xffffffffu;
    for (int q = 0; q < 4; ++q) {  // k = 2q + e (a0, a1, b0) and 8 + 2q + e (a2, a3, b1)
      const unsigned a0 = __shfl_sync(F, a[0], 4 * g + q), a1 = __shfl_sync(F, a[1], 4 * g + q);
      const unsigned a2 = __shfl_sync(F, a[2], 4 * g + q), a3 = __shfl_sync(F, a[3], 4 * g + q);
      const unsigned p0 = __shfl_sync(F, b0, 8 * t + q), p1 = __shfl_sync(F, b1, 8 * t + q);
      const unsigned r0 = __shfl_sync(F, b0, 8 * t + 4 + q), r1 = __shfl_sync(F, b1, 8 * t + 4 + q);
      for (int e = 0; e < 2; ++e) {
        c[0] += f(a0, e) * f(p0, e) + f(a2, e) * f(p1, e);  // row g, column 2t
        c[1] += f(a0, e) * f(r0, e) + f(a2, e) * f(r1, e);  // row g, column 2t + 1
        c[2] += f(a1, e) * f(p0, e) + f(a3, e) * f(p1, e);  // row g + 8
        c[3] += f(a1, e) * f(r0, e) + f(a3, e) * f(r1, e);
      }
    }
  }
};
"""

_EMULATED = kernelkit.kernel(
    "ops_matmul_mma_emulated",
    ["x", "w", "bias"],
    ["y"],
    source("matmul", "mma_body"),
    header=source("matmul", "epilogue") + EMULATION + MMA_SYNC_EMULATION + source("matmul", "mma"),
    optional_inputs={"bias": "float32"},
    backend="cpu",
)
ACT = {None: 0, "relu": 1, "silu": 2, "gelu": 3}
RNG = np.random.default_rng(5)


def reference(a, w, bias, activation, transpose_b):
    y = a.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64)
    if bias is not None:
        y = y + bias
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "silu":
        return y / (1 + np.exp(-y))
    if activation == "gelu":
        return 0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))
    return y


def problem(m, n, k, transpose_b):
    return Problem("matmul", (ArgFacts("x", "array", "float16", (m, k)),),
                   (("M", m), ("N", n), ("K", k), ("transpose_b", transpose_b)))  # fmt: skip


def run(config, a, w, bias, activation, transpose_b, out=None):
    """The emulated kernel on torch CPU tensors, launched as matmul/mma launches it."""
    m, k = a.shape
    n = w.shape[0] if transpose_b else w.shape[1]
    assert MMA.mma_fits(problem(m, n, k, transpose_b), config) is None
    dtype = str(a.dtype).split(".")[-1]
    template = [*config.template, ("T", dtype), ("TB", "float32" if bias is None else
                str(bias.dtype).split(".")[-1]), ("TY", dtype), ("ACT", ACT[activation]),
                ("HAS_BIAS", bias is not None), ("W_KN", not transpose_b)]  # fmt: skip
    kw = {"out": [out]} if out is not None else {"output_shapes": [(m, n)],
                                                 "output_dtypes": [dtype]}  # fmt: skip
    (y,) = _EMULATED(
        [a, w, bias],
        grid=MMA.mma_grid(problem(m, n, k, transpose_b), config),
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
    assert not np.isnan(got).any()
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
    assert err <= 1e-2, err


@pytest.mark.parametrize("config", MMA.MMA_CONFIGS, ids=lambda c: c.describe())
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "b_KN"])
def test_every_config_both_layouts(config, transpose_b):
    """Ragged M, N, K (a partial tile in each, K not a multiple of BK) and, with 3+ k-tiles,
    every stage of the pipeline refilled."""
    v = config.values
    m, n, k = v["BM"] + 5, v["BN"] * 2 - 8, 3 * v["BK"] + 8 * (v["STAGES"] - 1)
    dtype = torch.bfloat16 if v["BM"] % 64 else torch.float16
    a = torch.randn(m, k).to(dtype)
    w = torch.randn(n, k).to(dtype) if transpose_b else torch.randn(k, n).to(dtype)
    check(run(config, a, w, None, None, transpose_b), a, w, None, None, transpose_b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu"])
def test_bias_and_activation(dtype, activation):
    config = MMA.MMA_CONFIGS[-1]
    a = torch.randn(33, 40).to(dtype)
    w = torch.randn(72, 40).to(dtype)
    bias = torch.randn(72).to(dtype if activation != "gelu" else torch.float32)
    check(run(config, a, w, bias, activation, True), a, w, bias, activation, True)


def test_odd_n_out_view_and_group_ordering():
    """Odd N (b as [N, K]: element stores, no pairs), a y written through out=, and more tile
    rows than one group of 8 (the grouped block order covers every tile once)."""
    config = MMA.MMA_CONFIGS[-1]  # 32 x 64 tiles: 300 rows are 10 tile rows, 2 groups
    a = torch.randn(300, 24).to(torch.float16)
    w = torch.randn(67, 24).to(torch.float16)
    out = torch.full((300, 67), float("nan")).to(torch.float16)
    y = run(config, a, w, None, "relu", True, out=out)
    assert y is out
    check(out, a, w, None, "relu", True)


def test_k_zero_gives_bias():
    config = MMA.MMA_CONFIGS[-1]
    a, w = torch.zeros(3, 0).to(torch.float16), torch.zeros(5, 0).to(torch.float16)
    bias = torch.arange(5, dtype=torch.float32)
    y = run(config, a, w, bias, None, True)
    assert y.float().tolist() == [[0, 1, 2, 3, 4]] * 3
