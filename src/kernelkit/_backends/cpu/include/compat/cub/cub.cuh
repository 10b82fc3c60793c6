// kernelkit CPU backend: <cub/cub.cuh>: CUB's block- and warp-level collectives, direct loads and
// stores and functors, over the CPU backend's barriers and warp shuffles (no device-wide
// algorithms: those launch kernels from the host).
#pragma once
#include "kk_cub_block.cuh"
#include "kk_cub_load.cuh"
#include "kk_cub_warp.cuh"

// CUB 2's functors (CCCL 3 has cuda::std::plus<> and cuda::maximum<> / cuda::minimum<>): only
// through the umbrella header, as kernelkit's <cub/cub.cuh> gives them under NVRTC.
namespace cub {
using Sum = ::cuda::std::plus<>;
using Max = ::cuda::maximum<>;
using Min = ::cuda::minimum<>;
}  // namespace cub
