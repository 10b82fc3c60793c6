"""Row-wise kernels (softmax, rms_norm, layer_norm) over the last dimension.

An aligned row that fits in registers is read once with 16-byte vector loads and written once:
the bandwidth minimum. A longer or unaligned row is read twice (statistics, then the output),
with an online max/sum for softmax. Statistics are in float32 whatever the input dtype.
Template values: ``T`` (element type), ``BLOCK`` (threads per row), ``ITEMS`` (vector loads
each thread keeps in registers; 0: the long-row loop), ``ROWS`` (rows per block), ``ND`` (x's
rank).
"""

from __future__ import annotations

# Shared device helpers (the elementwise op uses them too). A 16-byte vector holds 8 bf16/fp16
# elements or 4 fp32; kk_vec is it as a struct of T (for memory), kk_words as four 32-bit words
# (for registers).
HEADER = r"""
template <class T> struct kk_pack { static constexpr int N = 16 / sizeof(T); };
template <class T> struct alignas(16) kk_vec { T v[kk_pack<T>::N]; };

__device__ __forceinline__ float kk_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float kk_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread of a row's BLOCK threads gets the row's total. `red` holds 32 floats of shared
// memory (one per warp of the block: a block holds ROWS rows of BLOCK threads, at most 1024
// threads). Each reduction of a row function gets its own `red`, so no barrier is needed after
// reading it back.
template <int BLOCK, bool MAX>
__device__ __forceinline__ float kk_block_reduce(float v, float* red) {
  v = MAX ? kk_warp_max(v) : kk_warp_sum(v);
  if (BLOCK > 32) {
    constexpr int W = BLOCK / 32;  // warps per row
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < W ? red[(warp & ~(W - 1)) + lane] : (MAX ? -INFINITY : 0.0f);
    v = MAX ? kk_warp_max(v) : kk_warp_sum(v);
  }
  return v;
}

// A row kept in registers in its own type: ITEMS 16-byte vectors per thread, each as four
// 32-bit words (a struct of bf16 would take a register per element, twice the words). Thread
// t's item `it` is the vector at element kk_at(it, t) of the row.
struct alignas(16) kk_words { unsigned w[4]; };

template <class T, int BLOCK>
__device__ __forceinline__ int kk_at(int it, int t) {
  return (it * BLOCK + t) * kk_pack<T>::N;
}

// Element j of a vector, as float, and the bits of a float rounded to T (memcpy: the bit cast
// that works for every T without naming it).
template <class T>
__device__ __forceinline__ float kk_get(const kk_words& p, int j) {
  constexpr int PER = 4 / sizeof(T);
  const unsigned w = p.w[j / PER];
  if (PER == 1) return __uint_as_float(w);
  const unsigned short b = (unsigned short)(j % PER ? w >> 16 : w & 0xffffu);
  T h;
  memcpy(&h, &b, sizeof(T));
  return (float)h;
}

template <class T>
__device__ __forceinline__ void kk_set(kk_words& p, int j, float f) {
  constexpr int PER = 4 / sizeof(T);
  if (PER == 1) {
    p.w[j] = __float_as_uint(f);
    return;
  }
  const T h = T(f);
  unsigned short b;
  memcpy(&b, &h, sizeof(T));
  unsigned& w = p.w[j / PER];
  w = j % PER ? (w & 0xffffu) | ((unsigned)b << 16) : (w & 0xffff0000u) | b;
}

template <class T>
__device__ __forceinline__ void kk_fill(kk_words& p, float f) {
  for (int j = 0; j < kk_pack<T>::N; ++j) kk_set<T>(p, j, f);
}

// An empty asm that "changes" every word: the compiler converts the elements again after it
// instead of keeping the floats of an earlier pass live (twice a bf16 row's registers).
template <int ITEMS>
__device__ __forceinline__ void kk_reconvert(kk_words (&v)[ITEMS]) {
  for (int it = 0; it < ITEMS; ++it)
    for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(v[it].w[k]));
}

// An aligned row's vectors (n % VEC == 0): those past n are `fill` on load and not stored.
template <class T, int BLOCK, int ITEMS>
__device__ __forceinline__ void kk_load_row(const T* row, int n, int t, kk_words (&v)[ITEMS],
                                            float fill) {
  for (int it = 0; it < ITEMS; ++it) {
    const int base = kk_at<T, BLOCK>(it, t);
    if (base < n) {
      v[it] = *reinterpret_cast<const kk_words*>(row + base);
    } else {
      kk_fill<T>(v[it], fill);
    }
  }
}

template <class T, int BLOCK, int ITEMS>
__device__ __forceinline__ void kk_store_row(T* row, int n, int t, const kk_words (&v)[ITEMS]) {
  for (int it = 0; it < ITEMS; ++it) {
    const int base = kk_at<T, BLOCK>(it, t);
    if (base < n) *reinterpret_cast<kk_words*>(row + base) = v[it];
  }
}

// 2^x on the special-function unit (ex2.approx.ftz: about 2 ulp; results under 2^-126 flush
// to zero, which a softmax, whose sum is at least 1, cannot see); exp2f on the CPU backend.
__device__ __forceinline__ float kk_exp2(float x) {
#ifdef __CUDA_ARCH__
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

__device__ __forceinline__ bool kk_aligned16(const void* p) {
  return (((unsigned long long)p) & 15ull) == 0;
}
"""

