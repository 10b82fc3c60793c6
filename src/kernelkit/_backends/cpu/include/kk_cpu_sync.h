// Barriers, fences, atomics (real ones: blocks run concurrently), warp intrinsics, cooperative
// groups.
#pragma once

static inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kk_syncthreads_at(file, line);
}
static inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(),
                                      int line = __builtin_LINE());
[[noreturn]] __attribute__((cold)) static void __trap() {  // a fault, as the GPU's launch error
  kk_fault_record("__trap() called by block (%u,%u,%u) thread (%u,%u,%u)", blockIdx.x, blockIdx.y,
                  blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  throw kk_fault{};
}
// A failed assert() in a kernel: a fault naming it, as the GPU's device assert stops the launch
// (the host's assert would abort the whole process).
[[noreturn]] __attribute__((cold)) static void kk_assert_fault(const char* expr, const char* file,
                                                                 unsigned line) {
  kk_fault_record("assertion `%s' failed at %s:%u by block (%u,%u,%u) thread (%u,%u,%u)", expr,
                  file, line, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
                  threadIdx.z);
  throw kk_fault{};
}
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// Programmatic dependent launch: launches here run one after another (a kernel starts after the
// previous one has ended), so the dependency is already met and there is no one to trigger.
static inline void cudaGridDependencySynchronize() {}
static inline void cudaTriggerProgrammaticLaunchCompletion() {}

// --- atomics ----------------------------------------------------------------------------------
#define KK_RLX __ATOMIC_RELAXED
template <class T, class F>
static inline T kk_atomic_update(T* p, F f) {  // CAS loop: returns the old value
  T old = __atomic_load_n(p, KK_RLX);
  while (!__atomic_compare_exchange_n(p, &old, f(old), true, KK_RLX, KK_RLX)) {
  }
  return old;
}
template <class T, class F>
static inline T kk_atomic_update_bits(T* p, F f) {  // the same through the integer bits
  using U = std::conditional_t<sizeof(T) == 8, unsigned long long,
                               std::conditional_t<sizeof(T) == 4, unsigned, unsigned short>>;
  U* q = reinterpret_cast<U*>(p);
  U old = __atomic_load_n(q, KK_RLX);
  for (;;) {
    const U nv = kk_bitcast<U>(f(kk_bitcast<T>(old)));
    if (__atomic_compare_exchange_n(q, &old, nv, true, KK_RLX, KK_RLX)) return kk_bitcast<T>(old);
  }
}

#define KK_ATOMIC_INT(T)                                                                        \
  static inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, KK_RLX); }           \
  static inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, KK_RLX); }           \
  static inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, KK_RLX); }           \
  static inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, KK_RLX); }             \
  static inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, KK_RLX); }           \
  static inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, KK_RLX); }         \
  static inline T atomicMax(T* p, T v) {                                                      \
    return kk_atomic_update(p, [v](T o) { return o > v ? o : v; });                           \
  }                                                                                           \
  static inline T atomicMin(T* p, T v) {                                                      \
    return kk_atomic_update(p, [v](T o) { return o < v ? o : v; });                           \
  }                                                                                           \
  static inline T atomicCAS(T* p, T cmp, T v) {                                               \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
    return cmp;                                                                               \
  }
KK_ATOMIC_INT(int)
KK_ATOMIC_INT(unsigned)
KK_ATOMIC_INT(unsigned long long)
KK_ATOMIC_INT(long long)
KK_ATOMIC_INT(long)  // int64_t and uint64_t are long on LP64 hosts
KK_ATOMIC_INT(unsigned long)
#undef KK_ATOMIC_INT
static inline unsigned atomicInc(unsigned* p, unsigned lim) {
  return kk_atomic_update(p, [lim](unsigned o) { return o >= lim ? 0u : o + 1u; });
}
static inline unsigned atomicDec(unsigned* p, unsigned lim) {
  return kk_atomic_update(p, [lim](unsigned o) { return (o == 0 || o > lim) ? lim : o - 1u; });
}

