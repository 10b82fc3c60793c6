// The rest of cuda_fp16.h / cuda_bf16.h's functions: conversions in each rounding mode (rn, rz,
// rd, ru), saturating and unordered forms, NaN-propagating max/min, make_half2. Included at the
// end of kk_cpu_half.h. Each is checked bit for bit against the GPU (tests/gpu).
#pragma once

// The halves as kk_round_to's formats (kk_cpu_round.h): a conversion from float is within one
// step of a long double's value; zeros step to the smallest subnormals.
template <class H>
struct kk_half_format {
  static H near(long double v) { return H((float)v); }
  static H step(H h, bool up) {
    const unsigned short x = h.__x;
    H r;
    if ((x & 0x7fffu) == 0) r.__x = up ? 0x0001u : 0x8001u;
    else r.__x = (unsigned short)(((x >> 15) == 0) == up ? x + 1 : x - 1);
    return r;
  }
  static long double value(H h) { return float(h); }
  static bool odd(H h) { return h.__x & 1u; }
};
template <>
struct kk_format<__half> : kk_half_format<__half> {
  static constexpr long double inf_at = 65536.0L;
};
template <>
struct kk_format<__nv_bfloat16> : kk_half_format<__nv_bfloat16> {
  static constexpr long double inf_at = 0x1p128L;
};
// a * b + c rounded once: the product is exact in a long double, and what the sum loses
// (TwoSum's error term) breaks a tie.
template <class H>
static inline H kk_h_fma(H a, H b, H c) {
  const long double p = (long double)float(a) * float(b), z = float(c), s = p + z;
  const long double t = s - p, e = (p - (s - t)) + (z - t);
  return kk_round_to<H>(s, KK_RN, kk_sign(e));
}
// A half's value rounded to an integer type: a float's (kk_to_int, kk_cpu_round.h).
#define KK_H_TO_INT(H, S, I, NAME)                                                            \
  static inline I __##S##2##NAME##_rn(H h) { return kk_to_int<I>(float(h), KK_RN); }          \
  static inline I __##S##2##NAME##_rz(H h) { return kk_to_int<I>(float(h), KK_RZ); }          \
  static inline I __##S##2##NAME##_rd(H h) { return kk_to_int<I>(float(h), KK_RD); }          \
  static inline I __##S##2##NAME##_ru(H h) { return kk_to_int<I>(float(h), KK_RU); }
#define KK_INT_TO_H(H, S, I, NAME)                                                            \
  static inline H __##NAME##2##S##_rz(I i) { return kk_round_to<H>((long double)i, KK_RZ); }  \
  static inline H __##NAME##2##S##_rd(I i) { return kk_round_to<H>((long double)i, KK_RD); }  \
  static inline H __##NAME##2##S##_ru(I i) { return kk_round_to<H>((long double)i, KK_RU); }
#define KK_INT_TO_H_RN(H, S, I, NAME)                                                         \
  static inline H __##NAME##2##S##_rn(I i) { return kk_round_to<H>((long double)i, KK_RN); }

#define KK_HALF_MORE(H, H2, S)                                                                \
  static inline H2 make_##S##2(H a, H b) { return H2(a, b); }                                 \
  static inline short __##S##_as_short(H h) { return (short)h.__x; }                          \
  static inline H __short_as_##S(short s) { H h; h.__x = (unsigned short)s; return h; }       \
  static inline H __float2##S##_rz(float f) { return kk_round_to<H>(f, KK_RZ); }              \
  static inline H __float2##S##_rd(float f) { return kk_round_to<H>(f, KK_RD); }              \
  static inline H __float2##S##_ru(float f) { return kk_round_to<H>(f, KK_RU); }              \
  KK_H_TO_INT(H, S, int, int) KK_H_TO_INT(H, S, unsigned, uint)                               \
  KK_H_TO_INT(H, S, short, short) KK_H_TO_INT(H, S, unsigned short, ushort)                   \
  KK_H_TO_INT(H, S, long long, ll) KK_H_TO_INT(H, S, unsigned long long, ull)                 \
  static inline signed char __##S##2char_rz(H h) { return kk_to_int<signed char>(float(h), KK_RZ); } \
  static inline unsigned char __##S##2uchar_rz(H h) {                                         \
    return kk_to_int<unsigned char>(float(h), KK_RZ);                                         \
  }                                                                                           \
  KK_INT_TO_H(H, S, int, int) KK_INT_TO_H(H, S, unsigned, uint)                               \
  KK_INT_TO_H(H, S, short, short) KK_INT_TO_H(H, S, unsigned short, ushort)                   \
  KK_INT_TO_H(H, S, long long, ll) KK_INT_TO_H(H, S, unsigned long long, ull)                 \
  KK_INT_TO_H_RN(H, S, int, int) KK_INT_TO_H_RN(H, S, unsigned, uint)                         \
  KK_INT_TO_H_RN(H, S, short, short) KK_INT_TO_H_RN(H, S, unsigned short, ushort)             \
  KK_INT_TO_H_RN(H, S, long long, ll) KK_INT_TO_H_RN(H, S, unsigned long long, ull)

