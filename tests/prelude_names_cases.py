"""Kernels that declare the prelude's convenience names themselves or test CUDA's version macros
(shared by tests/backend/test_prelude_names.py and tests/unit/test_prelude_names_nvrtc.py)."""

from __future__ import annotations

# THC/Apex style: a shuffle helper that takes the pre-CUDA-9 branch unless CUDA_VERSION is set,
# and PyTorch's own `static const int WARP_SIZE = 32;` at file scope.
APEX_HEADER = """
static const int WARP_SIZE = 32;

template <typename T>
__device__ __forceinline__ T WARP_SHFL_XOR(T value, int laneMask, int width = warpSize,
                                           unsigned int mask = 0xffffffff) {
#if CUDA_VERSION >= 9000
  return __shfl_xor_sync(mask, value, laneMask, width);
#else
  return __shfl_xor(value, laneMask, width);
#endif
}
"""
APEX_BODY = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
float v = x[i];
for (int m = WARP_SIZE / 2; m > 0; m >>= 1) v += WARP_SHFL_XOR(v, m);
y[i] = v;
"""

# WARP_SIZE declared in the body, and as a template parameter of a header function.
BODY_DECLARES = """
constexpr int WARP_SIZE = 32;
int i = blockIdx.x * blockDim.x + threadIdx.x;
y[i] = x[i] * lanes<WARP_SIZE>();
"""
TEMPLATE_HEADER = """
template <int WARP_SIZE>
__device__ int lanes() { return WARP_SIZE; }
"""

# A body that uses WARP_SIZE without defining it (kernelkit's prelude gives it), and the
# version macros as nvcc sets them.
USES_PRELUDE = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
#if defined(__CUDACC__) && CUDA_VERSION >= 12000 && CUDART_VERSION >= 12000 && \\
    __CUDACC_VER_MAJOR__ >= 12
y[i] = x[i] + WARP_SIZE;
#else
y[i] = -1.0f;
#endif
"""
