
template <class T> struct kk_pack { static constexpr int N = 16 / sizeof(T); };
template <class T> struct alignas(16) kk_vec { T v[kk_pack<T>::N]; };

// The total of each aligned group of G lanes (a warp: G = 32), in every lane of the group; all
// 32 lanes of the warp take part.
template <int G = 32>
__device__ __forceinline__ float kk_warp_sum(float v) {
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <int G = 32>
__device__ __forceinline__ float kk_warp_max(float v) {
  for (int o = G / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Every thread of a row's BLOCK threads gets the row's total. `red` holds 32 floats of shared
// memory (one per warp of the block: a block holds ROWS rows of BLOCK threads, at most 1024
// threads). Each reduction of a row function gets its own `red`, so no barrier is needed after
// reading it back. BLOCK < 32 (short rows: 8 or 16 threads a row, ROWS * BLOCK a whole number of
// warps): the row's lanes of one warp, by shuffles alone.
template <int BLOCK, bool MAX>
__device__ __forceinline__ float kk_block_reduce(float v, float* red) {
  constexpr int G = BLOCK < 32 ? BLOCK : 32;
  v = MAX ? kk_warp_max<G>(v) : kk_warp_sum<G>(v);
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

// Whether T is bfloat16, whose float is its bits shifted up: an element in the high half of a
// word is the word with its low half cleared (one instruction; the conversion through T took
// a shift down and one up).
template <class T>
struct kk_is_bf16 {
  static constexpr bool value = false;
};
#if defined(__CUDA_BF16_TYPES_EXIST__) || defined(KK_CPU_BF16_TYPES)
template <>
struct kk_is_bf16<__nv_bfloat16> {
  static constexpr bool value = true;
};
#endif

// Half `hi` (0: low, 1: high) of a 32-bit word of packed 16-bit T as float (a float32 T: the
// word itself; memcpy: the bit cast that works for every T without naming it).
template <class T>
__device__ __forceinline__ float kk_unpack(unsigned w, int hi) {
  if (sizeof(T) == 4) return __uint_as_float(w);
  if (kk_is_bf16<T>::value) return __uint_as_float(hi ? w & 0xffff0000u : w << 16);
  const unsigned short b = (unsigned short)(hi ? w >> 16 : w & 0xffffu);
  T h;
  memcpy(&h, &b, sizeof(T));
  return (float)h;
}

// Element j of a vector, as float, and the bits of a float rounded to T.
template <class T>
__device__ __forceinline__ float kk_get(const kk_words& p, int j) {
  constexpr int PER = 4 / sizeof(T);
  return kk_unpack<T>(p.w[j / PER], j % PER);
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

// The weight's (or bias's) elements for one 16-byte vector of x: VEC = kk_pack<T>::N elements of
// W, VEC * sizeof(W) bytes (8, 16 or 32), loaded in the fewest aligned loads (W's pointer
// 16-byte aligned, as x's). A float32 weight of a 16-bit row is two 16-byte loads, not eight of
// 4 bytes (bf16 rows with float32 weights, as autocast leaves a norm's, ran 1.8-2.8x slower
// element by element).
template <class T, class W>
struct kk_wvec {
  static constexpr int N = kk_pack<T>::N, WORDS = N * (int)sizeof(W) / 4;
  unsigned w[WORDS];
};

template <class T, class W>
__device__ __forceinline__ void kk_wload(kk_wvec<T, W>& v, const W* p, long long i) {
  constexpr int WORDS = kk_wvec<T, W>::WORDS;
  if constexpr (WORDS == 2) {
    const uint2 q = reinterpret_cast<const uint2*>(p)[i];
    v.w[0] = q.x, v.w[1] = q.y;
  } else {
    for (int k = 0; k < WORDS / 4; ++k) {
      const uint4 q = reinterpret_cast<const uint4*>(p)[i * (WORDS / 4) + k];
      v.w[4 * k] = q.x, v.w[4 * k + 1] = q.y, v.w[4 * k + 2] = q.z, v.w[4 * k + 3] = q.w;
    }
  }
}

// Element j of such a vector, as float.
template <class T, class W>
__device__ __forceinline__ float kk_wget(const kk_wvec<T, W>& v, int j) {
  constexpr int PER = 4 / sizeof(W);
  return kk_unpack<W>(v.w[j / PER], j % PER);
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

// Where row r of x starts, in elements (rows: x's dimensions but the last, row-major; the last
// dimension contiguous). XS = 0: x is row-contiguous, r * n. XS = 1: any strides between rows (a
// slice of a wider array, the heads of a fused QKV projection), read from x_strides at constant
// indices (ND is a template value; a size-1 dimension divides nothing).
template <int ND, int XS>
__device__ __forceinline__ long long kk_row_at(long long r, long long n, const kk_dims& shape,
                                               const kk_dims& strides) {
  if (!XS) return r * n;
  long long at = 0;
#pragma unroll
  for (int d = ND - 2; d >= 0; --d) {
    const long long e = shape.v[d];
    if (d == 0) {
      at += r * strides.v[0];
    } else if (e != 1) {
      // on the path to the row's first load: 32-bit where both fit (a shift for a power of two
      // measured no faster on an H200: the prologue's other 64-bit arithmetic remains)
      const long long q = ((r | e) >> 32) == 0 ? (long long)((unsigned)r / (unsigned)e) : r / e;
      at += (r - q * e) * strides.v[d];
      r = q;
    }
  }
  return at;
}

// Whether every row of x starts 16-byte aligned: x itself, and (XS = 1) every stride between rows
// a whole number of 16-byte steps. One answer for the whole grid (a block's rows take one path).
template <class T, int ND, int XS>
__device__ __forceinline__ bool kk_rows_aligned16(const T* x, const kk_dims& shape,
                                                  const kk_dims& strides) {
  bool ok = kk_aligned16(x);
#pragma unroll
  for (int d = 0; d + 1 < ND; ++d)
    ok = ok && (!XS || shape.v[d] == 1 || (strides.v[d] * (long long)sizeof(T)) % 16 == 0);
  return ok;
}
