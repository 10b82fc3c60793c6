"""``template=`` values are real C++ template parameters (issue 25, item 3): the body is a
function template instantiated with them, so ``if constexpr`` discards its other branch and a
``static_assert`` there does not fire, as in the original kernel; enumerators and functions from
``header=`` are template values through ``kernelkit.cxx``.

``NORM_F32`` is ggml's ``norm_f32`` body, unchanged: ggml-org/llama.cpp,
ggml/src/ggml-cuda/norm.cu at 0129866abecd5d7f83839ff7c404370386db7709 (MIT), the signature
removed. ``GGML_HEADER`` gives what it uses from ggml's common.cuh (``warp_reduce_sum`` for
``float2``), written here. Run on every backend against float64 NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(2503)

GGML_HEADER = """
#ifndef WARP_SIZE
#define WARP_SIZE 32
#endif
template <int width = WARP_SIZE>
static __device__ __forceinline__ float2 warp_reduce_sum(float2 a) {
#pragma unroll
  for (int offset = width / 2; offset > 0; offset >>= 1) {
    a.x += __shfl_xor_sync(0xffffffff, a.x, offset, width);
    a.y += __shfl_xor_sync(0xffffffff, a.y, offset, width);
  }
  return a;
}
"""

NORM_F32 = """
    const int nrows     = gridDim.x;
    const int nchannels = gridDim.y;

    const int row       = blockIdx.x;
    const int channel   = blockIdx.y;
    const int sample    = blockIdx.z;
    const int tid       = threadIdx.x;

    x   += sample*stride_sample + channel*stride_channel + row*stride_row;
    dst += ((sample*nchannels + channel)*nrows + row)*ncols;

    float2 mean_var = make_float2(0.0f, 0.0f);

    for (int col = tid; col < ncols; col += block_size) {
        const float xi = x[col];
        mean_var.x += xi;
        mean_var.y += xi * xi;
    }

    // sum up partial sums
    mean_var = warp_reduce_sum(mean_var);
    if constexpr (block_size > WARP_SIZE) {
        static_assert(block_size == 1024, "unexpected block_size");
        __shared__ float2 s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = mean_var;
        }
        __syncthreads();
        mean_var = s_sum[lane_id];
        mean_var = warp_reduce_sum(mean_var);
    }

    const float mean = mean_var.x / ncols;
    const float var = mean_var.y / ncols - mean * mean;
    const float inv_std = rsqrtf(var + eps);

    for (int col = tid; col < ncols; col += block_size) {
        dst[col] = (x[col] - mean) * inv_std;
    }
"""

NORM = kernelkit.kernel(
    "ggml_norm_f32",
    ["x", "ncols", "stride_row", "stride_channel", "stride_sample", "eps"],
    ["dst"],
    NORM_F32,
    header=GGML_HEADER,
)


# ggml's launcher: block_size 32 below 1024 columns, else 1024
@pytest.mark.parametrize(("ncols", "block_size"), [(37, 32), (500, 32), (1100, 1024)])
def test_ggml_norm_at_both_block_sizes(arrays, backend, ncols, block_size):
    samples, channels, rows = 2, 3, 5
    x = RNG.standard_normal((samples, channels, rows, ncols)).astype(np.float32)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    sc, sr = channels * rows * ncols, rows * ncols
    modes = (False, True) if backend == "cpu" else (False,)
    for check in modes:
        (y,) = NORM(
            [arrays.put(x), ncols, np.int64(ncols), np.int64(sr), np.int64(sc), np.float32(1e-5)],
            output_shapes=[x.shape],
            output_dtypes=[np.float32],
            grid=(rows * block_size, channels, samples),
            threadgroup=(block_size, 1, 1),
            template=[("block_size", block_size)],
            check=check,
        )
        np.testing.assert_allclose(arrays.get(y), want, rtol=2e-4, atol=2e-4)


SORT_HEADER = """
enum ggml_sort_order { GGML_SORT_ORDER_ASC, GGML_SORT_ORDER_DESC };
namespace act { __device__ __forceinline__ float twice(float v) { return 2.0f * v; } }
__device__ __forceinline__ float negate(float v) { return -v; }
"""
# A template value of enum type and one of function type, used as the originals use them.
ORDERED = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= n) return;
float v = F(x[i]);
if constexpr (order == GGML_SORT_ORDER_ASC) {
  y[i] = v;
} else {
  static_assert(order == GGML_SORT_ORDER_DESC, "unknown order");
  y[i] = -v;
}
"""


@pytest.mark.parametrize(
    ("order", "fn", "sign", "scale"),
    [
        ("GGML_SORT_ORDER_ASC", "act::twice", 1, 2),
        ("::GGML_SORT_ORDER_DESC", "negate", -1, -1),
    ],
)
def test_enum_and_function_template_values(arrays, backend, order, fn, sign, scale):
    k = kernelkit.kernel("ordered", ["x", "n"], ["y"], ORDERED, header=SORT_HEADER)
    x = RNG.standard_normal(77).astype(np.float32)
    (y,) = k(
        [arrays.put(x), 77],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(77, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("order", kernelkit.cxx(order)), ("F", kernelkit.cxx(fn))],
    )
    np.testing.assert_array_equal(arrays.get(y), sign * scale * x)


def test_template_type_and_bool_parameters(arrays, backend):
    k = kernelkit.kernel(
        "typed",
        ["x"],
        ["y"],
        "int i = threadIdx.x;\nif constexpr (square) { y[i] = T(x[i] * x[i]); }\n"
        'else { static_assert(sizeof(T) == 8, "only double"); y[i] = T(x[i]); }',
    )
    x = RNG.standard_normal(16).astype(np.float32)
    for square, dtype in ((True, np.float32), (False, np.float64)):
        (y,) = k(
            [arrays.put(x)],
            output_shapes=[x.shape],
            output_dtypes=[dtype],
            grid=(16, 1, 1),
            threadgroup=(16, 1, 1),
            template=[("T", dtype), ("square", square)],
        )
        want = (x * x if square else x).astype(dtype)
        np.testing.assert_array_equal(arrays.get(y), want)