// Saturating forms clamp to [0, 1] (NaN to +0); relu forms clamp below at 0 (NaN gives the
// canonical NaN); _rn forms are the plain operations (kernelkit never contracts them).
template <class H>
static inline H kk_h_canonical_nan() { H r; r.__x = 0x7fffu; return r; }
template <class H>
static inline H kk_h_sat(H h) {
  const float f = float(h);
  return f != f || f <= 0.0f ? H(0.0f) : f >= 1.0f ? H(1.0f) : h;
}
template <class H>
static inline H kk_h_relu(H h) {
  const float f = float(h);
  return f != f ? kk_h_canonical_nan<H>() : f <= 0.0f ? H(0.0f) : h;  // -0 gives +0 too
}

#define KK_PAIR2(H2, NAME, ONE)                                                               \
  static inline H2 NAME(H2 a, H2 b) { return H2(ONE(a.x, b.x), ONE(a.y, b.y)); }
// Per relation R: __hR2 (1.0 or 0.0 a lane), __hbR2 (both lanes) where kk_cpu_half.h lacks
// them, and __hR2_mask (0xffff a lane) for each.
#define KK_PAIR_H2(H, H2, R, ONE)                                                             \
  static inline H2 __h##R##2(H2 a, H2 b) {                                                    \
    return H2(H(ONE(a.x, b.x) ? 1.f : 0.f), H(ONE(a.y, b.y) ? 1.f : 0.f));                    \
  }
#define KK_PAIR_B2(H2, R, ONE)                                                                \
  static inline bool __hb##R##2(H2 a, H2 b) { return ONE(a.x, b.x) && ONE(a.y, b.y); }
#define KK_PAIR_MASK(H2, R, ONE)                                                              \
  static inline unsigned __h##R##2_mask(H2 a, H2 b) {                                         \
    return (ONE(a.x, b.x) ? 0xffffu : 0u) | (ONE(a.y, b.y) ? 0xffff0000u : 0u);               \
  }
#define KK_PAIR_ALL(H, H2, R, ONE)                                                            \
  KK_PAIR_H2(H, H2, R, ONE) KK_PAIR_B2(H2, R, ONE) KK_PAIR_MASK(H2, R, ONE)

