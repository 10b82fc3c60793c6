// kernelkit CPU backend: <cub/cub.cuh>: CUB's block- and warp-level collectives, direct loads and
// stores and functors, over the CPU backend's barriers and warp shuffles (no device-wide
// algorithms: those launch kernels from the host).
#pragma once
#include "kk_cub_block.cuh"
#include "kk_cub_load.cuh"
#include "kk_cub_warp.cuh"
