// kernelkit (CUDA backend): glibc's __assert_fail, which nvcc declares as a device builtin
// (crt/common_functions.h) and real code calls directly (c10's CUDA_KERNEL_ASSERT). NVRTC has
// only __assertfail, so this forwards to it: the same report and trap as a failed assert().
#pragma once
extern "C" __host__ __device__ __forceinline__ __attribute__((__noreturn__)) void __assert_fail(
    const char* assertion, const char* file, unsigned int line, const char* function) noexcept {
  __assertfail(assertion, file, line, function, sizeof(char));
  __builtin_unreachable();
}
