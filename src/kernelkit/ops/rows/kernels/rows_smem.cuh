// Row kernels that read x from DRAM once whatever the row's length (softmax, rms_norm,
// layer_norm): each block keeps its slice of a row in shared memory while it takes the slice's
// statistics, and writes the output from there. A row longer than one block's shared memory is
// split over a thread-block cluster of CL blocks (sm_90): block `rank` takes elements
// [rank S, (rank + 1) S) (S = the slice, whole 16-byte vectors) and the blocks' statistics are
// combined through distributed shared memory in the same order in every block (rank order, or
// a butterfly over a warp's lanes for layer_norm at CL >= 8), so every block (and every run)
// computes the same row statistics.
//
// Needs (from the row header before it): kk_pack, kk_words, kk_get/kk_set, kk_block_reduce,
// kk_exp2, kk_max_nan, kk_softmax_merge, kk_softmax_reduce, KK_L2E.
// Template values: T (x, y), W (weight, bias), OP (0 softmax, 1 rms_norm, 2 layer_norm), BLOCK
// (threads, a multiple of 32), CL (blocks a row), VECTOR (n % VEC == 0 and every pointer
// 16-byte aligned: 16-byte loads and stores; else element by element).
// Dynamic shared memory: S * sizeof(T) bytes, S = kk_long_slice<T>(n, CL).

#define KK_LONG_UNROLL 4  // vectors a thread has in flight while loading: 4 x 16 B per thread

template <class T>
__host__ __device__ __forceinline__ long long kk_long_slice(long long n, int cl) {
  constexpr int VEC = kk_pack<T>::N;
  const long long per = (n + cl - 1) / cl;
  return (per + VEC - 1) / VEC * VEC;
}

// The cluster's blocks: rank, barrier, and a float of another block's shared memory. With
// CL = 1 they cost nothing; CL > 1 needs sm_90 (the match rule) or a CPU backend that emulates
// clusters (KK_CPU_CLUSTERS).
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900) || defined(KK_CPU_CLUSTERS)
#define KK_LONG_HAS_CLUSTERS 1
#endif

template <int CL>
__device__ __forceinline__ unsigned kk_long_rank() {
#ifdef KK_LONG_HAS_CLUSTERS
  if (CL > 1) return cg::this_cluster().block_rank();
#endif
  return 0;
}

template <int CL>
__device__ __forceinline__ void kk_long_cluster_sync() {
#ifdef KK_LONG_HAS_CLUSTERS
  if (CL > 1) cg::this_cluster().sync();
#else
  if (CL > 1) __trap();  // no clusters below sm_90: the match rule never sends CL > 1 here
#endif
}

template <int CL>
__device__ __forceinline__ const float* kk_long_peer(float* p, unsigned rank) {
#ifdef KK_LONG_HAS_CLUSTERS
  if (CL > 1) return cg::this_cluster().map_shared_rank(p, rank);
#endif
  return p;
}

// One thread's running statistics of its elements: softmax (max a, sum of exp(x - a) b);
// rms_norm (sum of squares a); layer_norm (sum of x - sh a, then of squared deviations b).
template <int OP>
__device__ __forceinline__ void kk_long_take(float& a, float& b, float v, float sh) {
  if (OP == 0) {
    if (v != -INFINITY) kk_softmax_merge(a, b, v, 1.0f);
  } else if (OP == 1) {
    a = fmaf(v, v, a);
  } else {
    a += v - sh;
  }
}

// A vector's worth: softmax takes the vector's max first (one rescale a vector, not one an
// element).
template <class T, int OP>
__device__ __forceinline__ void kk_long_take_vec(float& a, float& b, const kk_words& v, float sh) {
  constexpr int VEC = kk_pack<T>::N;
  if (OP == 0) {
    float mv = kk_get<T>(v, 0);
    for (int j = 1; j < VEC; ++j) mv = kk_max_nan(mv, kk_get<T>(v, j));
    if (mv == -INFINITY) return;  // nothing but -inf: adds nothing
    float sv = 0.0f;
    for (int j = 0; j < VEC; ++j) sv += kk_exp2((kk_get<T>(v, j) - mv) * KK_L2E);
    kk_softmax_merge(a, b, mv, sv);
  } else {
    float s = 0.0f;
    for (int j = 0; j < VEC; ++j) {
      const float e = kk_get<T>(v, j);
      s += OP == 1 ? e * e : e - sh;
    }
    a += s;
  }
}

// Phase 1: x[lo, lo + m) of the row -> shared memory `s`, with each thread's statistics.
template <class T, int OP, int BLOCK, bool VECTOR>
__device__ __forceinline__ void kk_long_load(const T* xs, T* s, long long m, float sh, float& a,
                                             float& b) {
  constexpr int VEC = kk_pack<T>::N, U = KK_LONG_UNROLL;
  const int t = threadIdx.x;
  if (VECTOR) {
    const int nv = (int)(m / VEC);  // m % VEC == 0 on this path
    const kk_words* src = reinterpret_cast<const kk_words*>(xs);
    kk_words* dst = reinterpret_cast<kk_words*>(s);
    for (int base = 0; base < nv; base += BLOCK * U) {
      kk_words v[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // every load issued before the first is used
        const int i = base + u * BLOCK + t;
        if (i < nv) v[u] = src[i];
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * BLOCK + t;
        if (i < nv) {
          dst[i] = v[u];
          kk_long_take_vec<T, OP>(a, b, v[u], sh);
        }
      }
    }
  } else {
    for (long long e = t; e < m; e += BLOCK) {
      const T v = xs[e];
      s[e] = v;
      kk_long_take<OP>(a, b, (float)v, sh);
    }
  }
}