#define KK_ATOMIC_FLOAT(T)                                                                      \
  static inline T atomicAdd(T* p, T v) {                                                      \
    return kk_atomic_update_bits(p, [v](T o) { return T(o + v); });                           \
  }                                                                                           \
  static inline T atomicSub(T* p, T v) {                                                      \
    return kk_atomic_update_bits(p, [v](T o) { return T(o - v); });                           \
  }                                                                                           \
  static inline T atomicMax(T* p, T v) {                                                      \
    return kk_atomic_update_bits(p, [v](T o) { return o > v ? o : v; });                      \
  }                                                                                           \
  static inline T atomicMin(T* p, T v) {                                                      \
    return kk_atomic_update_bits(p, [v](T o) { return o < v ? o : v; });                      \
  }                                                                                           \
  static inline T atomicExch(T* p, T v) {                                                     \
    return kk_atomic_update_bits(p, [v](T) { return v; });                                    \
  }
KK_ATOMIC_FLOAT(float)
KK_ATOMIC_FLOAT(double)
KK_ATOMIC_FLOAT(__half)
KK_ATOMIC_FLOAT(__nv_bfloat16)
#undef KK_ATOMIC_FLOAT
static inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
// Pairs of halves, as one 32-bit update (PyTorch's fastAtomicAdd).
static inline __half2 atomicAdd(__half2* p, __half2 v) {
  return kk_atomic_update_bits(p, [v](__half2 o) { return o + v; });
}
static inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
  return kk_atomic_update_bits(p, [v](__nv_bfloat162 o) { return o + v; });
}
// Scoped variants: every scope is the whole machine here.
#define KK_SCOPED(op) \
  template <class... A> static inline auto op##_block(A... a) { return op(a...); }  \
  template <class... A> static inline auto op##_system(A... a) { return op(a...); }
KK_SCOPED(atomicAdd) KK_SCOPED(atomicSub) KK_SCOPED(atomicExch) KK_SCOPED(atomicMin)
KK_SCOPED(atomicMax) KK_SCOPED(atomicInc) KK_SCOPED(atomicDec) KK_SCOPED(atomicCAS)
KK_SCOPED(atomicAnd) KK_SCOPED(atomicOr) KK_SCOPED(atomicXor)
#undef KK_SCOPED

// --- warp intrinsics (fiber mode only; kernelkit compiles kernels that use them with fibers) ---
#define KK_FULL_MASK 0xffffffffu
static inline unsigned kk_lane() { return kk_linear_tid() & 31u; }

[[noreturn]] __attribute__((cold)) static void kk_shfl_fault(unsigned mask, unsigned group,
                                                              int src, const char* file,
                                                              int line) {
  kk_fault_record("warp shuffle reads lane %d, which does not take part (mask 0x%08x, lanes "
                  "present 0x%08x; the GPU returns an undefined value), by block (%u,%u,%u) "
                  "thread (%u,%u,%u) at %s:%d", src, mask, group, blockIdx.x, blockIdx.y,
                  blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, file, line);
  throw kk_fault{};
}

