// Metal's math namespace for bodies ported from mx.fast.metal_kernel.
namespace metal {
#define KK_METAL_F1(name, f32, f64)                                              \
  __device__ __forceinline__ float name(float x) { return f32(x); }               \
  __device__ __forceinline__ double name(double x) { return f64(x); }
KK_METAL_F1(exp, expf, ::exp) KK_METAL_F1(exp2, exp2f, ::exp2) KK_METAL_F1(log, logf, ::log)
KK_METAL_F1(log2, log2f, ::log2) KK_METAL_F1(sqrt, sqrtf, ::sqrt) KK_METAL_F1(rsqrt, rsqrtf, ::rsqrt)
KK_METAL_F1(abs, fabsf, ::fabs) KK_METAL_F1(sin, sinf, ::sin) KK_METAL_F1(cos, cosf, ::cos)
KK_METAL_F1(tanh, tanhf, ::tanh) KK_METAL_F1(floor, floorf, ::floor) KK_METAL_F1(ceil, ceilf, ::ceil)
KK_METAL_F1(round, roundf, ::round) KK_METAL_F1(erf, erff, ::erf)
// the rest of the CPU prelude's metal:: functions (kk_cpu_math.h), so both backends agree
KK_METAL_F1(log10, log10f, ::log10) KK_METAL_F1(fabs, fabsf, ::fabs) KK_METAL_F1(tan, tanf, ::tan)
KK_METAL_F1(sinh, sinhf, ::sinh) KK_METAL_F1(cosh, coshf, ::cosh) KK_METAL_F1(asin, asinf, ::asin)
KK_METAL_F1(acos, acosf, ::acos) KK_METAL_F1(atan, atanf, ::atan) KK_METAL_F1(trunc, truncf, ::trunc)
KK_METAL_F1(rint, rintf, ::rint)
#undef KK_METAL_F1
__device__ __forceinline__ int abs(int x) { return x < 0 ? -x : x; }
template <typename T> __device__ __forceinline__ T max(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T min(T a, T b) { return a < b ? a : b; }
template <typename T> __device__ __forceinline__ T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
template <typename T> __device__ __forceinline__ T select(T a, T b, bool c) { return c ? b : a; }
__device__ __forceinline__ float pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double pow(double a, double b) { return ::pow(a, b); }
__device__ __forceinline__ float fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }
__device__ __forceinline__ float fmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double fmax(double a, double b) { return ::fmax(a, b); }
__device__ __forceinline__ float fmin(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double fmin(double a, double b) { return ::fmin(a, b); }
template <typename T> __device__ __forceinline__ T precise_divide(T a, T b) { return a / b; }
namespace precise {
__device__ __forceinline__ float exp(float x) { return expf(x); }
__device__ __forceinline__ float log(float x) { return logf(x); }
__device__ __forceinline__ float sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float tanh(float x) { return tanhf(x); }
}  // namespace precise
namespace fast {
__device__ __forceinline__ float exp(float x) { return __expf(x); }
__device__ __forceinline__ float log(float x) { return __logf(x); }
__device__ __forceinline__ float sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float tanh(float x) { return tanhf(x); }
}  // namespace fast
}  // namespace metal
