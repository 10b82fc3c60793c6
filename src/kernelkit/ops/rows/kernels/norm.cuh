
// Item `it`'s weight (or bias) vector of thread t, loaded where LOAD (else left unset: unused).
template <class T, class W, int BLOCK, bool LOAD>
__device__ __forceinline__ kk_wvec<T, W> kk_late(const W* p, int it, int t) {
  kk_wvec<T, W> v;
  if (LOAD) kk_wload(v, p, (long long)it * BLOCK + t);
  return v;
}

template <class T, class W, int BLOCK, int ITEMS, bool VECTOR, bool CENTER>
__device__ void kk_norm_row(const T* xr, T* yr, long long n, int t, float* red, const W* w,
                            const W* b, float eps) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr int K = ITEMS > 0 ? ITEMS : 1;
  // layer_norm's statistics of x - x[0] (shifted data): a constant row's deviations are exact
  // zeros (its output is the bias, as in torch), and a large mean loses no digits
  const float sh = CENTER ? (float)xr[0] : 0.0f;
  float mean = 0.0f;  // of x - sh
  if (ITEMS > 0 && VECTOR) {  // in registers (as softmax): exact two-pass stats, one read of x
    const int ni = (int)n;
    kk_words v[K];
    kk_load_row<T, BLOCK, K>(xr, ni, t, v, 0.0f);
    // The weight (and bias) in 16-byte vectors when they have T's width (their alignment was
    // checked with the row's), loaded before the reductions so that their latency overlaps; of
    // another width (a float32 weight of a 16-bit row), in vectors of that width at the output
    // (kk_late: twice a 16-bit row's registers if held from the start).
    constexpr bool WVEC = sizeof(W) == sizeof(T);
    kk_words wv[WVEC ? K : 1], bv[WVEC && CENTER ? K : 1];
    if (WVEC) {
      kk_load_row<W, BLOCK, WVEC ? K : 1>(w, ni, t, wv, 0.0f);
      if (CENTER) kk_load_row<W, BLOCK, WVEC && CENTER ? K : 1>(b, ni, t, bv, 0.0f);
    }
    if (CENTER && sizeof(T) == 4) {
      // float32 layer_norm keeps the deviations (x - sh, then x - sh - mean) in the row's own
      // registers from pass to pass: 6 instead of 10 float operations an element, and no
      // register more (on an H200, where the kernel issued an instruction on 68% of cycles,
      // 4096x4096 took 39.0 -> 34.4 us). A 16-bit row would take twice its registers as
      // floats (163 a thread at 8192 bf16 in 128 threads: 73 -> 104 us): see below.
      float s = 0.0f;
      for (int it = 0; it < K; ++it) {
        const bool pad = kk_at<T, BLOCK>(it, t) >= ni;  // whole vectors: n % VEC == 0
        float si = 0.0f;
        for (int j = 0; j < VEC; ++j) {
          const float d = pad ? 0.0f : kk_get<T>(v[it], j) - sh;
          kk_set<T>(v[it], j, d);
          si += d;
        }
        s += si;
      }
      mean = kk_block_reduce<BLOCK, false>(s, red) / (float)n;
      float q = 0.0f;
      for (int it = 0; it < K; ++it) {
        float qi = 0.0f;
        for (int j = 0; j < VEC; ++j) {
          const float d = kk_get<T>(v[it], j) - mean;
          kk_set<T>(v[it], j, d);
          qi += d * d;
        }
        if (kk_at<T, BLOCK>(it, t) < ni) q += qi;
      }
      const float rstd = rsqrtf(kk_block_reduce<BLOCK, false>(q, red + 32) / (float)n + eps);
      for (int it = 0; it < K; ++it) {
        if (!WVEC && kk_at<T, BLOCK>(it, t) >= ni) continue;
        const kk_wvec<T, W> wl = kk_late<T, W, BLOCK, !WVEC>(w, it, t),
                            bl = kk_late<T, W, BLOCK, !WVEC>(b, it, t);
        for (int j = 0; j < VEC; ++j)
          kk_set<T>(v[it], j,
                    kk_get<T>(v[it], j) * rstd * (WVEC ? kk_get<W>(wv[it], j) : kk_wget(wl, j)) +
                        (WVEC ? kk_get<W>(bv[it], j) : kk_wget(bl, j)));
      }
      kk_store_row<T, BLOCK, K>(yr, ni, t, v);
      return;
    }
    // A 16-bit layer_norm row, in fewer instructions (the H200 runs out of issue slots here,
    // not bytes): each thread sums x and takes its count times the shift off once (a constant
    // row still gives exactly 0: sums of at most 64 equal 16-bit values are exact), and x is
    // centred by one offset sh + mean. A 16-bit x is a multiple of 2^-8 (bf16) or 2^-11 (fp16)
    // of its magnitude, so any nonzero deviation is too; the offset's rounding, 2^-24 of it,
    // is at most 2^-16 (2^-13) of a deviation.
    if (CENTER) {
      float s = 0.0f, c = 0.0f;
      for (int it = 0; it < K; ++it) {
        if (kk_at<T, BLOCK>(it, t) >= ni) continue;  // padding (whole vectors: n % VEC == 0)
        float si = 0.0f;
        for (int j = 0; j < VEC; ++j) si += kk_get<T>(v[it], j);
        s += si;
        c += (float)VEC;
      }
      mean = kk_block_reduce<BLOCK, false>(fmaf(-c, sh, s), red) / (float)n;
      kk_reconvert(v);
    }
    const float off = sh + mean;  // 0 for rms_norm
    float q = 0.0f;
    for (int it = 0; it < K; ++it) {
      if (kk_at<T, BLOCK>(it, t) >= ni) continue;  // whole vectors: n % VEC == 0
      float qi = 0.0f;
      for (int j = 0; j < VEC; ++j) {
        const float d = kk_get<T>(v[it], j) - off;
        qi += d * d;
      }
      q += qi;
    }
    const float rstd = rsqrtf(kk_block_reduce<BLOCK, false>(q, red + 32) / (float)n + eps);
    kk_reconvert(v);
    for (int it = 0; it < K; ++it) {
      if (!WVEC && kk_at<T, BLOCK>(it, t) >= ni) continue;
      const kk_wvec<T, W> wl = kk_late<T, W, BLOCK, !WVEC>(w, it, t),
                          bl = kk_late<T, W, BLOCK, !WVEC && CENTER>(b, it, t);
      for (int j = 0; j < VEC; ++j) {
        float o = (kk_get<T>(v[it], j) - off) * rstd * (WVEC ? kk_get<W>(wv[it], j) : kk_wget(wl, j));
        if (CENTER) o += WVEC ? kk_get<W>(bv[it], j) : kk_wget(bl, j);
        kk_set<T>(v[it], j, o);
      }
    }
    kk_store_row<T, BLOCK, K>(yr, ni, t, v);
    return;
  }
  // A long or unaligned row: the mean, then the variance around it (exact two-pass), then the
  // output, element by element.
  if (CENTER) {
    float s = 0.0f;
    for (long long e = t; e < n; e += BLOCK) s += (float)xr[e] - sh;
    mean = kk_block_reduce<BLOCK, false>(s, red) / (float)n;
  }
  float q = 0.0f;
  for (long long e = t; e < n; e += BLOCK) {
    const float d = (float)xr[e] - sh - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(kk_block_reduce<BLOCK, false>(q, red + 32) / (float)n + eps);
  for (long long e = t; e < n; e += BLOCK) {
    float o = ((float)xr[e] - sh - mean) * rstd * (float)w[e];
    if (CENTER) o += (float)b[e];
    yr[e] = T(o);
  }
}
