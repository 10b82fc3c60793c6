"""``matmul/gemv_slab_tc``'s kernel text (``_matmul_slab_tc.SLAB_TC_KERNEL``: segments, fragment
addressing, the agreeing entries and their shuffles, the stage ring, the epilogue) run on the CPU
backend, with its sm_90 instructions replaced by an emulation written from the PTX ISA:
``mma.sync`` m16n8k16 as warp shuffles (shared with the ``mma`` kernel's test), and the bulk
copies with their mbarriers. A bulk copy scribbles over its destination when it is issued and
lands its bytes only when a thread waits on its barrier (so reading a stage without waiting, or
after its refill was issued, reads garbage); an mbarrier checks its arrivals and byte counts,
and a copy that its addresses are 16-byte aligned and that it reads inside the weight. Every
(SEG, XH) the kernel has, each M it serves, both dtypes, bias and activation, ragged N, against
a float64 reference. What it cannot show: the hardware's timing and bank conflicts, and a
refill issued while other warps still read the stage. The CPU backend runs a block's threads in
index order from one warp operation to the next, so the other warps have read the stage before
thread 0 reaches such a refill (the GPU tests and compute-sanitizer's racecheck cover it)."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_matmul_mma_emulated import ACT, MMA_SYNC_EMULATION, reference

import kernelkit
from kernelkit._records import ArgFacts, Problem
from kernelkit.ops import _matmul_slab_tc as STC
from kernelkit.ops._kernel_files import source

torch = pytest.importorskip("torch")

EMULATION = r"""
#include <cstring>
#define KK_HAS_TMA 1  // the CPU prelude does not define it: run the kernel text here

static inline int kk_emu_lane() { return (int)(kk_linear_tid() & 31); }

// Shared "addresses": a region's slot (1-63) in bits 24-29, the byte offset below. A region is
// registered the first time a pointer in it is converted (the ring, the barrier array).
static thread_local unsigned char* kk_emu_region[64];
static thread_local int kk_emu_regions;
__device__ inline unsigned kk_mma_smem_u32(const void* p) {
  unsigned char* c = (unsigned char*)p;
  for (int i = 1; i < 64; ++i)
    if (kk_emu_region[i] && c >= kk_emu_region[i] && c - kk_emu_region[i] < (1 << 24))
      return (unsigned)i << 24 | (unsigned)(c - kk_emu_region[i]);
  const int i = 1 + kk_emu_regions++ % 63;
  kk_emu_region[i] = c;
  return (unsigned)i << 24;
}
static inline unsigned char* kk_emu_at(unsigned a) {
  return kk_emu_region[a >> 24] + (a & 0xffffff);
}