// A shuffle's source lane must take part; when it does not, the GPU's result is undefined. The
// CPU returns the caller's own value, and checked mode reports it.
template <class T>
static inline T kk_shfl_from(unsigned mask, T v, int src, const char* file, int line) {
  static_assert(sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  const kk_xchg x = kk_warp_exchange(mask, bits, src, false);
#ifdef KK_CPU_CHECKED
  const unsigned lane = kk_lane();
  if (__builtin_expect((unsigned)src != lane && !(((x.group & (mask | 1u << lane)) >> src) & 1u), 0))
    kk_shfl_fault(mask, x.group, src, file, line);
#else
  (void)file, (void)line;
#endif
  T r;
  memcpy(&r, &x.value, sizeof(T));
  return r;
}
#define KK_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()
// The lane a shuffle reads, as PTX's shfl.sync computes it for CUDA's __shfl*_sync: segment mask
// 32 - width, the offset (or lane, or lane mask) taken mod 32, the segment's last lane the clamp
// (its first for up); a source past it gives the caller's own lane. Through xor a lane may read
// an earlier segment, as on the GPU (checked bit for bit, tests/backend/test_warp_intrinsics.py).
enum { KK_SHFL_IDX, KK_SHFL_UP, KK_SHFL_DOWN, KK_SHFL_XOR };
static inline int kk_shfl_lane(int mode, unsigned b, int width) {
  const int lane = (int)kk_lane(), segmask = (32 - width) & 31, bv = (int)(b & 31u);
  const int first = lane & segmask, last = first | (31 & ~segmask);
  const int j = mode == KK_SHFL_IDX ? first | (bv & ~segmask)
                : mode == KK_SHFL_UP ? lane - bv : mode == KK_SHFL_DOWN ? lane + bv : lane ^ bv;
  return (mode == KK_SHFL_UP ? j >= first : j <= last) ? j : lane;
}
template <class T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, KK_SITE) {
  return kk_shfl_from(mask, v, kk_shfl_lane(KK_SHFL_IDX, (unsigned)src, width), file, line);
}
template <class T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32, KK_SITE) {
  return kk_shfl_from(mask, v, kk_shfl_lane(KK_SHFL_UP, d, width), file, line);
}
template <class T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32, KK_SITE) {
  return kk_shfl_from(mask, v, kk_shfl_lane(KK_SHFL_DOWN, d, width), file, line);
}
template <class T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, KK_SITE) {
  return kk_shfl_from(mask, v, kk_shfl_lane(KK_SHFL_XOR, (unsigned)lane_mask, width), file, line);
}
#undef KK_SITE
template <class T>
static inline unsigned __match_any_sync(unsigned mask, T v) {
  static_assert(sizeof(T) <= 8, "__match_any_sync compares values of at most 8 bytes");
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  return (unsigned)kk_warp_exchange(mask, bits, (int)kk_lane(), false, KK_XCHG_MATCH).value;
}
template <class T>
static inline unsigned __match_all_sync(unsigned mask, T v, int* pred) {
  unsigned long long bits = 0;
  memcpy(&bits, &v, sizeof(T));
  const kk_xchg x = kk_warp_exchange(mask, bits, (int)kk_lane(), false, KK_XCHG_MATCH);
  *pred = (unsigned)x.value == x.group;
  return *pred ? x.group : 0u;
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
  return kk_warp_exchange(mask, 0, (int)kk_lane(), pred != 0).ballot;
}
static inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
  const kk_xchg x = kk_warp_exchange(mask, 0, (int)kk_lane(), pred != 0);
  return x.ballot == x.group;
}
static inline void __syncwarp(unsigned mask = KK_FULL_MASK) {
  kk_warp_exchange(mask, 0, (int)kk_lane(), false);
}
// The lanes in the caller's branch (see kk_activemask in kk_cpu_sched.h for the emulation); the
// call is told apart from others by its place in the source.
static inline unsigned __activemask(KK_SITE_PARAMS) {
  return kk_activemask(kk_site{kk_file, kk_line});
}
template <class T, class F>
static inline T kk_warp_reduce(unsigned mask, T v, F f) {
  for (int o = 16; o > 0; o >>= 1) v = f(v, __shfl_xor_sync(mask, v, o));
  return v;
}
static inline int __reduce_add_sync(unsigned m, int v) {
  return kk_warp_reduce(m, v, [](int a, int b) { return a + b; });
}
static inline unsigned __reduce_add_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a + b; });
}
static inline int __reduce_max_sync(unsigned m, int v) {
  return kk_warp_reduce(m, v, [](int a, int b) { return a > b ? a : b; });
}
static inline int __reduce_min_sync(unsigned m, int v) {
  return kk_warp_reduce(m, v, [](int a, int b) { return a < b ? a : b; });
}
static inline unsigned __reduce_max_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
static inline unsigned __reduce_min_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
static inline unsigned __reduce_and_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a & b; });
}
static inline unsigned __reduce_or_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a | b; });
}
static inline unsigned __reduce_xor_sync(unsigned m, unsigned v) {
  return kk_warp_reduce(m, v, [](unsigned a, unsigned b) { return a ^ b; });
}
static inline int __syncthreads_count(int pred, const char* file, int line) {
  // one shared counter per block: count, barrier, read, barrier (so it can be reused)
  static thread_local int count;
  if (kk_linear_tid() == 0) count = 0;
  kk_syncthreads_at(file, line);
  if (pred) ++count;  // fibers of a block never run at the same time: no atomics needed
  kk_syncthreads_at(file, line);
  const int r = count;
  kk_syncthreads_at(file, line);
  return r;
}
static inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
static inline int __syncthreads_and(int pred) {
  return __syncthreads_count(pred) == (int)(blockDim.x * blockDim.y * blockDim.z);
}

