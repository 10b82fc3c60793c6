# ruff: noqa: E501, W291, W293 - the kernels are the project's text, unchanged
"""ggml's CUDA kernels (llama.cpp's ggml/src/ggml-cuda, MIT), ported: each body as shipped at the
commit named beside it, only the signature removed. Template parameters are ``template=`` values:
``T`` the case's dtype, ``op`` a ``header=`` function through ``kernelkit.cxx``, ``use_shared`` a
bool. The header holds what the bodies use from ggml-cuda/common.cuh (``WARP_SIZE``, the Hopper
arch number, the PDL helpers and the float warp reductions) and unary.cu's op functions, copied
unchanged from the commit named beside each.
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

template<int width = WARP_SIZE>
static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = width/2; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, width);
    }
    return x;
}

template<int width = WARP_SIZE>
static __device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
    for (int offset = width/2; offset > 0; offset >>= 1) {
        x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, width));
    }
    return x;
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

# argmax_f32, argmax.cu at 02838c7abfab171d96f642e217f59349ed58c100
ARGMAX = """
    const int64_t row = blockIdx.x;

    float maxval = -FLT_MAX;
    int   argmax = -1;
    const float * rowx = x + row * ncols;

    for (int32_t col = threadIdx.x; col < ncols; col += blockDim.x) {
        const float val = rowx[col];
        if (val > maxval) {
            maxval = val;
            argmax = col;
        }
    }

#pragma unroll
    for (int offset = WARP_SIZE/2; offset > 0; offset >>= 1) {
        const float val = __shfl_xor_sync(0xFFFFFFFF, maxval, offset, WARP_SIZE);
        const int   col = __shfl_xor_sync(0xFFFFFFFF, argmax, offset, WARP_SIZE);
        if (val > maxval) {
            maxval = val;
            argmax = col;
        } else if (val == maxval && col < argmax) {
            // keep the smallest index on ties (first-occurrence wins)
            argmax = col;
        }
    }

    const int n_warps = blockDim.x / WARP_SIZE;
    const int lane_id = threadIdx.x % WARP_SIZE;
    const int warp_id = threadIdx.x / WARP_SIZE;
    if (n_warps > 1) {
        constexpr int    max_warps = 1024 / WARP_SIZE;
        __shared__ float shared_maxval[max_warps];
        __shared__ int   shared_argmax[max_warps];
        if (lane_id == 0) {
            shared_maxval[warp_id] = maxval;
            shared_argmax[warp_id] = argmax;
        }

        __syncthreads();

        if (warp_id == 0) {
            if (lane_id < n_warps) {
                maxval = shared_maxval[lane_id];
                argmax = shared_argmax[lane_id];
            }
#pragma unroll
            for (int offset = WARP_SIZE/2; offset > 0; offset >>= 1) {
                const float val = __shfl_xor_sync(0xFFFFFFFF, maxval, offset, WARP_SIZE);
                const int   col = __shfl_xor_sync(0xFFFFFFFF, argmax, offset, WARP_SIZE);
                if (val > maxval) {
                    maxval = val;
                    argmax = col;
                } else if (val == maxval && col < argmax) {
                    // keep the smallest index on ties (first-occurrence wins)
                    argmax = col;
                }
            }
        }
    }

    if (warp_id == 0 && lane_id == 0) {
        dst[row] = argmax;
    }
"""

# cross_entropy_loss_f32, cross-entropy-loss.cu at 34a50172faa24b5139ce1e754d2c26795ddca25f
CROSS_ENTROPY = """
    extern __shared__ float tmp[];

    logits += int64_t(blockIdx.x)*nclasses;
    labels += int64_t(blockIdx.x)*nclasses;

    // Find maximum for softmax:
    float max_logit = -INFINITY;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float val = logits[i];
        max_logit = fmaxf(max_logit, val);

        if (use_shared) {
            tmp[i] = val;
        }
    }
    max_logit = warp_reduce_max(max_logit);

    // Calculate log(softmax(logits)) which is just logits - max:
    float sum = 0.0f;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float logit_i = use_shared ? tmp[i] : logits[i];
        sum += expf(logit_i - max_logit);
    }
    sum = warp_reduce_sum(sum);
    sum = logf(sum);

    // log(exp(logits - max) / sum) = (logits - max) - log(sum)
    float loss = 0.0f;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float logit_i = use_shared ? tmp[i] : logits[i];
        loss += (logit_i - max_logit - sum) * labels[i];
    }
    loss = -warp_reduce_sum(loss) / (float)k;

    if (threadIdx.x != 0) {
        return;
    }

    dst[blockIdx.x] = loss;
