// __half and __nv_bfloat16 as 2-byte storage types; arithmetic goes through float (exact for one
// +,-,*,/ since float has more than 2p+2 bits of half's and bfloat16's precision).
#pragma once
#define KK_CPU_BF16_TYPES 1  // __nv_bfloat16 below (kernelkit's own kernels test it)

static inline unsigned kk_f32_bits(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float kk_bits_f32(unsigned u) { float f; memcpy(&f, &u, 4); return f; }

static inline unsigned short kk_f32_to_f16(float f) {  // round to nearest even
  unsigned u = kk_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;  // NaN: the GPU's canonical NaN (cvt.rn.f16.f32)
  if (a == 0x7f800000u) return (unsigned short)(sign | 0x7c00u);
  if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {  // subnormal half (or zero): add 0.5 to shift mantissa bits into place
    float r = kk_bits_f32(a) + 0.5f;
    return (unsigned short)(sign | (kk_f32_bits(r) - 0x3f000000u));
  }
  unsigned odd = (a >> 13) & 1u;
  a += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round
  return (unsigned short)(sign | (a >> 13));
}

static inline float kk_f16_to_f32(unsigned short h) {
  unsigned sign = (unsigned)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return kk_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) return (sign ? -1.0f : 1.0f) * (float)m * 5.9604644775390625e-8f;  // m * 2^-24
  return kk_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

static inline unsigned short kk_f32_to_bf16(float f) {  // round to nearest even
  unsigned u = kk_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN: the GPU's canonical NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}
static inline float kk_bf16_to_f32(unsigned short b) { return kk_bits_f32((unsigned)b << 16); }

// The bits as cuda_fp16.h / cuda_bf16.h's raw structs, which the types convert to and from.
struct __half_raw { unsigned short x; };
struct __half2_raw { unsigned short x, y; };
struct __nv_bfloat16_raw { unsigned short x; };
struct __nv_bfloat162_raw { unsigned short x, y; };

#define KK_HALF_TYPE(H, RAW, TO, FROM)                                                        \
  struct H {                                                                                  \
    unsigned short __x;                                                                       \
    H() = default;                                                                            \
    H(const RAW& r) : __x(r.x) {}                                                             \
    operator RAW() const { return {__x}; }                                                    \
    H(float f) : __x(TO(f)) {}                                                                \
    H(double f) : __x(TO((float)f)) {}                                                        \
    H(int i) : __x(TO((float)i)) {}                                                           \
    H(unsigned i) : __x(TO((float)i)) {}                                                      \
    H(long long i) : __x(TO((float)i)) {}                                                     \
    H(unsigned long long i) : __x(TO((float)i)) {}                                            \
    operator float() const { return FROM(__x); }                                              \
    H& operator+=(H o) { return *this = H(float(*this) + float(o)); }                         \
    H& operator-=(H o) { return *this = H(float(*this) - float(o)); }                         \
    H& operator*=(H o) { return *this = H(float(*this) * float(o)); }                         \
    H& operator/=(H o) { return *this = H(float(*this) / float(o)); }                         \
    H& operator++() { return *this += H(1.0f); }                                              \
    H& operator--() { return *this -= H(1.0f); }                                              \
    H operator++(int) { H r = *this; ++*this; return r; }                                     \
    H operator--(int) { H r = *this; --*this; return r; }                                     \
    H operator-() const { H r; r.__x = (unsigned short)(__x ^ 0x8000u); return r; }           \
    H operator+() const { return *this; }                                                     \
  };                                                                                          \
  static inline H operator+(H a, H b) { return H(float(a) + float(b)); }                      \
  static inline H operator-(H a, H b) { return H(float(a) - float(b)); }                      \
  static inline H operator*(H a, H b) { return H(float(a) * float(b)); }                      \
  static inline H operator/(H a, H b) { return H(float(a) / float(b)); }                      \
  static inline bool operator==(H a, H b) { return float(a) == float(b); }                    \
  static inline bool operator!=(H a, H b) { return float(a) != float(b); }                    \
  static inline bool operator<(H a, H b) { return float(a) < float(b); }                      \
  static inline bool operator>(H a, H b) { return float(a) > float(b); }                      \
  static inline bool operator<=(H a, H b) { return float(a) <= float(b); }                    \
  static inline bool operator>=(H a, H b) { return float(a) >= float(b); }                    \
  KK_HALF_MIXED(H, +) KK_HALF_MIXED(H, -) KK_HALF_MIXED(H, *) KK_HALF_MIXED(H, /)              \
  KK_HALF_MIXED(H, ==) KK_HALF_MIXED(H, !=) KK_HALF_MIXED(H, <) KK_HALF_MIXED(H, >)            \
  KK_HALF_MIXED(H, <=) KK_HALF_MIXED(H, >=)

// half op number: computed in float (or double), like CUDA's implicit conversions.
#define KK_HALF_MIXED(H, OP)                                                                  \
  template <class U, class = std::enable_if_t<std::is_arithmetic<U>::value>>                  \
  static inline auto operator OP(H a, U b) { return float(a) OP b; }                          \
  template <class U, class = std::enable_if_t<std::is_arithmetic<U>::value>>                  \
  static inline auto operator OP(U a, H b) { return a OP float(b); }

KK_HALF_TYPE(__half, __half_raw, kk_f32_to_f16, kk_f16_to_f32)
KK_HALF_TYPE(__nv_bfloat16, __nv_bfloat16_raw, kk_f32_to_bf16, kk_bf16_to_f32)
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat16 bfloat16_t;

// std::numeric_limits of both, as libcu++ gives them under nvcc and NVRTC (without these the
// primary template answers 0 for quiet_NaN(), max(), ... : PyTorch's NLL loss returns NaN so).
#define KK_HALF_LIMITS(H, DIG, DIG10, MAXDIG10, MINEXP, MINEXP10, MAXEXP, MAXEXP10, MIN, MAX, \
                       EPS, DENORM, INF, QNAN, SNAN)                                          \
  template <>                                                                                 \
  struct std::numeric_limits<H> {                                                             \
    static H kk_bits(unsigned short b) { H r; r.__x = b; return r; }                          \
    static constexpr bool is_specialized = true, is_signed = true, is_integer = false;         \
    static constexpr bool is_exact = false, has_infinity = true, has_quiet_NaN = true;        \
    static constexpr bool has_signaling_NaN = true, is_iec559 = true, is_bounded = true;      \
    static constexpr bool is_modulo = false, traps = false, tinyness_before = false;          \
    static constexpr std::float_denorm_style has_denorm = std::denorm_present;                \
    static constexpr bool has_denorm_loss = false;                                            \
    static constexpr std::float_round_style round_style = std::round_to_nearest;              \
    static constexpr int digits = DIG, digits10 = DIG10, max_digits10 = MAXDIG10, radix = 2;  \
    static constexpr int min_exponent = MINEXP, min_exponent10 = MINEXP10;                    \
    static constexpr int max_exponent = MAXEXP, max_exponent10 = MAXEXP10;                    \
    static H min() noexcept { return kk_bits(MIN); }                                          \
    static H max() noexcept { return kk_bits(MAX); }                                          \
    static H lowest() noexcept { return kk_bits(MAX | 0x8000u); }                             \
    static H epsilon() noexcept { return kk_bits(EPS); }                                      \
    static H round_error() noexcept { return H(0.5f); }                                       \
    static H infinity() noexcept { return kk_bits(INF); }                                     \
    static H quiet_NaN() noexcept { return kk_bits(QNAN); }                                   \
    static H signaling_NaN() noexcept { return kk_bits(SNAN); }                               \
    static H denorm_min() noexcept { return kk_bits(DENORM); }                                \
  };
KK_HALF_LIMITS(__half, 11, 3, 5, -13, -4, 16, 4, 0x0400u, 0x7bffu, 0x1400u, 0x0001u, 0x7c00u,
               0x7e00u, 0x7d00u)
KK_HALF_LIMITS(__nv_bfloat16, 8, 2, 4, -125, -37, 128, 38, 0x0080u, 0x7f7fu, 0x3c00u, 0x0001u,
               0x7f80u, 0x7fc0u, 0x7fa0u)
#undef KK_HALF_LIMITS

// The pairs, with cuda_fp16.h / cuda_bf16.h's constructor (two halves; floats convert) and
// lane-wise operators (comparisons are true when both lanes compare true, as __hbeq2).
#define KK_HALF2_TYPE(H2, H, RAW2)                                                            \
  struct alignas(4) H2 {                                                                      \
    H x, y;                                                                                   \
    H2() = default;                                                                           \
    constexpr H2(const H& a, const H& b) : x(a), y(b) {}                                      \
    H2(const RAW2& r) { x.__x = r.x; y.__x = r.y; }                                           \
    operator RAW2() const { return {x.__x, y.__x}; }                                          \
    H2& operator+=(const H2& o) { x += o.x; y += o.y; return *this; }                         \
    H2& operator-=(const H2& o) { x -= o.x; y -= o.y; return *this; }                         \
    H2& operator*=(const H2& o) { x *= o.x; y *= o.y; return *this; }                         \
    H2& operator/=(const H2& o) { x /= o.x; y /= o.y; return *this; }                         \
    H2& operator++() { ++x; ++y; return *this; }                                              \
    H2& operator--() { --x; --y; return *this; }                                              \
    H2 operator++(int) { H2 r = *this; ++*this; return r; }                                   \
    H2 operator--(int) { H2 r = *this; --*this; return r; }                                   \
    H2 operator-() const { return H2(-x, -y); }                                               \
    H2 operator+() const { return *this; }                                                    \
  };                                                                                          \
  static inline H2 operator+(const H2& a, const H2& b) { return H2(a.x + b.x, a.y + b.y); }   \
  static inline H2 operator-(const H2& a, const H2& b) { return H2(a.x - b.x, a.y - b.y); }   \
  static inline H2 operator*(const H2& a, const H2& b) { return H2(a.x * b.x, a.y * b.y); }   \
  static inline H2 operator/(const H2& a, const H2& b) { return H2(a.x / b.x, a.y / b.y); }   \
  static inline bool operator==(const H2& a, const H2& b) { return a.x == b.x && a.y == b.y; } \
  static inline bool operator!=(const H2& a, const H2& b) { return a.x != b.x && a.y != b.y; } \
  static inline bool operator<(const H2& a, const H2& b) { return a.x < b.x && a.y < b.y; }    \
  static inline bool operator>(const H2& a, const H2& b) { return a.x > b.x && a.y > b.y; }    \
  static inline bool operator<=(const H2& a, const H2& b) { return a.x <= b.x && a.y <= b.y; } \
  static inline bool operator>=(const H2& a, const H2& b) { return a.x >= b.x && a.y >= b.y; }
KK_HALF2_TYPE(__half2, __half, __half2_raw)
KK_HALF2_TYPE(__nv_bfloat162, __nv_bfloat16, __nv_bfloat162_raw)
#undef KK_HALF2_TYPE
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

// __hmax / __hmin: a NaN input gives the other input, two NaNs the canonical NaN (0x7fff), and
// +0 is above -0 (cuda_fp16.h's documented semantics; not float's fmax, which may return either
// zero).
template <class H>
static inline H kk_hminmax(H a, H b, bool want_max) {
  const bool na = std::isnan(float(a)), nb = std::isnan(float(b));
  if (na || nb) {
    if (na && nb) { H r; r.__x = 0x7fffu; return r; }
    return na ? b : a;
  }
  const float fa = float(a), fb = float(b);
  if (fa == fb) {  // equal, or +0 and -0: the sign bit decides
    const bool a_neg = a.__x >> 15;
    return (want_max ? a_neg : !a_neg) ? b : a;
  }
  return (fa > fb) == want_max ? a : b;
}

// a * b + c rounded once, as the GPU's fma.rn.f16 / .bf16 (kk_cpu_half_more.h)
template <class H>
static inline H kk_h_fma(H a, H b, H c);

#define KK_HALF_FUNCS(H, P, S)                                                                \
  static inline H __float2##S(float f) { return H(f); }                                       \
  static inline H __float2##S##_rn(float f) { return H(f); }                                  \
  static inline H __double2##S(double f) { return H(f); }                                     \
  static inline float __##S##2float(H h) { return float(h); }                                 \
  static inline unsigned short __##S##_as_ushort(H h) { return h.__x; }                       \
  static inline H __ushort_as_##S(unsigned short u) { H h; h.__x = u; return h; }             \
  static inline H P##add(H a, H b) { return a + b; }                                          \
  static inline H P##sub(H a, H b) { return a - b; }                                          \
  static inline H P##mul(H a, H b) { return a * b; }                                          \
  static inline H P##div(H a, H b) { return a / b; }                                          \
  static inline H P##fma(H a, H b, H c) { return kk_h_fma(a, b, c); }                        \
  static inline H P##neg(H a) { return -a; }                                                  \
  static inline H P##abs(H a) { H r; r.__x = (unsigned short)(a.__x & 0x7fffu); return r; }   \
  static inline H P##max(H a, H b) { return kk_hminmax(a, b, true); }                        \
  static inline H P##min(H a, H b) { return kk_hminmax(a, b, false); }                       \
  static inline bool P##eq(H a, H b) { return a == b; }                                       \
  static inline bool P##ne(H a, H b) { return a < b || a > b; } /* ordered: NaN -> false */  \
  static inline bool P##lt(H a, H b) { return a < b; }                                        \
  static inline bool P##le(H a, H b) { return a <= b; }                                       \
  static inline bool P##gt(H a, H b) { return a > b; }                                        \
  static inline bool P##ge(H a, H b) { return a >= b; }                                       \
  static inline bool P##isnan(H a) { return std::isnan(float(a)); }                          \
  static inline int P##isinf(H a) { /* -1, 1 or 0 */                                         \
    return std::isinf(float(a)) ? (float(a) < 0 ? -1 : 1) : 0;                                \
  }

