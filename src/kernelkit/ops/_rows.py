"""Row-wise kernels (softmax, rms_norm, layer_norm): one block per row of the last dimension.

A row that fits in registers is read once (16-byte vector loads where the row is aligned) and
written once: the bandwidth minimum. A longer row is read twice (statistics, then the output),
with an online max/sum for softmax. Statistics are in float32 whatever the input dtype.
Template values: ``T`` (element type), ``BLOCK`` (threads per row), ``ITEMS`` (vector loads
each thread keeps in registers; 0: the long-row loop).
"""

from __future__ import annotations

# Shared device helpers. The 16-byte vector is a struct of T, so bf16/fp16 rows move 8 elements
# per load and fp32 rows 4; a row whose start or length is not 16-byte aligned takes the scalar
# path (decided per row, uniform across the block).
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
// Every thread of the block gets the total. `red` holds 32 floats of shared memory.
template <int BLOCK, bool MAX>
__device__ __forceinline__ float kk_block_reduce(float v, float* red) {
  v = MAX ? kk_warp_max(v) : kk_warp_sum(v);
  if (BLOCK > 32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = lane < BLOCK / 32 ? red[lane] : (MAX ? -INFINITY : 0.0f);
    v = MAX ? kk_warp_max(v) : kk_warp_sum(v);
    __syncthreads();  // red is reused by the next reduction
  }
  return v;
}

// Element e of thread t's item `it`: vector path (it*BLOCK + t)*VEC + j, scalar (it*VEC+j)*BLOCK+t
template <class T, int BLOCK, int ITEMS, bool VECTOR>
__device__ __forceinline__ void kk_load_row(const T* row, long long n,
                                            float (&v)[ITEMS][kk_pack<T>::N], float fill) {
  constexpr int VEC = kk_pack<T>::N;
  for (int it = 0; it < ITEMS; ++it) {
    if (VECTOR) {
      const long long base = ((long long)it * BLOCK + threadIdx.x) * VEC;
      if (base < n) {
        const kk_vec<T> p = *reinterpret_cast<const kk_vec<T>*>(row + base);
        for (int j = 0; j < VEC; ++j) v[it][j] = (float)p.v[j];
      } else {
        for (int j = 0; j < VEC; ++j) v[it][j] = fill;
      }
    } else {
      for (int j = 0; j < VEC; ++j) {
        const long long e = ((long long)it * VEC + j) * BLOCK + threadIdx.x;
        v[it][j] = e < n ? (float)row[e] : fill;
      }
    }
  }
}

template <class T, int BLOCK, int ITEMS, bool VECTOR>
__device__ __forceinline__ void kk_store_row(T* row, long long n,
                                             const float (&v)[ITEMS][kk_pack<T>::N]) {
  constexpr int VEC = kk_pack<T>::N;
  for (int it = 0; it < ITEMS; ++it) {
    if (VECTOR) {
      const long long base = ((long long)it * BLOCK + threadIdx.x) * VEC;
      if (base < n) {
        kk_vec<T> p;
        for (int j = 0; j < VEC; ++j) p.v[j] = T(v[it][j]);
        *reinterpret_cast<kk_vec<T>*>(row + base) = p;
      }
    } else {
      for (int j = 0; j < VEC; ++j) {
        const long long e = ((long long)it * VEC + j) * BLOCK + threadIdx.x;
        if (e < n) row[e] = T(v[it][j]);
      }
    }
  }
}

