// kernelkit CUDA prelude: compiled with every kernel, so it stays small. Heavy headers
// (cuda_fp16.h, cuda_bf16.h, cooperative_groups.h) are included above this text only when
// the kernel uses them. Arch branches stay here, for NVRTC to settle for the device at hand.
#define KERNELKIT_CUDA 1
// kernelkit's own code says KK_WARP_SIZE; WARP_SIZE is for bodies that use it without defining
// it (render #undefs it when the kernel's code declares a WARP_SIZE of its own).
#define KK_WARP_SIZE 32
#ifndef WARP_SIZE
#define WARP_SIZE 32
#endif

// Feature macros a body can test (settled by NVRTC for the arch it compiles for).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define KK_HAS_NATIVE_BF16 1
#define KK_HAS_CP_ASYNC 1
#else
#define KK_HAS_NATIVE_BF16 0
#define KK_HAS_CP_ASYNC 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KK_HAS_TMA 1
#define KK_HAS_CLUSTERS 1
#else
#define KK_HAS_TMA 0
#define KK_HAS_CLUSTERS 0
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KK_HAS_WGMMA 1
#else
#define KK_HAS_WGMMA 0
#endif

// What nvcc code takes from the host's <stddef.h> and <math.h>, which NVRTC does not include (the
// CPU backend gets the same names from the C library): a body may use them on both backends.
#ifndef NULL
#define NULL 0
#endif
// INFINITY and NAN are float constant expressions, as the C library's. Through constexpr
// members: written as (1.0f / 0.0f) inline, NVRTC emits a run-time IEEE division (with its
// slow-path call) at every use, e.g. each `x == -INFINITY` of a softmax; as namespace-scope
// variables they draw an "unused variable" warning into every compile log.
struct kk_float_limits {
  static constexpr float infinity = 1.0f / 0.0f, nan = 0.0f / 0.0f;
};
#ifndef INFINITY
#define INFINITY kk_float_limits::infinity
#endif
#ifndef NAN
#define NAN kk_float_limits::nan
#endif
#ifndef HUGE_VALF  // the C library's names for them
#define HUGE_VALF INFINITY
#endif
#ifndef HUGE_VAL
#define HUGE_VAL ((double)INFINITY)
#endif
// min/max of a floating value and an int, which CUDA's overloads leave ambiguous, in the
// floating type (fminf/fmaxf, as its own float overloads): as the CPU backend's.
#define KK_MIXED_MINMAX(F, FMAX, FMIN)                                                       \
  __device__ __forceinline__ F max(F a, int b) { return FMAX(a, (F)b); }                    \
  __device__ __forceinline__ F max(int a, F b) { return FMAX((F)a, b); }                    \
  __device__ __forceinline__ F min(F a, int b) { return FMIN(a, (F)b); }                    \
  __device__ __forceinline__ F min(int a, F b) { return FMIN((F)a, b); }
KK_MIXED_MINMAX(float, fmaxf, fminf)
KK_MIXED_MINMAX(double, fmax, fmin)
#undef KK_MIXED_MINMAX
// min/max of two integers of different widths (an int with a long long, a short with an
// unsigned long long: ggml's `min(split, n - i)`), which CUDA's overloads also leave ambiguous,
// in their common type (the usual arithmetic conversions), as the CPU backend's. A call CUDA's
// own overloads take exactly (two ints, an int with an unsigned) keeps them: a non-template
// wins a tie; and a kernel's own two-argument min/max template wins over these, whose trailing
// parameter pack makes them the less specialized (C++17 partial ordering).
template <class T> struct kk_is_int { static constexpr bool value = false; };
#define KK_IS_INT(T) \
  template <> struct kk_is_int<T> { static constexpr bool value = true; };
KK_IS_INT(char) KK_IS_INT(signed char) KK_IS_INT(unsigned char) KK_IS_INT(short)
KK_IS_INT(unsigned short) KK_IS_INT(int) KK_IS_INT(unsigned) KK_IS_INT(long)
KK_IS_INT(unsigned long) KK_IS_INT(long long) KK_IS_INT(unsigned long long)
#undef KK_IS_INT
template <bool B, class T> struct kk_int_pair {};
template <class T> struct kk_int_pair<true, T> { typedef T type; };
#define KK_INT_MINMAX(NAME, CMP)                                                              \
  template <class A, class B, class... None>                                                  \
  __device__ __forceinline__ typename kk_int_pair<kk_is_int<A>::value && kk_is_int<B>::value, \
                                                  decltype(A() + B())>::type                  \
  NAME(A a, B b, None...) {                                                                   \
    typedef decltype(A() + B()) C;                                                            \
    return ((C)b CMP (C)a) ? (C)b : (C)a;                                                     \
  }
KK_INT_MINMAX(min, <)
KK_INT_MINMAX(max, >)
#undef KK_INT_MINMAX
#ifndef M_PI
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
#endif

// Programmatic dependent launch (sm_90+): nvcc gets these from cuda_device_runtime_api.h through
// its forced cuda_runtime.h; NVRTC has neither, and real kernels (ggml's) call them. The text is
// that header's (not static: an unused static function draws a warning into every log).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(__CUDA_DEVICE_RUNTIME_API_H__)
__device__ __forceinline__ void cudaTriggerProgrammaticLaunchCompletion(void) {
  asm volatile("griddepcontrol.launch_dependents;" :::);
}
__device__ __forceinline__ void cudaGridDependencySynchronize(void) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
#endif

typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint;

#ifndef KK_MAX_NDIM  // set by every backend's render from kernelkit's MAX_NDIM (_codegen.abi_options)
#error "KK_MAX_NDIM is not defined: kernelkit's render passes -DKK_MAX_NDIM"
#endif
// x_shape / x_strides: KK_MAX_NDIM int64 by value; x_shape[i], x_shape.data(), or elem_to_loc.
struct kk_dims {
  long long v[KK_MAX_NDIM];
  __device__ __forceinline__ operator const long long*() const { return v; }
  __device__ __forceinline__ const long long* data() const { return v; }
};

// A kernelkit.tensor_map input: CUtensorMap's 128 opaque bytes, by value as a __grid_constant__
// parameter; &name is the address cp.async.bulk.tensor and prefetch.tensormap take.
struct alignas(64) kk_tensor_map {
  unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned kk_linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// Offset (in elements) of row-major element `elem` of an array with these shape and strides.
__device__ __forceinline__ long long elem_to_loc(long long elem, const long long* shape,
                                                 const long long* strides, int ndim) {
  long long loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * strides[i];
    elem /= shape[i];
  }
  return loc;
}

// The same for an input's own x_shape / x_strides (by value in parameter space): every index a
// constant once unrolled, so the arrays are read where they are. The pointer form indexes them at
// run time, which copies both to local memory in every thread (384 bytes a thread for three
// inputs: a bias add through elementwise's strided path ran 12x slower than torch for it).
__device__ __forceinline__ long long elem_to_loc(long long elem, const kk_dims& shape,
                                                 const kk_dims& strides, int ndim) {
  long long loc = 0;
#pragma unroll
  for (int i = KK_MAX_NDIM - 1; i >= 0; --i) {
    if (i < ndim && elem > 0) {  // (as the pointer form: an empty shape divides nothing)
      loc += (elem % shape.v[i]) * strides.v[i];
      elem /= shape.v[i];
    }
  }
  return loc;
}
