// kernelkit CPU backend prelude: CUDA spellings on the host. Included first by every kernel TU
// (and precompiled). Execution model: see kk_cpu_sched.h.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__) && !defined(__aarch64__) || defined(KK_CPU_UCONTEXT)
#include <ucontext.h>
#endif

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <limits>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>
// (every system header comes first: the CUDA keyword macros below would break them)

#define KERNELKIT_CPU 1
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __constant__ static const
#define __managed__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__
// Per-block storage: every thread of a block runs on the block's worker OS thread (as a loop or as
// fibers), so a thread_local (static at block scope) is exactly one copy per running block.
#define __shared__ thread_local

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
static inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }

constexpr int warpSize = 32;
// kernelkit's own code says KK_WARP_SIZE; WARP_SIZE is for bodies that use it without defining
// it (render #undefs it when the kernel's code declares a WARP_SIZE of its own).
#define KK_WARP_SIZE 32
#define WARP_SIZE 32

// What a recent CUDA compiler and its headers define, for code that tests them (Apex's
// `#if CUDA_VERSION >= 9000` picks __shfl_xor_sync). Defined after the system headers above:
// glibc tests __CUDACC__. __CUDA_ARCH__ stays undefined: no GPU architecture's code path
// (inline PTX, arch intrinsics) runs here.
#define __CUDACC__ 1
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 8
#define __CUDACC_VER_BUILD__ 0
#define CUDA_VERSION 12080
#define CUDART_VERSION 12080

// The CUDA builtins as seen from helper functions; the kernel function itself receives them as
// parameters of the same names (which shadow these), so the hot loop never touches TLS.
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

// Linear thread index in the block; a macro so that it sees the kernel's own threadIdx/blockDim.
#define kk_linear_tid() \
  ((unsigned)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)))

// --- parameter wrappers (layouts fixed by the packer: see kernelkit/_records.py) ---------------
#ifndef KK_MAX_NDIM  // set by every backend's render from kernelkit's MAX_NDIM (_codegen.abi_options)
#error "KK_MAX_NDIM is not defined: kernelkit's render passes -DKK_MAX_NDIM"
#endif
struct kk_dims {  // KK_MAX_NDIM int64 by value
  long long v[KK_MAX_NDIM];
  template <class I>
  constexpr const long long& operator[](I i) const { return v[i]; }
  operator const long long*() const { return v; }
  operator const long*() const { return reinterpret_cast<const long*>(v); }
  const long long* data() const { return v; }
};

// Unwraps checked references to their value type (for min/max).
template <class T>
struct kk_value { using type = T; };
template <class T>
using kk_value_t = typename kk_value<std::remove_cv_t<std::remove_reference_t<T>>>::type;

template <class S, class T>
static inline long long elem_to_loc(long long elem, const S& shape, const T& strides, int ndim) {
  long long loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % (long long)shape[i]) * (long long)strides[i];
    elem /= (long long)shape[i];
  }
  return loc;
}

// --- vector types ----------------------------------------------------------------------------
#define KK_VEC_ALIGN(T, N) alignas((sizeof(T) * N) > 16 ? 16 : (sizeof(T) * N))
#define KK_VEC(name, T)                                                                        \
  struct name##1 { T x; };                                                                     \
  struct KK_VEC_ALIGN(T, 2) name##2 { T x, y; };                                               \
  struct name##3 { T x, y, z; };                                                               \
  struct KK_VEC_ALIGN(T, 4) name##4 { T x, y, z, w; };                                         \
  static inline name##1 make_##name##1(T x) { return name##1{x}; }                             \
  static inline name##2 make_##name##2(T x, T y) { return name##2{x, y}; }                     \
  static inline name##3 make_##name##3(T x, T y, T z) { return name##3{x, y, z}; }             \
  static inline name##4 make_##name##4(T x, T y, T z, T w) { return name##4{x, y, z, w}; }
KK_VEC(char, signed char)
KK_VEC(uchar, unsigned char)
KK_VEC(short, short)
KK_VEC(ushort, unsigned short)
KK_VEC(int, int)
KK_VEC(long, long)
KK_VEC(ulong, unsigned long)
KK_VEC(longlong, long long)
KK_VEC(ulonglong, unsigned long long)
KK_VEC(float, float)
KK_VEC(double, double)
#undef KK_VEC
struct uint1 { unsigned x; };
struct KK_VEC_ALIGN(unsigned, 2) uint2 { unsigned x, y; };
struct KK_VEC_ALIGN(unsigned, 4) uint4 { unsigned x, y, z, w; };
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return uint4{x, y, z, w};
}

#include "kk_cpu_round.h"
#include "kk_cpu_half.h"
#include "kk_cpu_math.h"
#include "kk_cpu_sched.h"
#include "kk_cpu_sync.h"
#include "kk_cpu_checked.h"
#include <assert.h>  // compat/assert.h: assert() as a kernel fault, with or without an include

// Inline assembly with an instruction in kernel code is PTX for the GPU: _source.py writes
// KK_PTX_ASM for its `asm` keyword, so the compiler refuses it at its line, unless the
// preprocessor drops it (#ifdef __CUDA_ARCH__). An empty asm (a compiler barrier) stays.
#define KK_PTX_ASM                                                                               \
  _Pragma("GCC error \"inline assembly (asm) is PTX for the GPU, which the kernelkit CPU backend cannot run: put it under #ifdef __CUDA_ARCH__ with a C++ fallback in the #else branch\"")
