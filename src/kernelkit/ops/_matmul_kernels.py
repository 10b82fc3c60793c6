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

_CUDA_ARCH = re.compile(r"(?:sm|compute)_(\d+)[af]?")


def cuda_cc(arch: str) -> int | None:
    """The compute capability in a CUDA target's arch (``sm_90a`` -> 90), None for other
    backends' archs (the tensor-core kernels' match rules ask it first)."""
    found = _CUDA_ARCH.fullmatch(arch)
    return int(found[1]) if found else None


# Epilogue shared by both kernels: bias (per column) and activation, in float.
EPILOGUE = r"""
template <int ACT>
__device__ __forceinline__ float kk_mm_act(float v) {
  if (ACT == 1) return fmaxf(v, 0.0f);                                   // relu
  if (ACT == 2) return v / (1.0f + expf(-v));                            // silu
  if (ACT == 3) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));  // gelu
  return v;
}
"""

GEMV = (
    EPILOGUE
    + r"""
template <class T> struct kk_mm_pack { static constexpr int N = 16 / sizeof(T); };
template <class T> struct alignas(16) kk_mm_vec { T v[kk_mm_pack<T>::N]; };

// y[m, n] for m < M, n in [n0, n0 + ROWS): warp `warp` takes K elements [k0, k1).
template <class T, class TB, class TY, int M, int ROWS, int WARPS, int U, int ACT,
          bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv(const T* x, const T* w, const TB* bias, TY* y,
                                        long long N, long long K) {
  constexpr int VEC = kk_mm_pack<T>::N;
  __shared__ float part[WARPS][ROWS * M];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long n0 = (long long)blockIdx.x * ROWS;
  const long long chunks = K / VEC;  // K % VEC == 0 (the match rule)
  const long long per_warp = (chunks + WARPS - 1) / WARPS;
  const long long c0 = warp * per_warp;
  const long long c1 = c0 + per_warp < chunks ? c0 + per_warp : chunks;
  float acc[ROWS][M];
  for (int r = 0; r < ROWS; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = 0.0f;
  // 16-byte loads need 16-byte aligned rows (K % VEC == 0 is the match rule; a view may start
  // anywhere): element-by-element loads otherwise (uniform per launch). Each lane first issues
  // the weight loads of U chunks (ROWS x U x 16 bytes in flight), then uses them.
  const bool vector = (((unsigned long long)x | (unsigned long long)w) & 15ull) == 0;
  for (long long c = c0 + lane; c < c1; c += 32 * U) {
    kk_mm_vec<T> wv[U][ROWS];
    for (int u = 0; u < U; ++u) {
      const long long cu = c + 32 * u < c1 ? c + 32 * u : c;  // a repeated chunk is not used
      for (int r = 0; r < ROWS; ++r) {
        const long long n = n0 + r < N ? n0 + r : N - 1;  // a clamped row is computed, not stored
        const T* src = w + n * K + cu * VEC;
        if (vector) {
          wv[u][r] = *reinterpret_cast<const kk_mm_vec<T>*>(src);
        } else {
          for (int j = 0; j < VEC; ++j) wv[u][r].v[j] = src[j];
        }
      }
    }
    for (int u = 0; u < U; ++u) {
      if (c + 32 * u >= c1) break;
      const long long k = (c + 32 * u) * VEC;
      for (int m = 0; m < M; ++m) {
        float xf[VEC];
        const T* xs = x + (long long)m * K + k;
        if (vector) {
          const kk_mm_vec<T> xv = *reinterpret_cast<const kk_mm_vec<T>*>(xs);
          for (int j = 0; j < VEC; ++j) xf[j] = (float)xv.v[j];
        } else {
          for (int j = 0; j < VEC; ++j) xf[j] = (float)xs[j];
        }
        for (int r = 0; r < ROWS; ++r)
          for (int j = 0; j < VEC; ++j) acc[r][m] += xf[j] * (float)wv[u][r].v[j];
      }
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int m = 0; m < M; ++m) {
      float v = acc[r][m];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0) part[warp][r * M + m] = v;
    }
  __syncthreads();
  for (int i = threadIdx.x; i < ROWS * M; i += blockDim.x) {
    const int r = i / M, m = i % M;
    const long long n = n0 + r;
    if (n >= N) continue;
    float v = 0.0f;
    for (int q = 0; q < WARPS; ++q) v += part[q][i];  // fixed order: deterministic
    if (HAS_BIAS) v += (float)bias[n];
    y[(long long)m * N + n] = TY(kk_mm_act<ACT>(v));
  }
}
"""
)

GEMV_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long N = w_shape[0];
kk_gemv<T, TB, TY, M, ROWS, WARPS, U, ACT, HAS_BIAS>(x, w, bias, y, N, K);
"""

TILED = (
    EPILOGUE
    + r"""
// One BM x BN tile of y per block of BM/TM x BN/TN threads; each thread a TM x TN sub-tile.
template <class T, class TB, class TY, int BM, int BN, int BK, int TM, int TN, int ACT,
          bool HAS_BIAS, bool W_KN>
