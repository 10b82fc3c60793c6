
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