// layer_norm's statistics from a cluster of 8 or more blocks: every warp on its own, lane r < CL
// reading block r's (count, mean, squared deviations) (the other lanes a count of 0), then sums
// over the 32 lanes by a butterfly. Each step adds a pair of lanes in either order, which gives
// the same bits, so every lane, warp and block (and every run) computes the same statistics.
// kk_long_combine's arrays took 48 (CL = 8) to 84 (CL = 16) registers a thread here (H200,
// NVRTC 13.0): two blocks of 512 an SM at CL = 8 and one at CL = 16 where three fit the shared
// memory, 1.08x slower at 64 x 262144 bfloat16. (CL <= 16: the butterfly's first step pairs
// lane i with lane i + 16, which holds zeros, so a fused multiply-add there changes no lane's bits
// against another's.) (Softmax and rms_norm keep the arrays: this form took them from 32-40 registers to
// 40-48 and rms_norm measured up to 1.12x slower.)
template <int CL>
__device__ __forceinline__ void kk_long_combine_lanes(float* st, long long n, float eps,
                                                      float& p0, float& p1) {
  const int lane = threadIdx.x & 31;
  float c = 0.0f, mu = 0.0f, q = 0.0f;
  if (lane < CL) {
    const float* peer = kk_long_peer<CL>(st, (unsigned)lane);
    c = peer[0];
    mu = peer[1];
    q = peer[2];
  }
  const float mean = kk_warp_sum(c * mu) / (float)n;
  const float d = mu - mean;
  p0 = mean;
  p1 = rsqrtf(kk_warp_sum(q + c * d * d) / (float)n + eps);
}

// The row's statistics from the cluster's blocks (each block's in `st`, rank order): softmax
// (max, 1 / sum); rms_norm (0, rstd); layer_norm (mean of x - sh, rstd), combined as Chan et al.
// combine partial means and sums of squared deviations (layer_norm over 8 or more blocks: the
// lanes of each warp, kk_long_combine_lanes).
template <int OP, int CL>
__device__ __forceinline__ void kk_long_combine(float* st, long long n, float eps, float& p0,
                                                float& p1) {
  if constexpr (OP == 2 && CL >= 8) {
    kk_long_combine_lanes<CL>(st, n, eps, p0, p1);
  } else {
    float a = OP == 0 ? -INFINITY : 0.0f, b = 0.0f, c[CL], mu[CL], q[CL];
#pragma unroll
    for (int r = 0; r < CL; ++r) {  // every remote load issued at once
      const float* peer = kk_long_peer<CL>(st, (unsigned)r);
      c[r] = peer[0];
      mu[r] = peer[1];
      q[r] = peer[2];
    }
    if (OP == 0) {
      for (int r = 0; r < CL; ++r) kk_softmax_merge(a, b, mu[r], q[r]);
      if (a == INFINITY) a = NAN;  // exp(inf - inf): torch gives the row NaN
      p0 = a;
      p1 = 1.0f / b;  // a row of nothing but -inf: exp(NaN) * inf, NaN as in torch
    } else if (OP == 1) {
      for (int r = 0; r < CL; ++r) a += q[r];
      p0 = 0.0f;
      p1 = rsqrtf(a / (float)n + eps);
    } else {
      for (int r = 0; r < CL; ++r) a += c[r] * mu[r];
      const float mean = a / (float)n;
      for (int r = 0; r < CL; ++r) {
        const float d = mu[r] - mean;
        b += q[r] + c[r] * d * d;
      }
      p0 = mean;
      p1 = rsqrtf(b / (float)n + eps);
    }
  }
}

template <class T, class W, int OP>
__device__ __forceinline__ float kk_long_out(float v, float sh, float p0, float p1, const W* w,
                                             const W* b, long long e) {
  if (OP == 0) return kk_exp2((v - p0) * KK_L2E) * p1;
  if (OP == 1) return v * p1 * (float)w[e];
  return (v - sh - p0) * p1 * (float)w[e] + (float)b[e];
}

