// kernelkit CPU backend: <cuda_fp8.h>: the 8-bit float types (__nv_fp8_e4m3: 4 exponent bits,
// no infinity, NaN 0x7f/0xff, largest 448; __nv_fp8_e5m2: 5 exponent bits, infinities, largest
// 57344), their pairs and quads, and the conversion functions, with CUDA's answers: round to
// nearest even; NaN from a float is 0x7f, from a double keeps its sign (and, in e5m2, the top
// two bits of its payload); past the largest value __NV_SATFINITE gives the largest finite value
// of the sign and __NV_NOSAT NaN (e4m3) or infinity (e5m2); an infinity is such a value. The
// types' constructors saturate (__NV_SATFINITE), and their conversions to integers go through
// __half rounding toward zero (NaN gives 0). Checked bit for bit against an H200 on every code
// and on floats across and past both ranges (tests/backend/test_fp8.py).
#pragma once
#define __CUDA_FP8_TYPES_EXIST__

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;
typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

// The value of a non-negative code; the code past the largest finite one (e4m3 0x7f, e5m2 0x7c)
// stands for where rounding overflows (480 and 65536: the overflow thresholds are its ties).
static inline long double kk_fp8_value(unsigned code, bool e4m3) {
  const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (int)(code >> man_bits), m = (int)(code & ((1u << man_bits) - 1u));
  if (e == 0) return ldexpl((long double)m, 1 - bias - man_bits);
  return ldexpl((long double)(m + (1 << man_bits)), e - bias - man_bits);
}

// A number that is not NaN rounded to the nearest code, ties to the even code.
static inline __nv_fp8_storage_t kk_fp8_round(long double v, __nv_saturation_t sat,
                                              __nv_fp8_interpretation_t kind) {
  const bool e4m3 = kind == __NV_E4M3;
  const unsigned top = e4m3 ? 0x7fu : 0x7cu, largest = e4m3 ? 0x7eu : 0x7bu;
  const unsigned sign = std::signbit(v) ? 0x80u : 0u;
  const long double a = fabsl(v);
  unsigned code = top;
  if (a < kk_fp8_value(top, e4m3)) {
    unsigned lo = 0, hi = top;  // value(lo) <= a < value(hi)
    while (hi - lo > 1) {
      const unsigned mid = (lo + hi) / 2;
      (kk_fp8_value(mid, e4m3) <= a ? lo : hi) = mid;
    }
    const long double below = a - kk_fp8_value(lo, e4m3), above = kk_fp8_value(hi, e4m3) - a;
    code = below < above ? lo : above < below ? hi : (lo & 1u ? hi : lo);
  }
  if (code >= top) code = sat == __NV_SATFINITE ? largest : top;
  return (__nv_fp8_storage_t)(sign | code);
}

