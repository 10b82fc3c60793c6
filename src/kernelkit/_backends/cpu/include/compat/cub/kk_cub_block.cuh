// kernelkit CPU backend: CUB's block-level collectives (cub::BlockReduce, cub::BlockScan,
// cub::BlockLoad, cub::BlockStore) over the backend's __syncthreads emulation.
//
// Model: each thread writes its value into the TempStorage the body declared __shared__ (one copy
// per running block), one barrier, then thread 0 combines the values in thread order and, for
// scans, writes each thread's prefix back; a second barrier publishes them. Results are those
// CUB documents (a reduction's in thread 0; a scan's in every thread); the order of operations is
// the sequential one, so a float result may differ from the GPU's tree in the last bits.
// As on the GPU, reusing one TempStorage needs a __syncthreads() between the calls.
#pragma once
#include "kk_cub_util.cuh"

namespace cub {

enum BlockReduceAlgorithm {
  BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY,
  BLOCK_REDUCE_RAKING,
  BLOCK_REDUCE_WARP_REDUCTIONS,
};
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };

template <class T, int BLOCK_DIM_X, BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    kk_detail::slots<T, BLOCK_THREADS> slot;
  };
  BlockReduce() : s_(kk_detail::private_storage<TempStorage>()) {}
  explicit BlockReduce(TempStorage& s) : s_(s) {}

  template <class Op>
  T Reduce(T input, Op op) { return Reduce(input, op, BLOCK_THREADS); }
  template <class Op>
  T Reduce(T input, Op op, int num_valid) {
    const int t = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>();
    const int n = kk_detail::present<BLOCK_THREADS>(num_valid);
    s_.slot[t] = input;
    __syncthreads();
    if (t == 0) {
      for (int i = 1; i < n; ++i) input = op(input, s_.slot[i]);
    }
    return input;  // valid in thread 0, as CUB's
  }
  template <int ITEMS, class Op>
  T Reduce(T (&inputs)[ITEMS], Op op) { return Reduce(kk_detail::fold(inputs, op), op); }
  T Sum(T input) { return Reduce(input, kk_detail::plus{}); }
  T Sum(T input, int num_valid) { return Reduce(input, kk_detail::plus{}, num_valid); }
  template <int ITEMS>
  T Sum(T (&inputs)[ITEMS]) { return Reduce(inputs, kk_detail::plus{}); }

 private:
  TempStorage& s_;
};

