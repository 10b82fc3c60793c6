// CUDA's math functions that the C library lacks: inverse error functions, the scaled
// complementary error function, the inverse normal CDF, modified Bessel functions of order 0 and
// 1, norms of arrays and of 3 or 4 values, integer powers. Computed in long double (Newton steps
// on the C library's erfl/erfcl), so each is within the GPU's documented error bounds (checked in
// tests/backend/test_special_functions.py). Included by kk_cpu_math.h.
#pragma once

// x with erf(x) = y (|y| < 1), from Giles' approximation refined by Newton steps on erf where
// |y| <= 0.5 and on erfc near the ends (where 1 - |y| keeps the digits that y loses).
static inline long double kk_erfinv(long double y) {
  if (y != y || y < -1 || y > 1) return NAN;
  if (y == 1 || y == -1) return y * (long double)INFINITY;
  const long double w = -logl((1 - y) * (1 + y));
  long double x;
  if (w < 5) {
    const long double t = w - 2.5L;
    x = ((((((((2.81022636e-08L * t + 3.43273939e-07L) * t - 3.5233877e-06L) * t -
               4.39150654e-06L) * t + 0.00021858087L) * t - 0.00125372503L) * t -
            0.00417768164L) * t + 0.246640727L) * t + 1.50140941L) * y;
  } else {
    const long double t = sqrtl(w) - 3;
    x = ((((((((-0.000200214257L * t + 0.000100950558L) * t + 0.00134934322L) * t -
               0.00367342844L) * t + 0.00573950773L) * t - 0.0076224613L) * t +
            0.00943887047L) * t + 1.00167406L) * t + 2.83297682L) * y;
  }
  const long double two_over_sqrt_pi = 1.12837916709551257389615890312154517L;
  const long double tail = 1 - fabsl(y);  // exact for a float or double y
  for (int i = 0; i < 4; ++i) {
    const long double d = two_over_sqrt_pi * expl(-x * x);
    if (d == 0) break;
    const long double f = fabsl(y) <= 0.5L ? erfl(x) - y
                                           : (y > 0 ? tail - erfcl(x) : erfcl(-x) - tail);
    x -= f / d;
  }
  return x;
}
// x with erfc(x) = y (0 < y < 2): Newton on erfc itself, whose small values keep their digits.
static inline long double kk_erfcinv(long double y) {
  if (y != y || y < 0 || y > 2) return NAN;
  if (y == 0) return INFINITY;
  if (y == 2) return -INFINITY;
  long double x = kk_erfinv(1 - y);
  if (y < 0.5L && y > 0) {
    const long double two_over_sqrt_pi = 1.12837916709551257389615890312154517L;
    if (!std::isfinite(x)) x = sqrtl(-logl(y));  // 1 - y rounded to 1: start from the tail
    for (int i = 0; i < 6; ++i) {
      const long double d = -two_over_sqrt_pi * expl(-x * x);
      if (d == 0) break;
      x -= (erfcl(x) - y) / d;
    }
  }
  return x;
}
// exp(x^2) erfc(x): the product where erfc does not underflow, else its asymptotic series.
static inline long double kk_erfcx(long double x) {
  if (x < 100) return expl(x * x) * erfcl(x);
  const long double r = 1 / (x * x);
  return (1 - r / 2 * (1 - 1.5L * r * (1 - 2.5L * r))) / (x * 1.77245385090551602729816748334114518L);
}
// I_0 and I_1 by their power series: every term positive (no cancellation), the terms' ratio
// (x/2)^2 / (k (k + n)) taken until it no longer changes the sum.
static inline long double kk_bessel_i(int order, long double x) {
  if (x != x) return x;
  if (std::isinf(x)) return order == 1 && x < 0 ? -(long double)INFINITY : INFINITY;
  const long double q = x * x / 4;
  long double term = order == 0 ? 1 : x / 2, sum = term;
  for (int k = 1; k < 100000; ++k) {
    term *= q / ((long double)k * (k + order));
    const long double next = sum + term;
    if (next == sum) break;
    sum = next;
  }
  return sum;
}
static inline long double kk_norm(int n, const float* a) {
  long double s = 0;
  for (int i = 0; i < n; ++i) s += (long double)a[i] * a[i];
  return sqrtl(s);
}
static inline long double kk_norm(int n, const double* a) {
  long double s = 0;
  for (int i = 0; i < n; ++i) s += (long double)a[i] * a[i];
  return sqrtl(s);
}