static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(double x, __nv_saturation_t sat,
                                                        __nv_fp8_interpretation_t kind) {
  if (x != x) {
    unsigned long long b;
    memcpy(&b, &x, 8);
    const unsigned sign = (unsigned)(b >> 63) << 7;
    return (__nv_fp8_storage_t)(sign | (kind == __NV_E4M3 ? 0x7fu : 0x7eu | (unsigned)((b >> 50) & 3u)));
  }
  return kk_fp8_round(x, sat, kind);
}
static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
                                                       __nv_fp8_interpretation_t kind) {
  return x != x ? (__nv_fp8_storage_t)0x7fu : kk_fp8_round(x, sat, kind);  // NaN: canonical
}
static inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(__half_raw x, __nv_saturation_t sat,
                                                         __nv_fp8_interpretation_t kind) {
  __half h;
  h.__x = x.x;
  return __nv_cvt_float_to_fp8(float(h), sat, kind);
}
static inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw x,
                                                             __nv_saturation_t sat,
                                                             __nv_fp8_interpretation_t kind) {
  __nv_bfloat16 h;
  h.__x = x.x;
  return __nv_cvt_float_to_fp8(float(h), sat, kind);
}
// Two at once: the first (x) in the low byte.
static inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(double2 x, __nv_saturation_t sat,
                                                             __nv_fp8_interpretation_t kind) {
  return (__nv_fp8x2_storage_t)(__nv_cvt_double_to_fp8(x.y, sat, kind) << 8 |
                                __nv_cvt_double_to_fp8(x.x, sat, kind));
}
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 x, __nv_saturation_t sat,
                                                            __nv_fp8_interpretation_t kind) {
  return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.y, sat, kind) << 8 |
                                __nv_cvt_float_to_fp8(x.x, sat, kind));
}
static inline __nv_fp8x2_storage_t __nv_cvt_halfraw2_to_fp8x2(__half2_raw x, __nv_saturation_t sat,
                                                              __nv_fp8_interpretation_t kind) {
  return (__nv_fp8x2_storage_t)(__nv_cvt_halfraw_to_fp8({x.y}, sat, kind) << 8 |
                                __nv_cvt_halfraw_to_fp8({x.x}, sat, kind));
}
static inline __nv_fp8x2_storage_t __nv_cvt_bfloat16raw2_to_fp8x2(
    __nv_bfloat162_raw x, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
  return (__nv_fp8x2_storage_t)(__nv_cvt_bfloat16raw_to_fp8({x.y}, sat, kind) << 8 |
                                __nv_cvt_bfloat16raw_to_fp8({x.x}, sat, kind));
}
// To half: exact; NaN gives the canonical 0x7fff.
static inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t x,
                                                 __nv_fp8_interpretation_t kind) {
  const bool e4m3 = kind == __NV_E4M3;
  const unsigned code = x & 0x7fu;
  if (e4m3 ? code == 0x7fu : code > 0x7cu) return {0x7fffu};
  const float f = code == 0x7cu && !e4m3 ? INFINITY : (float)kk_fp8_value(code, e4m3);
  __half h = __half(x & 0x80u ? -f : f);
  return {h.__x};
}
static inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x,
                                                     __nv_fp8_interpretation_t kind) {
  return {__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(x & 0xffu), kind).x,
          __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)(x >> 8), kind).x};
}

// The scalar types (CUDA's __nv_fp8_e4m3 and __nv_fp8_e5m2 are alike but for the format).
template <__nv_fp8_interpretation_t K>
struct kk_fp8 {
  __nv_fp8_storage_t __x;
  kk_fp8() = default;
  explicit kk_fp8(float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, K)) {}
  explicit kk_fp8(double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, K)) {}
  explicit kk_fp8(__half h) : __x(__nv_cvt_halfraw_to_fp8({h.__x}, __NV_SATFINITE, K)) {}
  explicit kk_fp8(__nv_bfloat16 h)
      : __x(__nv_cvt_bfloat16raw_to_fp8({h.__x}, __NV_SATFINITE, K)) {}
  // integers, and unscoped enums (CUDA's int constructor takes them by promotion)
  template <class I, class = std::enable_if_t<std::is_integral<I>::value ||
                                              (std::is_enum<I>::value &&
                                               std::is_convertible<I, int>::value)>>
  explicit kk_fp8(I v) : kk_fp8((float)v) {}
  explicit operator __half() const {
    __half h;
    h.__x = __nv_cvt_fp8_to_halfraw(__x, K).x;
    return h;
  }
  explicit operator float() const { return float(__half(*this)); }
  explicit operator double() const { return (double)float(*this); }
  explicit operator __nv_bfloat16() const { return __float2bfloat16_rz(float(*this)); }
  explicit operator bool() const { return (__x & 0x7fu) != 0u; }
  // 8-bit integers: NaN gives 0, out of range saturates, else toward zero (kk_to_int, as CUDA's
  // header computes them from the float); wider ones through __half, as CUDA's
  template <class I>
  I kk_small_int() const { return kk_to_int<I>(float(*this), KK_RZ); }
  explicit operator unsigned char() const { return kk_small_int<unsigned char>(); }
  explicit operator signed char() const { return kk_small_int<signed char>(); }
  explicit operator char() const { return (char)kk_small_int<char>(); }
  explicit operator short() const { return __half2short_rz(__half(*this)); }
  explicit operator unsigned short() const { return __half2ushort_rz(__half(*this)); }
  explicit operator int() const { return __half2int_rz(__half(*this)); }
  explicit operator unsigned() const { return __half2uint_rz(__half(*this)); }
  explicit operator long() const { return (long)__half2ll_rz(__half(*this)); }
  explicit operator unsigned long() const { return (unsigned long)__half2ull_rz(__half(*this)); }
  explicit operator long long() const { return __half2ll_rz(__half(*this)); }
  explicit operator unsigned long long() const { return __half2ull_rz(__half(*this)); }
};
struct __nv_fp8_e4m3 : kk_fp8<__NV_E4M3> {
  using kk_fp8<__NV_E4M3>::kk_fp8;
  __nv_fp8_e4m3() = default;
};
struct __nv_fp8_e5m2 : kk_fp8<__NV_E5M2> {
  using kk_fp8<__NV_E5M2>::kk_fp8;
  __nv_fp8_e5m2() = default;
};