// --- cooperative groups -----------------------------------------------------------------------
namespace cooperative_groups {
struct thread_block {
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    kk_syncthreads_at(file, line);
  }
  unsigned thread_rank() const { return kk_linear_tid(); }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  uint3 group_index() const { return blockIdx; }
  uint3 thread_index() const { return threadIdx; }
  dim3 group_dim() const { return blockDim; }
  dim3 dim_threads() const { return blockDim; }
};
static inline thread_block this_thread_block() { return thread_block{}; }

struct grid_group {
  unsigned long long thread_rank() const {
    const unsigned long long b =
        blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    return b * (blockDim.x * blockDim.y * blockDim.z) + kk_linear_tid();
  }
  unsigned long long size() const {
    return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y *
           blockDim.z;
  }
  unsigned long long num_threads() const { return size(); }
  bool is_valid() const { return kk_cur_launch && kk_cur_launch->cooperative; }
  // every block of a cooperative launch (kernel(..., cooperative=True)) meets here
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    kk_grid_sync(file, line);
  }
};
static inline grid_group this_grid() { return grid_group{}; }

// The thread-block cluster (a kernel with cluster_dims; without, a cluster of one block): its
// blocks run as one cooperative launch of their own (kk_run_clusters), so sync() meets every
// thread of the cluster and map_shared_rank() reaches a live block's shared memory.
#define KK_CPU_CLUSTERS 1
struct cluster_group {
  static const kk_launch& launch() { return *kk_cur_launch; }
  static dim3 dim_blocks() { return launch().clustered ? launch().cluster : dim3(1, 1, 1); }
  static unsigned num_blocks() {
    const dim3 d = dim_blocks();
    return d.x * d.y * d.z;
  }
  static unsigned block_rank() {
    return launch().clustered ? (unsigned)kk_block_index(launch(), blockIdx) : 0u;
  }
  static dim3 block_index() {
    const dim3 d = dim_blocks();
    return dim3(blockIdx.x % d.x, blockIdx.y % d.y, blockIdx.z % d.z);
  }
  static unsigned thread_rank() {
    return block_rank() * (blockDim.x * blockDim.y * blockDim.z) + kk_linear_tid();
  }
  static unsigned num_threads() { return num_blocks() * blockDim.x * blockDim.y * blockDim.z; }
  static unsigned size() { return num_threads(); }
  static bool is_valid() { return true; }
  static void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    kk_cluster_sync(file, line);
  }
  template <class T>
  static T* map_shared_rank(T* addr, unsigned rank) {
    return (T*)kk_cluster_map(addr, rank);
  }
};
static inline cluster_group this_cluster() { return cluster_group{}; }

// Lane of the rank-th set bit of `m`.
static inline int kk_nth_lane(unsigned m, unsigned rank) {
  for (; rank && m; --rank) m &= m - 1;
  return m ? __builtin_ctz(m) : -1;
}
static inline unsigned kk_lanes_below() { return (1u << kk_lane()) - 1u; }
// The bits of `v` at the set positions of `m`, packed down (x86's pext).
static inline unsigned kk_compress(unsigned v, unsigned m) {
  unsigned r = 0, k = 0;
  for (; m; m &= m - 1, ++k) r |= ((v >> __builtin_ctz(m)) & 1u) << k;
  return r;
}

