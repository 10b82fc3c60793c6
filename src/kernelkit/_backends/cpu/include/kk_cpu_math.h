// CUDA math and integer intrinsics, min/max, and the metal:: spellings, on the host libm.
#pragma once

// The GPU's max.f32/min.f32 (CUDA's max and min of floating values): a NaN (quiet or
// signalling) gives the other operand, two NaNs a NaN, and -0 is below +0.
template <class C>
static inline C kk_fminmax(C x, C y, bool want_max) {
  if (x != x) return y;
  if (y != y) return x;
  if (x == y) return (std::signbit(x) == want_max) ? y : x;  // equal, or +0 and -0
  return (x > y) == want_max ? x : y;
}
// min/max on any mix of arithmetic types (and kernelkit's scalar wrappers), as CUDA's overloads:
// in the common type; floating ones as the GPU's max.f32 / min.f32 (kk_fminmax). The trailing
// parameter pack makes these the less specialized: a kernel's own two-argument min/max template
// wins over them, as over the CUDA prelude's integer ones.
#define KK_MINMAX(name, cmp, WANT_MAX)                                                       \
  template <class A, class B, class... None>                                                  \
  static inline std::enable_if_t<std::is_arithmetic<kk_value_t<A>>::value &&                  \
                                     std::is_arithmetic<kk_value_t<B>>::value,                \
                                 std::common_type_t<kk_value_t<A>, kk_value_t<B>>>            \
  name(const A& a, const B& b, None...) {                                                     \
    using C = std::common_type_t<kk_value_t<A>, kk_value_t<B>>;                               \
    C x = (C)(kk_value_t<A>)a, y = (C)(kk_value_t<B>)b;                                       \
    if constexpr (std::is_floating_point<C>::value) return kk_fminmax(x, y, WANT_MAX);        \
    else return (y cmp x) ? y : x;                                                            \
  }
KK_MINMAX(min, <, false)
KK_MINMAX(max, >, true)
#undef KK_MINMAX
static inline __half min(__half a, __half b) { return __hmin(a, b); }
static inline __half max(__half a, __half b) { return __hmax(a, b); }
static inline __nv_bfloat16 min(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
static inline __nv_bfloat16 max(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
static inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
#define __expf kk_expf
static inline float kk_expf(float x) { return expf(x); }
#define __exp10f kk_exp10f
static inline float kk_exp10f(float x) { return exp10f(x); }
#define __logf kk_logf
static inline float kk_logf(float x) { return logf(x); }
#define __log2f kk_log2f
static inline float kk_log2f(float x) { return log2f(x); }
#define __log10f kk_log10f
static inline float kk_log10f(float x) { return log10f(x); }
#define __sinf kk_sinf
static inline float kk_sinf(float x) { return sinf(x); }
#define __cosf kk_cosf
static inline float kk_cosf(float x) { return cosf(x); }
#define __tanf kk_tanf
static inline float kk_tanf(float x) { return tanf(x); }
#define __sincosf kk_sincosf
static inline void kk_sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
#define __powf kk_powf
static inline float kk_powf(float a, float b) { return powf(a, b); }
static inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
static inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }

// CUDA-only math functions (the C99 ones come from the host libm).
static inline float rhypotf(float a, float b) { return 1.0f / hypotf(a, b); }
static inline float norm3df(float a, float b, float c) { return sqrtf(a * a + b * b + c * c); }
static inline float rnorm3df(float a, float b, float c) { return 1.0f / norm3df(a, b, c); }
static inline float norm4df(float a, float b, float c, float d) {
  return sqrtf(a * a + b * b + c * c + d * d);
}
static inline float rnorm4df(float a, float b, float c, float d) {
  return 1.0f / norm4df(a, b, c, d);
}
static inline double rcbrt(double x) { return 1.0 / cbrt(x); }



#include "kk_cpu_simd.h"
#include "kk_cpu_special.h"

template <class To, class From>
static inline To kk_bitcast(From f) {
  static_assert(sizeof(To) == sizeof(From), "bit cast needs equal sizes");
  To t;
  memcpy(&t, &f, sizeof(t));
  return t;
}
static inline int __float_as_int(float x) { return kk_bitcast<int>(x); }
static inline unsigned __float_as_uint(float x) { return kk_bitcast<unsigned>(x); }
static inline float __int_as_float(int x) { return kk_bitcast<float>(x); }
static inline float __uint_as_float(unsigned x) { return kk_bitcast<float>(x); }
static inline long long __double_as_longlong(double x) { return kk_bitcast<long long>(x); }
static inline double __longlong_as_double(long long x) { return kk_bitcast<double>(x); }

static inline unsigned long long kk_bitcast_u64(double x) { return kk_bitcast<unsigned long long>(x); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
// The position of mask's |offset|-th set bit from bit base, upward for offset > 0 and downward
// for offset < 0 (offset 0: base itself if set); 0xffffffff where there is none (PTX's fns).
static inline unsigned __fns(unsigned mask, unsigned base, int offset) {
  if (offset == 0) return base < 32 && ((mask >> base) & 1u) ? base : 0xffffffffu;
  int count = offset > 0 ? offset - 1 : -offset - 1;
  const int inc = offset > 0 ? 1 : -1;
  for (int pos = (int)base; pos >= 0 && pos < 32; pos += inc)
    if (((mask >> pos) & 1u) && count-- == 0) return (unsigned)pos;
  return 0xffffffffu;
}
static inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  unsigned long long v = ((unsigned long long)y << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
}
static inline int __mul24(int a, int b) { return (a << 8 >> 8) * (b << 8 >> 8); }
static inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a * b) >> 32);
}
static inline long long __mul64hi(long long a, long long b) {
  return (long long)(((__int128)a * b) >> 64);
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned __uhadd(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a + b) >> 1);
}
static inline unsigned __urhadd(unsigned a, unsigned b) {
  return (unsigned)(((unsigned long long)a + b + 1) >> 1);
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)((((unsigned long long)hi << 32 | lo) << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s & 31));
}
static inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)((((unsigned long long)hi << 32 | lo) << (s < 32 ? s : 32)) >> 32);
}
static inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
  return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s < 32 ? s : 32));
}
// 8- and 16-bit dot products with 32-bit accumulate (quantized kernels)
static inline int __dp4a(int a, int b, int c) {
  for (int k = 0; k < 32; k += 8) c += (int)(signed char)(a >> k) * (int)(signed char)(b >> k);
  return c;
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
  for (int k = 0; k < 32; k += 8) c += ((a >> k) & 0xffu) * ((b >> k) & 0xffu);
  return c;
}
static inline int __dp2a_lo(int a, int b, int c) {
  return c + (int)(short)a * (int)(signed char)b + (int)(short)(a >> 16) * (int)(signed char)(b >> 8);
}
static inline int __dp2a_hi(int a, int b, int c) {
  return c + (int)(short)a * (int)(signed char)(b >> 16) +
         (int)(short)(a >> 16) * (int)(signed char)(b >> 24);
}
static inline int __double2hiint(double x) { return (int)(kk_bitcast_u64(x) >> 32); }
static inline int __double2loint(double x) { return (int)kk_bitcast_u64(x); }
static inline double __hiloint2double(int hi, int lo) {
  const unsigned long long u = ((unsigned long long)(unsigned)hi << 32) | (unsigned)lo;
  double d;
  memcpy(&d, &u, 8);
  return d;
}
static inline void __nanosleep(unsigned ns) { (void)ns; }
template <class T>
static inline T __ldg(const T* p) { return *p; }
// Cache-hinted loads and stores (no caches to steer here). The stored value converts to the
// pointee's type, as CUDA's per-type overloads do.
template <class T>
struct kk_ident { using type = T; };
#define KK_LOAD_HINT(name) \
  template <class T>       \
  static inline T name(const T* p) { return *p; }
