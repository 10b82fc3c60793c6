// kernelkit (CUDA backend): the C and C++ standard headers a kernel may include, under NVRTC,
// which ships none. Each header of this directory includes libcu++'s (CCCL's cuda/std/...) and
// this file, which makes libcu++'s names visible as std::..., as the host's C++ library would on
// the CPU backend: std::sqrt, std::numeric_limits, std::is_same_v, std::int64_t, std::min.
// The C names (sqrtf, printf, malloc, FLT_MAX, INT_MAX, int64_t, size_t) are NVRTC builtins or
// come from libcu++'s headers at global scope.
#pragma once
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>
namespace std {
using namespace ::cuda::std;
}
