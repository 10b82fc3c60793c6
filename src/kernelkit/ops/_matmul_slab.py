"""``matmul``'s decode kernel for sm_90 (``gemv_slab``): M <= 4, float16/bfloat16, weight [N, K]
with K of 2048, 4096 or 8192. The kernel source, its configs and the rules the selection stage
asks (match, fits, grid, heuristic).

Reading the weight once at the memory's rate is the whole cost of these shapes. ``gemv_tc``
loads it with 16-byte loads from every lane and stays at 74-83% of the copy rate on an H100
(8192 x 8192 and 14336 x 4096, M = 1). Here the copy engine of Hopper's TMA unit moves it:
``cp.async.bulk`` (no tensor map) copies whole rows, contiguous in memory, into a ring of
shared-memory stages, one copy per stage issued by one thread, and an mbarrier per stage counts
the bytes in. On an H100 this reads the 8192 x 8192 and 14336 x 4096 weights at 96-98% of the
copy rate at M = 1, where cuBLAS reads them at 92-95% (``benchmarks/ops.py --only matmul``,
``benchmarks/weight_stream.py``).

A variant that copied row pieces (16-64 rows x 512-2048 bytes a stage, for the tensor cores at
M <= 16) was measured and dropped: 0.94-1.00x cuBLAS at M = 1 and 0.66-0.76x at M = 16, never
ahead of both cuBLAS and ``gemv_tc``; it issued many short copies from rows 16 KiB apart.
"""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, cuda_cc

__all__ = [
    "BULK_PTX",
    "SLAB",
    "SLAB_BODY",
    "SLAB_CONFIGS",
    "SLAB_K",
    "SLAB_MAX_M",
    "SLAB_RING",
    "decode_match",
    "slab_config",
    "slab_fits",
    "slab_grid",
    "slab_heuristic",
    "slab_jpr",
    "slab_match",
]

# cp.async.bulk global -> shared, completing on an mbarrier that counts the bytes (sm_90).
BULK_PTX = r"""
__device__ __forceinline__ void kk_bulk_init(unsigned bar) {  // one arrival a phase
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(bar));
}
__device__ __forceinline__ void kk_bulk_init_fence() {  // the inits, seen by the copy engine
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void kk_bulk_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kk_bulk_copy(unsigned dst, const void* src, unsigned bytes,
                                             unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void kk_bulk_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n KK_BULK_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra.uni KK_BULK_WAIT;\n}\n"
      :: "r"(bar), "r"(parity) : "memory");
}
"""

# What the whole-row kernels (gemv_slab, gemv_slab_tc) share, built on the helpers above (so an
# emulation of those runs it too): the ring's barriers, one stage's copy, one stage's outputs.
SLAB_RING = r"""
// Thread 0: the S mbarriers of a ring, one arrival a phase, set up for the copy engine.
template <int S>
__device__ __forceinline__ void kk_slab_ring_init(unsigned long long (&bars)[S]) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) kk_bulk_init(kk_mma_smem_u32(&bars[s]));
    kk_bulk_init_fence();
  }
}
// Thread 0: stage i % S of the ring (STAGE bytes each) <- rows RS i .. of the block's `rows`
// rows of K 16-bit elements at `w` (fewer in the last stage: rows past N are not copied), one
// copy (the rows are contiguous), counted in by the stage's barrier.
template <int S, unsigned STAGE, int RS, class T>
__device__ __forceinline__ void kk_slab_ring_fill(const void* ring, unsigned long long (&bars)[S],
                                                  int i, const T* w, int rows, long long K) {
  const int n = rows - RS * i < RS ? rows - RS * i : RS;
  const T* src = w + RS * i * K;
  const unsigned bar = kk_mma_smem_u32(&bars[i % S]), bytes = (unsigned)(n * K * 2);
  kk_bulk_expect(bar, bytes);
  kk_bulk_copy(kk_mma_smem_u32(ring) + (i % S) * STAGE, src, bytes, bar);
}
// Thread t < RS MX of a stage: output t = (row r, x row m) is the warps' partial sums, added in
// a fixed order (deterministic), plus the bias, through the activation. part: [WARPS][RS MX].
template <class TB, class TY, int WARPS, int RS, int MX, int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_slab_store(const float* part, int t, long long M, int rows_left,
                                              long long n_first, const TB* bias, TY* y,
                                              long long N) {
  const int r = t / MX, m = t % MX;
  if (t >= RS * MX || m >= M || r >= rows_left) return;
  float a = 0.0f;
  for (int p = 0; p < WARPS; ++p) a += part[p * RS * MX + t];
  const long long n = n_first + r;
  if (HAS_BIAS) a += (float)bias[n];
  y[m * N + n] = TY(kk_mm_act<ACT>(a));
}
"""

