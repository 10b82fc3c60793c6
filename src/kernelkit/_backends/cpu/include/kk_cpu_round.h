// CUDA's rounding-mode intrinsics on the host: float and double arithmetic in each mode (rn, rz,
// rd, ru: __fadd_rz, __fmul_ru, __fsqrt_rd, __ddiv_ru, ...) and the conversions between floats
// and integers, with the GPU's answers where C leaves them undefined: out-of-range values
// saturate, NaN gives 0 (64-bit integers: 0x8000000000000000, as the GPU's cvt). No FP
// environment is touched: each result is the round-to-nearest one moved one step where the
// exact value (from a long double, TwoSum or an fma remainder) says so. Included by
// kk_cpu.h before the half types (kk_cpu_half_more.h rounds to them with kk_round_to).
#pragma once

enum { KK_RN = 0, KK_RZ = 1, KK_RD = 2, KK_RU = 3 };

// r, the round-to-nearest result of an operation on finite inputs, moved to the result in
// `mode` given the sign of (exact - r) (err < 0: the exact value is below r). An infinite r
// overflowed: the directed modes that round toward zero there stop at the largest finite value.
template <class F>
static inline F kk_directed(F r, int err, int mode) {
  if (mode == KK_RN || std::isnan(r)) return r;
  if (std::isinf(r)) {
    const bool toward_zero = mode == KK_RZ || (mode == KK_RD) == (r > 0);
    return toward_zero ? std::nextafter(r, F(0)) : r;
  }
  const bool down = err < 0 && (mode == KK_RD || (mode == KK_RZ && r > 0));
  const bool up = err > 0 && (mode == KK_RU || (mode == KK_RZ && r < 0));
  return down ? std::nextafter(r, -(F)INFINITY) : up ? std::nextafter(r, (F)INFINITY) : r;
}
static inline int kk_sign(long double v) { return (v > 0) - (v < 0); }

// The formats kk_round_to rounds to: float and double here, the halves in kk_cpu_half_more.h.
// near(v): a value within one step of v (a C conversion: exact for float and double, twice
// rounded for the halves); step(x, up): the next value up or down (zeros step to the smallest
// subnormals, the largest finite values to infinity); value(x): x exactly; odd(x): x's lowest
// bit; inf_at: where infinity counts for round-to-nearest (the next power of two above the
// largest finite value, so that the overflow threshold is a tie there).
template <class F>
struct kk_format;
template <class F>
struct kk_ieee_format {  // float and double: a C conversion rounds to nearest already
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  static F near(long double v) { return (F)v; }
  static F step(F x, bool up) { return std::nextafter(x, up ? (F)INFINITY : -(F)INFINITY); }
  static long double value(F x) { return x; }
  static bool odd(F x) { Bits u; memcpy(&u, &x, sizeof u); return u & 1u; }
};
template <>
struct kk_format<float> : kk_ieee_format<float> {
  static constexpr long double inf_at = 0x1p128L;
};
template <>
struct kk_format<double> : kk_ieee_format<double> {
  static constexpr long double inf_at = 0x1p1024L;
};
template <class F>
static inline long double kk_exact(F x) {
  const long double v = kk_format<F>::value(x), at = kk_format<F>::inf_at;
  return std::isinf(v) ? (v > 0 ? at : -at) : v;
}

// v rounded to F in `mode`; sticky (-1, 0, 1): the exact value is a little below, at or above
// v (the bits a long double lost: every value of F and every midpoint between two is a long
// double, so the exact value and v fall on the same side of each except where v is one, and
// there the sticky sign decides). near(v) and its neighbours bracket v; the mode picks.
template <class F>
static inline F kk_round_to(long double v, int mode, int sticky = 0) {
  using T = kk_format<F>;
  F c = T::near(v);
  if (std::isnan(v) || std::isinf(v)) return c;
  if (std::isinf(T::value(c))) c = T::step(c, T::value(c) < 0);  // the largest finite value
  const long double cv = kk_exact(c);
  if (cv == v && sticky == 0) return c;
  const bool above = cv > v || (cv == v && sticky < 0), below = cv < v || (cv == v && sticky > 0);
  const F lo = above ? T::step(c, false) : c, hi = below ? T::step(c, true) : c;
  switch (mode) {
    case KK_RZ: return v > 0 || (v == 0 && sticky > 0) ? lo : hi;
    case KK_RD: return lo;
    case KK_RU: return hi;
    default: {
      const long double dlo = v - kk_exact(lo), dhi = kk_exact(hi) - v;
      if (dlo != dhi) return dlo < dhi ? lo : hi;
      if (sticky != 0) return sticky > 0 ? hi : lo;
      return T::odd(lo) ? hi : lo;  // a tie: the even one
    }
  }
}

