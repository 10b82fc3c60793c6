# ruff: noqa: E501 - the kernels are the project's text, unchanged
"""ggml's CUDA kernels (llama.cpp's ggml/src/ggml-cuda, MIT), ported: each body as shipped at the
commit named beside it, only the signature removed. Template parameters are ``template=`` values:
``T`` the case's dtype, ``op`` a ``header=`` function through ``kernelkit.cxx``. The header holds
what the bodies use from ggml-cuda/common.cuh (``WARP_SIZE``, the Hopper arch number, the PDL
helpers) and unary.cu's op functions, copied unchanged from the commit named beside each.
(argmax_f32 and the cross-entropy kernels, first ported here too, are in
tests/real_kernels_headers.py on main.)
"""

from __future__ import annotations

import numpy as np
import pytest
from real_ports import Port, Ports, close

import kernelkit

REPO = "ggml-org/llama.cpp"
RNG = np.random.default_rng(13)

# ggml/src/ggml-cuda/common.cuh at 00108827d87949b538ad1821f81a6b111827fcda
COMMON = """
#include <cstdint>
#include <cfloat>
#include <cmath>

#define WARP_SIZE 32
#define GGML_CUDA_CC_HOPPER          900

#if !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && \\
    (CUDART_VERSION >= 12030 || (!(defined(_MSC_VER) && !defined(__clang__)) && CUDART_VERSION >= 11080))
#    define GGML_CUDA_USE_PDL
#endif  // !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && (CUDART_VERSION >= 12030 || (!(defined(_MSC_VER) && !defined(__clang__)) && CUDART_VERSION >= 11080))

static __device__ __forceinline__ void ggml_cuda_pdl_sync() {
#if defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
    cudaGridDependencySynchronize();
#endif // defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
}

static __device__ __forceinline__ void ggml_cuda_pdl_lc() {
#if defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
    cudaTriggerProgrammaticLaunchCompletion();
#endif // defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
}
"""

# ggml/src/ggml-cuda/unary.cu at 036be503fdc41549c814f6dd8cbd07b95d11f957 (the ops used here)
UNARY_OPS = """
static __device__ __forceinline__ float op_sgn(float x) {
    return (x > 0.f ? 1.f : ((x < 0.f ? -1.f : 0.f)));
}

static __device__ __forceinline__ float op_gelu_erf(float x) {
    const float SQRT_2_INV = 0.70710678118654752440084436210484f;

    return 0.5f*x*(1.0f + erff(x*SQRT_2_INV));
}

static __device__ __forceinline__ float op_gelu_quick(float x) {
    const float GELU_QUICK_COEF = -1.702f;

    return x * (1.0f / (1.0f + expf(GELU_QUICK_COEF * x)));
}

static __device__ __forceinline__ float op_tanh(float x) {
    return tanhf(x);
}

static __device__ __forceinline__ float op_relu(float x) {
    return fmaxf(x, 0);
}

static __device__ __forceinline__ float op_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

static __device__ __forceinline__ float op_hardswish(float x) {
    return x * fminf(1.0f, fmaxf(0.0f, (x + 3.0f) / 6.0f));
}

static __device__ __forceinline__ float op_softplus(float x) {
    return (x > 20.0f) ? x : logf(1.0f + expf(x));
}

static __device__ __forceinline__ float op_elu(float x) {
    return (x > 0.f) ? x : expm1f(x);
}
"""

# ggml/src/ggml-cuda/clamp.cu at 614dee046f1cef98b3f16e46b2adde65bac4b8a3
CLAMP_OP = """
static __device__ __forceinline__ float op_clamp(float x, float min, float max) {
    return fminf(fmaxf(x, min), max);
}
"""

# unary_op_kernel, unary.cu at 036be503fdc41549c814f6dd8cbd07b95d11f957
UNARY_OP = """
    ggml_cuda_pdl_lc();
    const int i = blockDim.x*blockIdx.x + threadIdx.x;

    if (i >= k) {
        return;
    }

    ggml_cuda_pdl_sync();
    dst[i] = (T)op((float)x[i]);
"""

# unary_gated_op_kernel, unary.cu at 036be503fdc41549c814f6dd8cbd07b95d11f957
UNARY_GATED_OP = """
    ggml_cuda_pdl_lc();
    const int64_t i = int64_t(blockDim.x)*blockIdx.x + threadIdx.x;

    if (i >= k) {
        return;
    }

    // perform base op and multiply with gate (either offset in same tensor or a separate one)
    const int64_t j0 = (i / n) * o0 + (i % n);
    const int64_t j1 = o0 == o1 ? j0 : (i / n) * o1 + (i % n);

    ggml_cuda_pdl_sync();
    dst[i] = (T)(op((float)x[j0]) * (float)g[j1]);
"""

