"""Struct parameters by value (issue 25, item 5) and grid-wide sync (item 6), on ggml's own
code: ``soft_max_f32_parallelize_cols`` takes ``const soft_max_params p`` by value and syncs the
whole grid twice per row (``cg::this_grid().sync()``), launched cooperatively.

From ggml-org/llama.cpp, ggml/src/ggml-cuda/softmax.cu at
07003f1ffb23468e176b17d7ac99f98514e258bd (MIT): ``soft_max_params``,
``two_stage_warp_reduce_max/sum``, ``soft_max_f32_parallelize_cols_single_row`` and the body of
``soft_max_f32_parallelize_cols``, unchanged but for the kernel's signature. The
``warp_reduce_*`` helpers it takes from ggml's common.cuh are written here.
"""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(2506)

GGML_SOFTMAX_HEADER = r"""
#include <cooperative_groups.h>
#ifndef WARP_SIZE
#define WARP_SIZE 32
#endif
#ifdef KERNELKIT_CPU
#include <assert.h>
#else
#define assert(x)
#endif

static __device__ __forceinline__ float warp_reduce_sum(float x) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
    x += __shfl_xor_sync(0xffffffff, x, offset, WARP_SIZE);
  }
  return x;
}
static __device__ __forceinline__ float warp_reduce_max(float x) {
  for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, offset, WARP_SIZE));
  }
  return x;
}

struct soft_max_params {

    int64_t nheads;
    uint32_t n_head_log2;
    int64_t ncols;
    int64_t nrows_x;
    int64_t nrows_y;
    int64_t ne00;
    int64_t ne01;
    int64_t ne02;
    int64_t ne03;
    int64_t nb11;
    int64_t nb12;
    int64_t nb13;

    int64_t ne12;
    int64_t ne13;
    float scale;
    float max_bias;
    float m0;
    float m1;
};

// TODO: This is a common pattern used across kernels that could be moved to common.cuh + templated
static __device__ float two_stage_warp_reduce_max(float val) {
    val = warp_reduce_max(val);
    if (blockDim.x > WARP_SIZE) {
        assert((blockDim.x <= 1024) && (blockDim.x % WARP_SIZE) == 0);
        __shared__ float local_vals[32];
        const int        warp_id = threadIdx.x / WARP_SIZE;
        const int        lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            local_vals[warp_id] = val;
        }
        __syncthreads();
        val = -INFINITY;
        if (lane_id < (static_cast<int>(blockDim.x) / WARP_SIZE)) {
            val = local_vals[lane_id];
        }
        return warp_reduce_max(val);
    } else {
        return val;
    }
}

static __device__ float two_stage_warp_reduce_sum(float val) {
    val = warp_reduce_sum(val);
    if (blockDim.x > WARP_SIZE) {
        assert((blockDim.x <= 1024) && (blockDim.x % WARP_SIZE) == 0);
        __shared__ float local_vals[32];
        const int        warp_id = threadIdx.x / WARP_SIZE;
        const int        lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            local_vals[warp_id] = val;
        }
        __syncthreads();
        val = 0.0f;
        if (lane_id < (static_cast<int>(blockDim.x) / WARP_SIZE)) {
            val = local_vals[lane_id];
        }
        return warp_reduce_sum(val);
    } else {
        return val;
    }
}

// TODO: Template to allow keeping ncols in registers if they fit
static __device__ void soft_max_f32_parallelize_cols_single_row(const float * __restrict__ x,
                                                                float * __restrict__ dst,
                                                                float * __restrict__ tmp_vals,
                                                                const soft_max_params p) {
    namespace cg = cooperative_groups;

    const cg::grid_group g = cg::this_grid();

    const int tid               = threadIdx.x;
    const int col_start         = blockIdx.x * blockDim.x + tid;
    const int n_elem_per_thread = 4;

    float     local_vals[n_elem_per_thread] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    float     local_max                     = -INFINITY;
    const int step_size                     = gridDim.x * blockDim.x;

    // Compute thread-local max
    for (int col = col_start; col < p.ncols;) {
        for (int i = 0; i < n_elem_per_thread; i++) {
            const int idx = col + i * step_size;
            local_vals[i] = idx < p.ncols ? x[idx] : -INFINITY;
        }
        for (int i = 0; i < n_elem_per_thread; i++) {
            local_max = fmaxf(local_max, local_vals[i]);
        }
        col += step_size * n_elem_per_thread;
    }

    // Compute CTA-level max
    local_max = two_stage_warp_reduce_max(local_max);

    // Store CTA-level max to GMEM
    if (tid == 0) {
        tmp_vals[blockIdx.x] = local_max;
    }
    g.sync();

    // Compute compute global max from CTA-level maxs
    assert(gridDim.x < blockDim.x);  // currently we only support this case
    if (tid < gridDim.x) {
        local_max = tmp_vals[tid];
    } else {
        local_max = -INFINITY;
    }
    local_max = two_stage_warp_reduce_max(local_max);

    // Compute softmax dividends, accumulate divisor
    float tmp_expf = 0.0f;
    for (int col = col_start; col < p.ncols;) {
        for (int i = 0; i < n_elem_per_thread; i++) {
            const int idx = col + i * step_size;
            local_vals[i] = idx < p.ncols ? x[idx] : -INFINITY;
        }
        for (int i = 0; i < n_elem_per_thread; i++) {
            const int idx = col + i * step_size;
            if (idx < p.ncols) {
                const float tmp = expf(local_vals[i] - local_max);
                tmp_expf += tmp;
                dst[idx] = tmp;
            }
        }
        col += step_size * n_elem_per_thread;
    }

    // Reduce divisor within CTA
    tmp_expf = two_stage_warp_reduce_sum(tmp_expf);

    // Store CTA-level sum to GMEM
    if (tid == 0) {
        tmp_vals[blockIdx.x] = tmp_expf;
    }
    g.sync();

    // Compute global sum from CTA-level sums
    if (tid < gridDim.x) {
        tmp_expf = tmp_vals[tid];
    } else {
        tmp_expf = 0.0f;
    }
    tmp_expf = two_stage_warp_reduce_sum(tmp_expf);

    // Divide dividend by global sum + store data
    for (int col = col_start; col < p.ncols;) {
        for (int i = 0; i < n_elem_per_thread; i++) {
            const int idx = col + i * step_size;
            local_vals[i] = idx < p.ncols ? dst[idx] : -INFINITY;
        }
        for (int i = 0; i < n_elem_per_thread; i++) {
            const int idx = col + i * step_size;
            if (idx < p.ncols) {
                dst[idx] = local_vals[i] / tmp_expf;
            }
        }
        col += step_size * n_elem_per_thread;
    }
}
"""

