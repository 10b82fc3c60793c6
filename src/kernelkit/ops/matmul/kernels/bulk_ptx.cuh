
__device__ __forceinline__ void kk_bulk_init(unsigned bar) {  // one arrival a phase
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(bar));
}
__device__ __forceinline__ void kk_bulk_init_fence() {  // the inits, seen by the copy engine
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void kk_bulk_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kk_bulk_copy(unsigned dst, const void* src, unsigned bytes,
                                             unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void kk_bulk_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n KK_BULK_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra.uni KK_BULK_WAIT;\n}\n"
      :: "r"(bar), "r"(parity) : "memory");
}
