// kernelkit CPU backend: CUB's warp-level collectives (cub::WarpReduce, cub::WarpScan) over the
// backend's warp shuffles: the lanes of each logical warp of LOGICAL_WARP_THREADS combine, in
// lane order, as CUB's shuffle-based specializations do. Results are those CUB documents (a
// reduction's in the logical warp's lane 0; a scan's in every lane).
#pragma once
#include "kk_cub_util.cuh"

namespace cub {
namespace kk_detail {

// The shuffles name every lane of the physical warp that the block has (the width argument
// keeps logical warps apart), not only the logical warp's: the CPU emulation mispairs a later
// full-warp shuffle after shuffles of half-warp masks from one call site (see the test
// test_warp_reduce_and_scan); on a GPU both spellings are the same when the lanes all call.
static inline unsigned present_lanes() {
  const unsigned tid = kk_linear_tid(), block = blockDim.x * blockDim.y * blockDim.z;
  const unsigned n = block - tid / 32u * 32u;
  return n >= 32u ? 0xffffffffu : (1u << n) - 1u;
}

template <int W>
struct logical_warp {
  static_assert(W >= 1 && W <= 32 && (W & (W - 1)) == 0,
                "LOGICAL_WARP_THREADS must be a power of two no larger than 32");
  unsigned lane = kk_linear_tid() % 32u;
  unsigned first = lane / W * W;  // the logical warp's first lane in the warp
  unsigned mask = present_lanes();
  int rank() const { return (int)(lane - first); }
};

}  // namespace kk_detail

template <class T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpReduce {
  using warp = kk_detail::logical_warp<LOGICAL_WARP_THREADS>;

 public:
  struct TempStorage {
    unsigned char unused;
  };
  explicit WarpReduce(TempStorage&) {}

  template <class Op>
  T Reduce(T input, Op op) { return Reduce(input, op, LOGICAL_WARP_THREADS); }
  template <class Op>
  T Reduce(T input, Op op, int valid_items) {
    const warp w;
    for (int o = 1; o < LOGICAL_WARP_THREADS; o <<= 1) {
      const T other = __shfl_down_sync(w.mask, input, o, LOGICAL_WARP_THREADS);
      if ((w.rank() & (2 * o - 1)) == 0 && w.rank() + o < valid_items) input = op(input, other);
    }
    return input;  // valid in the logical warp's lane 0
  }
  T Sum(T input) { return Reduce(input, kk_detail::plus{}); }
  T Sum(T input, int valid_items) { return Reduce(input, kk_detail::plus{}, valid_items); }
  T Max(T input) { return Reduce(input, ::cuda::maximum<>{}); }
  T Min(T input) { return Reduce(input, ::cuda::minimum<>{}); }
};

template <class T, int LOGICAL_WARP_THREADS = 32, int LEGACY_PTX_ARCH = 0>
class WarpScan {
  using warp = kk_detail::logical_warp<LOGICAL_WARP_THREADS>;
  using plus = kk_detail::plus;

 public:
  struct TempStorage {
    unsigned char unused;
  };
  explicit WarpScan(TempStorage&) {}

  template <class Op>
  void InclusiveScan(T input, T& output, Op op) {
    const warp w;
    for (int o = 1; o < LOGICAL_WARP_THREADS; o <<= 1) {
      const T other = __shfl_up_sync(w.mask, input, o, LOGICAL_WARP_THREADS);
      if (w.rank() >= o) input = op(other, input);
    }
    output = input;
  }
  template <class Op>
  void InclusiveScan(T input, T& output, Op op, T& aggregate) {
    InclusiveScan(input, output, op);
    aggregate = Broadcast(output, LOGICAL_WARP_THREADS - 1);
  }
  void InclusiveSum(T input, T& output) { InclusiveScan(input, output, plus{}); }
  void InclusiveSum(T input, T& output, T& aggregate) { InclusiveScan(input, output, plus{}, aggregate); }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial_value, Op op) {
    T a;
    ExclusiveScan(input, output, initial_value, op, a);
  }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial_value, Op op, T& aggregate) {
    T incl;
    InclusiveScan(input, incl, op, aggregate);
    const warp w;
    const T prev = __shfl_up_sync(w.mask, incl, 1, LOGICAL_WARP_THREADS);
    output = w.rank() == 0 ? initial_value : op(initial_value, prev);
  }
  template <class Op>
  void ExclusiveScan(T input, T& output, Op op) {  // lane 0's output is undefined in CUB
    T incl;
    InclusiveScan(input, incl, op);
    const warp w;
    const T prev = __shfl_up_sync(w.mask, incl, 1, LOGICAL_WARP_THREADS);
    output = w.rank() == 0 ? input : prev;
  }
  void ExclusiveSum(T input, T& output) { ExclusiveScan(input, output, T(0), plus{}); }
  void ExclusiveSum(T input, T& output, T& aggregate) {
    ExclusiveScan(input, output, T(0), plus{}, aggregate);
  }
  T Broadcast(T input, unsigned src_lane) {
    const warp w;
    return __shfl_sync(w.mask, input, (int)src_lane, LOGICAL_WARP_THREADS);
  }
};

}  // namespace cub