KK_HALF_FUNCS(__half, __h, half)
KK_HALF_FUNCS(__nv_bfloat16, __h_bf16_, bfloat16)
// CUDA spells the bf16 forms with the same names as half's (overloads): re-export them.
#define KK_BF16_ALIAS(n) \
  static inline auto __h##n(__nv_bfloat16 a, __nv_bfloat16 b) { return __h_bf16_##n(a, b); }
KK_BF16_ALIAS(add) KK_BF16_ALIAS(sub) KK_BF16_ALIAS(mul) KK_BF16_ALIAS(div) KK_BF16_ALIAS(max)
KK_BF16_ALIAS(min) KK_BF16_ALIAS(eq) KK_BF16_ALIAS(ne) KK_BF16_ALIAS(lt) KK_BF16_ALIAS(le)
KK_BF16_ALIAS(gt) KK_BF16_ALIAS(ge)
#undef KK_BF16_ALIAS
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
  return __h_bf16_fma(a, b, c);
}
static inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return -a; }
static inline __nv_bfloat16 __habs(__nv_bfloat16 a) { return __h_bf16_abs(a); }
static inline bool __hisnan(__nv_bfloat16 a) { return std::isnan(float(a)); }

#define KK_HMATH(name, fn)                                                                    \
  static inline __half name(__half a) { return __half(fn(float(a))); }                        \
  static inline __nv_bfloat16 name(__nv_bfloat16 a) { return __nv_bfloat16(fn(float(a))); }
