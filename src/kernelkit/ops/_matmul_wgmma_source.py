"""The kernel source of ``matmul``'s Hopper tile kernel (``wgmma``): the wgmma and TMA PTX
helpers, the stage copies (CPU-testable), the kernel and the two bodies (cp.async: WS = 0, 1;
TMA: WS = 2). The design, the configs and the rules are in ``_matmul_wgmma``."""

from __future__ import annotations

from ._matmul_cluster import CLUSTER_PTX
from ._matmul_kernels import EPILOGUE, MMA_PTX
from ._matmul_slab import BULK_PTX

__all__ = [
    "BNS",
    "WGMMA",
    "WGMMA_BODY",
    "WGMMA_COPIES",
    "WGMMA_KERNEL",
    "WGMMA_PTX",
    "WGMMA_TMA_BODY",
]

BNS = (64, 128, 256)  # the n sides of the wgmma instructions generated below
_PTX_TYPES = {"__half": "f16", "__nv_bfloat16": "bf16"}


def _wgmma_instruction(ctype: str, n: int) -> str:
    """``kk_wgmma<ctype, n>``: one m64nNk16 step, fp32 accumulators d += A B^T, A and B K-major in
    shared memory (descriptors a, b), for the operand type ``ctype``."""
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    t = _PTX_TYPES[ctype]
    return (
        f"template <> __device__ __forceinline__ void kk_wgmma<{ctype}, {n}>(\n"
        f"    float (&d)[{regs}], unsigned long long a, unsigned long long b) {{\n"
        f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
        f'      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} "\n'
        f'      "{{{outs}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
        f"      : {binds}\n"
        f'      : "l"(a), "l"(b), "n"(1));\n'
        f"}}\n"
    )


WGMMA_PTX = r"""
// sm_90a warpgroup MMA. A shared-memory operand descriptor for a K-major tile of 128-byte rows
// in the 128-byte swizzle: start address >> 4 (bits 0-13), leading offset 16 bytes (unused when
// swizzled), stride 1024 bytes between 8-row groups (bits 32-45), layout 1 = 128B swizzle.
__device__ __forceinline__ unsigned long long kk_wg_desc(unsigned addr) {
  return (unsigned long long)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}
__device__ __forceinline__ void kk_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void kk_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void kk_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// A tensor copy of the box at (c0, c1) (elements; c0 the contiguous dimension) of a 2-D map into
// shared memory at dst, counted into mbarrier bar by its bytes (zeros past the edges count too).
__device__ __forceinline__ void kk_tma_2d(unsigned dst, const kk_tensor_map* map, int c0, int c1,
                                          unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n"
      :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// Keeps the compiler from moving accumulators between registers while a wgmma owns them.
template <int R>
__device__ __forceinline__ void kk_wg_pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
template <class T, int N>
__device__ __forceinline__ void kk_wgmma(float (&d)[N / 2], unsigned long long a,
                                         unsigned long long b);
""" + "".join(_wgmma_instruction(c, n) for c in _PTX_TYPES for n in BNS)