# The body of every row kernel: each block takes ROWS rows of BLOCK threads each; a row past
# the end (the last block's padding) loads and stores nothing but still meets the barriers.
# The vector path needs every row aligned: the same test for the whole block ({vector} is
# filled with true/false).
_ROW = r"""
__shared__ float kk_red[64];
const long long n = x_shape[ND - 1];  // ND (x's rank) is a template value: constant indices
long long rows = 1;                   // keep the shape in parameter space, not local memory
for (int d = 0; d + 1 < ND; ++d) rows *= x_shape[d];
const int t = threadIdx.x % BLOCK;
const long long r = (long long)blockIdx.x * ROWS + threadIdx.x / BLOCK;
const long long nr = r < rows ? n : 0;
const T* xr = x + (r < rows ? r : 0) * n;
T* yr = y + (r < rows ? r : 0) * n;
if (n % kk_pack<T>::N == 0 && kk_aligned16(x) && kk_aligned16(y) EXTRA_ALIGN) {
  CALL_ROW(true);
} else {
  CALL_ROW(false);
}
"""

SOFTMAX = r"""
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
  for (int o = 16; o > 0; o >>= 1)
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
"""

# rms_norm: y = x / sqrt(mean(x^2) + eps) * w ; layer_norm: (x - mean) / sqrt(var + eps) * w + b
NORM = r"""
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
    // checked with the row's), loaded before the reductions so that their latency overlaps.
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
      for (int it = 0; it < K; ++it)
        for (int j = 0; j < VEC; ++j) {
          const int e = kk_at<T, BLOCK>(it, t) + j;
          if (!WVEC && e >= ni) continue;
          kk_set<T>(v[it], j,
                    kk_get<T>(v[it], j) * rstd * (WVEC ? kk_get<W>(wv[it], j) : (float)w[e]) +
                        (WVEC ? kk_get<W>(bv[it], j) : (float)b[e]));
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
    for (int it = 0; it < K; ++it)
      for (int j = 0; j < VEC; ++j) {
        const int e = kk_at<T, BLOCK>(it, t) + j;
        if (!WVEC && e >= ni) continue;
        float o = (kk_get<T>(v[it], j) - off) * rstd * (WVEC ? kk_get<W>(wv[it], j) : (float)w[e]);
        if (CENTER) o += WVEC ? kk_get<W>(bv[it], j) : (float)b[e];
        kk_set<T>(v[it], j, o);
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
"""


def body(call: str, aligned: tuple[str, ...] = ()) -> str:
    """The kernel body calling a row function: ``call`` uses ``VECTOR`` for its vector flag,
    e.g. ``"kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, nr, t, kk_red)"``; the vector path
    also needs the pointers named in ``aligned`` (e.g. a weight) 16-byte aligned."""
    extra = "".join(f" && kk_aligned16({p})" for p in aligned)
    text = _ROW.replace(" EXTRA_ALIGN", extra)
    return text.replace("CALL_ROW(true)", call.replace("VECTOR", "true")).replace(
        "CALL_ROW(false)", call.replace("VECTOR", "false")
    )