// Pairs (the first in the low byte) and quads.
template <__nv_fp8_interpretation_t K>
struct kk_fp8x2 {
  __nv_fp8x2_storage_t __x;
  kk_fp8x2() = default;
  explicit kk_fp8x2(float2 f) : __x(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, K)) {}
  explicit kk_fp8x2(double2 f) : __x(__nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, K)) {}
  explicit kk_fp8x2(__half2 h)
      : __x(__nv_cvt_halfraw2_to_fp8x2({h.x.__x, h.y.__x}, __NV_SATFINITE, K)) {}
  explicit kk_fp8x2(__nv_bfloat162 h)
      : __x(__nv_cvt_bfloat16raw2_to_fp8x2({h.x.__x, h.y.__x}, __NV_SATFINITE, K)) {}
  explicit operator __half2() const {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(__x, K);
    __half a, b;
    a.__x = r.x;
    b.__x = r.y;
    return __half2(a, b);
  }
  explicit operator float2() const {
    const __half2 h = __half2(*this);
    return make_float2(float(h.x), float(h.y));
  }
};
struct __nv_fp8x2_e4m3 : kk_fp8x2<__NV_E4M3> {
  using kk_fp8x2<__NV_E4M3>::kk_fp8x2;
  __nv_fp8x2_e4m3() = default;
};
struct __nv_fp8x2_e5m2 : kk_fp8x2<__NV_E5M2> {
  using kk_fp8x2<__NV_E5M2>::kk_fp8x2;
  __nv_fp8x2_e5m2() = default;
};
template <__nv_fp8_interpretation_t K>
struct kk_fp8x4 {
  __nv_fp8x4_storage_t __x;
  kk_fp8x4() = default;
  explicit kk_fp8x4(float4 f)
      : __x((__nv_fp8x4_storage_t)__nv_cvt_float2_to_fp8x2(make_float2(f.z, f.w), __NV_SATFINITE,
                                                           K) << 16 |
            __nv_cvt_float2_to_fp8x2(make_float2(f.x, f.y), __NV_SATFINITE, K)) {}
  explicit kk_fp8x4(double4 f)
      : __x((__nv_fp8x4_storage_t)__nv_cvt_double2_to_fp8x2(make_double2(f.z, f.w),
                                                            __NV_SATFINITE, K) << 16 |
            __nv_cvt_double2_to_fp8x2(make_double2(f.x, f.y), __NV_SATFINITE, K)) {}
  explicit kk_fp8x4(__half2 lo, __half2 hi)
      : __x((__nv_fp8x4_storage_t)kk_fp8x2<K>(hi).__x << 16 | kk_fp8x2<K>(lo).__x) {}
  explicit kk_fp8x4(__nv_bfloat162 lo, __nv_bfloat162 hi)
      : __x((__nv_fp8x4_storage_t)kk_fp8x2<K>(hi).__x << 16 | kk_fp8x2<K>(lo).__x) {}
  explicit operator float4() const {
    kk_fp8x2<K> lo, hi;
    lo.__x = (__nv_fp8x2_storage_t)(__x & 0xffffu);
    hi.__x = (__nv_fp8x2_storage_t)(__x >> 16);
    const float2 a = float2(lo), b = float2(hi);
    return make_float4(a.x, a.y, b.x, b.y);
  }
};
struct __nv_fp8x4_e4m3 : kk_fp8x4<__NV_E4M3> {
  using kk_fp8x4<__NV_E4M3>::kk_fp8x4;
  __nv_fp8x4_e4m3() = default;
};
struct __nv_fp8x4_e5m2 : kk_fp8x4<__NV_E5M2> {
  using kk_fp8x4<__NV_E5M2>::kk_fp8x4;
  __nv_fp8x4_e5m2() = default;
};