# op_clamp_kernel, clamp.cu at 614dee046f1cef98b3f16e46b2adde65bac4b8a3
CLAMP = """
#if !defined(GGML_USE_HIP) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
    cudaGridDependencySynchronize();
#endif
    const int i = blockDim.x*blockIdx.x + threadIdx.x;

    if (i >= k) {
        return;
    }

    dst[i] = (T)op_clamp((float)x[i], (float)min, (float)max);
#if !defined(GGML_USE_HIP) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
    cudaTriggerProgrammaticLaunchCompletion();
#endif
"""


def port(name, path, commit, inputs, outputs, body, header, **kw):
    return Port(
        name, REPO, f"ggml/src/ggml-cuda/{path}", commit, inputs, outputs, body, header, **kw
    )


HALF = ("float32", "float16")
UNARY_PORT = port(
    "unary_op_kernel", "unary.cu", "036be503fdc41549c814f6dd8cbd07b95d11f957",
    ("x:T*", "k:i32"), ("dst:T*",), UNARY_OP, COMMON + UNARY_OPS,
    template=("T",), dtypes=HALF, fixed=(("op", (kernelkit.cxx("op_gelu_erf"),)),),
)  # fmt: skip
UNARY_GATED_PORT = port(
    "unary_gated_op_kernel", "unary.cu", "036be503fdc41549c814f6dd8cbd07b95d11f957",
    ("x:T*", "g:T*", "k:i64", "n:i64", "o0:i64", "o1:i64"), ("dst:T*",), UNARY_GATED_OP,
    COMMON + UNARY_OPS, template=("T",), dtypes=HALF,
    fixed=(("op", (kernelkit.cxx("op_relu"),)),),
)  # fmt: skip
CLAMP_PORT = port(
    "op_clamp_kernel", "clamp.cu", "614dee046f1cef98b3f16e46b2adde65bac4b8a3",
    ("x:T*", "min:T", "max:T", "k:i32"), ("dst:T*",), CLAMP, COMMON + CLAMP_OP,
    template=("T",), dtypes=HALF,
)  # fmt: skip
PORTS = (UNARY_PORT, UNARY_GATED_PORT, CLAMP_PORT)


@pytest.fixture
def ports(backend):
    return Ports(backend)


def _erf(x):
    from math import erf

    return np.vectorize(erf)(x)


OPS = {
    "op_gelu_erf": lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
    "op_hardswish": lambda x: x * np.clip((x + 3) / 6, 0, 1),
    "op_softplus": lambda x: np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20)))),
    "op_elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
}
CUDA_NEG_BLOCK_SIZE = (
    256  # unary.cuh's launch block (and CUDA_GLU_BLOCK_SIZE, CUDA_CLAMP_BLOCK_SIZE)
)


def blocks(n, block=CUDA_NEG_BLOCK_SIZE):
    return {"grid": (-(-n // block) * block, 1, 1), "threadgroup": (block, 1, 1)}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", sorted(OPS))
def test_unary_op(ports, dtype, op):
    x = ports.round(3 * RNG.standard_normal(1001), dtype)
    (y,) = ports.run(
        UNARY_PORT, dtype, [x, x.size], [x.shape], template=[("op", kernelkit.cxx(op))],
        **blocks(x.size),
    )  # fmt: skip
    close(y, ports.round(OPS[op](x), dtype), dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("swapped", [False, True])
def test_unary_gated_op_swiglu_layout(ports, dtype, swapped):
    """ggml_cuda_op_unary_gated with one source: x and g are the two halves of each row."""
    rows, nc = 5, 37
    src = ports.round(RNG.standard_normal((rows, 2 * nc)), dtype)
    a, b = (src[:, nc:], src[:, :nc]) if swapped else (src[:, :nc], src[:, nc:])
    # the kernel takes the two halves as pointers into the same row-major buffer
    x_off, g_off = (nc, 0) if swapped else (0, nc)
    flat = src.reshape(-1)
    args = [flat[x_off:], flat[g_off:], rows * nc, nc, 2 * nc, 2 * nc]
    (y,) = ports.run(
        UNARY_GATED_PORT, dtype, args, [(rows, nc)], template=[("op", kernelkit.cxx("op_relu"))],
        **blocks(rows * nc),
    )  # fmt: skip
    close(y, ports.round(np.maximum(a, 0) * b, dtype), dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_clamp(ports, dtype):
    x = ports.round(3 * RNG.standard_normal(999), dtype)
    (y,) = ports.run(CLAMP_PORT, dtype, [x, -1.25, 0.75, x.size], [x.shape], **blocks(x.size))
    np.testing.assert_array_equal(y, np.clip(x, -1.25, 0.75))
