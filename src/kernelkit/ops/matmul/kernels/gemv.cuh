
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
