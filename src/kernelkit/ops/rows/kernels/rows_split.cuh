// Long rows over many blocks, in two kernels (softmax, rms_norm, layer_norm): `stats` reads a
// chunk of a row a block and writes the chunk's statistics; `apply` combines a row's chunk
// statistics, in chunk order (every block and every run gets the same row statistics), and
// writes its chunk of the output. Where x fits in L2 the second read is served from there:
// `stats` loads with an L2 evict-last policy, `apply` loads and stores evict-first (HINT = 1;
// HINT = 0: plain loads and stores), so x's lines outlive the output's; and `apply` takes the
// chunks in reverse order, so it starts with the ones `stats` read last.
//
// A row of n elements is S = ceil(n / CHUNK) chunks, CHUNK = BLOCK * U * VEC elements (U 16-byte
// vectors a thread, held in registers between load and use); block b takes chunk b % S of row
// b / S. Statistics per chunk, three floats: (sh, first, second): softmax (max, sum of
// exp(x - max)); rms_norm (0, sum of squares); layer_norm (mean of x - sh, sum of squared
// deviations from it), sh = the row's first element, as the other row kernels shift (0 for the
// others). `apply` takes sh from there, never from x: with out= x itself, chunk 0's block may
// have written the row's first element already. A chunk's element count follows from its index.
//
// Needs (from the row headers before it): kk_pack, kk_words, kk_get/kk_set, kk_block_reduce,
// kk_softmax_reduce, kk_softmax_merge, kk_warp_sum, kk_exp2, kk_max_nan, KK_L2E, and
// kk_long_take/kk_long_take_vec/kk_long_out (rows_smem.cuh).

#define KK_SPLIT_KEEP 1
#define KK_SPLIT_DROP 2

// 16 bytes of x: plain, kept in L2 (evict_last) or dropped first (evict_first).
template <int HOW>
__device__ __forceinline__ kk_words kk_split_ld(const void* p) {
  kk_words v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (HOW != 0) {
    unsigned long long pol;
    if (HOW == KK_SPLIT_KEEP)
      asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    else
      asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
        : "l"(p), "l"(pol));
    return v;
  }
#endif
  v = *reinterpret_cast<const kk_words*>(p);
  return v;
}

template <int HOW>
__device__ __forceinline__ void kk_split_st(void* p, const kk_words& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (HOW != 0) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(p), "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
    return;
  }
#endif
  *reinterpret_cast<kk_words*>(p) = v;
}

// Thread t's U vectors of the chunk starting at element lo of row xr (n elements). VECTOR: n %
// VEC == 0 and xr 16-byte aligned, so a vector is wholly in the row or wholly past it; else
// element by element. Elements past the row are 0 (never taken: every use checks the index).
template <class T, int BLOCK, int U, bool VECTOR, int HOW>
__device__ __forceinline__ void kk_split_load(const T* xr, long long lo, long long n,
                                              kk_words (&v)[U]) {
  constexpr int VEC = kk_pack<T>::N;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long base = lo + (long long)(u * BLOCK + (int)threadIdx.x) * VEC;
    if (VECTOR) {
      if (base < n) v[u] = kk_split_ld<HOW>(xr + base);
      else v[u] = kk_words{{0u, 0u, 0u, 0u}};
    } else {
      for (int j = 0; j < VEC; ++j) kk_set<T>(v[u], j, base + j < n ? (float)xr[base + j] : 0.0f);
    }
  }
}

// Statistics kernel: this block's chunk -> part[3 (r S + s) ...].
template <class T, int OP, int BLOCK, int U, bool VECTOR, int HINT>
__device__ __forceinline__ void kk_split_stats(const T* xr, float* part, long long n, long long S,
                                               long long r, long long s) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr long long CHUNK = (long long)BLOCK * U * VEC;
  __shared__ float red[64];
  const long long lo = s * CHUNK, m = n - lo < CHUNK ? n - lo : CHUNK;
  kk_words v[U];
  kk_split_load<T, BLOCK, U, VECTOR, HINT ? KK_SPLIT_KEEP : 0>(xr, lo, n, v);
  const float sh = OP == 2 ? (float)xr[0] : 0.0f;
  float a = OP == 0 ? -INFINITY : 0.0f, b = 0.0f;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long base = lo + (long long)(u * BLOCK + (int)threadIdx.x) * VEC;
    if (VECTOR) {
      if (base < n) kk_long_take_vec<T, OP>(a, b, v[u], sh);
    } else {
      for (int j = 0; j < VEC; ++j)
        if (base + j < n) kk_long_take<OP>(a, b, kk_get<T>(v[u], j), sh);
    }
  }
  float first = 0.0f, second = 0.0f;
  if (OP == 0) {
    kk_softmax_reduce<BLOCK>(a, b, red);
    first = a, second = b;
  } else if (OP == 1) {
    second = kk_block_reduce<BLOCK, false>(a, red);
  } else {  // the chunk's mean, then the squared deviations around it, from the registers
    first = kk_block_reduce<BLOCK, false>(a, red) / (float)m;
    float q = 0.0f;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const long long base = lo + (long long)(u * BLOCK + (int)threadIdx.x) * VEC;
      for (int j = 0; j < VEC; ++j) {
        if (base + j < n) {
          const float d = kk_get<T>(v[u], j) - sh - first;
          q = fmaf(d, d, q);
        }
      }
    }
    second = kk_block_reduce<BLOCK, false>(q, red + 32);
  }
  if (threadIdx.x == 0) {
    float* p = part + 3 * (r * S + s);
    p[0] = sh, p[1] = first, p[2] = second;
  }
}