template <class T, int BLOCK_DIM_X, BlockScanAlgorithm ALGORITHM = BLOCK_SCAN_RAKING,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
  static constexpr int BLOCK_THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  using plus = kk_detail::plus;

 public:
  struct TempStorage {
    kk_detail::slots<T, BLOCK_THREADS + 2> slot;  // the threads' values, aggregate, prefix
  };
  BlockScan() : s_(kk_detail::private_storage<TempStorage>()) {}
  explicit BlockScan(TempStorage& s) : s_(s) {}

  // --- one item per thread ---
  void ExclusiveSum(T input, T& output) { T a; ExclusiveScan(input, output, T(0), plus{}, a); }
  void ExclusiveSum(T input, T& output, T& aggregate) {
    ExclusiveScan(input, output, T(0), plus{}, aggregate);
  }
  template <class Cb>
  void ExclusiveSum(T input, T& output, Cb& prefix_op) { ExclusiveScan(input, output, plus{}, prefix_op); }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial_value, Op op) {
    T a;
    ExclusiveScan(input, output, initial_value, op, a);
  }
  template <class Op>
  void ExclusiveScan(T input, T& output, T initial_value, Op op, T& aggregate) {
    output = scan(input, op, &initial_value, aggregate);
  }
  template <class Op>
  void ExclusiveScan(T input, T& output, Op op) { T a; output = scan(input, op, nullptr, a); }
  template <class Op>
  void ExclusiveScan(T input, T& output, Op op, T& aggregate) { output = scan(input, op, nullptr, aggregate); }
  template <class Op, class Cb>
  void ExclusiveScan(T input, T& output, Op op, Cb& prefix_op) {
    T a;
    const T excl = scan(input, op, nullptr, a);
    const T prefix = call_prefix(prefix_op, a);
    output = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>() == 0 ? prefix : op(prefix, excl);
  }
  void InclusiveSum(T input, T& output) { InclusiveScan(input, output, plus{}); }
  void InclusiveSum(T input, T& output, T& aggregate) { InclusiveScan(input, output, plus{}, aggregate); }
  template <class Cb>
  void InclusiveSum(T input, T& output, Cb& prefix_op) { InclusiveScan(input, output, plus{}, prefix_op); }
  template <class Op>
  void InclusiveScan(T input, T& output, Op op) { T a; InclusiveScan(input, output, op, a); }
  template <class Op>
  void InclusiveScan(T input, T& output, Op op, T& aggregate) {
    const T excl = scan(input, op, nullptr, aggregate);
    output = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>() == 0 ? input : op(excl, input);
  }
  template <class Op, class Cb>
  void InclusiveScan(T input, T& output, Op op, Cb& prefix_op) {
    T a, incl;
    InclusiveScan(input, incl, op, a);
    output = op(call_prefix(prefix_op, a), incl);
  }

  // --- ITEMS per thread (a blocked arrangement): the thread's items fold first ---
  template <int ITEMS>
  void ExclusiveSum(T (&in)[ITEMS], T (&out)[ITEMS]) { T a; ExclusiveScan(in, out, T(0), plus{}, a); }
  template <int ITEMS>
  void ExclusiveSum(T (&in)[ITEMS], T (&out)[ITEMS], T& aggregate) {
    ExclusiveScan(in, out, T(0), plus{}, aggregate);
  }
  template <int ITEMS, class Cb>
  void ExclusiveSum(T (&in)[ITEMS], T (&out)[ITEMS], Cb& prefix_op) {
    T a, first;
    ExclusiveScan(in, out, T(0), plus{}, a);
    first = call_prefix(prefix_op, a);
    for (int i = 0; i < ITEMS; ++i) out[i] = first + out[i];
  }
  template <int ITEMS, class Op>
  void ExclusiveScan(T (&in)[ITEMS], T (&out)[ITEMS], T initial_value, Op op) {
    T a;
    ExclusiveScan(in, out, initial_value, op, a);
  }
  template <int ITEMS, class Op>
  void ExclusiveScan(T (&in)[ITEMS], T (&out)[ITEMS], T initial_value, Op op, T& aggregate) {
    T running;
    ExclusiveScan(kk_detail::fold(in, op), running, initial_value, op, aggregate);
    for (int i = 0; i < ITEMS; ++i) {
      const T v = in[i];
      out[i] = running;
      running = op(running, v);
    }
  }
  template <int ITEMS>
  void InclusiveSum(T (&in)[ITEMS], T (&out)[ITEMS]) { T a; InclusiveScan(in, out, plus{}, a); }
  template <int ITEMS>
  void InclusiveSum(T (&in)[ITEMS], T (&out)[ITEMS], T& aggregate) {
    InclusiveScan(in, out, plus{}, aggregate);
  }
  template <int ITEMS, class Op>
  void InclusiveScan(T (&in)[ITEMS], T (&out)[ITEMS], Op op) { T a; InclusiveScan(in, out, op, a); }
  template <int ITEMS, class Op>
  void InclusiveScan(T (&in)[ITEMS], T (&out)[ITEMS], Op op, T& aggregate) {
    const T excl = scan(kk_detail::fold(in, op), op, nullptr, aggregate);
    const bool first = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>() == 0;
    T running = first ? in[0] : op(excl, in[0]);
    out[0] = running;
    for (int i = 1; i < ITEMS; ++i) out[i] = running = op(running, in[i]);
  }

 private:
  // Each thread's exclusive prefix (thread 0: initial_value, or its input when there is none)
  // and the block's aggregate (the inputs only).
  template <class Op>
  T scan(T input, Op op, const T* initial_value, T& aggregate) {
    const int t = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>();
    const int n = kk_detail::present<BLOCK_THREADS>(BLOCK_THREADS);
    s_.slot[t] = input;
    __syncthreads();
    if (t == 0) {
      T total = s_.slot[0];
      T running = initial_value ? op(*initial_value, s_.slot[0]) : s_.slot[0];
      for (int i = 1; i < n; ++i) {
        const T v = s_.slot[i];
        total = op(total, v);
        s_.slot[i] = running;
        running = op(running, v);
      }
      s_.slot[0] = initial_value ? *initial_value : input;
      s_.slot[BLOCK_THREADS] = total;
    }
    __syncthreads();
    aggregate = s_.slot[BLOCK_THREADS];
    return s_.slot[t];
  }
  // CUB calls the callback in the first warp and applies lane 0's result.
  template <class Cb>
  T call_prefix(Cb& prefix_op, T aggregate) {
    const int t = kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>();
    if (t < 32) {
      const T p = prefix_op(aggregate);
      if (t == 0) s_.slot[BLOCK_THREADS + 1] = p;
    }
    __syncthreads();
    return s_.slot[BLOCK_THREADS + 1];
  }

  TempStorage& s_;
};

}  // namespace cub
