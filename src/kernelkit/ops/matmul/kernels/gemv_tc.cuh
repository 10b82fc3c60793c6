
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
