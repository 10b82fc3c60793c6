"""Kernels that use CUB's block and warp collectives (shared by tests/backend/test_cub.py, which
runs them against NumPy, and tests/unit/test_cub_nvrtc.py, which compiles them with CCCL's CUB
under NVRTC: the CPU backend's cub takes what the real one takes)."""

from __future__ import annotations

BLOCK_HEADER = """
#include <cuda/functional>
#include <cub/block/block_load.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>

struct RunningPrefix {  // CUB's documented block-prefix callback: a running total over tiles
  int total;
  __device__ int operator()(int block_aggregate) {
    int old = total;
    total += block_aggregate;
    return old;
  }
};
"""
# One block walks x in tiles of T * ITEMS: an exclusive prefix sum carried across tiles by the
# callback (blocked loads and stores), a striped copy, per-tile sums, and a max over valid threads.
BLOCK_BODY = """
constexpr int T = 128, ITEMS = 3, TILE = T * ITEMS;
using Load = cub::BlockLoad<int, T, ITEMS, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
using LoadS = cub::BlockLoad<int, T, ITEMS, cub::BLOCK_LOAD_STRIPED>;
using Store = cub::BlockStore<int, T, ITEMS, cub::BLOCK_STORE_DIRECT>;
using StoreS = cub::BlockStore<int, T, ITEMS, cub::BLOCK_STORE_STRIPED>;
using Scan = cub::BlockScan<int, T>;
using Reduce = cub::BlockReduce<int, T>;
__shared__ union {
  typename Load::TempStorage load;
  typename LoadS::TempStorage loads;
  typename Store::TempStorage store;
  typename StoreS::TempStorage stores;
  typename Scan::TempStorage scan;
  typename Reduce::TempStorage reduce;
} tmp;
const int n = x_shape[0];
RunningPrefix prefix{0};
for (int base = 0, tile = 0; base < n; base += TILE, ++tile) {
  const int valid = min(TILE, n - base);
  int items[ITEMS];
  Load(tmp.load).Load(x + base, items, valid, 0);
  __syncthreads();
  Scan(tmp.scan).ExclusiveSum(items, items, prefix);
  __syncthreads();
  Store(tmp.store).Store(excl + base, items, valid);
  __syncthreads();
  LoadS(tmp.loads).Load(x + base, items, valid, 0);
  __syncthreads();
  StoreS(tmp.stores).Store(copy + base, items, valid);
  __syncthreads();
  int s = Reduce(tmp.reduce).Sum(items);
  __syncthreads();
  int m = Reduce(tmp.reduce).Reduce(items[0], cuda::maximum<>(), min(T, valid));
  __syncthreads();
  int incl, agg;
  Scan(tmp.scan).InclusiveScan(items[0], incl, cuda::maximum<>(), agg);
  __syncthreads();
  if (threadIdx.x == 0) {
    sums[tile] = s;
    maxes[tile] = m;
    scanmax[tile] = agg;
  }
}
"""

WARP_HEADER = """
#include <cuda/functional>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>
"""
# 128 threads: logical warps of 16 reduce (all lanes, then 5 valid), warps of 32 scan.
WARP_BODY = """
using WR = cub::WarpReduce<int, 16>;
using WS = cub::WarpScan<int>;
__shared__ typename WR::TempStorage wr[8];
__shared__ typename WS::TempStorage ws[4];
const int i = blockIdx.x * blockDim.x + threadIdx.x;
const int v = x[i];
const int s = WR(wr[threadIdx.x / 16]).Sum(v);
const int m = WR(wr[threadIdx.x / 16]).Reduce(v, cuda::maximum<>(), 5);
if (threadIdx.x % 16 == 0) {
  seg_sum[i / 16] = s;
  seg_max5[i / 16] = m;
}
int inc, exc, agg;
WS(ws[threadIdx.x / 32]).InclusiveSum(v, inc, agg);
incl[i] = inc;
WS(ws[threadIdx.x / 32]).ExclusiveScan(v, exc, 100, cuda::maximum<>());
excl_max[i] = exc;
if (threadIdx.x % 32 == 0) warp_total[i / 32] = agg;
"""

# The umbrella header, with CUB 2's functors (cub::Sum, cub::Max): 128 threads.
UMBRELLA_HEADER = "#include <cub/cub.cuh>"
UMBRELLA_BODY = """
using BR = cub::BlockReduce<int, 128>;
using WS = cub::WarpScan<int>;
__shared__ typename BR::TempStorage br;
__shared__ typename WS::TempStorage ws[4];
int v = BR(br).Reduce(x[threadIdx.x], cub::Sum());
__syncthreads();
int m = BR(br).Reduce(x[threadIdx.x], cub::Max());
int s;
WS(ws[threadIdx.x / 32]).ExclusiveSum(x[threadIdx.x], s);
y[threadIdx.x] = threadIdx.x == 0 ? v + m : s;
"""
