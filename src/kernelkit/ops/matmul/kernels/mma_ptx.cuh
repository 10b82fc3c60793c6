
// sm_80+ instructions through inline PTX (what a CPU emulation of them replaces, see the tests).
// mma.sync m16n8k16, fp32 accumulators, for T = __half (f16) or __nv_bfloat16 (bf16).
template <class T> struct kk_mma_op;
#define KK_MMA_OP(T, PTX_TYPE)                                                             \
  template <> struct kk_mma_op<T> {                                                        \
    static __device__ __forceinline__ void run(float (&c)[4], const unsigned (&a)[4],      \
                                               unsigned b0, unsigned b1) {                 \
      asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 "           \
          "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"             \
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                 \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                 \
    }                                                                                      \
  };
KK_MMA_OP(__half, "f16")
KK_MMA_OP(__nv_bfloat16, "bf16")
#undef KK_MMA_OP

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void kk_mma_cp16(unsigned dst, const void* src, bool full) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
}
__device__ __forceinline__ void kk_mma_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void kk_mma_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}
// volatile: the same address reads new data after every barrier (never reuse a result)
__device__ __forceinline__ void kk_mma_ldsm(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void kk_mma_ldsm_t(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ unsigned kk_mma_smem_u32(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);  // the shared window's 32-bit address
}