SLAB_KERNEL = r"""
// --- gemv_slab: y = act(x @ w^T + bias) for M <= MX <= 4, sm_90: whole rows, one copy each ----
// A block owns ROWS consecutive rows of w: one contiguous span, streamed through S stages of SKB
// KiB, RS whole rows (one cp.async.bulk, thread 0 issues it). Long copies are what the
// copy engine and the memory do best: the probe behind this kernel read 96-98% of the copy rate.
// Thread t takes 16-byte vectors t, t + THREADS, ... of each row (JPR of them: K = 8 THREADS
// JPR), so its k are the same in every row: x's for them stay in registers for the whole
// kernel. Per row, each warp sums by shuffles, then the warps' sums are added in a fixed order
// (deterministic); `part` alternates between two buffers, so one barrier per stage suffices.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T> struct kk_slab_words;
template <> struct kk_slab_words<__nv_bfloat16> {
  static __device__ __forceinline__ float2 get(unsigned v) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  }
};
template <> struct kk_slab_words<__half> {
  static __device__ __forceinline__ float2 get(unsigned v) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
};
template <class T>
__device__ __forceinline__ float kk_slab_dot(const uint4& a, const uint4& b, float acc) {
  const unsigned wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = kk_slab_words<T>::get(wa[i]), q = kk_slab_words<T>::get(wb[i]);
    acc = fmaf(p.x, q.x, acc);
    acc = fmaf(p.y, q.y, acc);
  }
  return acc;
}

template <class T, class TB, class TY, int THREADS, int ROWS, int SKB, int JPR, int S, int MX,
          int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_slab(const T* x, const T* w, const TB* bias, TY* y,
                                             long long M, long long N, long long K) {
#if KK_HAS_TMA
  // K == 8 THREADS JPR, and a stage of SKB KiB holds RS whole rows (the config rules)
  constexpr int WARPS = THREADS / 32, RS = SKB * 1024 / (16 * THREADS * JPR), VPT = RS * JPR;
  constexpr unsigned STAGE = SKB * 1024u;
  static_assert(RS >= 1 && RS * 16 * THREADS * JPR == SKB * 1024 && ROWS % RS == 0, "rules");
  extern __shared__ __align__(128) uint4 kk_slab_ring[];
  __shared__ unsigned long long bars[S];  // 8-byte aligned, as mbarriers must be
  __shared__ float part[2][WARPS][RS * MX];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const long long n0 = (long long)blockIdx.x * ROWS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + RS - 1) / RS;
  kk_slab_ring_init(bars);
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + RS i ..
    kk_slab_ring_fill<S, STAGE, RS>(kk_slab_ring, bars, i, w + n0 * K, rows, K);
  };
  if (t == 0)
    for (int i = 0; i < S - 1 && i < tiles; ++i) fill(i);
  uint4 xr[MX][JPR];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int m = 0; m < MX; ++m)
#pragma unroll
    for (int j = 0; j < JPR; ++j)
      xr[m][j] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K) + t + THREADS * j) : zero;
  for (int i = 0; i < tiles; ++i) {
    if (t == 0 && i + S - 1 < tiles) fill(i + S - 1);
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
    uint4 v[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) v[j] = kk_slab_ring[(i % S) * (STAGE / 16) + t + THREADS * j];
#pragma unroll
    for (int r = 0; r < RS; ++r)
#pragma unroll
      for (int m = 0; m < MX; ++m) {
        float a = 0.0f;
#pragma unroll
        for (int j = 0; j < JPR; ++j) a = kk_slab_dot<T>(v[r * JPR + j], xr[m][j], a);
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) part[i & 1][warp][r * MX + m] = a;
      }
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    kk_slab_store<TB, TY, WARPS, RS, MX, ACT, HAS_BIAS>(&part[i & 1][0][0], t, M, rows - RS * i,
                                                         n0 + (long long)RS * i, bias, y, N);
  }
#else
  __trap();  // sm_90+ only (the match rule): no cp.async.bulk / mbarrier transactions below
#endif
}
"""

# The header: the shared epilogue, the PTX helpers, the ring, the kernel.
SLAB = EPILOGUE + MMA_PTX + BULK_PTX + SLAB_RING + SLAB_KERNEL