__device__ __forceinline__ bool kk_aligned16(const void* p) {
  return (((unsigned long long)p) & 15ull) == 0;
}
"""

# The body of every row kernel: pick the row, then the aligned or the scalar form of the row
# function ({vector} is filled with true/false).
_ROW = r"""
__shared__ float kk_red[32];
const long long n = x_shape[x_ndim - 1];
const long long r = blockIdx.x;
const T* xr = x + r * n;
T* yr = y + r * n;
if (n % kk_pack<T>::N == 0 && kk_aligned16(xr) && kk_aligned16(yr) EXTRA_ALIGN) {
  CALL_ROW(true);
} else {
  CALL_ROW(false);
}
"""

SOFTMAX = r"""
template <class T, int BLOCK, int ITEMS, bool VECTOR>
__device__ void kk_softmax_row(const T* xr, T* yr, long long n, float* red) {
  constexpr int VEC = kk_pack<T>::N;
  if (ITEMS > 0) {  // the row is in registers: one read, one write
    constexpr int K = ITEMS > 0 ? ITEMS : 1;
    float v[K][VEC];
    kk_load_row<T, BLOCK, K, VECTOR>(xr, n, v, -INFINITY);
    float m = -INFINITY;
    for (int it = 0; it < K; ++it) for (int j = 0; j < VEC; ++j) m = fmaxf(m, v[it][j]);
    m = kk_block_reduce<BLOCK, true>(m, red);
    float s = 0.0f;
    for (int it = 0; it < K; ++it)
      for (int j = 0; j < VEC; ++j) { v[it][j] = expf(v[it][j] - m); s += v[it][j]; }
    const float inv = 1.0f / kk_block_reduce<BLOCK, false>(s, red);
    for (int it = 0; it < K; ++it) for (int j = 0; j < VEC; ++j) v[it][j] *= inv;
    kk_store_row<T, BLOCK, K, VECTOR>(yr, n, v);
    return;
  }
  // A long row: an online max and sum over chunks, then a second read to write.
  const long long chunk = (long long)BLOCK * VEC;
  float m = -INFINITY, s = 0.0f;
  for (long long c = 0; c < n; c += chunk) {
    float v[1][VEC];
    kk_load_row<T, BLOCK, 1, VECTOR>(xr + c, n - c, v, -INFINITY);
    for (int j = 0; j < VEC; ++j) {
      if (v[0][j] == -INFINITY) continue;
      const float m2 = fmaxf(m, v[0][j]);
      s = s * expf(m - m2) + expf(v[0][j] - m2);
      m = m2;
    }
  }
  const float mb = kk_block_reduce<BLOCK, true>(m, red);
  s = m == -INFINITY ? 0.0f : s * expf(m - mb);
  const float inv = 1.0f / kk_block_reduce<BLOCK, false>(s, red);
  for (long long c = 0; c < n; c += chunk) {
    float v[1][VEC];
    kk_load_row<T, BLOCK, 1, VECTOR>(xr + c, n - c, v, -INFINITY);
    for (int j = 0; j < VEC; ++j) v[0][j] = expf(v[0][j] - mb) * inv;
    kk_store_row<T, BLOCK, 1, VECTOR>(yr + c, n - c, v);
  }
}
"""

# rms_norm: y = x / sqrt(mean(x^2) + eps) * w ; layer_norm: (x - mean) / sqrt(var + eps) * w + b
NORM = r"""
template <class T, class W, int BLOCK, int ITEMS, bool VECTOR, bool CENTER>
__device__ void kk_norm_row(const T* xr, T* yr, long long n, float* red, const W* w, const W* b,
                            float eps) {
  constexpr int VEC = kk_pack<T>::N;
  constexpr int K = ITEMS > 0 ? ITEMS : 1;
  float mean = 0.0f;
  if (ITEMS > 0) {  // in registers: exact two-pass statistics from one read of x
    float v[K][VEC];
    kk_load_row<T, BLOCK, K, VECTOR>(xr, n, v, 0.0f);
    if (CENTER) {
      float s = 0.0f;
      for (int it = 0; it < K; ++it) for (int j = 0; j < VEC; ++j) s += v[it][j];
      mean = kk_block_reduce<BLOCK, false>(s, red) / (float)n;
    }
    float q = 0.0f;
    for (int it = 0; it < K; ++it)
      for (int j = 0; j < VEC; ++j) {
        const long long e = VECTOR ? ((long long)it * BLOCK + threadIdx.x) * VEC + j
                                   : ((long long)it * VEC + j) * BLOCK + threadIdx.x;
        const float d = e < n ? v[it][j] - mean : 0.0f;
        q += d * d;
      }
    const float rstd = rsqrtf(kk_block_reduce<BLOCK, false>(q, red) / (float)n + eps);
    // weight (and bias) in 16-byte vectors too when they have T's width (the row's alignment
    // was checked for them as well): scalar loads at a stride of 16 bytes cost 2x here
    constexpr bool WVEC = VECTOR && sizeof(W) == sizeof(T);
    for (int it = 0; it < K; ++it) {
      const long long base = ((long long)it * BLOCK + threadIdx.x) * VEC;
      if (WVEC) {
        if (base >= n) continue;
        const kk_vec<W> wv = *reinterpret_cast<const kk_vec<W>*>(w + base);
        kk_vec<W> bv;
        if (CENTER) bv = *reinterpret_cast<const kk_vec<W>*>(b + base);
        for (int j = 0; j < VEC; ++j) {
          float o = (v[it][j] - mean) * rstd * (float)wv.v[j];
          if (CENTER) o += (float)bv.v[j];
          v[it][j] = o;
        }
        continue;
      }
      for (int j = 0; j < VEC; ++j) {
        const long long e = VECTOR ? base + j : ((long long)it * VEC + j) * BLOCK + threadIdx.x;
        if (e < n) {
          float o = (v[it][j] - mean) * rstd * (float)w[e];
          if (CENTER) o += (float)b[e];
          v[it][j] = o;
        }
      }
    }
    kk_store_row<T, BLOCK, K, VECTOR>(yr, n, v);
    return;
  }
  // A long row: the mean, then the variance around it (exact two-pass), then the output.
  if (CENTER) {
    float s = 0.0f;
    for (long long e = threadIdx.x; e < n; e += BLOCK) s += (float)xr[e];
    mean = kk_block_reduce<BLOCK, false>(s, red) / (float)n;
  }
  float q = 0.0f;
  for (long long e = threadIdx.x; e < n; e += BLOCK) {
    const float d = (float)xr[e] - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(kk_block_reduce<BLOCK, false>(q, red) / (float)n + eps);
  for (long long e = threadIdx.x; e < n; e += BLOCK) {
    float o = ((float)xr[e] - mean) * rstd * (float)w[e];
    if (CENTER) o += (float)b[e];
    yr[e] = T(o);
  }
}
"""


def body(call: str, aligned: tuple[str, ...] = ()) -> str:
    """The kernel body calling a row function: ``call`` uses ``VECTOR`` for its vector flag,
    e.g. ``"kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, n, kk_red)"``; the vector path also
    needs the pointers named in ``aligned`` (e.g. a weight) 16-byte aligned."""
    extra = "".join(f" && kk_aligned16({p})" for p in aligned)
    text = _ROW.replace(" EXTRA_ALIGN", extra)
    return text.replace("CALL_ROW(true)", call.replace("VECTOR", "true")).replace(
        "CALL_ROW(false)", call.replace("VECTOR", "false")
    )
