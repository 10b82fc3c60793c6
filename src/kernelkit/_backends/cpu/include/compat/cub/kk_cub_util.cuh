// kernelkit CPU backend: what CUB's collectives share (thread ranks, raw slots).
#pragma once
#include <type_traits>

#include "../cuda/functional"

namespace cub {

static inline void CTA_SYNC() { __syncthreads(); }
static inline void WARP_SYNC(unsigned mask) { __syncwarp(mask); }
static inline unsigned LaneId() { return kk_linear_tid() % 32u; }
static inline unsigned WarpId() { return kk_linear_tid() / 32u; }
static inline int RowMajorTid(int x, int y, int z) {
  return (int)((z == 1 ? 0 : threadIdx.z * x * y) + (y == 1 ? 0 : threadIdx.y * x) + threadIdx.x);
}

// A key with its value (<cub/util_type.cuh>), and the functors that reduce such pairs to the
// largest or smallest value, the smaller key on a tie (<cub/thread/thread_operators.cuh>).
template <class K, class V>
struct KeyValuePair {
  using Key = K;
  using Value = V;
  K key;
  V value;
  KeyValuePair() = default;
  KeyValuePair(K const& k, V const& v) : key(k), value(v) {}
  bool operator==(const KeyValuePair& b) const { return value == b.value && key == b.key; }
  bool operator!=(const KeyValuePair& b) const { return value != b.value || key != b.key; }
};
struct ArgMax {
  template <class V, class K>
  KeyValuePair<K, V> operator()(const KeyValuePair<K, V>& a, const KeyValuePair<K, V>& b) const {
    return b.value > a.value || (a.value == b.value && b.key < a.key) ? b : a;
  }
};
struct ArgMin {
  template <class V, class K>
  KeyValuePair<K, V> operator()(const KeyValuePair<K, V>& a, const KeyValuePair<K, V>& b) const {
    return b.value < a.value || (a.value == b.value && b.key < a.key) ? b : a;
  }
};

namespace kk_detail {

struct plus {
  template <class T>
  T operator()(const T& a, const T& b) const { return a + b; }
};

// The calling thread's rank in the block by the collective's template dimensions, as CUB's.
template <int X, int Y>
static inline int tid() { return (int)(threadIdx.x + X * (threadIdx.y + Y * threadIdx.z)); }

// How many of `n` threads a collective combines: no more than the block has.
template <int BLOCK_THREADS>
static inline int present(int n) {
  const int block = (int)(blockDim.x * blockDim.y * blockDim.z);
  return n < block ? (n < BLOCK_THREADS ? n : BLOCK_THREADS) : block;
}

// Storage for N values of T without constructing them (CUB's TempStorage is raw memory too).
template <class T, int N>
struct slots {
  alignas(T) unsigned char bytes[sizeof(T) * N];
  T& operator[](int i) { return reinterpret_cast<T*>(bytes)[i]; }
};

template <class S>
static inline S& private_storage() {
  static thread_local S s;  // one per running block, like a __shared__ declaration
  return s;
}

template <class T, int ITEMS, class Op>
static inline T fold(T (&items)[ITEMS], Op op) {
  T v = items[0];
  for (int i = 1; i < ITEMS; ++i) v = op(v, items[i]);
  return v;
}

}  // namespace kk_detail
}  // namespace cub
