// --- midm's split-K cluster helpers (sm_90 thread-block clusters) -----------------------------
// The SPLIT blocks of a cluster take slices of K for one output tile and add their fp32 tiles
// through distributed shared memory. These four helpers are all the kernel knows of clusters;
// with SPLIT = 1 they compile to nothing (any arch), and a CPU emulation replaces them (the
// tests). SPLIT > 1 needs clusters: without them the kernel traps rather than add one slice.

// Called once at the start with the block's dynamic shared memory (the emulation records it).
template <int SPLIT>
__device__ __forceinline__ void kk_midm_cluster_init(void*) {}

// This block's rank in its cluster: which slice of K it takes, which share of the tile it sums.
template <int SPLIT>
__device__ __forceinline__ unsigned kk_midm_rank() {
  if (SPLIT == 1) return 0u;
#if KK_HAS_CLUSTERS
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  __trap();  // no clusters before sm_90 (where __cluster_dims__ does not compile either)
  return 0u;
#endif
}

// The generic address of `p` (in this block's shared memory) in block `rank`'s shared memory.
template <int SPLIT>
__device__ __forceinline__ const float* kk_midm_map(const float* p, unsigned rank) {
  if (SPLIT == 1) return p;
#if KK_HAS_CLUSTERS
  unsigned long long r;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(r) : "l"(p), "r"(rank));
  return reinterpret_cast<const float*>(r);
#else
  return p;
#endif
}

// Every thread of the cluster arrives; what each wrote to shared memory before is seen after.
template <int SPLIT>
__device__ __forceinline__ void kk_midm_cluster_sync() {
  if (SPLIT == 1) {
    __syncthreads();
    return;
  }
#if KK_HAS_CLUSTERS
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