SLAB_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_slab<T, TB, TY, THREADS, ROWS, SKB, JPR, S, MX, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
"""


SLAB_MAX_M = 4
SLAB_K = (2048, 4096, 8192)  # whole rows fill 16 or 32 KiB stages; x's vectors fit registers


def slab_config(threads: int, rows: int, skb: int, stages: int, mx: int) -> Config:
    """A gemv_slab config: ``rows`` weight rows a block, ``stages`` stages of ``skb`` KiB."""
    values = {"THREADS": threads, "ROWS": rows, "SKB": skb, "S": stages, "MX": mx}
    return Config(values, (threads,), stages * skb * 1024)


SLAB_CONFIGS = tuple(
    slab_config(threads, rows, skb, stages, mx)
    for mx in (1, 2, 4)
    for threads in (128, 256)
    for rows in (8, 32)
    for skb in (16, 32)
    for stages in (3, 4)
)


def slab_jpr(p: Problem, c: Config) -> int:
    """16-byte vectors of a row each thread takes (the template value JPR)."""
    return int(p.attr("K")) // (8 * int(c.values["THREADS"]))


def decode_match(
    p: Problem,
    t: Target,
    max_m: int,
    why_m: str,
    k_why: str | None,
    needs: str = "cp.async.bulk and mbarrier transactions",
) -> str | None:
    """The rules the sm_90 decode kernels share, in this order: the arch (what ``needs`` it),
    M <= ``max_m`` (``why_m`` says why), a weight [N, K], 16-bit inputs, the kernel's own rule
    for K (``k_why``: None when K suits it), operands on 16-byte boundaries."""
    cc = cuda_cc(t.arch)
    if cc is None or cc < 90:
        return f"{needs} need sm_90 or newer, not {t.arch}"
    if p.attr("M") > max_m:
        return f"M = {p.attr('M')} > {max_m} ({why_m})"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"takes float16/bfloat16, not {p.arg('x').dtype}"
    if k_why:
        return k_why
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (bulk copies need it)"
    return None


def slab_match(p: Problem, t: Target) -> str | None:
    """None when gemv_slab can run ``p`` on ``t``, else why not."""
    k = p.attr("K")
    k_why = None if k in SLAB_K else f"K = {k} is not one of {SLAB_K} (stages of whole rows)"
    return decode_match(p, t, SLAB_MAX_M, "x's rows are held in registers", k_why)


def slab_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_slab runs correctly for ``p``, or None."""
    v = c.values
    try:
        threads, rows, skb, st, mx = (int(v[k]) for k in ("THREADS", "ROWS", "SKB", "S", "MX"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs THREADS, ROWS, SKB, S, MX)"
    k, m = int(p.attr("K")), int(p.attr("M"))
    if threads % 32 or not 32 <= threads <= 1024 or st < 2 or rows < 1:
        return f"THREADS = {threads} (whole warps), S = {st} (>= 2), ROWS = {rows}"
    if m > mx:
        return f"M = {m} rows of x do not fit MX = {mx}"
    if k % (8 * threads):
        return f"K = {k} is not {threads} threads x 16-byte vectors x a whole number"
    if (skb * 1024) % (2 * k) or rows % ((skb * 1024) // (2 * k)):
        return f"a stage of {skb} KiB is not whole rows of K = {k} dividing ROWS = {rows}"
    jpr, rs = k // (8 * threads), skb * 1024 // (2 * k)
    if mx * jpr > 16 or rs * jpr > 16:
        return f"x's {mx} x {jpr} and a stage's {rs} x {jpr} vectors a thread: too many registers"
    if c.threadgroup != (threads, 1, 1) or c.shared_memory != st * skb * 1024:
        return f"threadgroup ({threads},) and {st * skb} KiB of shared memory, got {c}"
    return None


def slab_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One block per ROWS weight rows."""
    return (-(-p.attr("N") // c.values["ROWS"]) * c.threadgroup[0], 1, 1)


def slab_heuristic(p: Problem, t: Target) -> Config | None:
    """From the probe on an H100: 16 KiB stages, 3 in flight, 256 threads, 8 rows a block;
    None where the rows are too long for it (the next implementation serves)."""
    m = int(p.attr("M"))
    mx = 1 if m <= 1 else 2 if m <= 2 else 4
    for c in (slab_config(256, 8, 16, 4, mx), slab_config(256, 32, 32, 4, mx)):
        if slab_fits(p, c) is None and c.shared_memory <= t.max_shared_memory_optin_bytes:
            return c
    return None