// Elements of chunk i of a row of n (chunk elements a chunk, the last one short).
__device__ __forceinline__ float kk_split_count(long long i, long long n, long long chunk) {
  return (float)(n - i * chunk < chunk ? n - i * chunk : chunk);
}

// The row's (p0, p1) from its S chunk statistics (as kk_long_combine from a cluster's blocks):
// softmax (max, 1 / sum); rms_norm (0, rstd); layer_norm (mean of x - sh, rstd). Warp 0 reads
// them, chunk i on lane i % 32, in chunk order; the warp's sums are the same on every lane.
template <int OP>
__device__ __forceinline__ void kk_split_combine(const float* pr, long long S, long long n,
                                                 long long chunk, float eps, float* out2) {
  if (threadIdx.x >= 32) return;
  const int lane = (int)threadIdx.x;
  float a = OP == 0 ? -INFINITY : 0.0f, b = 0.0f;
  for (long long i = lane; i < S; i += 32) {
    const float f = __ldcg(pr + 3 * i + 1), q = __ldcg(pr + 3 * i + 2);
    if (OP == 0) kk_softmax_merge(a, b, f, q);
    else if (OP == 1) a += q;
    else a += kk_split_count(i, n, chunk) * f;
  }
  float p0 = 0.0f, p1;
  if (OP == 0) {
    for (int o = 16; o > 0; o >>= 1)
      kk_softmax_merge(a, b, __shfl_xor_sync(0xffffffffu, a, o), __shfl_xor_sync(0xffffffffu, b, o));
    if (a == INFINITY) a = NAN;  // exp(inf - inf): torch gives the row NaN
    p0 = a;
    p1 = 1.0f / b;
  } else if (OP == 1) {
    p1 = rsqrtf(kk_warp_sum(a) / (float)n + eps);
  } else {
    const float mean = kk_warp_sum(a) / (float)n;
    for (long long i = lane; i < S; i += 32) {
      const float c = kk_split_count(i, n, chunk), d = __ldcg(pr + 3 * i + 1) - mean;
      b += __ldcg(pr + 3 * i + 2) + c * d * d;
    }
    p0 = mean;
    p1 = rsqrtf(kk_warp_sum(b) / (float)n + eps);
  }
  if (lane == 0) out2[0] = p0, out2[1] = p1;
}

// Apply kernel: this block's chunk of y from its chunk of x (loaded first, in flight while warp
// 0 combines the row's statistics) and the row's statistics.
template <class T, class W, int OP, int BLOCK, int U, bool VECTOR, int HINT>
__device__ __forceinline__ void kk_split_apply(const T* xr, T* y, const W* w, const W* bias,
                                               const float* part, float eps, long long n,
                                               long long S, long long r, long long s) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr long long CHUNK = (long long)BLOCK * U * VEC;
  constexpr bool WVEC = VECTOR && OP != 0;  // weights of any width in vectors (kk_wvec)
  __shared__ float p[2];
  T* yr = y + r * n;
  const long long lo = s * CHUNK;
  kk_words v[U];
  kk_split_load<T, BLOCK, U, VECTOR, HINT ? KK_SPLIT_DROP : 0>(xr, lo, n, v);
  const float sh = OP == 2 ? __ldcg(part + 3 * r * S) : 0.0f;  // x[0] may be y[0] by now
  kk_split_combine<OP>(part + 3 * r * S, S, n, CHUNK, eps, p);
  __syncthreads();
  const float p0 = p[0], p1 = p[1];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const long long base = lo + (long long)(u * BLOCK + (int)threadIdx.x) * VEC;
    if (VECTOR) {
      if (base >= n) continue;
      kk_wvec<T, W> wv, bv;
      if (WVEC) {
        kk_wload(wv, w, base / VEC);
        if (OP == 2) kk_wload(bv, bias, base / VEC);
      }
      for (int j = 0; j < VEC; ++j) {
        const float e = kk_get<T>(v[u], j);
        float o;
        if (WVEC) {
          o = OP == 1 ? e * p1 * kk_wget(wv, j)
                      : (e - sh - p0) * p1 * kk_wget(wv, j) + kk_wget(bv, j);
        } else {
          o = kk_long_out<T, W, OP>(e, sh, p0, p1, w, bias, base + j);
        }
        kk_set<T>(v[u], j, o);
      }
      kk_split_st<HINT ? KK_SPLIT_DROP : 0>(yr + base, v[u]);
    } else {
      for (int j = 0; j < VEC; ++j)
        if (base + j < n)
          yr[base + j] = T(kk_long_out<T, W, OP>(kk_get<T>(v[u], j), sh, p0, p1, w, bias, base + j));
    }
  }
}