#define KK_STORE_HINT(name) \
  template <class T>        \
  static inline void name(T* p, typename kk_ident<T>::type v) { *p = v; }
KK_LOAD_HINT(__ldcg) KK_LOAD_HINT(__ldca) KK_LOAD_HINT(__ldcs) KK_LOAD_HINT(__ldlu)
KK_LOAD_HINT(__ldcv)
KK_STORE_HINT(__stcg) KK_STORE_HINT(__stcs) KK_STORE_HINT(__stwb) KK_STORE_HINT(__stwt)
#undef KK_LOAD_HINT
#undef KK_STORE_HINT
static inline long long clock64() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// metal:: spellings used by Metal-style bodies; fast:: and precise:: are the same functions here.
namespace metal {
#define KK_M1(name, fn) \
  template <class T> static inline T name(T x) { return (T)fn((kk_value_t<T>)x); }
KK_M1(exp, std::exp) KK_M1(exp2, std::exp2) KK_M1(log, std::log) KK_M1(log2, std::log2)
KK_M1(log10, std::log10) KK_M1(sqrt, std::sqrt) KK_M1(abs, std::abs) KK_M1(fabs, std::fabs)
KK_M1(sin, std::sin) KK_M1(cos, std::cos) KK_M1(tan, std::tan) KK_M1(tanh, std::tanh)
KK_M1(sinh, std::sinh) KK_M1(cosh, std::cosh) KK_M1(asin, std::asin) KK_M1(acos, std::acos)
KK_M1(atan, std::atan) KK_M1(floor, std::floor) KK_M1(ceil, std::ceil) KK_M1(round, std::round)
KK_M1(trunc, std::trunc) KK_M1(rint, std::rint) KK_M1(erf, std::erf)
#undef KK_M1
template <class T> static inline T rsqrt(T x) { return (T)(1.0f / std::sqrt((float)x)); }
template <class T> static inline T fma(T a, T b, T c) { return (T)std::fma((float)a, (float)b, (float)c); }
template <class T> static inline T pow(T a, T b) { return (T)std::pow((float)a, (float)b); }
template <class T> static inline T max(T a, T b) { return a > b ? a : b; }
template <class T> static inline T min(T a, T b) { return a < b ? a : b; }
template <class T> static inline T fmax(T a, T b) { return (T)std::fmax((float)a, (float)b); }
template <class T> static inline T fmin(T a, T b) { return (T)std::fmin((float)a, (float)b); }
template <class T> static inline T clamp(T x, T lo, T hi) { return x < lo ? lo : (x > hi ? hi : x); }
template <class T> static inline T select(T a, T b, bool c) { return c ? b : a; }
template <class T> static inline T precise_divide(T a, T b) { return a / b; }
static inline double exp(double x) { return std::exp(x); }
static inline double log(double x) { return std::log(x); }
static inline double sqrt(double x) { return std::sqrt(x); }
namespace fast { using namespace ::metal; }
namespace precise { using namespace ::metal; }
}  // namespace metal