PARALLELIZE_COLS = """
    for (int rowx = 0; rowx < p.ne01 * p.ne02 * p.ne03; rowx++) {
        soft_max_f32_parallelize_cols_single_row(x + int64_t(rowx) * p.ncols, dst + int64_t(rowx) * p.ncols, tmp_vals,
                                                 p);
    }
"""  # noqa: E501 - ggml's own line

# soft_max_params as NumPy lays it out (C alignment: n_head_log2 is followed by 4 bytes of pad)
PARAMS_DTYPE = np.dtype(
    [("nheads", "<i8"), ("n_head_log2", "<u4"), ("ncols", "<i8"), ("nrows_x", "<i8"),
     ("nrows_y", "<i8"), ("ne00", "<i8"), ("ne01", "<i8"), ("ne02", "<i8"), ("ne03", "<i8"),
     ("nb11", "<i8"), ("nb12", "<i8"), ("nb13", "<i8"), ("ne12", "<i8"), ("ne13", "<i8"),
     ("scale", "<f4"), ("max_bias", "<f4"), ("m0", "<f4"), ("m1", "<f4")],
    align=True,
)  # fmt: skip

SOFTMAX_COLS = kernelkit.kernel(
    "ggml_soft_max_parallelize_cols",
    ["x", "p"],
    ["dst", "tmp_vals"],
    PARALLELIZE_COLS,
    header=GGML_SOFTMAX_HEADER,
    structs={"p": kernelkit.struct("soft_max_params", PARAMS_DTYPE.itemsize)},
    cooperative=True,
)


def params(ncols, rows):
    p = np.zeros((), PARAMS_DTYPE)
    p["ncols"], p["ne00"], p["ne01"], p["ne02"], p["ne03"] = ncols, ncols, rows, 1, 1
    p["nrows_x"], p["scale"] = rows, 1.0
    return p