static inline float erfinvf(float y) { return (float)kk_erfinv(y); }
static inline double erfinv(double y) { return (double)kk_erfinv(y); }
static inline float erfcinvf(float y) { return (float)kk_erfcinv(y); }
static inline double erfcinv(double y) { return (double)kk_erfcinv(y); }
static inline float normcdfinvf(float p) { return (float)(-sqrtl(2) * kk_erfcinv(2.0L * p)); }
static inline double normcdfinv(double p) { return (double)(-sqrtl(2) * kk_erfcinv(2.0L * p)); }
static inline float erfcxf(float x) { return (float)kk_erfcx(x); }
static inline double erfcx(double x) { return (double)kk_erfcx(x); }
static inline float cyl_bessel_i0f(float x) { return (float)kk_bessel_i(0, x); }
static inline double cyl_bessel_i0(double x) { return (double)kk_bessel_i(0, x); }
static inline float cyl_bessel_i1f(float x) { return (float)kk_bessel_i(1, x); }
static inline double cyl_bessel_i1(double x) { return (double)kk_bessel_i(1, x); }
static inline float normf(int n, const float* a) { return (float)kk_norm(n, a); }
static inline double norm(int n, const double* a) { return (double)kk_norm(n, a); }
static inline float rnormf(int n, const float* a) { return (float)(1 / kk_norm(n, a)); }
static inline double rnorm(int n, const double* a) { return (double)(1 / kk_norm(n, a)); }
static inline double norm3d(double a, double b, double c) {
  return (double)sqrtl((long double)a * a + (long double)b * b + (long double)c * c);
}
static inline double norm4d(double a, double b, double c, double d) {
  return (double)sqrtl((long double)a * a + (long double)b * b + (long double)c * c +
                       (long double)d * d);
}
static inline double rnorm3d(double a, double b, double c) { return 1 / norm3d(a, b, c); }
static inline double rnorm4d(double a, double b, double c, double d) {
  return 1 / norm4d(a, b, c, d);
}
static inline double rhypot(double a, double b) { return (double)(1 / hypotl(a, b)); }
// sin(pi x) and cos(pi x) with the argument reduced exactly (fmod by 2 is exact): integers and
// half-integers give exact zeros and ones, as the GPU's sinpi/cospi (sin(M_PI * x) does not).
static inline long double kk_sinpi(long double x) {
  if (!std::isfinite(x)) return NAN;
  long double r = fmodl(x, 2);  // (-2, 2), exact
  if (r == floorl(r)) return copysignl(0, x);  // an integer: sin(pi n) is a zero of x's sign
  if (r > 1) r -= 2;
  if (r < -1) r += 2;
  if (r > 0.5L) r = 1 - r;
  if (r < -0.5L) r = -1 - r;
  return sinl(3.14159265358979323846264338327950288L * r);
}
static inline long double kk_cospi(long double x) {
  if (!std::isfinite(x)) return NAN;
  long double r = fmodl(fabsl(x), 2);  // [0, 2), exact
  if (r > 1) r = 2 - r;
  return r == 0.5L ? 0.0L : kk_sinpi(0.5L - r);
}
static inline float sinpif(float x) { return (float)kk_sinpi(x); }
static inline float cospif(float x) { return (float)kk_cospi(x); }
static inline double sinpi(double x) { return (double)kk_sinpi(x); }
static inline double cospi(double x) { return (double)kk_cospi(x); }
static inline void sincospif(float x, float* s, float* c) {
  *s = sinpif(x);
  *c = cospif(x);
}
static inline void sincospi(double x, double* s, double* c) {
  *s = sinpi(x);
  *c = cospi(x);
}
static inline float powif(float a, int b) { return (float)powl(a, b); }
static inline double powi(double a, int b) { return (double)powl(a, b); }