// x + y when that is exactly zero: two zeros of one sign keep it; otherwise +0 in every mode but
// rd, -0 there (IEEE 754).
template <class F, class G>
static inline F kk_zero_sum(G x, G y, int mode) {
  if (x == 0 && y == 0 && std::signbit(x) == std::signbit(y)) return std::signbit(x) ? -F(0) : F(0);
  return mode == KK_RD ? -F(0) : F(0);
}
// float arithmetic: the exact result as a long double and the sign of what that lost.
static inline long double kk_two_sum(long double a, long double b, int* sticky) {
  const long double s = a + b, t = s - a;
  *sticky = kk_sign((a - (s - t)) + (b - t));
  return s;
}
#define KK_F_MODES(SUFFIX, MODE)                                                         \
  static inline float __fadd_##SUFFIX(float a, float b) {                                     \
    int st; const long double s = kk_two_sum(a, b, &st);                                      \
    if (s == 0 && st == 0) return kk_zero_sum<float, long double>(a, b, MODE);               \
    return kk_round_to<float>(s, MODE, st);                                                   \
  }                                                                                           \
  static inline float __fsub_##SUFFIX(float a, float b) { return __fadd_##SUFFIX(a, -b); }    \
  static inline float __fmul_##SUFFIX(float a, float b) {                                     \
    return kk_round_to<float>((long double)a * b, MODE); /* 48 bits: exact */                 \
  }                                                                                           \
  static inline float __fmaf_##SUFFIX(float a, float b, float c) {                            \
    const long double p = (long double)a * b;                                                 \
    int st; const long double s = kk_two_sum(p, c, &st);                                      \
    if (s == 0 && st == 0)                                                                    \
      return kk_zero_sum<float, long double>(p, c, MODE);                                     \
    return kk_round_to<float>(s, MODE, st);                                                   \
  }                                                                                           \
  static inline float __fdiv_##SUFFIX(float a, float b) {                                     \
    const long double q = (long double)a / b;                                                 \
    if (!std::isfinite(a) || !std::isfinite(b) || b == 0) return a / b;                      \
    return kk_round_to<float>(q, MODE, kk_sign(fmal(-q, b, a)) * kk_sign(b));                 \
  }                                                                                           \
  static inline float __frcp_##SUFFIX(float x) { return __fdiv_##SUFFIX(1.0f, x); }           \
  static inline float __fsqrt_##SUFFIX(float x) {                                             \
    const long double s = sqrtl(x);                                                           \
    if (!std::isfinite(x) || x <= 0) return sqrtf(x);                                         \
    return kk_round_to<float>(s, MODE, kk_sign(fmal(-s, s, x)));                              \
  }
// double arithmetic: the round-to-nearest result and the sign of its error, from TwoSum or a
// remainder in long double (whose exponent range keeps the remainders of subnormal operands
// and results exact). Non-finite operands give the plain result.
#define KK_D_MODES(SUFFIX, MODE)                                                               \
  static inline double __dadd_##SUFFIX(double a, double b) {                                  \
    const double s = a + b, t = s - a;                                                        \
    if (!std::isfinite(a) || !std::isfinite(b)) return s;                                     \
    const int err = kk_sign((a - (s - t)) + (b - t));                                         \
    if (s == 0 && err == 0) return kk_zero_sum<double, double>(a, b, MODE);                   \
    return kk_directed(s, err, MODE);                                                         \
  }                                                                                           \
  static inline double __dsub_##SUFFIX(double a, double b) { return __dadd_##SUFFIX(a, -b); } \
  static inline double __dmul_##SUFFIX(double a, double b) {                                  \
    const double p = a * b;                                                                   \
    if (!std::isfinite(a) || !std::isfinite(b)) return p;                                     \
    return kk_directed(p, kk_sign(fmal(a, b, -(long double)p)), MODE);                        \
  }                                                                                           \
  static inline double __ddiv_##SUFFIX(double a, double b) {                                  \
    const double q = a / b;                                                                   \
    if (!std::isfinite(a) || !std::isfinite(b) || b == 0) return q;                           \
    return kk_directed(q, kk_sign(fmal(-(long double)q, b, a)) * kk_sign(b), MODE);           \
  }                                                                                           \
  static inline double __drcp_##SUFFIX(double x) { return __ddiv_##SUFFIX(1.0, x); }          \
  static inline double __dsqrt_##SUFFIX(double x) {                                          \
    const double s = sqrt(x);                                                                 \
    if (!std::isfinite(x) || x <= 0) return s;                                                \
    return kk_directed(s, kk_sign(fmal(-(long double)s, s, x)), MODE);                        \
  }
