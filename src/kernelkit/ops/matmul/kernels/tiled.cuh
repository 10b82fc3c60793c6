
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