"""

# cross_entropy_loss_back_f32, cross-entropy-loss.cu at 34a50172faa24b5139ce1e754d2c26795ddca25f
CROSS_ENTROPY_BACK = """
    extern __shared__ float tmp[];

    logits += int64_t(blockIdx.x)*nclasses;
    labels += int64_t(blockIdx.x)*nclasses;
    dst    += int64_t(blockIdx.x)*nclasses;

    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float val = logits[i];
        maxval = fmaxf(maxval, val);

        if (use_shared) {
            tmp[i] = val;
        }
    }
    maxval = warp_reduce_max(maxval);

    float sum = 0.0f;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float val = expf((use_shared ? tmp[i] : logits[i]) - maxval);
        sum += val;

        if (use_shared) {
            tmp[i] = val;
        } else {
            dst[i] = val;
        }
    }
    sum = warp_reduce_sum(sum);
    const float sm_scale = 1.0f/sum;

    const float d_by_nrows = *grad/gridDim.x;
    for (int i = threadIdx.x; i < nclasses; i += WARP_SIZE) {
        const float val = use_shared ? tmp[i] : dst[i];
        dst[i] = (val*sm_scale - labels[i])*d_by_nrows;
    }
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
ARGMAX_PORT = port(
    "argmax_f32", "argmax.cu", "02838c7abfab171d96f642e217f59349ed58c100",
    ("x:f32*", "ncols:i64"), ("dst:i32*",), ARGMAX, COMMON,
)  # fmt: skip
XENT = "34a50172faa24b5139ce1e754d2c26795ddca25f"
CROSS_ENTROPY_PORT = port(
    "cross_entropy_loss_f32", "cross-entropy-loss.cu", XENT,
    ("logits:f32*", "labels:f32*", "nclasses:i32", "k:i32"), ("dst:f32*",), CROSS_ENTROPY,
    COMMON, fixed=(("use_shared", (True, False)),),
)  # fmt: skip
CROSS_ENTROPY_BACK_PORT = port(
    "cross_entropy_loss_back_f32", "cross-entropy-loss.cu", XENT,
    ("grad:f32*", "logits:f32*", "labels:f32*", "nclasses:i32"), ("dst:f32*",),
    CROSS_ENTROPY_BACK, COMMON, fixed=(("use_shared", (True, False)),),
)  # fmt: skip

PORTS = (
    UNARY_PORT, UNARY_GATED_PORT, CLAMP_PORT, ARGMAX_PORT, CROSS_ENTROPY_PORT,
    CROSS_ENTROPY_BACK_PORT,
)  # fmt: skip


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


@pytest.mark.parametrize("ncols", [7, 100, 5000])
def test_argmax(ports, ncols):
    rows = 6
    x = ports.round(RNG.standard_normal((rows, ncols)), "float32")
    x[1, :] = 0.5  # all ties: the first index wins
    x[2, -1] = 100.0
    threads = min(1024, (ncols + 31) // 32 * 32)  # ggml_cuda_argmax's launch
    (got,) = ports.run(
        ARGMAX_PORT, "float32", [x, ncols], [(rows,)], grid=(rows * threads, 1, 1),
        threadgroup=(threads, 1, 1),
    )  # fmt: skip
    np.testing.assert_array_equal(got, x.argmax(axis=1))


@pytest.mark.parametrize("use_shared", [True, False])
def test_cross_entropy_loss_and_back(ports, use_shared):
    rows, nclasses = 7, 103
    logits = ports.round(2 * RNG.standard_normal((rows, nclasses)), "float32")
    labels = RNG.random((rows, nclasses))
    labels = ports.round(labels / labels.sum(axis=1, keepdims=True), "float32")
    geo = {
        "grid": (rows * 32, 1, 1), "threadgroup": (32, 1, 1),
        "shared_memory": nclasses * 4 if use_shared else 0,
        "template": [("use_shared", use_shared)],
    }  # fmt: skip
    (loss,) = ports.run(
        CROSS_ENTROPY_PORT, "float32", [logits, labels, nclasses, rows], [(rows,)], **geo
    )
    shifted = logits - logits.max(axis=1, keepdims=True)
    logsm = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    close(loss, -(logsm * labels).sum(axis=1) / rows, "float32")
    grad = np.array([0.75])
    (d,) = ports.run(
        CROSS_ENTROPY_BACK_PORT, "float32", [grad, logits, labels, nclasses], [logits.shape],
        **geo,
    )  # fmt: skip
    close(d, (np.exp(logsm) - labels) * 0.75 / rows, "float32")
