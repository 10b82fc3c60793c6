// Long rows streamed through persistent clusters (softmax, rms_norm, layer_norm): the cluster
// kernel of rows_smem.cuh, but each cluster takes several rows (rows c, c + G, c + 2G, ... of
// G = gridDim.x / CL clusters) through two shared-memory slices, so that the next row's slice
// is read while this row's is written. On sm_90 an aligned slice moves by the copy engine
// (TMA bulk copies: one thread issues a slice's load into the free buffer, an mbarrier says
// when it has landed; the output is written in place and stored by one bulk copy), so the
// threads touch only shared memory and hold no loads in flight; elsewhere (the CPU backend,
// unaligned rows) the threads load and store as kk_long_row does.
//
// Needs rows_smem.cuh (kk_long_*) and the matmul family's bulk_ptx.cuh (kk_bulk_*) before it.
// Template values as kk_long_row's; dynamic shared memory: 2 S * sizeof(T) bytes.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KK_STREAM_TMA 1
__device__ __forceinline__ unsigned kk_stream_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
// the output slice from shared memory to global memory in one bulk copy (its own group)
__device__ __forceinline__ void kk_stream_put(void* dst, const void* src, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               :: "l"(dst), "r"(kk_stream_addr(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// every bulk store this thread issued has read its shared memory (the buffer may be refilled)
__device__ __forceinline__ void kk_stream_put_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// the threads' writes to shared memory, seen by the copy engine's next read of it
__device__ __forceinline__ void kk_stream_fence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

// The output of a slice held in shared memory, written back in place (each thread its own
// vectors, as it read them).
template <class T, class W, int OP, int BLOCK>
__device__ __forceinline__ void kk_stream_out(kk_words* s, long long m, float sh, float p0,
                                              float p1, const W* w, const W* b) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr bool WVEC = OP != 0 && sizeof(W) == sizeof(T);
  for (int i = threadIdx.x; i < (int)(m / VEC); i += BLOCK) {
    kk_words v = s[i], wv, bv;
    if (WVEC) wv = reinterpret_cast<const kk_words*>(w)[i];
    if (WVEC && OP == 2) bv = reinterpret_cast<const kk_words*>(b)[i];
    for (int j = 0; j < VEC; ++j) {
      const float e = kk_get<T>(v, j);
      float o;
      if (WVEC) {
        o = OP == 1 ? e * p1 * kk_get<W>(wv, j)
                    : (e - sh - p0) * p1 * kk_get<W>(wv, j) + kk_get<W>(bv, j);
      } else {
        o = kk_long_out<T, W, OP>(e, sh, p0, p1, w, b, (long long)i * VEC + j);
      }
      kk_set<T>(v, j, o);
    }
    s[i] = v;
  }
}

template <class T, class W, int OP, int BLOCK, int CL, bool VECTOR>
__device__ __forceinline__ void kk_stream_rows(const T* x, T* y, const W* w, const W* b,
                                               float eps, long long rows, long long n) {
  extern __shared__ __align__(16) unsigned char kk_stream_smem[];
  __shared__ float red[64];
  __shared__ float st[2][3];  // a buffer's (count, first, second) statistics for the cluster
  const unsigned rank = kk_long_rank<CL>();
  const long long slice = kk_long_slice<T>(n, CL), lo = (long long)rank * slice;
  const long long m = lo >= n ? 0 : (n - lo < slice ? n - lo : slice);
  const long long first = blockIdx.x / CL, step = gridDim.x / CL;  // this cluster's rows
  const int count = first < rows ? (int)((rows - 1 - first) / step + 1) : 0;
  T* const base = reinterpret_cast<T*>(kk_stream_smem);  // slice k & 1 at base + (k & 1) S
  const W* wl = OP == 0 ? w : w + lo;
  const W* bl = OP == 2 ? b + lo : b;
#ifdef KK_STREAM_TMA
  __shared__ __align__(8) unsigned long long bar[2];  // a buffer's slice has landed
  constexpr bool TMA = VECTOR;
  const unsigned bytes = (unsigned)(m * (long long)sizeof(T));
  const unsigned bars = kk_stream_addr(bar);
  auto fetch = [&](int k) {  // row k of this cluster's into buffer k & 1 (thread 0)
    const unsigned at = bars + 8u * (unsigned)(k & 1);
    kk_bulk_expect(at, bytes);
    if (bytes) kk_bulk_copy(kk_stream_addr(base + (k & 1) * slice), x + (first + k * step) * n + lo, bytes, at);
  };
  if (TMA) {
    if (threadIdx.x == 0) {
      kk_bulk_init(bars);
      kk_bulk_init(bars + 8u);
      kk_bulk_init_fence();
      if (count) fetch(0);
    }
    __syncthreads();  // the barriers, initialised for every thread
  }
#else
  constexpr bool TMA = false;
#endif
  for (int k = 0; k < count; ++k) {
    const long long r = first + k * step;
    T* s = base + (k & 1) * slice;
    float* stk = st[k & 1];
    const float sh = OP == 2 ? (float)x[r * n] : 0.0f;  // as kk_long_row: x - x[0]
    float a = OP == 0 ? -INFINITY : 0.0f, bb = 0.0f;
    if (TMA) {
#ifdef KK_STREAM_TMA
      if (threadIdx.x == 0 && k + 1 < count) {
        kk_stream_put_read();  // row k - 1's store has read the buffer row k + 1 takes
        fetch(k + 1);
      }
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
    if (TMA) {
#ifdef KK_STREAM_TMA
      kk_stream_out<T, W, OP, BLOCK>(reinterpret_cast<kk_words*>(s), m, sh, p0, p1, wl, bl);
      kk_stream_fence();
      __syncthreads();  // the whole slice written, for the copy engine
      if (threadIdx.x == 0 && bytes) kk_stream_put(y + r * n + lo, s, bytes);
#endif
    } else {
      kk_long_store<T, W, OP, BLOCK, VECTOR>(s, y + r * n + lo, m, sh, p0, p1, wl, bl);
    }
  }
#ifdef KK_STREAM_TMA
  if (TMA && threadIdx.x == 0) kk_stream_put_read();  // the stores have read shared memory
#endif
  kk_long_cluster_sync<CL>();  // no block leaves while another may still read its st
}