# ggml launches (number of SMs) blocks of 8 warps; here a few blocks, odd column counts
@pytest.mark.parametrize(("ncols", "rows", "blocks"), [(5000, 2, 7), (20011, 1, 16)])
def test_ggml_softmax_parallelize_cols(arrays, backend, ncols, rows, blocks):
    x = (RNG.standard_normal((rows, ncols)) * 3).astype(np.float32)
    x64 = x.astype(np.float64)
    want = np.exp(x64 - x64.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    p = params(ncols, rows)
    for value in (p[()], p.tobytes()):  # a structured scalar, or its bytes
        dst, _ = SOFTMAX_COLS(
            [arrays.put(x), value],
            output_shapes=[x.shape, (blocks,)],
            output_dtypes=[np.float32, np.float32],
            grid=(blocks * 256, 1, 1),
            threadgroup=(256, 1, 1),
        )
        np.testing.assert_allclose(arrays.get(dst), want, rtol=2e-5, atol=1e-9)


def test_struct_of_the_wrong_size_is_refused_by_name(arrays, backend):
    x = np.zeros((1, 64), np.float32)
    with pytest.raises(kernelkit.ArgumentError, match=r"input 'p' must be 128 bytes.*got 127"):
        SOFTMAX_COLS(
            [arrays.put(x), params(64, 1).tobytes()[:-1]],
            output_shapes=[x.shape, (2,)],
            output_dtypes=[np.float32, np.float32],
            grid=(512, 1, 1),
            threadgroup=(256, 1, 1),
        )


def test_uint3_extents_by_value(arrays, backend):
    k = kernelkit.kernel(
        "extents",
        ["x", "ne"],
        ["y"],
        "unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "if (i < ne.x * ne.y * ne.z) y[i] = x[i] * (float)(ne.x + 10 * ne.y + 100 * ne.z);",
        structs={"ne": kernelkit.struct("uint3", 12)},
    )
    x = RNG.standard_normal(2 * 3 * 5).astype(np.float32)
    ne = np.array([2, 3, 5], np.uint32)
    (y,) = k(
        [arrays.put(x), ne.tobytes()],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(30, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(arrays.get(y), x * np.float32(532))


def test_struct_declarations_are_checked():
    with pytest.raises(kernelkit.ArgumentError, match=r"structs names 'q'"):
        kernelkit.kernel("k", ["x"], ["y"], "", structs={"q": kernelkit.struct("uint3", 12)})
    with pytest.raises(kernelkit.ArgumentTypeError, match=r"structs\['x'\] must be"):
        kernelkit.kernel("k", ["x"], ["y"], "", structs={"x": ("uint3", 12)})
    with pytest.raises(kernelkit.ArgumentError, match=r"\[struct\] size must be"):
        kernelkit.struct("uint3", 0)
    with pytest.raises(kernelkit.ArgumentError, match=r"\[cxx\]"):
        kernelkit.struct("uint3; int", 12)


# --- grid-wide sync on the CPU backend: a grid reduction, its limits ------------------------

GRID_SUM = """
namespace cg = cooperative_groups;
cg::grid_group g = cg::this_grid();
float acc = 0.0f;
for (long long i = g.thread_rank(); i < x_shape[0]; i += g.size()) acc += x[i];
for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
if ((threadIdx.x & 31) == 0) partial[blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32] = acc;
g.sync();
if (g.thread_rank() == 0) {
  float s = 0.0f;
  for (unsigned w = 0; w < gridDim.x * (blockDim.x / 32); ++w) s += partial[w];
  total[0] = s;
}
"""


def _grid_sum(cooperative):
    return kernelkit.kernel(
        "grid_sum",
        ["x"],
        ["partial", "total"],
        GRID_SUM,
        header="#include <cooperative_groups.h>",
        cooperative=cooperative,
    )


def _run_grid_sum(k, x, blocks):
    return k(
        [x],
        output_shapes=[(blocks * 4,), (1,)],
        output_dtypes=[np.float32, np.float32],
        grid=(blocks * 128, 1, 1),
        threadgroup=(128, 1, 1),
        backend="cpu",
    )


def test_grid_reduction_over_many_blocks_on_the_cpu():
    x = RNG.standard_normal(100_003).astype(np.float32)
    _, total = _run_grid_sum(_grid_sum(True), x, 40)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_grid_sync_without_a_cooperative_launch_is_a_fault():
    with pytest.raises(kernelkit.KernelFault, match=r"grid_group::sync\(\).*cooperative=True"):
        _run_grid_sum(_grid_sum(False), np.ones(1000, np.float32), 4)


def test_cooperative_grid_beyond_the_cpu_limit_is_refused():
    with pytest.raises(kernelkit.KernelkitError, match=r"cooperative launch of 257 blocks"):
        _run_grid_sum(_grid_sum(True), np.ones(1000, np.float32), 257)


def test_a_fault_in_one_block_ends_a_cooperative_launch_without_hanging():
    k = kernelkit.kernel(
        "coop_trap",
        ["x"],
        ["y"],
        "namespace cg = cooperative_groups;\nif (blockIdx.x == 3 && threadIdx.x == 5) __trap();\n"
        "cg::this_grid().sync();\ny[blockIdx.x * blockDim.x + threadIdx.x] = x[0];",
        header="#include <cooperative_groups.h>",
        cooperative=True,
    )
    with pytest.raises(kernelkit.KernelFault, match=r"__trap\(\) called by block \(3,0,0\)"):
        k(
            [np.ones(4, np.float32)],
            output_shapes=[(8 * 64,)],
            output_dtypes=[np.float32],
            grid=(8 * 64, 1, 1),
            threadgroup=(64, 1, 1),
            backend="cpu",
        )