WGMMA_COPIES = r"""
// --- wgmma: y = act(x @ w^T + bias), sm_90a -------------------------------------------------
// Block b: cluster tile b / SPLIT (m tiles fastest: neighbours share a weight tile in L2), rank
// b % SPLIT, its k tiles [kt0, kt1). Stages of [BM + BN rows x 128 bytes] x KB (x's rows then
// w's, 128-byte swizzle: chunk c of row r at c ^ (r % 8)) come through a ring of S stages.
struct kk_wg_tile {
  long long m0, n0;
  int kt0, kts;
  unsigned rank;
};
// K as the compiler cannot see through (a value it will not hoist out of a loop), on the GPU.
__device__ __forceinline__ long long kk_wg_opaque(long long v) {
#ifdef __CUDA_ARCH__
  asm volatile("mov.b64 %0, %1;\n" : "=l"(v) : "l"(v));
#endif
  return v;
}

// Thread p of P: its 16-byte cp.async copies of k tile kt into `stage` (rows past M or N and k
// past K zero-filled); neighbouring threads copy neighbouring 16 bytes of a row.
template <class T, int BM, int BN, int KB, int P>
__device__ __forceinline__ void kk_wg_copy_stage(unsigned stage, int p, const T* x, const T* w,
                                                 const kk_wg_tile& tl, int kt, long long M,
                                                 long long N, long long K) {
  constexpr unsigned SUB = (BM + BN) * 128u;
  constexpr int COPIES = (BM + BN) * 8 * KB / P;
  static_assert((BM + BN) * 8 * KB % P == 0, "the config rules");
  const long long k = (long long)kt * 64 * KB;
#pragma unroll
  for (int j = 0; j < COPIES; ++j) {
    const int c = p + j * P, r = c / (8 * KB), kc = c % (8 * KB), ch = kc & 7;
    const bool is_x = r < BM;
    const long long row = is_x ? tl.m0 + r : tl.n0 + (r - BM), kk = k + 8 * kc;
    const bool full = row < (is_x ? M : N) && kk < K;
    const T* src = full ? (is_x ? x : w) + row * K + kk : x;
    kk_mma_cp16(stage + (kc >> 3) * SUB + r * 128u + ((ch ^ (r & 7)) << 4), src, full);
  }
}

// The copying warpgroup's thread p (of 128) for one stage (WS = 1): it always takes the same
// 16-byte column kc of rows r0, r0 + RSTEP, ..., so whether a copy is x's or w's is known when
// compiling, a row's bounds check holds for every stage (rows_ok, bit j), and the addresses
// are a multiply-add each. K passes through an empty asm every stage so that the compiler does
// not keep every copy's address in registers between stages.
template <class T, int BM, int BN, int KB>
__device__ __forceinline__ void kk_wg_produce(unsigned stage, int p, const T* x, const T* w,
                                              const kk_wg_tile& tl, int kt,
                                              unsigned long long rows_ok, long long K) {
  constexpr int CPR = 8 * KB, RSTEP = 128 / CPR, J = (BM + BN) / RSTEP;
  constexpr unsigned SUB = (BM + BN) * 128u;
  static_assert(128 % CPR == 0 && BM % RSTEP == 0 && J <= 64, "the config rules");
  const long long k_rows = kk_wg_opaque(K);
  constexpr int XJ = BM / RSTEP;  // copies j < XJ are x's rows, the others w's
  const int kc = p % CPR, r0 = p / CPR, ch = kc & 7;
  const long long kk = (long long)kt * 64 * KB + 8 * kc, step = RSTEP * k_rows;
  const bool k_in = kk < K;
  const T* src = x + (tl.m0 + r0) * k_rows + kk;  // row j's, advanced a row step at a time
  const unsigned dst = stage + (kc >> 3) * SUB;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (j == XJ) src = w + (tl.n0 + r0) * k_rows + kk;
    const int r = r0 + j * RSTEP;
    const bool full = k_in && ((rows_ok >> j) & 1ull);
    kk_mma_cp16(dst + r * 128u + ((ch ^ (r & 7)) << 4), full ? src : x, full);
    src += step;
  }
}
// Bit j: whether the copying thread p's row j (of kk_wg_produce) is inside x or w.
template <int BM, int BN, int KB>
__device__ __forceinline__ unsigned long long kk_wg_rows_ok(int p, const kk_wg_tile& tl,
                                                            long long M, long long N) {
  constexpr int RSTEP = 16 / KB, J = (BM + BN) / RSTEP, XJ = BM / RSTEP;
  unsigned long long ok = 0;
  for (int j = 0; j < J; ++j) {
    const long long row = j < XJ ? tl.m0 + p / (8 * KB) + j * RSTEP
                                 : tl.n0 + p / (8 * KB) + (j - XJ) * RSTEP;
    ok |= (unsigned long long)(row < (j < XJ ? M : N)) << j;
  }
  return ok;
}
"""