// A set of lanes of one warp: what coalesced_threads(), labeled_partition() and
// binary_partition() give; ranks count the set lanes from the lowest.
struct coalesced_group {
  unsigned m;
  unsigned mask() const { return m; }
  unsigned size() const { return (unsigned)__builtin_popcount(m); }
  unsigned num_threads() const { return size(); }
  unsigned thread_rank() const { return (unsigned)__builtin_popcount(m & kk_lanes_below()); }
  unsigned meta_group_rank() const { return 0; }
  unsigned meta_group_size() const { return 1; }
  void sync() const { __syncwarp(m); }
  template <class T>
  T shfl(T v, unsigned rank) const {
    const int src = kk_nth_lane(m, rank);
    return __shfl_sync(m, v, src < 0 ? (int)kk_lane() : src);
  }
  template <class T>
  T shfl_down(T v, unsigned d) const {
    const unsigned r = thread_rank() + d;
    return r < size() ? shfl(v, r) : shfl(v, thread_rank());
  }
  template <class T>
  T shfl_up(T v, unsigned d) const {
    const unsigned r = thread_rank();
    return shfl(v, r >= d ? r - d : r);
  }
  unsigned ballot(int pred) const { return kk_compress(__ballot_sync(m, pred), m); }
  bool any(int pred) const { return __any_sync(m, pred); }
  bool all(int pred) const { return __all_sync(m, pred); }
  template <class T>
  unsigned match_any(T v) const { return kk_compress(__match_any_sync(m, v), m); }
};
// The lanes that call it together (converged): see __activemask().
static inline coalesced_group coalesced_threads(KK_SITE_PARAMS) {
  return coalesced_group{kk_activemask(kk_site{kk_file, kk_line})};
}

// Tiles of at most a warp: lanes [base, base + N) of the warp. Wider tiles (64..1024 threads, as
// CUDA allows) synchronize as a sub-block barrier and, as in CUDA, have no shuffles or votes.
template <unsigned N, bool Narrow = (N <= 32)>
struct thread_block_tile;
template <unsigned N>
struct thread_block_tile<N, true> {
  static_assert(N >= 1 && (N & (N - 1)) == 0, "tile size must be a power of 2");
  unsigned mask() const {
    const unsigned base = kk_lane() & ~(N - 1);
    return N == 32 ? KK_FULL_MASK : (((1u << N) - 1u) << base);
  }
  unsigned thread_rank() const { return kk_lane() & (N - 1); }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return kk_linear_tid() / N; }
  unsigned meta_group_size() const {
    return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N;
  }
  void sync() const { __syncwarp(mask()); }
  template <class T>
  T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, N); }
  template <class T>
  T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, N); }
  template <class T>
  T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, N); }
  template <class T>
  T shfl_xor(T v, int m) const { return __shfl_xor_sync(mask(), v, m, N); }
  unsigned ballot(int pred) const { return __ballot_sync(mask(), pred) >> (kk_lane() & ~(N - 1)); }
  bool any(int pred) const { return __any_sync(mask(), pred); }
  bool all(int pred) const { return __all_sync(mask(), pred); }
  template <class T>
  unsigned match_any(T v) const {
    return __match_any_sync(mask(), v) >> (kk_lane() & ~(N - 1));
  }
  operator coalesced_group() const { return coalesced_group{mask()}; }
};
template <unsigned N>
struct thread_block_tile<N, false> {
  static_assert(N <= 1024 && (N & (N - 1)) == 0, "tile size must be a power of 2 <= 1024");
  unsigned thread_rank() const { return kk_linear_tid() & (N - 1); }
  static constexpr unsigned size() { return N; }
  static constexpr unsigned num_threads() { return N; }
  unsigned meta_group_rank() const { return kk_linear_tid() / N; }
  unsigned meta_group_size() const {
    return (blockDim.x * blockDim.y * blockDim.z + N - 1) / N;
  }
  void sync() const { kk_tile_sync((int)(kk_linear_tid() & ~(N - 1)), (int)N); }
};
template <unsigned N, class Parent>
static inline thread_block_tile<N> tiled_partition(const Parent&) { return {}; }
template <unsigned N>
using thread_block_tile_t = thread_block_tile<N>;