__device__ __forceinline__ void kk_tiled(const T* x, const T* w, const TB* bias, TY* y,
                                         long long M, long long N, long long K) {
  __shared__ float xs[BK][BM + 1];
  __shared__ float ws[BK][BN + 1];
  constexpr int TX = BN / TN, TY_ = BM / TM, THREADS = TX * TY_;
  const int tid = threadIdx.x, tx = tid % TX, ty = tid / TX;
  // every tile on grid.x (grid.y holds at most 65535 blocks: M up to 4M rows otherwise), n fastest
  const long long tiles_n = (N + BN - 1) / BN, tile = blockIdx.x;
  const long long m0 = tile / tiles_n * BM, n0 = tile % tiles_n * BN;
  float acc[TM][TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
  for (long long k0 = 0; k0 < K; k0 += BK) {
    for (int i = tid; i < BM * BK; i += THREADS) {
      const int mm = i / BK, kk = i % BK;
      const long long m = m0 + mm, k = k0 + kk;
      xs[kk][mm] = m < M && k < K ? (float)x[m * K + k] : 0.0f;
    }
    for (int i = tid; i < BN * BK; i += THREADS) {
      const int nn = W_KN ? i % BN : i / BK, kk = W_KN ? i / BN : i % BK;
      const long long n = n0 + nn, k = k0 + kk;
      ws[kk][nn] = n < N && k < K ? (float)(W_KN ? w[k * N + n] : w[n * K + k]) : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = xs[kk][ty * TM + i];
      for (int j = 0; j < TN; ++j) b[j] = ws[kk][tx * TN + j];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) {
      const long long m = m0 + ty * TM + i, n = n0 + tx * TN + j;
      if (m < M && n < N) {
        float v = acc[i][j];
        if (HAS_BIAS) v += (float)bias[n];
        y[m * N + n] = TY(kk_mm_act<ACT>(v));
      }
    }
}
"""
)

TILED_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long M = x_shape[0];
const long long N = W_KN ? w_shape[1] : w_shape[0];
kk_tiled<T, TB, TY, BM, BN, BK, TM, TN, ACT, HAS_BIAS, W_KN>(x, w, bias, y, M, N, K);
"""

# The sm_80+ instructions both tensor-core kernels use (gemv_tc and _matmul_mma's tiles), through
# inline PTX; the CPU emulation test of the mma kernel replaces this block.
MMA_PTX = r"""
// sm_80+ instructions through inline PTX (what a CPU emulation of them replaces, see the tests).
// mma.sync m16n8k16, fp32 accumulators, for T = __half (f16) or __nv_bfloat16 (bf16).
template <class T> struct kk_mma_op;
#define KK_MMA_OP(T, PTX_TYPE)                                                             \
  template <> struct kk_mma_op<T> {                                                        \
    static __device__ __forceinline__ void run(float (&c)[4], const unsigned (&a)[4],      \
                                               unsigned b0, unsigned b1) {                 \
      asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 "           \
          "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"             \
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                 \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                 \
    }                                                                                      \
  };
KK_MMA_OP(__half, "f16")
KK_MMA_OP(__nv_bfloat16, "bf16")
#undef KK_MMA_OP

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void kk_mma_cp16(unsigned dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void kk_mma_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void kk_mma_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
// volatile: the same address reads new data after every barrier (never reuse a result)
__device__ __forceinline__ void kk_mma_ldsm(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void kk_mma_ldsm_t(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ unsigned kk_mma_smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);  // the shared window's 32-bit address
}
"""

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
TC_STEP = r"""
// The mma steps of one 32-wide step of K, from the lane's 16-byte words of w (NT) and x (MT).
template <class T, int MT, int NT>
__device__ __forceinline__ void kk_tc_step(float (*acc)[4], const uint4* wv, const uint4* xv) {
  for (int half = 0; half < 2; ++half) {
    unsigned a[4];
    a[0] = half ? xv[0].z : xv[0].x;
    a[2] = half ? xv[0].w : xv[0].y;
    a[1] = MT == 2 ? (half ? xv[MT - 1].z : xv[MT - 1].x) : 0u;
    a[3] = MT == 2 ? (half ? xv[MT - 1].w : xv[MT - 1].y) : 0u;
    for (int j = 0; j < NT; ++j)
      kk_mma_op<T>::run(acc[j], a, half ? wv[j].z : wv[j].x, half ? wv[j].w : wv[j].y);
  }
}
"""

GEMV_TC = (
    EPILOGUE
    + MMA_PTX
    + TC_STEP
    + r"""
// 8 consecutive 16-bit elements as a uint4: one 16-byte load when aligned (uniform per launch).
__device__ __forceinline__ uint4 kk_tc_load(const void* p, bool vector) {
  if (vector) return __ldg(reinterpret_cast<const uint4*>(p));
  const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
  uint4 r;
  r.x = s[0] | ((unsigned)s[1] << 16);
  r.y = s[2] | ((unsigned)s[3] << 16);
  r.z = s[4] | ((unsigned)s[5] << 16);
  r.w = s[6] | ((unsigned)s[7] << 16);
  return r;
}

// cp.async of one lane's 16 bytes into its ring slot (zeros when !live)
__device__ __forceinline__ void kk_tc_fill(uint4* dst, const void* src, bool live) {
  kk_mma_cp16(kk_mma_smem_u32(dst), src, live);
}

template <class T, class TB, class TY, int MT, int NT, int WARPS, int U, int STAGES, int ACT,
          bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_tc(const T* x, const T* w, const TB* bias, TY* y,
                                           long long M, long long N, long long K) {
  __shared__ float part[WARPS][NT][32][4];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const long long n0 = (long long)blockIdx.x * (8 * NT);
  // The warps take the 32-wide steps of K in turn (warp w: steps w, w + WARPS, ...), so at any
  // time a block reads WARPS * 64 contiguous bytes of each of its rows.
  const long long steps = (K + 31) / 32;
  const long long mine = steps > warp ? (steps - warp + WARPS - 1) / WARPS : 0;
  const bool vector = (((unsigned long long)x | (unsigned long long)w) & 15ull) == 0;
  const T* wrow[NT];
  for (int j = 0; j < NT; ++j) {
    const long long n = n0 + 8 * j + g;
    wrow[j] = w + (n < N ? n : N - 1) * K;  // a clamped row is computed, never stored
  }
  const T* xrow[MT];
  bool xlive[MT];
  for (int h = 0; h < MT; ++h) {
    xlive[h] = g + 8 * h < M;
    xrow[h] = x + (xlive[h] ? g + 8 * h : 0) * K;
  }
  float acc[NT][4];
  for (int j = 0; j < NT; ++j)
    for (int v = 0; v < 4; ++v) acc[j][v] = 0.0f;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  if (STAGES > 0 && vector) {
    // A ring of STAGES steps per warp in (dynamic) shared memory, filled by cp.async: the bytes
    // in flight hold no registers. Each lane reads back only what it copied itself, so no
    // barrier is needed; step i + STAGES - 1 is copied into the slot read one step earlier.
    extern __shared__ __align__(16) uint4 kk_tc_ring[];
    constexpr int SLOTS = NT + 2, RING = STAGES >= 2 ? STAGES : 2;
    uint4* ring = kk_tc_ring + (long long)warp * RING * SLOTS * 32 + lane;
    for (long long i = 0; i < mine + RING - 1; ++i) {
      if (i >= RING - 1) {  // consume step i - (RING - 1)
        kk_mma_wait<RING - 2>();  // it has landed (groups 0 .. i - 1 are committed)
        uint4 wv[NT], xv[MT];
        const uint4* slot = ring + ((i - (RING - 1)) % RING) * SLOTS * 32;
        for (int j = 0; j < NT; ++j) wv[j] = slot[j * 32];
        for (int h = 0; h < MT; ++h) xv[h] = slot[(NT + h) * 32];
        kk_tc_step<T, MT, NT>(acc, wv, xv);
      }
      const long long k = (warp + i * WARPS) * 32 + 8 * q;  // fill step i
      const bool live = i < mine && k < K;
      uint4* fill = ring + (i % RING) * SLOTS * 32;
      for (int j = 0; j < NT; ++j) kk_tc_fill(fill + j * 32, live ? wrow[j] + k : w, live);
      for (int h = 0; h < MT; ++h)
        kk_tc_fill(fill + (NT + h) * 32, live && xlive[h] ? xrow[h] + k : x, live && xlive[h]);
      kk_mma_commit();
    }
    kk_mma_wait<0>();
  } else {
    for (long long i = 0; i < mine; i += U) {
      uint4 wv[U][NT], xv[U][MT];
      for (int u = 0; u < U; ++u) {  // every load of U steps first: U * (NT + MT) in flight
        const long long k = (warp + (i + u) * WARPS) * 32 + 8 * q;
        const bool live = i + u < mine && k < K;
        for (int j = 0; j < NT; ++j) wv[u][j] = live ? kk_tc_load(wrow[j] + k, vector) : zero;
        for (int h = 0; h < MT; ++h)
          xv[u][h] = live && xlive[h] ? kk_tc_load(xrow[h] + k, vector) : zero;
      }
      for (int u = 0; u < U; ++u) kk_tc_step<T, MT, NT>(acc, wv[u], xv[u]);
    }
  }
  for (int j = 0; j < NT; ++j)
    for (int v = 0; v < 4; ++v) part[warp][j][lane][v] = acc[j][v];
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 128; i += blockDim.x) {
    const int j = i >> 7, l = (i >> 2) & 31, v = i & 3;
    const long long m = (l >> 2) + (v >= 2 ? 8 : 0);
    const long long n = n0 + 8 * j + 2 * (l & 3) + (v & 1);
    if (m >= M || n >= N) continue;
    float r = 0.0f;
    for (int p = 0; p < WARPS; ++p) r += part[p][j][l][v];  // fixed order: deterministic
    if (HAS_BIAS) r += (float)bias[n];
    y[m * N + n] = TY(kk_mm_act<ACT>(r));
  }
}
"""
)

GEMV_TC_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_tc<T, TB, TY, MT, NT, WARPS, U, STAGES, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
"""