// An mbarrier in its own 8 shared bytes: phase, whether this phase's one arrival came, the bytes
// it expects. Copies in flight: a block-wide list, landed when a thread waits on their barrier.
struct kk_emu_bar { unsigned short phase, arrived; unsigned expected; };
struct kk_emu_copy { unsigned dst, bytes, bar; const void* src; };
static thread_local kk_emu_copy kk_emu_copies[64];
static thread_local int kk_emu_ncopies;
static inline kk_emu_bar& kk_emu_bar_at(unsigned bar) {
  static_assert(sizeof(kk_emu_bar) == 8, "an mbarrier's 8 bytes");
  return *reinterpret_cast<kk_emu_bar*>(kk_emu_at(bar));
}
__device__ inline void kk_bulk_init(unsigned bar) {
  kk_emu_bar_at(bar) = kk_emu_bar{0, 0, 0u};
  kk_emu_ncopies = 0;  // a new block: nothing in flight
}
__device__ inline void kk_bulk_init_fence() {}
static thread_local const unsigned char* kk_emu_w[2];  // the weight's first and past-last bytes
__device__ inline void kk_bulk_expect(unsigned bar, unsigned bytes) {
  kk_emu_bar& b = kk_emu_bar_at(bar);
  if (b.arrived) __trap();  // a second arrival in a phase that counts one
  b.arrived = 1;
  b.expected += bytes;
}
__device__ inline void kk_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  const unsigned char* s = (const unsigned char*)src;
  if (((size_t)kk_emu_at(dst) | bytes | (size_t)s) % 16 || kk_emu_ncopies == 64) __trap();
  if (s < kk_emu_w[0] || s + bytes > kk_emu_w[1]) __trap();  // a read past the weight
  std::memset(kk_emu_at(dst), 0xff, bytes);  // NaN words until it lands
  kk_emu_copies[kk_emu_ncopies++] = kk_emu_copy{dst, bytes, bar, src};
}
__device__ inline void kk_bulk_wait(unsigned bar, unsigned parity) {
  kk_block* blk = kk_fiber_block("kk_bulk_wait");
  for (int spins = 0; (kk_emu_bar_at(bar).phase & 1u) == parity; ++spins) {
    kk_emu_bar& b = kk_emu_bar_at(bar);
    unsigned landed = 0;
    for (int i = 0; i < kk_emu_ncopies; ++i)
      landed += kk_emu_copies[i].bar == bar ? kk_emu_copies[i].bytes : 0;
    if (b.arrived && landed == b.expected) {  // the phase completes: its copies land now
      int kept = 0;
      for (int i = 0; i < kk_emu_ncopies; ++i) {
        const kk_emu_copy c = kk_emu_copies[i];
        if (c.bar == bar) std::memcpy(kk_emu_at(c.dst), c.src, c.bytes);
        else kk_emu_copies[kept++] = c;
      }
      kk_emu_ncopies = kept;
      b = kk_emu_bar{(unsigned short)(b.phase + 1), 0, 0u};
      return;
    }
    if (b.arrived && landed > b.expected) __trap();  // more bytes than the barrier expects
    if (spins == 100000) __trap();  // nobody arrives: a hang on the GPU
    kk_yield(blk, blk->cur);  // let the thread that issues the copies run
  }
}
"""

_EMULATED = kernelkit.kernel(
    "ops_matmul_gemv_slab_tc_emulated",
    ["x", "w", "bias"],
    ["y"],
    "kk_emu_w[0] = (const unsigned char*)w;  // the bounds a bulk copy must read inside\n"
    "kk_emu_w[1] = (const unsigned char*)(w + w_shape[0] * w_shape[1]);\n"
    + source("matmul", "slab_tc_body"),
    header=source("matmul", "epilogue")
    + EMULATION
    + MMA_SYNC_EMULATION
    + source("matmul", "tc_step", "slab_ring", "slab_tc"),
    optional_inputs={"bias": "float32"},
    backend="cpu",
)


def problem(m, n, k):
    return Problem("matmul", (ArgFacts("x", "array", "bfloat16", (m, k)),),
                   (("M", m), ("N", n), ("K", k), ("transpose_b", True)))  # fmt: skip


def run(config, a, w, bias=None, activation=None):
    """The emulated kernel on torch CPU tensors, launched as matmul/gemv_slab_tc launches it."""
    (m, k), n = a.shape, w.shape[0]
    p = problem(m, n, k)
    assert STC.slab_tc_fits(p, config) is None, STC.slab_tc_fits(p, config)
    dtype = str(a.dtype).split(".")[-1]
    tb = "float32" if bias is None else str(bias.dtype).split(".")[-1]
    template = [*config.template, ("T", dtype), ("TB", tb), ("TY", dtype),
                ("ACT", ACT[activation]), ("HAS_BIAS", bias is not None),
                ("JW", STC.slab_tc_jw(p, config))]  # fmt: skip
    out = torch.full((m, n), float("nan")).to(a.dtype)
    _EMULATED(
        [a, w, bias],
        grid=STC.slab_tc_grid(p, config),
        threadgroup=config.threadgroup,
        template=template,
        shared_memory=config.shared_memory,
        out=[out],
    )
    return out


def check(y, a, w, bias=None, activation=None):
    ref = reference(
        a.double().numpy(),
        w.double().numpy(),
        None if bias is None else bias.double().numpy(),
        activation,
        True,
    )
    got = y.double().numpy()
    assert not np.isnan(got).any()
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert err <= 1e-2, err


# (SEG, XH): x's rows an mma takes (MX = 8 XH / SEG) and each M it serves
SHAPES = [(s, xh) for s in (8, 4, 2, 1) for xh in (1, 2, 4) if 8 * xh // s <= 16]


@pytest.mark.parametrize(("seg", "xh"), SHAPES, ids=[f"SEG{s}-XH{xh}" for s, xh in SHAPES])
def test_every_segment_shape_each_m_it_serves(seg, xh):
    """K = 1024 in 4 warps: rows of 2 KiB, 8 a 16 KiB stage, 4 stages a block through a ring of
    2 (N = 37 over 32-row blocks: a partial block and a partial stage); every M of the shape."""
    mx = 8 * xh // seg
    config = STC.slab_tc_config(4, 32, 16, 2, seg, xh)
    for m in range(mx // 2 + 1, mx + 1):
        a = torch.randn(m, 1024).to(torch.bfloat16)
        w = torch.randn(37, 1024).to(torch.bfloat16)
        check(run(config, a, w), a, w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu"])
def test_bias_activation_and_a_longer_ring(dtype, activation):
    """A ring of three stages of 2 rows (K = 4096), 8 rows a block: 3 blocks, the last partial."""
    config = STC.slab_tc_config(4, 8, 16, 3, 4, 2)
    a = torch.randn(4, 4096).to(dtype)
    w = torch.randn(21, 4096).to(dtype)
    bias = torch.randn(21).to(torch.float32)
    check(run(config, a, w, bias, activation), a, w, bias, activation)


@pytest.mark.parametrize(("seg", "xh"), [(8, 1), (8, 2), (8, 4), (4, 2), (2, 2), (4, 4), (2, 4)])
def test_segments_of_different_scale_keep_apart(seg, xh):
    """Segment s of x scaled by 1 + s and of w by 1 + (s * 3) % SEG (chunk c is segment c % SEG):
    an entry taken from another segment's column (a cross-segment sum) changes the result by
    far more than the tolerance, which zero-mean data of one scale would not show."""
    m = 8 * xh // seg
    config = STC.slab_tc_config(4, 32, 16, 2, seg, xh)
    a = torch.randn(m, 1024)
    w = torch.randn(37, 1024)
    for s in range(seg):
        a.view(m, -1, seg, 32)[:, :, s] *= 1 + s
        w.view(37, -1, seg, 32)[:, :, s] *= 1 + (s * 3) % seg
    a, w = a.to(torch.bfloat16), w.to(torch.bfloat16)
    check(run(config, a, w), a, w)
