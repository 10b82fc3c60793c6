
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
