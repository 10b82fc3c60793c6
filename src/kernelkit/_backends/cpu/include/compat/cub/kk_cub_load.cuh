// kernelkit CPU backend: CUB's direct loads and stores and cub::BlockLoad / cub::BlockStore.
// Every algorithm but *_STRIPED leaves the items in a blocked arrangement (thread t holds items
// t * ITEMS ... t * ITEMS + ITEMS - 1), as CUB's do: the transposing ones reach the same result
// through shared memory on the GPU, which the CPU does not need.
#pragma once
#include "kk_cub_util.cuh"

namespace cub {

enum BlockLoadAlgorithm {
  BLOCK_LOAD_DIRECT,
  BLOCK_LOAD_STRIPED,
  BLOCK_LOAD_VECTORIZE,
  BLOCK_LOAD_TRANSPOSE,
  BLOCK_LOAD_WARP_TRANSPOSE,
  BLOCK_LOAD_WARP_TRANSPOSE_TIMESLICED,
};
enum BlockStoreAlgorithm {
  BLOCK_STORE_DIRECT,
  BLOCK_STORE_STRIPED,
  BLOCK_STORE_VECTORIZE,
  BLOCK_STORE_TRANSPOSE,
  BLOCK_STORE_WARP_TRANSPOSE,
  BLOCK_STORE_WARP_TRANSPOSE_TIMESLICED,
};

// item i of thread t: blocked t * ITEMS + i; striped i * THREADS + t; warp-striped within warps.
template <int ITEMS>
struct kk_blocked {
  static int at(int t, int i) { return t * ITEMS + i; }
};
template <int THREADS>
struct kk_striped {
  static int at(int t, int i) { return i * THREADS + t; }
};
template <int ITEMS>
struct kk_warp_striped {
  static int at(int t, int i) { return (t / 32) * 32 * ITEMS + (t % 32) + i * 32; }
};

template <class Order, class T, int ITEMS, class It>
static inline void kk_load(int t, It src, T (&items)[ITEMS], int valid) {
  for (int i = 0; i < ITEMS; ++i)
    if (Order::at(t, i) < valid) items[i] = src[Order::at(t, i)];
}
template <class Order, class T, int ITEMS, class It>
static inline void kk_store(int t, It dst, T (&items)[ITEMS], int valid) {
  for (int i = 0; i < ITEMS; ++i)
    if (Order::at(t, i) < valid) dst[Order::at(t, i)] = items[i];
}
template <class T, int ITEMS, class D>
static inline void kk_fill(T (&items)[ITEMS], D value) {
  for (int i = 0; i < ITEMS; ++i) items[i] = value;
}
constexpr int kk_all = 0x7fffffff;

template <class T, int ITEMS, class It>
static inline void LoadDirectBlocked(int t, It src, T (&items)[ITEMS], int valid = kk_all) {
  kk_load<kk_blocked<ITEMS>>(t, src, items, valid);
}
template <class T, class D, int ITEMS, class It>
static inline void LoadDirectBlocked(int t, It src, T (&items)[ITEMS], int valid, D oob) {
  kk_fill(items, oob);
  kk_load<kk_blocked<ITEMS>>(t, src, items, valid);
}
template <int THREADS, class T, int ITEMS, class It>
static inline void LoadDirectStriped(int t, It src, T (&items)[ITEMS], int valid = kk_all) {
  kk_load<kk_striped<THREADS>>(t, src, items, valid);
}
template <int THREADS, class T, class D, int ITEMS, class It>
static inline void LoadDirectStriped(int t, It src, T (&items)[ITEMS], int valid, D oob) {
  kk_fill(items, oob);
  kk_load<kk_striped<THREADS>>(t, src, items, valid);
}
template <class T, int ITEMS, class It>
static inline void LoadDirectWarpStriped(int t, It src, T (&items)[ITEMS], int valid = kk_all) {
  kk_load<kk_warp_striped<ITEMS>>(t, src, items, valid);
}
template <class T, int ITEMS, class It>
static inline void StoreDirectBlocked(int t, It dst, T (&items)[ITEMS], int valid = kk_all) {
  kk_store<kk_blocked<ITEMS>>(t, dst, items, valid);
}
template <int THREADS, class T, int ITEMS, class It>
static inline void StoreDirectStriped(int t, It dst, T (&items)[ITEMS], int valid = kk_all) {
  kk_store<kk_striped<THREADS>>(t, dst, items, valid);
}
template <class T, int ITEMS, class It>
static inline void StoreDirectWarpStriped(int t, It dst, T (&items)[ITEMS], int valid = kk_all) {
  kk_store<kk_warp_striped<ITEMS>>(t, dst, items, valid);
}

template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD,
          BlockLoadAlgorithm ALGORITHM = BLOCK_LOAD_DIRECT, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockLoad {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  using Order = std::conditional_t<ALGORITHM == BLOCK_LOAD_STRIPED, kk_striped<THREADS>,
                                   kk_blocked<ITEMS_PER_THREAD>>;

 public:
  struct TempStorage {
    unsigned char unused;
  };
  BlockLoad() {}
  explicit BlockLoad(TempStorage&) {}
  template <class It>
  void Load(It src, T (&items)[ITEMS_PER_THREAD]) { Load(src, items, kk_all); }
  template <class It>
  void Load(It src, T (&items)[ITEMS_PER_THREAD], int valid) {
    kk_load<Order>(kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>(), src, items, valid);
  }
  template <class It, class D>
  void Load(It src, T (&items)[ITEMS_PER_THREAD], int valid, D oob_default) {
    kk_fill(items, oob_default);
    Load(src, items, valid);
  }
};

template <class T, int BLOCK_DIM_X, int ITEMS_PER_THREAD,
          BlockStoreAlgorithm ALGORITHM = BLOCK_STORE_DIRECT, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockStore {
  static constexpr int THREADS = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;
  using Order = std::conditional_t<ALGORITHM == BLOCK_STORE_STRIPED, kk_striped<THREADS>,
                                   kk_blocked<ITEMS_PER_THREAD>>;

 public:
  struct TempStorage {
    unsigned char unused;
  };
  BlockStore() {}
  explicit BlockStore(TempStorage&) {}
  template <class It>
  void Store(It dst, T (&items)[ITEMS_PER_THREAD]) { Store(dst, items, kk_all); }
  template <class It>
  void Store(It dst, T (&items)[ITEMS_PER_THREAD], int valid) {
    kk_store<Order>(kk_detail::tid<BLOCK_DIM_X, BLOCK_DIM_Y>(), dst, items, valid);
  }
};

}  // namespace cub