KK_HMATH(hexp, expf) KK_HMATH(hlog, logf) KK_HMATH(hsqrt, sqrtf) KK_HMATH(hsin, sinf)
KK_HMATH(hcos, cosf) KK_HMATH(hexp2, exp2f) KK_HMATH(hlog2, log2f) KK_HMATH(htrunc, truncf)
KK_HMATH(hfloor, floorf) KK_HMATH(hceil, ceilf) KK_HMATH(hrint, rintf) KK_HMATH(hrcp, 1.0f /)
static inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
static inline __nv_bfloat16 hrsqrt(__nv_bfloat16 a) { return __nv_bfloat16(1.0f / sqrtf(float(a))); }
#undef KK_HMATH

// Pair functions of cuda_fp16.h / cuda_bf16.h: lane-wise through the scalar forms.
#define KK_PAIR_FUNCS(H2, H, S)                                                               \
  static inline H2 __floats2##S##2_rn(float a, float b) { return H2(H(a), H(b)); }            \
  static inline H2 __float2##S##2_rn(float a) { return H2(H(a), H(a)); }                      \
  static inline H2 __float22##S##2_rn(float2 f) { return H2(H(f.x), H(f.y)); }               \
  static inline float2 __##S##22float2(H2 h) { return float2{float(h.x), float(h.y)}; }       \
  static inline float __low2float(H2 h) { return float(h.x); }                                \
  static inline float __high2float(H2 h) { return float(h.y); }                               \
  static inline H __low2##S(H2 h) { return h.x; }                                             \
  static inline H __high2##S(H2 h) { return h.y; }                                            \
  static inline H2 __halves2##S##2(H a, H b) { return H2(a, b); }                             \
  static inline H2 __##S##2##S##2(H a) { return H2(a, a); }                                   \
  static inline H2 __lows2##S##2(H2 a, H2 b) { return H2(a.x, b.x); }                         \
  static inline H2 __highs2##S##2(H2 a, H2 b) { return H2(a.y, b.y); }                        \
  static inline H2 __low2##S##2(H2 a) { return H2(a.x, a.x); }                                \
  static inline H2 __high2##S##2(H2 a) { return H2(a.y, a.y); }                               \
  static inline H2 __lowhigh2highlow(H2 a) { return H2(a.y, a.x); }                           \
  static inline H2 __hadd2(H2 a, H2 b) { return a + b; }                                      \
  static inline H2 __hsub2(H2 a, H2 b) { return a - b; }                                      \
  static inline H2 __hmul2(H2 a, H2 b) { return a * b; }                                      \
  static inline H2 __h2div(H2 a, H2 b) { return a / b; }                                      \
  static inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)); } \
  static inline H2 __hneg2(H2 a) { return -a; }                                               \
  static inline H2 __habs2(H2 a) { return H2(__habs(a.x), __habs(a.y)); }                     \
  static inline H2 __hmax2(H2 a, H2 b) { return H2(__hmax(a.x, b.x), __hmax(a.y, b.y)); }     \
  static inline H2 __hmin2(H2 a, H2 b) { return H2(__hmin(a.x, b.x), __hmin(a.y, b.y)); }     \
  static inline bool __hbeq2(H2 a, H2 b) { return a == b; }                                   \
  static inline bool __hbne2(H2 a, H2 b) { return __hne(a.x, b.x) && __hne(a.y, b.y); }       \
  static inline bool __hblt2(H2 a, H2 b) { return a < b; }                                    \
  static inline bool __hble2(H2 a, H2 b) { return a <= b; }                                   \
  static inline bool __hbgt2(H2 a, H2 b) { return a > b; }                                    \
  static inline bool __hbge2(H2 a, H2 b) { return a >= b; }                                   \
  static inline H2 __heq2(H2 a, H2 b) { return H2(H(a.x == b.x ? 1.f : 0.f), H(a.y == b.y ? 1.f : 0.f)); } \
  static inline H2 __hne2(H2 a, H2 b) { return H2(H(__hne(a.x, b.x) ? 1.f : 0.f), H(__hne(a.y, b.y) ? 1.f : 0.f)); } \
  static inline H2 __hlt2(H2 a, H2 b) { return H2(H(a.x < b.x ? 1.f : 0.f), H(a.y < b.y ? 1.f : 0.f)); } \
  static inline H2 __hgt2(H2 a, H2 b) { return H2(H(a.x > b.x ? 1.f : 0.f), H(a.y > b.y ? 1.f : 0.f)); } \
  static inline H2 h2exp(H2 a) { return H2(hexp(a.x), hexp(a.y)); }                           \
  static inline H2 h2exp2(H2 a) { return H2(hexp2(a.x), hexp2(a.y)); }                        \
  static inline H2 h2log(H2 a) { return H2(hlog(a.x), hlog(a.y)); }                           \
  static inline H2 h2log2(H2 a) { return H2(hlog2(a.x), hlog2(a.y)); }                        \
  static inline H2 h2sqrt(H2 a) { return H2(hsqrt(a.x), hsqrt(a.y)); }                        \
  static inline H2 h2rsqrt(H2 a) { return H2(hrsqrt(a.x), hrsqrt(a.y)); }                     \
  static inline H2 h2rcp(H2 a) { return H2(hrcp(a.x), hrcp(a.y)); }                           \
  static inline H2 h2sin(H2 a) { return H2(hsin(a.x), hsin(a.y)); }                           \
  static inline H2 h2cos(H2 a) { return H2(hcos(a.x), hcos(a.y)); }                           \
  static inline H2 h2floor(H2 a) { return H2(hfloor(a.x), hfloor(a.y)); }                     \
  static inline H2 h2ceil(H2 a) { return H2(hceil(a.x), hceil(a.y)); }                        \
  static inline H2 h2trunc(H2 a) { return H2(htrunc(a.x), htrunc(a.y)); }                     \
  static inline H2 h2rint(H2 a) { return H2(hrint(a.x), hrint(a.y)); }
KK_PAIR_FUNCS(__half2, __half, half)
KK_PAIR_FUNCS(__nv_bfloat162, __nv_bfloat16, bfloat16)
#undef KK_PAIR_FUNCS
#include "kk_cpu_half_more.h"
