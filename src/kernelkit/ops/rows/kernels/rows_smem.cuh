// Row kernels that read x from DRAM once whatever the row's length (softmax, rms_norm,
// layer_norm): each block keeps its slice of a row in shared memory while it takes the slice's
// statistics, and writes the output from there. A row longer than one block's shared memory is
// split over a thread-block cluster of CL blocks (sm_90): block `rank` takes elements
// [rank S, (rank + 1) S) (S = the slice, whole 16-byte vectors) and the blocks' statistics are
// combined through distributed shared memory, in rank order, so every block (and every run)
// computes the same row statistics. A cluster may take several rows (the grid has fewer
// clusters than rows: one wave of them, say): while it stores one row's output from shared
// memory it loads the next row's slice into the same places, so that reads and writes of DRAM
// overlap on every SM instead of alternating wave by wave.
//
// Needs (from the row header before it): kk_pack, kk_words, kk_get/kk_set, kk_block_reduce,
// kk_exp2, kk_max_nan, kk_softmax_merge, kk_softmax_reduce, KK_L2E.
// Template values: T (x, y), W (weight, bias), OP (0 softmax, 1 rms_norm, 2 layer_norm), BLOCK
// (threads, a multiple of 32), CL (blocks a row, a cluster), VECTOR (n % VEC == 0 and every pointer
// 16-byte aligned: 16-byte loads and stores; else element by element).
// Dynamic shared memory: S * sizeof(T) bytes, S = kk_long_slice<T>(n, CL).

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

// 16 bytes of x into shared memory: cp.async on sm_80+ (nothing held in registers, every copy
// of a slice in flight at once; kk_long_wait makes them visible to the thread that issued
// them), a plain copy elsewhere (older GPUs, the CPU backend).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KK_LONG_ASYNC 1
#endif

__device__ __forceinline__ void kk_long_copy16(kk_words* dst, const kk_words* src) {
#ifdef KK_LONG_ASYNC
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
#else
  *dst = *src;
#endif
}

