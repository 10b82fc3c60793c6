
// Distributed shared memory: a float (or two) of block `rank` of this cluster, and a
// cluster-wide barrier (release/acquire: what each block wrote to its shared memory before it
// is seen after it).
__device__ __forceinline__ unsigned kk_cluster_addr(const float* p, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote) : "r"(kk_mma_smem_u32(p)), "r"(rank));
  return remote;
}
__device__ __forceinline__ float kk_cluster_load(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
               : "=f"(v) : "r"(kk_cluster_addr(p, rank)) : "memory");
  return v;
}
__device__ __forceinline__ float2 kk_cluster_load2(const float* p, unsigned rank) {  // 8-aligned
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y) : "r"(kk_cluster_addr(p, rank)) : "memory");
  return v;
}
__device__ __forceinline__ void kk_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