// Phase 2: y[lo, lo + m) from shared memory. Weights (and bias) in vectors (kk_wvec: of any
// width), two vectors' worth loaded before the first store where they have T's width (a store
// may alias a weight as far as the compiler knows, so it does not move a load above one: one L2
// read in flight otherwise). layer_norm in 16 bits keeps one: two, with the bias, take 56
// registers a thread against 32-40 (two blocks of 512 an SM instead of three), which measured
// slower there on an H100 (1-7%) and faster in float32 (2-8%); so does a weight wider than x.
template <class T, class W, int OP, int BLOCK, bool VECTOR>
__device__ __forceinline__ void kk_long_store(const T* s, T* ys, long long m, float sh, float p0,
                                              float p1, const W* w, const W* b) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr bool WVEC = VECTOR && OP != 0;
  constexpr int U = WVEC && sizeof(W) == sizeof(T) && (OP == 1 || sizeof(T) == 4) ? 2 : 1;
  const int t = threadIdx.x;
  if (VECTOR) {
    const int nv = (int)(m / VEC);
    const kk_words* src = reinterpret_cast<const kk_words*>(s);
    kk_words* dst = reinterpret_cast<kk_words*>(ys);
#pragma unroll 2
    for (int base = t; base < nv; base += BLOCK * U) {
      kk_words v[U];
      kk_wvec<T, W> wv[U], bv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // every load issued before the first store
        const int i = base + u * BLOCK;
        if (i < nv) {
          v[u] = src[i];
          if (WVEC) kk_wload(wv[u], w, i);
          if (WVEC && OP == 2) kk_wload(bv[u], b, i);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int i = base + u * BLOCK;
        if (i >= nv) break;
        for (int j = 0; j < VEC; ++j) {
          const float e = kk_get<T>(v[u], j);
          float o;
          if (WVEC) {
            o = OP == 1 ? e * p1 * kk_wget(wv[u], j)
                        : (e - sh - p0) * p1 * kk_wget(wv[u], j) + kk_wget(bv[u], j);
          } else {
            o = kk_long_out<T, W, OP>(e, sh, p0, p1, w, b, (long long)i * VEC + j);
          }
          kk_set<T>(v[u], j, o);
        }
        dst[i] = v[u];
      }
    }
  } else {
    for (long long e = t; e < m; e += BLOCK)
      ys[e] = T(kk_long_out<T, W, OP>((float)s[e], sh, p0, p1, w, b, e));
  }
}

// One block's part of row r: its slice [lo, lo + m) of x's row `xr` in, y out. `w`, `b`: the
// whole weight and bias (null for softmax).
template <class T, class W, int OP, int BLOCK, int CL, bool VECTOR>
__device__ __forceinline__ void kk_long_row(const T* xr, T* y, const W* w, const W* b, float eps,
                                            long long r, long long n) {
  extern __shared__ __align__(16) unsigned char kk_long_smem[];
  __shared__ float red[64];
  __shared__ float st[3];  // this block's (count, first, second) statistics for the cluster
  T* s = reinterpret_cast<T*>(kk_long_smem);
  const unsigned rank = kk_long_rank<CL>();
  const long long slice = kk_long_slice<T>(n, CL), lo = (long long)rank * slice;
  const long long m = lo >= n ? 0 : (n - lo < slice ? n - lo : slice);
  // layer_norm takes its statistics of x - x[0]: a constant row's deviations are exact zeros
  // (its output is the bias, as in torch), and a large mean loses no digits
  const float sh = OP == 2 ? (float)xr[0] : 0.0f;
  float a = OP == 0 ? -INFINITY : 0.0f, bb = 0.0f;
  kk_long_load<T, OP, BLOCK, VECTOR>(xr + lo, s, m, sh, a, bb);
  float mine0 = 0.0f, mine1 = 0.0f;  // this block's (first, second)
  if (OP == 0) {
    kk_softmax_reduce<BLOCK>(a, bb, red);
    mine0 = a, mine1 = bb;
  } else if (OP == 1) {
    mine1 = kk_block_reduce<BLOCK, false>(a, red);
  } else {
    // the slice's mean, then its squared deviations around it from shared memory: each thread
    // reads back what it wrote (no barrier needed, whatever BLOCK is)
    const float mean = m ? kk_block_reduce<BLOCK, false>(a, red) / (float)m : 0.0f;
    float q = 0.0f;
    if (VECTOR) {
      constexpr int VEC = kk_pack<T>::N;
      const kk_words* sv = reinterpret_cast<const kk_words*>(s);
      for (int i = threadIdx.x; i < (int)(m / VEC); i += BLOCK) {
        const kk_words v = sv[i];
        for (int j = 0; j < VEC; ++j) {
          const float d = kk_get<T>(v, j) - sh - mean;
          q = fmaf(d, d, q);
        }
      }
    } else {
      for (long long e = threadIdx.x; e < m; e += BLOCK) {
        const float d = (float)s[e] - sh - mean;
        q = fmaf(d, d, q);
      }
    }
    mine0 = mean;
    mine1 = kk_block_reduce<BLOCK, false>(q, red + 32);
  }
  if (threadIdx.x == 0) st[0] = (float)m, st[1] = mine0, st[2] = mine1;
  if (CL > 1) kk_long_cluster_sync<CL>();  // every block's st (and its slice) is complete
  else __syncthreads();
  float p0, p1;
  kk_long_combine<OP, CL>(st, n, eps, p0, p1);
  kk_long_store<T, W, OP, BLOCK, VECTOR>(s, y + r * n + lo, m, sh, p0, p1,
                                         OP == 0 ? w : w + lo, OP == 2 ? b + lo : b);
  kk_long_cluster_sync<CL>();  // no block leaves while another may still read its st
}
