
constexpr float KK_L2E = 1.4426950408889634f;  // exp(x) = 2^(x log2 e)

// max that returns NaN when either operand is NaN (fmaxf returns the other operand): a row
// holding NaN or +inf gives NaN everywhere, as torch's softmax does, on every path.
__device__ __forceinline__ float kk_max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? a + b : fmaxf(a, b);
#endif
}

// Two partial softmax sums, s1 of exp(x - m1) and s2 of exp(x - m2), as one sum of exp(x - m)
// for m = max(m1, m2): only the smaller part is rescaled (one exponential); a part with nothing
// but -inf (m = -inf) adds nothing.
// A NaN max stays NaN (the row's outputs are NaN, as in torch).
__device__ __forceinline__ void kk_softmax_merge(float& m, float& s, float m2, float s2) {
  const bool first = m >= m2 || m != m;
  const float hi = first ? m : m2, lo = first ? m2 : m;
  const float s_hi = first ? s : s2, s_lo = first ? s2 : s;
  s = lo == -INFINITY ? s_hi : s_hi + s_lo * kk_exp2((lo - hi) * KK_L2E);
  m = hi;
}

// The row's max and sum of exp(x - max) from every thread's own: one reduction (one barrier)
// for both. `red` holds 64 floats.
template <int BLOCK>
__device__ __forceinline__ void kk_softmax_reduce(float& m, float& s, float* red) {
  for (int o = (BLOCK < 32 ? BLOCK : 32) / 2; o > 0; o >>= 1)  // (BLOCK < 32: the row's lanes)
    kk_softmax_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                     __shfl_xor_sync(0xffffffffu, s, o));
  if (BLOCK > 32) {
    constexpr int W = BLOCK / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = m, red[32 + warp] = s;
    __syncthreads();
    const int first = warp & ~(W - 1);
    m = lane < W ? red[first + lane] : -INFINITY;
    s = lane < W ? red[32 + first + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
      kk_softmax_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o),
                       __shfl_xor_sync(0xffffffffu, s, o));
  }
}

template <class T, int BLOCK, int ITEMS, bool VECTOR>
__device__ void kk_softmax_row(const T* xr, T* yr, long long n, int t, float* red) {
  constexpr int VEC = kk_pack<T>::N;
  // The row in registers (aligned rows only: the scalar path would take a register per element
  // and cost every aligned call occupancy): one read, one write. Each thread first takes the
  // max and the sum of exponentials of its own elements, so that one reduction gives the row's.
  if (ITEMS > 0 && VECTOR) {
    constexpr int K = ITEMS > 0 ? ITEMS : 1;
    const int ni = (int)n;
    kk_words v[K];
    kk_load_row<T, BLOCK, K>(xr, ni, t, v, -INFINITY);
    // Each item's elements in a chain of their own, then the items: K short dependency chains
    // rather than one of K * VEC. A float row takes its max, then keeps exp(x - max) in place.
    // A narrower row goes item by item (the item's max, its exponentials, merged into the
    // running max and sum), so that only one item's floats are live at a time (ptxas would keep
    // a whole pass's conversions otherwise), and recomputes exp(x - max) for the output.
    float m = -INFINITY, s = 0.0f;
    if (sizeof(T) == 4) {
      for (int it = 0; it < K; ++it) {
        float mi = kk_get<T>(v[it], 0);
        for (int j = 1; j < VEC; ++j) mi = kk_max_nan(mi, kk_get<T>(v[it], j));
        m = kk_max_nan(m, mi);
      }
      const float ml = m == -INFINITY ? 0.0f : m;  // all -inf here: exp(-inf - 0) = 0
      for (int it = 0; it < K; ++it) {
        float si = 0.0f;
        for (int j = 0; j < VEC; ++j) {
          const float e = kk_exp2((kk_get<T>(v[it], j) - ml) * KK_L2E);
          kk_set<T>(v[it], j, e);
          si += e;
        }
        s += si;
      }
    } else {
      for (int it = 0; it < K; ++it) {
        float mi = kk_get<T>(v[it], 0);
        for (int j = 1; j < VEC; ++j) mi = kk_max_nan(mi, kk_get<T>(v[it], j));
        if (mi == -INFINITY) continue;
        float si = 0.0f;
        for (int j = 0; j < VEC; ++j) si += kk_exp2((kk_get<T>(v[it], j) - mi) * KK_L2E);
        kk_softmax_merge(m, s, mi, si);
      }
    }
    float mb = m, sb = s;
    kk_softmax_reduce<BLOCK>(mb, sb, red);
    if (mb == INFINITY) mb = NAN;  // exp(inf - inf): torch gives the row NaN
    // A row of nothing but -inf gives NaN, as torch does.
    const float inv = 1.0f / sb;
    const float scale = mb == -INFINITY || mb != mb ? NAN
                        : m == -INFINITY ? 0.0f
                                         : kk_exp2((m - mb) * KK_L2E) * inv;
    kk_reconvert(v);
    for (int it = 0; it < K; ++it)
      for (int j = 0; j < VEC; ++j) {
        const float x = kk_get<T>(v[it], j);
        kk_set<T>(v[it], j, sizeof(T) == 4 ? x * scale : kk_exp2((x - mb) * KK_L2E) * inv);
      }
    kk_store_row<T, BLOCK, K>(yr, ni, t, v);
    return;
  }
  // A long or unaligned row: an online max and sum, then a second read to write. Aligned rows
  // move in 16-byte vectors (the sum rescaled once per vector, when its max raises the running
  // one); unaligned rows element by element, which takes fewer registers than a vector's worth
  // of scalars (a kernel's register count is that of its greediest path).
  const long long chunk = (long long)BLOCK * VEC;
  float m = -INFINITY, s = 0.0f;
  if (VECTOR) {
    for (long long c = 0; c < n; c += chunk) {
      kk_words v[1];
      kk_load_row<T, BLOCK, 1>(xr + c, (int)min(n - c, chunk), t, v, -INFINITY);
      float mv = -INFINITY;
      for (int j = 0; j < VEC; ++j) mv = kk_max_nan(mv, kk_get<T>(v[0], j));
      if (mv == -INFINITY) continue;  // nothing but -inf (or padding) in this vector
      float sv = 0.0f;
      for (int j = 0; j < VEC; ++j) sv += kk_exp2((kk_get<T>(v[0], j) - mv) * KK_L2E);
      kk_softmax_merge(m, s, mv, sv);
    }
  } else {
    for (long long e = t; e < n; e += BLOCK) {
      const float x = (float)xr[e];
      if (x != -INFINITY) kk_softmax_merge(m, s, x, 1.0f);
    }
  }
  kk_softmax_reduce<BLOCK>(m, s, red);
  if (m == INFINITY) m = NAN;  // exp(inf - inf): torch gives the row NaN
  const float inv = 1.0f / s;  // a row of nothing but -inf: exp(NaN) * inf, NaN as in torch
  if (VECTOR) {
    for (long long c = 0; c < n; c += chunk) {
      kk_words v[1];
      const int nc = (int)min(n - c, chunk);
      kk_load_row<T, BLOCK, 1>(xr + c, nc, t, v, -INFINITY);
      for (int j = 0; j < VEC; ++j)
        kk_set<T>(v[0], j, kk_exp2((kk_get<T>(v[0], j) - m) * KK_L2E) * inv);
      kk_store_row<T, BLOCK, 1>(yr + c, nc, t, v);
    }
  } else {
    for (long long e = t; e < n; e += BLOCK) yr[e] = T(kk_exp2(((float)xr[e] - m) * KK_L2E) * inv);
  }
}