__device__ __forceinline__ void kk_long_wait() {
#ifdef KK_LONG_ASYNC
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// Every position of a slice belongs to one thread: thread t moves the vectors (elements on the
// scalar path) t, t + BLOCK, t + 2 BLOCK, ... in, takes their statistics, writes their output
// and refills them with the next row's. A thread reads back only what it wrote, so none of
// these phases waits for another thread.

// x[lo, lo + m) of a row -> shared memory `s` (issued; kk_long_wait before reading it).
template <class T, int BLOCK, bool VECTOR>
__device__ __forceinline__ void kk_long_fill(const T* xs, T* s, long long m) {
  constexpr int VEC = kk_pack<T>::N;
  const int t = threadIdx.x;
  if (VECTOR) {
    const int nv = (int)(m / VEC);  // m % VEC == 0 on this path
    const kk_words* src = reinterpret_cast<const kk_words*>(xs);
    kk_words* dst = reinterpret_cast<kk_words*>(s);
    for (int i = t; i < nv; i += BLOCK) kk_long_copy16(dst + i, src + i);
  } else {
    for (long long e = t; e < m; e += BLOCK) s[e] = xs[e];
  }
}

// This thread's statistics of its positions of the slice in `s`.
template <class T, int OP, int BLOCK, bool VECTOR>
__device__ __forceinline__ void kk_long_scan(const T* s, long long m, float sh, float& a,
                                             float& b) {
  constexpr int VEC = kk_pack<T>::N;
  const int t = threadIdx.x;
  if (VECTOR) {
    const int nv = (int)(m / VEC);
    const kk_words* src = reinterpret_cast<const kk_words*>(s);
    #pragma unroll 1
    for (int i = t; i < nv; i += BLOCK) kk_long_take_vec<T, OP>(a, b, src[i], sh);
  } else {
    for (long long e = t; e < m; e += BLOCK) kk_long_take<OP>(a, b, (float)s[e], sh);
  }
}

// The row's statistics from the cluster's blocks (each block's in `st`, rank order): softmax
// (max, 1 / sum); rms_norm (0, rstd); layer_norm (mean of x - sh, rstd), combined as Chan et al.
// combine partial means and sums of squared deviations.
template <int OP, int CL>
__device__ __forceinline__ void kk_long_combine(float* st, long long n, float eps, float& p0,
                                                float& p1) {
  // one block's statistics at a time (a few remote loads a row: registers matter more here,
  // they are live across the whole loop over a cluster's rows)
  float a = OP == 0 ? -INFINITY : 0.0f, b = 0.0f;
  for (int r = 0; r < CL; ++r) {
    const float* peer = kk_long_peer<CL>(st, (unsigned)r);
    if (OP == 0) kk_softmax_merge(a, b, peer[1], peer[2]);
    else if (OP == 1) a += peer[2];
    else a += peer[0] * peer[1];
  }
  if (OP == 0) {
    if (a == INFINITY) a = NAN;  // exp(inf - inf): torch gives the row NaN
    p0 = a;
    p1 = 1.0f / b;  // a row of nothing but -inf: exp(NaN) * inf, NaN as in torch
  } else if (OP == 1) {
    p0 = 0.0f;
    p1 = rsqrtf(a / (float)n + eps);
  } else {
    const float mean = a / (float)n;
    for (int r = 0; r < CL; ++r) {
      const float* peer = kk_long_peer<CL>(st, (unsigned)r);
      const float d = peer[1] - mean;
      b += peer[2] + peer[0] * d * d;
    }
    p0 = mean;
    p1 = rsqrtf(b / (float)n + eps);
  }
}

template <class T, class W, int OP>
__device__ __forceinline__ float kk_long_out(float v, float sh, float p0, float p1, const W* w,
                                             const W* b, long long e) {
  if (OP == 0) return kk_exp2((v - p0) * KK_L2E) * p1;
  if (OP == 1) return v * p1 * (float)w[e];
  return (v - sh - p0) * p1 * (float)w[e] + (float)b[e];
}

// y[lo, lo + m) from shared memory; then, where `xn` (the next row's slice) is not null, each
// position refilled from it, so that the next row's loads overlap this row's stores. Weights
// (and bias) of T's width move in vectors, U vectors' worth loaded before the first is used.
template <class T, class W, int OP, int BLOCK, bool VECTOR>
__device__ __forceinline__ void kk_long_store(T* s, T* ys, long long m, float sh, float p0,
                                              float p1, const W* w, const W* b, const T* xn) {
  // U vectors a step (one with a bias): at most 40 registers a thread with a cluster a row (three
  // blocks of 512 threads an SM), 56 with the loop over rows
  constexpr int VEC = kk_pack<T>::N, U = OP == 2 ? 1 : 2;
  constexpr bool WVEC = VECTOR && OP != 0 && sizeof(W) == sizeof(T);
  const int t = threadIdx.x;
  if (VECTOR) {
    const int nv = (int)(m / VEC);
    kk_words* sv = reinterpret_cast<kk_words*>(s);
    kk_words* dst = reinterpret_cast<kk_words*>(ys);
    const kk_words* wv = reinterpret_cast<const kk_words*>(w);
    const kk_words* bv = reinterpret_cast<const kk_words*>(b);
    const kk_words* nx = reinterpret_cast<const kk_words*>(xn);
    for (int base = t; base < nv; base += BLOCK * U) {
      kk_words v[U], wu[U], bu[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {  // every load issued before the first is used
        const int i = base + u * BLOCK;
        if (i < nv) {
          v[u] = sv[i];
          if (WVEC) wu[u] = wv[i];
          if (WVEC && OP == 2) bu[u] = bv[i];
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
            o = OP == 1 ? e * p1 * kk_get<W>(wu[u], j)
                        : (e - sh - p0) * p1 * kk_get<W>(wu[u], j) + kk_get<W>(bu[u], j);
          } else {
            o = kk_long_out<T, W, OP>(e, sh, p0, p1, w, b, (long long)i * VEC + j);
          }
          kk_set<T>(v[u], j, o);
        }
        dst[i] = v[u];
        if (xn) kk_long_copy16(sv + i, nx + i);  // after the store that used this position
      }
    }
  } else {
    for (long long e = t; e < m; e += BLOCK) {
      ys[e] = T(kk_long_out<T, W, OP>((float)s[e], sh, p0, p1, w, b, e));
      if (xn) s[e] = xn[e];
    }
  }
}

// One block's part of its cluster's rows r0, r0 + G, r0 + 2G, ... below `rows` (r0: the
// cluster's index, G: the grid's clusters): its slice [lo, lo + m) of x in, y out, the next
// row's slice loaded while this one's output is stored. `w`, `b`: the whole weight and bias
// (null for softmax).
template <class T, class W, int OP, int BLOCK, int CL, bool LOOP, bool VECTOR>
__device__ __forceinline__ void kk_long_rows(const T* x, T* y, const W* w, const W* b, float eps,
                                             long long rows, long long n) {
  extern __shared__ __align__(16) unsigned char kk_long_smem[];
  __shared__ float red[64];
  // this block's (count, first, second) statistics for the cluster, two rows' worth: a block
  // writes row k + 1's after the barrier of row k, which every block passes only after reading
  // row k - 1's, so one barrier a row keeps them apart
  __shared__ float st[2][3];
  T* s = reinterpret_cast<T*>(kk_long_smem);
  const unsigned rank = kk_long_rank<CL>();
  const long long slice = kk_long_slice<T>(n, CL), lo = (long long)rank * slice;
  const long long m = lo >= n ? 0 : (n - lo < slice ? n - lo : slice);
  // the rows move by pointer (fewer registers live across the loop than row numbers would take)
  const long long stride = (long long)(gridDim.x / CL) * n;  // one of the cluster's rows to its next
  const T* const end = x + rows * n;
  const T* xr = x + (long long)(blockIdx.x / CL) * n;
  T* yr = y + (xr - x) + lo;
  const W* const ws = OP == 0 ? w : w + lo;
  const W* const bs = OP == 2 ? b + lo : b;
  if (xr < end) kk_long_fill<T, BLOCK, VECTOR>(xr + lo, s, m);
  for (int k = 0; xr < end; ++k, xr += stride, yr += stride) {
    kk_long_wait();
    // layer_norm takes its statistics of x - x[0]: a constant row's deviations are exact zeros
    // (its output is the bias, as in torch), and a large mean loses no digits
    const float sh = OP == 2 ? (float)xr[0] : 0.0f;
    float a = OP == 0 ? -INFINITY : 0.0f, bb = 0.0f;
    kk_long_scan<T, OP, BLOCK, VECTOR>(s, m, sh, a, bb);
    float mine0 = 0.0f, mine1 = 0.0f;  // this block's (first, second)
    if (OP == 0) {
      kk_softmax_reduce<BLOCK>(a, bb, red);
      mine0 = a, mine1 = bb;
    } else if (OP == 1) {
      mine1 = kk_block_reduce<BLOCK, false>(a, red);
    } else {
      // the slice's mean, then its squared deviations around it from shared memory
      const float mean = m ? kk_block_reduce<BLOCK, false>(a, red) / (float)m : 0.0f;
      float q = 0.0f;
      if (VECTOR) {
        constexpr int VEC = kk_pack<T>::N;
        const kk_words* sv = reinterpret_cast<const kk_words*>(s);
        #pragma unroll 1
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
    float* sk = st[k & 1];
    if (threadIdx.x == 0) sk[0] = (float)m, sk[1] = mine0, sk[2] = mine1;
    if (CL > 1) kk_long_cluster_sync<CL>();  // every block's statistics of row r are complete
    else __syncthreads();
    float p0, p1;
    kk_long_combine<OP, CL>(sk, n, eps, p0, p1);
    const T* xn = LOOP && end - xr > stride ? xr + stride + lo : nullptr;  // the next row
    kk_long_store<T, W, OP, BLOCK, VECTOR>(s, yr, m, sh, p0, p1, ws, bs, xn);
    if (!LOOP) break;  // a cluster a row (the grid's): none of the loop's registers
  }
  kk_long_cluster_sync<CL>();  // no block leaves while another may still read its statistics
}