#define KK_HALF_MORE_OPS(H, H2)                                                               \
  static inline H __hadd_rn(H a, H b) { return a + b; }                                       \
  static inline H __hsub_rn(H a, H b) { return a - b; }                                       \
  static inline H __hmul_rn(H a, H b) { return a * b; }                                       \
  static inline H __hadd_sat(H a, H b) { return kk_h_sat(H(a + b)); }                         \
  static inline H __hsub_sat(H a, H b) { return kk_h_sat(H(a - b)); }                         \
  static inline H __hmul_sat(H a, H b) { return kk_h_sat(H(a * b)); }                         \
  static inline H __hfma_sat(H a, H b, H c) { return kk_h_sat(__hfma(a, b, c)); }             \
  static inline H __hfma_relu(H a, H b, H c) { return kk_h_relu(__hfma(a, b, c)); }           \
  static inline H __hmax_nan(H a, H b) {                                                      \
    return std::isnan(float(a)) || std::isnan(float(b)) ? kk_h_canonical_nan<H>()             \
                                                        : __hmax(a, b);                       \
  }                                                                                           \
  static inline H __hmin_nan(H a, H b) {                                                      \
    return std::isnan(float(a)) || std::isnan(float(b)) ? kk_h_canonical_nan<H>()             \
                                                        : __hmin(a, b);                       \
  }                                                                                           \
  static inline bool __hequ(H a, H b) { return !(a < b || a > b); }                           \
  static inline bool __hneu(H a, H b) { return !(a == b); }                                   \
  static inline bool __hltu(H a, H b) { return !(a >= b); }                                   \
  static inline bool __hleu(H a, H b) { return !(a > b); }                                    \
  static inline bool __hgtu(H a, H b) { return !(a <= b); }                                   \
  static inline bool __hgeu(H a, H b) { return !(a < b); }                                    \
  static inline H htanh(H a) { return H(tanhf(float(a))); }                                   \
  static inline H hexp10(H a) { return H(exp10f(float(a))); }                                 \
  static inline H hlog10(H a) { return H(log10f(float(a))); }                                 \
  KK_PAIR2(H2, __hadd2_rn, __hadd_rn) KK_PAIR2(H2, __hsub2_rn, __hsub_rn)                     \
  KK_PAIR2(H2, __hmul2_rn, __hmul_rn) KK_PAIR2(H2, __hadd2_sat, __hadd_sat)                   \
  KK_PAIR2(H2, __hsub2_sat, __hsub_sat) KK_PAIR2(H2, __hmul2_sat, __hmul_sat)                 \
  KK_PAIR2(H2, __hmax2_nan, __hmax_nan) KK_PAIR2(H2, __hmin2_nan, __hmin_nan)                 \
  static inline H2 __hfma2_sat(H2 a, H2 b, H2 c) {                                            \
    return H2(__hfma_sat(a.x, b.x, c.x), __hfma_sat(a.y, b.y, c.y));                          \
  }                                                                                           \
  static inline H2 __hfma2_relu(H2 a, H2 b, H2 c) {                                           \
    return H2(__hfma_relu(a.x, b.x, c.x), __hfma_relu(a.y, b.y, c.y));                        \
  }                                                                                           \
  static inline H2 __hcmadd(H2 a, H2 b, H2 c) { /* cuda_fp16.hpp's four fmas */              \
    const H re = __hfma(a.x, b.x, c.x), im = __hfma(a.x, b.y, c.y);                           \
    return H2(__hfma(__hneg(a.y), b.y, re), __hfma(a.y, b.x, im));                            \
  }                                                                                           \
  static inline H2 h2tanh(H2 a) { return H2(htanh(a.x), htanh(a.y)); }                        \
  static inline H2 h2exp10(H2 a) { return H2(hexp10(a.x), hexp10(a.y)); }                     \
  static inline H2 h2log10(H2 a) { return H2(hlog10(a.x), hlog10(a.y)); }                     \
  static inline H2 __hisnan2(H2 a) {                                                          \
    return H2(H(std::isnan(float(a.x)) ? 1.0f : 0.0f), H(std::isnan(float(a.y)) ? 1.0f : 0.0f)); \
  }                                                                                           \
  KK_PAIR_MASK(H2, eq, __heq) KK_PAIR_MASK(H2, ne, __hne) KK_PAIR_MASK(H2, lt, __hlt)         \
  KK_PAIR_MASK(H2, gt, __hgt) KK_PAIR_H2(H, H2, le, __hle) KK_PAIR_MASK(H2, le, __hle)        \
  KK_PAIR_H2(H, H2, ge, __hge) KK_PAIR_MASK(H2, ge, __hge)                                    \
  KK_PAIR_ALL(H, H2, equ, __hequ) KK_PAIR_ALL(H, H2, neu, __hneu)                             \
  KK_PAIR_ALL(H, H2, ltu, __hltu) KK_PAIR_ALL(H, H2, leu, __hleu)                             \
  KK_PAIR_ALL(H, H2, gtu, __hgtu) KK_PAIR_ALL(H, H2, geu, __hgeu)

// bfloat16's __hisinf (kk_cpu_half.h names it __h_bf16_isinf; CUDA overloads the __h name).
static inline int __hisinf(__nv_bfloat16 a) { return __h_bf16_isinf(a); }

KK_HALF_MORE(__half, __half2, half)
KK_HALF_MORE(__nv_bfloat16, __nv_bfloat162, bfloat16)
KK_HALF_MORE_OPS(__half, __half2)
KK_HALF_MORE_OPS(__nv_bfloat16, __nv_bfloat162)
#undef KK_HALF_MORE_OPS
#undef KK_PAIR_ALL
#undef KK_PAIR_MASK
#undef KK_PAIR_B2
#undef KK_PAIR_H2
#undef KK_PAIR2
#undef KK_HALF_MORE
#undef KK_INT_TO_H_RN
#undef KK_INT_TO_H
#undef KK_H_TO_INT
