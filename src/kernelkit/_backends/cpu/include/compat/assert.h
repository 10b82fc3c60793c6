// kernelkit (CPU backend): assert() in kernel code reports a fault, as the GPU's device assert
// stops the launch, where the host's assert would abort the process. The C library's header
// comes first for its declarations (__assert_fail, which c10's CUDA_KERNEL_ASSERT calls
// directly); its assert() is then replaced. No include guard: like the C library's, each
// inclusion defines assert() again (for NDEBUG as it stands there).
#include_next <assert.h>
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : kk_assert_fault(#e, __FILE__, __LINE__))
#endif