// The type-erased group (cuda-samples' simpleCooperativeGroups): a block, a tile of any width, or
// a coalesced set of lanes.
class thread_group {
 public:
  thread_group(const thread_block&) : kind_(kBlock), size_(0), mask_(0) {}
  template <unsigned N>
  thread_group(const thread_block_tile<N>&) : thread_group(kTile, N) {}
  thread_group(const coalesced_group& g) : kind_(kLanes), size_(g.size()), mask_(g.m) {}
  unsigned size() const {
    return kind_ == kBlock ? blockDim.x * blockDim.y * blockDim.z : size_;
  }
  unsigned num_threads() const { return size(); }
  unsigned thread_rank() const {
    if (kind_ == kBlock) return kk_linear_tid();
    if (kind_ == kLanes) return (unsigned)__builtin_popcount(mask_ & kk_lanes_below());
    return kk_linear_tid() & (size_ - 1);
  }
  bool is_valid() const { return true; }
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    if (kind_ == kBlock) kk_syncthreads_at(file, line);
    else if (kind_ == kLanes) __syncwarp(mask_);
    else if (size_ <= 32) __syncwarp(size_ == 32 ? KK_FULL_MASK
                                                 : ((1u << size_) - 1u) << (kk_lane() & ~(size_ - 1)));
    else kk_tile_sync((int)(kk_linear_tid() & ~(size_ - 1)), (int)size_);
  }
  static thread_group tile(unsigned n) { return thread_group(kTile, n); }

 private:
  enum Kind : unsigned char { kBlock, kTile, kLanes };
  thread_group(Kind k, unsigned n) : kind_(k), size_(n), mask_(0) {}
  Kind kind_;
  unsigned size_, mask_;
};
// tiled_partition(parent, n) with a run-time size: a power of 2 up to 32, as CUDA's header
// allows (it aborts the kernel otherwise); wider tiles need the static tiled_partition<N>.
static inline thread_group tiled_partition(const thread_block&, unsigned n) {
  if (n == 0 || n > 32 || (n & (n - 1))) {
    kk_fault_record("cooperative_groups::tiled_partition: run-time tile size %u is not a power "
                    "of 2 <= 32 (CUDA aborts the kernel; use tiled_partition<N> for wider tiles)",
                    n);
    throw kk_fault{};
  }
  return thread_group::tile(n);
}
static inline thread_group tiled_partition(const thread_group& parent, unsigned n) {
  (void)parent;
  return tiled_partition(thread_block{}, n);
}

// Lanes of `parent` with equal `label` (one warp-wide match).
template <class Parent>
static inline coalesced_group labeled_partition(const Parent& parent, int label) {
  const unsigned m = coalesced_group(parent).m;
  return coalesced_group{__match_any_sync(m, label)};
}
template <class Parent>
static inline coalesced_group binary_partition(const Parent& parent, bool pred) {
  return labeled_partition(parent, pred ? 1 : 0);
}

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

template <unsigned N, class T, class Op>
static inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
  static_assert(N <= 32, "cg::reduce needs a tile of at most 32 threads");
  for (unsigned o = N / 2; o > 0; o >>= 1) v = op(v, g.shfl_xor(v, (int)o));
  return v;
}
template <class T, class Op>
static inline T reduce(const coalesced_group& g, T v, Op op) {  // in rank order, as a tree would
  T acc = g.shfl(v, 0);
  for (unsigned r = 1; r < g.size(); ++r) acc = op(acc, g.shfl(v, r));
  return acc;
}
template <unsigned N, class T, class Op>
static inline T inclusive_scan(const thread_block_tile<N>& g, T v, Op op) {
  for (unsigned o = 1; o < N; o <<= 1) {
    const T u = g.shfl_up(v, o);
    if (g.thread_rank() >= o) v = op(u, v);
  }
  return v;
}
template <unsigned N, class T>
static inline T inclusive_scan(const thread_block_tile<N>& g, T v) {
  return inclusive_scan(g, v, plus<T>());
}
template <unsigned N, class T, class Op>
static inline T exclusive_scan(const thread_block_tile<N>& g, T v, Op op) {
  const T inc = inclusive_scan(g, v, op), prev = g.shfl_up(inc, 1);
  return g.thread_rank() == 0 ? T() : prev;
}
template <unsigned N, class T>
static inline T exclusive_scan(const thread_block_tile<N>& g, T v) {
  return exclusive_scan(g, v, plus<T>());
}
static inline void sync(const thread_block& b) { b.sync(); }
static inline void sync(const grid_group& g) { g.sync(); }
template <unsigned N>
static inline void sync(const thread_block_tile<N>& t) { t.sync(); }
static inline void sync(const coalesced_group& g) { g.sync(); }
static inline void sync(const thread_group& g) { g.sync(); }
}  // namespace cooperative_groups
namespace cg = cooperative_groups;
