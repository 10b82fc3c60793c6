// Long rows streamed through persistent clusters (softmax, rms_norm, layer_norm): the cluster
// kernel of rows_smem.cuh, but each cluster takes several rows (rows c, c + G, c + 2G, ... of
// G = gridDim.x / CL clusters), so that a block's slice of the weight and bias (the same for
// every row it takes) can be kept in shared memory (WS = 1) instead of read again from L2 for
// every row, and the next row's slice is read while this row's is written (two slices a block
// where a cluster takes more than one row). On sm_90 an aligned slice is loaded by the copy
// engine (a TMA bulk copy started by one thread, an mbarrier says when it has landed), so no
// thread holds a load in flight; elsewhere (the CPU backend, unaligned rows) the threads load
// as kk_long_row does. The threads store the output.
//
// Needs rows_smem.cuh (kk_long_*) and the matmul family's bulk_ptx.cuh (kk_bulk_*) before it.
// Template values as kk_long_row's, and WS. Dynamic shared memory (kk_stream_shared): the
// weight and bias slices when WS = 1 (each rounded up to 16 bytes), then one or two x slices.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KK_STREAM_TMA 1
__device__ __forceinline__ unsigned kk_stream_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
#endif

// Bytes of a weight slice of S elements in shared memory (16-byte aligned, so the x slices
// after it are).
template <class W>
__host__ __device__ __forceinline__ long long kk_stream_wbytes(long long s) {
  return (s * (long long)sizeof(W) + 15) / 16 * 16;
}

// n elements from global to shared memory by the block's threads (a barrier must follow: the
// output's vectors are not each thread's own elements here).
template <class E, int BLOCK>
__device__ __forceinline__ void kk_stream_copy(E* dst, const E* src, long long n) {
  for (long long e = threadIdx.x; e < n; e += BLOCK) dst[e] = src[e];
}

