// kernelkit (CUDA backend): <cub/cub.cuh> under NVRTC. CCCL's umbrella header refuses NVRTC,
// since its device-wide algorithms (cub::Device*) launch kernels from the host; this one
// includes CUB's block-, warp- and thread-level collectives, its iterators and type utilities,
// which run inside a kernel and compile under NVRTC.
#pragma once
#include <cub/config.cuh>

#include <cub/block/block_adjacent_difference.cuh>
#include <cub/block/block_discontinuity.cuh>
#include <cub/block/block_exchange.cuh>
#include <cub/block/block_histogram.cuh>
#include <cub/block/block_load.cuh>
#include <cub/block/block_merge_sort.cuh>
#include <cub/block/block_radix_rank.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_shuffle.cuh>
#include <cub/block/block_store.cuh>

#include <cub/thread/thread_load.cuh>
#include <cub/thread/thread_operators.cuh>
#include <cub/thread/thread_reduce.cuh>
#include <cub/thread/thread_scan.cuh>
#include <cub/thread/thread_store.cuh>

#include <cub/warp/warp_exchange.cuh>
#include <cub/warp/warp_load.cuh>
#include <cub/warp/warp_merge_sort.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>
#include <cub/warp/warp_store.cuh>

#include <cub/util_ptx.cuh>
#include <cub/util_type.cuh>

// CUB 2's functors, which CCCL 3 replaced with cuda::std::plus<> and cuda::maximum<> /
// cuda::minimum<>: code written for CUB 2 (cub::Sum(), cub::Max()) still compiles.
#include <cuda/functional>
#include <cuda/std/functional>
#if CCCL_MAJOR_VERSION >= 3
namespace cub {
using Sum = ::cuda::std::plus<>;
using Max = ::cuda::maximum<>;
using Min = ::cuda::minimum<>;
}  // namespace cub
#endif