KK_F_MODES(rn, KK_RN) KK_F_MODES(rz, KK_RZ) KK_F_MODES(rd, KK_RD) KK_F_MODES(ru, KK_RU)
KK_D_MODES(rn, KK_RN) KK_D_MODES(rz, KK_RZ) KK_D_MODES(rd, KK_RD) KK_D_MODES(ru, KK_RU)
#undef KK_F_MODES
#undef KK_D_MODES
static inline float __frsqrt_rn(float x) { return (float)(1.0L / sqrtl(x)); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }

// A float or double rounded to an integer type, saturating; NaN gives what the GPU's cvt does:
// 0x8000000000000000 for 64-bit integers, 0x80000000 from a double, else 0.
template <class I, class F>
static inline I kk_to_int(F x, int mode) {
  const long double v = x;
  if (v != v) return sizeof(I) == 8 ? (I)0x8000000000000000ull
                     : sizeof(F) == 8 ? (I)0x80000000u : (I)0;
  const long double r = mode == KK_RN ? nearbyintl(v) : mode == KK_RZ ? truncl(v)
                        : mode == KK_RD ? floorl(v) : ceill(v);
  if (r <= (long double)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
  if (r >= (long double)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
  return (I)r;
}
#define KK_TO_INT(F, FN, I, IN, SUFFIX, MODE) \
  static inline I __##FN##2##IN##_##SUFFIX(F x) { return kk_to_int<I>(x, MODE); }
#define KK_TO_F(I, IN, F, FN, SUFFIX, MODE) \
  static inline F __##IN##2##FN##_##SUFFIX(I x) { return kk_round_to<F>((long double)x, MODE); }
#define KK_CONVERSIONS(SUFFIX, MODE)                                                           \
  KK_TO_INT(float, float, int, int, SUFFIX, MODE)                                              \
  KK_TO_INT(float, float, unsigned, uint, SUFFIX, MODE)                                        \
  KK_TO_INT(float, float, long long, ll, SUFFIX, MODE)                                         \
  KK_TO_INT(float, float, unsigned long long, ull, SUFFIX, MODE)                               \
  KK_TO_INT(double, double, int, int, SUFFIX, MODE)                                            \
  KK_TO_INT(double, double, unsigned, uint, SUFFIX, MODE)                                      \
  KK_TO_INT(double, double, long long, ll, SUFFIX, MODE)                                       \
  KK_TO_INT(double, double, unsigned long long, ull, SUFFIX, MODE)                             \
  KK_TO_F(int, int, float, float, SUFFIX, MODE)                                                \
  KK_TO_F(unsigned, uint, float, float, SUFFIX, MODE)                                          \
  KK_TO_F(long long, ll, float, float, SUFFIX, MODE)                                           \
  KK_TO_F(unsigned long long, ull, float, float, SUFFIX, MODE)                                 \
  KK_TO_F(long long, ll, double, double, SUFFIX, MODE)                                         \
  KK_TO_F(unsigned long long, ull, double, double, SUFFIX, MODE)                               \
  KK_TO_F(double, double, float, float, SUFFIX, MODE)
KK_CONVERSIONS(rn, KK_RN) KK_CONVERSIONS(rz, KK_RZ) KK_CONVERSIONS(rd, KK_RD)
KK_CONVERSIONS(ru, KK_RU)
#undef KK_CONVERSIONS
#undef KK_TO_F
#undef KK_TO_INT
// int and unsigned to double are exact: CUDA has them in rn only
static inline double __int2double_rn(int x) { return (double)x; }
static inline double __uint2double_rn(unsigned x) { return (double)x; }