template <class T, class W, int OP, int BLOCK, int CL, int WS, bool VECTOR>
__device__ __forceinline__ void kk_stream_rows(const T* x, T* y, const W* w, const W* b,
                                               float eps, long long rows, long long n) {
  extern __shared__ __align__(16) unsigned char kk_stream_smem[];
  __shared__ float red[64];
  __shared__ float st[2][3];  // a row's (count, first, second) statistics, rows k & 1
  constexpr bool KEEP = WS && OP != 0;  // weights (and bias) in shared memory
  const unsigned rank = kk_long_rank<CL>();
  const long long slice = kk_long_slice<T>(n, CL), lo = (long long)rank * slice;
  const long long m = lo >= n ? 0 : (n - lo < slice ? n - lo : slice);
  const long long first = blockIdx.x / CL, step = gridDim.x / CL;  // this cluster's rows
  const int count = first < rows ? (int)((rows - 1 - first) / step + 1) : 0;
  const long long wb = KEEP ? kk_stream_wbytes<W>(slice) : 0;
  W* const ws = reinterpret_cast<W*>(kk_stream_smem);
  W* const bs = reinterpret_cast<W*>(kk_stream_smem + wb);
  T* const base = reinterpret_cast<T*>(kk_stream_smem + (OP == 2 ? 2 : 1) * wb);
  const W* wl = KEEP ? ws : OP == 0 ? w : w + lo;  // the output's weight and bias slices
  const W* bl = KEEP && OP == 2 ? bs : OP == 2 ? b + lo : b;
#ifdef KK_STREAM_TMA
  __shared__ __align__(8) unsigned long long bar[3];  // x slices 0 and 1 landed; the weights
  constexpr bool TMA = VECTOR;
  // a weight slice's start and length in whole 16-byte units (a float32 x with 16-bit weights
  // may start one at 8 bytes): bulk-copied, else copied by the threads
  const bool wtma = TMA && KEEP && count && (lo * (long long)sizeof(W)) % 16 == 0 &&
                    (m * (long long)sizeof(W)) % 16 == 0;
  const unsigned bytes = (unsigned)(m * (long long)sizeof(T));
  const unsigned bars = kk_stream_addr(bar);
  auto fetch = [&](int k) {  // this cluster's row k into slice k & 1 (thread 0)
    const unsigned at = bars + 8u * (unsigned)(k & 1);
    kk_bulk_expect(at, bytes);
    if (bytes)
      kk_bulk_copy(kk_stream_addr(base + (k & 1) * slice), x + (first + k * step) * n + lo,
                   bytes, at);
  };
  if (TMA) {
    if (threadIdx.x == 0) {
      for (int i = 0; i < 3; ++i) kk_bulk_init(bars + 8u * i);
      kk_bulk_init_fence();
      if (count) fetch(0);
      if (wtma) {  // the VECTOR path: w and b 16-byte aligned
        const unsigned wbytes = (unsigned)(m * (long long)sizeof(W));
        kk_bulk_expect(bars + 16u, (OP == 2 ? 2u : 1u) * wbytes);
        if (wbytes) {
          kk_bulk_copy(kk_stream_addr(ws), w + lo, wbytes, bars + 16u);
          if (OP == 2) kk_bulk_copy(kk_stream_addr(bs), b + lo, wbytes, bars + 16u);
        }
      }
    }
    __syncthreads();  // the barriers, initialised for every thread
  }
#else
  constexpr bool TMA = false, wtma = false;
#endif
  if (KEEP && !wtma && count) {
    kk_stream_copy<W, BLOCK>(ws, w + lo, m);
    if (OP == 2) kk_stream_copy<W, BLOCK>(bs, b + lo, m);
    __syncthreads();
  }
  for (int k = 0; k < count; ++k) {
    const long long r = first + k * step;
    T* s = base + (k & 1) * slice;
    float* stk = st[k & 1];
    const float sh = OP == 2 ? (float)x[r * n] : 0.0f;  // as kk_long_row: x - x[0]
    float a = OP == 0 ? -INFINITY : 0.0f, bb = 0.0f;
    if (TMA) {
#ifdef KK_STREAM_TMA
      // slice (k + 1) & 1 held row k - 1, which every thread finished storing (the barrier
      // at the end of the loop)
      if (threadIdx.x == 0 && k + 1 < count) fetch(k + 1);
      kk_bulk_wait(bars + 8u * (unsigned)(k & 1), (unsigned)((k >> 1) & 1));
#endif
      constexpr int VEC = kk_pack<T>::N;
      const kk_words* sv = reinterpret_cast<const kk_words*>(s);
      for (int i = threadIdx.x; i < (int)(m / VEC); i += BLOCK)
        kk_long_take_vec<T, OP>(a, bb, sv[i], sh);
    } else {
      kk_long_load<T, OP, BLOCK, VECTOR>(x + r * n + lo, s, m, sh, a, bb);
    }
    float mine0 = 0.0f, mine1 = 0.0f;  // this block's (first, second), as kk_long_row's
    if (OP == 0) {
      kk_softmax_reduce<BLOCK>(a, bb, red);
      mine0 = a, mine1 = bb;
    } else if (OP == 1) {
      mine1 = kk_block_reduce<BLOCK, false>(a, red);
    } else {
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
    // st[k & 1] was last read by the peers for row k - 2, before the barrier of row k - 1
    if (threadIdx.x == 0) stk[0] = (float)m, stk[1] = mine0, stk[2] = mine1;
    if (CL > 1) kk_long_cluster_sync<CL>();
    else __syncthreads();
    float p0, p1;
    kk_long_combine<OP, CL>(stk, n, eps, p0, p1);
#ifdef KK_STREAM_TMA
    if (wtma && k == 0) kk_bulk_wait(bars + 16u, 0u);  // the weights have landed
#endif
    kk_long_store<T, W, OP, BLOCK, VECTOR>(s, y + r * n + lo, m, sh, p0, p1, wl, bl);
    if (TMA) __syncthreads();  // every thread done with the slice row k + 2 refills
  }
  kk_long_cluster_sync<CL>();  // no block leaves while another may still read its st
}