WGMMA_KERNEL = r"""
template <int BM, int BN, int KB, int SPLIT>
__device__ __forceinline__ kk_wg_tile kk_wg_tile_of(long long M, long long N, long long K) {
  kk_wg_tile w;
  w.rank = 0;
  if (SPLIT > 1) asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(w.rank));
  const long long tile = blockIdx.x / SPLIT, tiles_m = (M + BM - 1) / BM;
  w.m0 = tile % tiles_m * BM;
  w.n0 = tile / tiles_m * BN;
  const int kt_all = (int)((K + 64 * KB - 1) / (64 * KB)), per = (kt_all + SPLIT - 1) / SPLIT;
  w.kt0 = (int)w.rank * per;
  w.kts = kt_all - w.kt0 < per ? kt_all - w.kt0 : per;
  return w;
}

// Warpgroup wg's wgmmas of one stage: KB sub-tiles of four k16 steps, A rows 64 wg .., B the
// stage's BN rows of w.
template <class T, int BM, int BN, int KB>
__device__ __forceinline__ void kk_wg_mma_stage(float (&acc)[BN / 2], unsigned stage, int wg) {
  constexpr unsigned A_BYTES = BM * 128u, SUB = (BM + BN) * 128u;
#pragma unroll
  for (int h = 0; h < KB; ++h) {  // sub-tile h: k [64 h, 64 h + 64) of the stage
    const unsigned long long da = kk_wg_desc(stage + h * SUB + wg * 8192u);  // rows 64 wg ..
    const unsigned long long db = kk_wg_desc(stage + h * SUB + A_BYTES);
#pragma unroll
    for (int k = 0; k < 4; ++k) kk_wgmma<T, BN>(acc, da + 2 * k, db + 2 * k);  // +32 bytes
  }
}

// Every thread of the block (THREADS), after the ring is idle: the consumers' (t < 128 WG)
// fp32 tiles into `red` (the ring's memory), then rank r of the cluster stores its share of
// the rows, the SPLIT tiles added in rank order (deterministic), bias, activation.
template <class TB, class TY, int WG, int BN, int SPLIT, int THREADS, int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_wg_epilogue(const float (&acc)[BN / 2], float* red, int t,
                                               const kk_wg_tile& tl, const TB* bias, TY* y,
                                               long long M, long long N) {
  constexpr int BM = 64 * WG, PITCH = BN + 8;
  if (t < 128 * WG) {
    const int wg = t >> 7, warp = (t >> 5) & 3, g = (t & 31) >> 2, q = t & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {  // accumulator 4j + v: row g (+8 for v >= 2), col 8j + 2q
      const int r = 64 * wg + 16 * warp + g, c = 8 * j + 2 * q;
      *reinterpret_cast<float2*>(&red[r * PITCH + c]) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(&red[(r + 8) * PITCH + c]) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  if (SPLIT > 1) kk_cluster_sync();  // every block's tile is in (and visible to the cluster)
  else __syncthreads();
  constexpr int SHARE = (BM + SPLIT - 1) / SPLIT, PAIRS = BN / 2;
  for (int idx = t; idx < SHARE * PAIRS; idx += THREADS) {  // rank r stores rows share r
    const int r = (int)tl.rank * SHARE + idx / PAIRS, c = 2 * (idx % PAIRS);
    const long long m = tl.m0 + r, n = tl.n0 + c;
    if (r >= BM || m >= M || n >= N) continue;
    float2 v = *reinterpret_cast<const float2*>(&red[r * PITCH + c]);
    if (SPLIT > 1) {
      v = make_float2(0.0f, 0.0f);
      for (unsigned b = 0; b < SPLIT; ++b) {  // in rank order: deterministic
        const float2 u = kk_cluster_load2(&red[r * PITCH + c], b);
        v.x += u.x;
        v.y += u.y;
      }
    }
    if (HAS_BIAS) v.x += (float)bias[n];
    y[m * N + n] = TY(kk_mm_act<ACT>(v.x));
    if (n + 1 < N) {
      if (HAS_BIAS) v.y += (float)bias[n + 1];
      y[m * N + n + 1] = TY(kk_mm_act<ACT>(v.y));
    }
  }
  if (SPLIT > 1) kk_cluster_sync();  // no block leaves while another may still read its tile
}

// A consumer warpgroup (WS >= 1): wait for stage i to land (``full``), its wgmmas, and release
// stage i - 1 (its wgmmas done) into ``empty``, one arrival per warp. FENCE: the stage was
// written by cp.async (the generic proxy), which the tensor cores see only after a proxy fence;
// TMA writes through the async proxy already.
template <class T, int BM, int BN, int KB, int S, bool FENCE>
__device__ __forceinline__ void kk_wg_consume(float (&acc)[BN / 2], unsigned base,
                                              unsigned long long (&full)[S],
                                              unsigned long long (&empty)[S], int kts, int wg,
                                              int t) {
  constexpr unsigned STAGE = KB * (BM + BN) * 128u;
  for (int i = 0; i < kts; ++i) {
    kk_bulk_wait(kk_mma_smem_u32(&full[i % S]), (unsigned)(i / S) & 1u);
    if (FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    kk_wg_pin(acc);
    kk_wgmma_fence();
    kk_wg_mma_stage<T, BM, BN, KB>(acc, base + (i % S) * STAGE, wg);
    kk_wgmma_commit();
    kk_wg_pin(acc);
    kk_wgmma_wait<1>();  // stage i - 1's wgmma is done: its slot is free
    if (i > 0 && (t & 31) == 0)
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                   :: "r"(kk_mma_smem_u32(&empty[(i - 1) % S])) : "memory");
  }
  kk_wgmma_wait<0>();
  kk_wg_pin(acc);
}

// The TMA producer (WS = 2), one thread: stage i waits on ``empty`` until the consumers are
// done with stage i - S, then its KB sub-tiles of x's XR rows and w's BN rows come as tensor
// copies (the maps' boxes: 64 elements x XR or BN rows, 128-byte swizzle, zeros past M, N
// and K) counted into ``full`` by their bytes. XR = BM, or M rounded up to 8 where M < BM:
// the rows of A past it are never written, and the wgmmas' rows past M are never stored.
template <int BM, int BN, int KB, int S>
__device__ __forceinline__ void kk_wg_tma_produce(unsigned base, unsigned long long (&full)[S],
                                                  unsigned long long (&empty)[S],
                                                  const kk_tensor_map* xm,
                                                  const kk_tensor_map* wm, const kk_wg_tile& tl,
                                                  int xr) {
  constexpr unsigned SUB = (BM + BN) * 128u, STAGE = KB * SUB;
  const unsigned bytes = KB * (unsigned)(xr + BN) * 128u;
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(xm) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(wm) : "memory");
  for (int i = 0; i < tl.kts; ++i) {
    const int s = i % S;
    if (i >= S) kk_bulk_wait(kk_mma_smem_u32(&empty[s]), (unsigned)(i / S + 1) & 1u);
    const unsigned bar = kk_mma_smem_u32(&full[s]), stage = base + s * STAGE;
    kk_bulk_expect(bar, bytes);
#pragma unroll
    for (int h = 0; h < KB; ++h) {
      const int k = ((tl.kt0 + i) * KB + h) * 64;
      kk_tma_2d(stage + h * SUB, xm, k, (int)tl.m0, bar);
      kk_tma_2d(stage + h * SUB + BM * 128u, wm, k, (int)tl.n0, bar);
    }
  }
}

// WS = 0: every thread copies; S - 2 stages are in flight while the tensor cores take one and
// the one before it may still be read by an unfinished wgmma; one block barrier a stage.
// WS = 1: warp-specialized. Warpgroup WG (the last) only copies: stage i waits on `empty` until
// the consumers are done with stage i - S, and each producer thread's copies of the stage are
// counted into `full` when they land (cp.async.mbarrier.arrive: no thread waits for them). The
// WG consumer warpgroups wait on `full`, run the stage's wgmmas, and release the stage before
// (its wgmmas done) into `empty`: no barrier holds the whole block until the epilogue.
template <class T, class TB, class TY, int WG, int BN, int KB, int S, int SPLIT, int WS, int ACT,
          bool HAS_BIAS>
__device__ __forceinline__ void kk_wgmma_gemm(const T* x, const T* w, const kk_tensor_map* xm,
                                              const kk_tensor_map* wm, const TB* bias, TY* y,
                                              long long M, long long N, long long K) {
#if KK_HAS_WGMMA
  constexpr int BM = 64 * WG, ACC = BN / 2, CONSUMERS = 128 * WG;
  constexpr int THREADS = CONSUMERS + (WS == 2 ? 32 : 128 * WS);
  constexpr unsigned STAGE = KB * (BM + BN) * 128u;
  static_assert(S >= 3 && WS >= 0 && WS <= 2, "the config rules");
  extern __shared__ __align__(1024) unsigned char kk_wg_smem[];
  __shared__ unsigned long long full[S], empty[S];  // WS = 1, 2 only
  const unsigned raw = kk_mma_smem_u32(kk_wg_smem), base = (raw + 1023u) & ~1023u;
  float* red = reinterpret_cast<float*>(kk_wg_smem + (base - raw));  // the ring, reused
  const int t = threadIdx.x, wg = t >> 7;
  const kk_wg_tile tl = kk_wg_tile_of<BM, BN, KB, SPLIT>(M, N, K);
  float acc[ACC];
#pragma unroll
  for (int j = 0; j < ACC; ++j) acc[j] = 0.0f;
  if constexpr (WS == 0) {
    auto load = [&](int i) {  // k tile kt0 + i into stage i % S; always a commit group
      if (i < tl.kts)
        kk_wg_copy_stage<T, BM, BN, KB, THREADS>(base + (i % S) * STAGE, t, x, w, tl,
                                                 tl.kt0 + i, M, N, K);
      kk_mma_commit();
    };
    for (int i = 0; i < S - 2; ++i) load(i);
    for (int i = 0; i < tl.kts; ++i) {
      kk_mma_wait<S - 3>();  // this thread's copies of stage i are in
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // seen by the tensor cores
      __syncthreads();  // every copy of stage i is in; every wgmma of stage i - 2 is done
      load(i + S - 2);  // into stage (i - 2) % S
      kk_wg_pin(acc);
      kk_wgmma_fence();
      kk_wg_mma_stage<T, BM, BN, KB>(acc, base + (i % S) * STAGE, wg);
      kk_wgmma_commit();
      kk_wg_pin(acc);
      kk_wgmma_wait<1>();  // stage i - 1's wgmma is done
    }
    kk_wgmma_wait<0>();
    kk_wg_pin(acc);
    kk_mma_wait<0>();  // no copy into the ring is left (the last groups are empty)
  } else if constexpr (WS == 1) {
    if (t == 0) {
      for (int s = 0; s < S; ++s) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n"  // the producer threads
                     :: "r"(kk_mma_smem_u32(&full[s])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"  // the consumer warps
                     :: "r"(kk_mma_smem_u32(&empty[s])), "n"(4 * WG));
      }
    }
    __syncthreads();
    if (wg == WG) {  // the producer warpgroup
      const unsigned long long rows_ok = kk_wg_rows_ok<BM, BN, KB>(t - CONSUMERS, tl, M, N);
      for (int i = 0; i < tl.kts; ++i) {
        const int s = i % S;
        if (i >= S) kk_bulk_wait(kk_mma_smem_u32(&empty[s]), (unsigned)(i / S + 1) & 1u);
        kk_wg_produce<T, BM, BN, KB>(base + s * STAGE, t - CONSUMERS, x, w, tl, tl.kt0 + i,
                                     rows_ok, K);
        // counted into `full` by the copy engine once this thread's copies so far have landed
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n"
                     :: "r"(kk_mma_smem_u32(&full[s])) : "memory");
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
      kk_wg_consume<T, BM, BN, KB, S, true>(acc, base, full, empty, tl.kts, wg, t);
    }
  } else {  // WS = 2: one warp's thread 0 issues the stages' tensor copies
    if (t == 0) {
      for (int s = 0; s < S; ++s) {
        kk_bulk_init(kk_mma_smem_u32(&full[s]));  // the producer's arrive.expect_tx
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"  // the consumer warps
                     :: "r"(kk_mma_smem_u32(&empty[s])), "n"(4 * WG));
      }
      kk_bulk_init_fence();
    }
    __syncthreads();
    if (t == CONSUMERS)
      kk_wg_tma_produce<BM, BN, KB, S>(base, full, empty, xm, wm, tl,
                                       M < BM ? (int)((M + 7) / 8 * 8) : BM);
    else if (wg < WG)
      kk_wg_consume<T, BM, BN, KB, S, false>(acc, base, full, empty, tl.kts, wg, t);
  }
  __syncthreads();  // every warpgroup is done with the ring: red takes its place
  kk_wg_epilogue<TB, TY, WG, BN, SPLIT, THREADS, ACT, HAS_BIAS>(acc, red, t, tl, bias, y, M, N);
#else
  __trap();  // sm_90a only (the match rule): wgmma is an arch-specific instruction
#endif
}
"""

# The header: the shared epilogue, cp.async helpers, cluster helpers, wgmma, the kernel.
WGMMA = EPILOGUE + MMA_PTX + BULK_PTX + CLUSTER_PTX + WGMMA_PTX + WGMMA_COPIES + WGMMA_KERNEL

WGMMA_BODY = r"""
const long long M = x_shape[0];  // x is 2-D (a batch is flattened first)
const long long K = x_shape[1];
const long long N = w_shape[0];
kk_wgmma_gemm<T, TB, TY, WG, BN, KB, S, SPLIT, WS, ACT, HAS_BIAS>(x, w, nullptr, nullptr, bias, y,
                                                                  M, N, K);
"""

# WS = 2: x and w also come as tensor maps (kernelkit.tensor_map, made by the op per call).
WGMMA_TMA_BODY = r"""
const long long M = x_shape[0];
const long long K = x_shape[1];
const long long N = w_shape[0];
kk_wgmma_gemm<T, TB, TY, WG, BN, KB, S, SPLIT, WS, ACT, HAS_BIAS>(x, w, &x_map, &w_map, bias, y, M,
                                                                  N, K);
"""
