# ruff: noqa: E501 - the kernels are the projects' text, unchanged
"""A third batch of real CUDA kernels ported as a user would (issue 25), an independent check that
what runs on the CPU backend compiles and runs the same under NVRTC. Each body is the kernel as
its project ships it, only the signature removed (with its ``__launch_bounds__``); any other edit
is in the port's ``edits``. These use what the earlier batches did not: CUB's
``BlockLoad``/``BlockStore`` with ``WARP_TRANSPOSE`` in a union of ``TempStorage``, a bitonic
sort in dynamic shared memory, an ``enum class``-templated block reduction, by-value structs,
a lambda capturing by reference with ``if constexpr`` stores through ``int2``, PDL calls,
``__ballot_sync``/``__ffs`` warp election, ``std::pow``/``std::abs`` in device code, and fp8
conversions through ``cuda_fp8.h``.

ggml (MIT), ggml-org/ggml at d99724f2b141fed9e1a9f402213506c081433465 (llama.cpp's
ggml/src/ggml-cuda, synced), src/ggml-cuda/:

- ssm-conv.cu: ``ssm_conv_f32<apply_silu, split_d_inner, d_conv>`` and
  ``ssm_conv_long_token_f32<apply_silu, split_d_inner, d_conv, split_n_t>`` (Mamba's causal
  conv1d, fused bias and SiLU; split_d_inner 128, d_conv 3, 4, 5, 9, 15, split_n_t 32).
- ssm-scan.cu: ``ssm_scan_f32<128, 16, L_template>`` (Mamba-1 selective scan, CUB path, L 1-8
  and 0) and ``ssm_scan_f32_group<c_factor, d_state>`` (Mamba-2, <4, 128> and <8, 256>, with
  the K rollback snapshots).
- argsort.cu: ``k_argsort_f32_i32<order>`` (ASC and DESC), ggml_sort_order from include/ggml.h.
- softmax.cu: ``soft_max_f32<use_shared, ncols_template, block_size_template, T>`` (T float and
  half masks, ALiBi, attention sinks, ``soft_max_params`` by value).
- rope.cu: ``rope_norm<forward, has_ff, T, D>`` (T, D = float/float, half/half, float/half; YaRN,
  freq factors, the ROPE+VIEW+SET_ROWS fusion, in place; ``rope_corr_dims`` by value).
- common.cuh and unary.cuh: the helpers the bodies call, copied unchanged (named beside each).

kernelkit declares an integer template value as ``int``: ggml's ``size_t`` and ``int64_t``
template parameters (split_d_inner, d_conv, split_n_t, splitD, N, L_template) are ``int`` here.
In ssm_conv_long_token_f32 that made ``min(split_n_t, n_t - bidz * split_n_t)`` a
``min(int, long long)``, which NVRTC refused as ambiguous and the CPU backend took; the CUDA
prelude now has min/max of mixed integer widths in their common type, as the CPU backend's.

vLLM (Apache-2.0), vllm-project/vllm: ``reshape_and_cache_flash_kernel`` (csrc/cache_kernels.cu
at 693083ae80680811c9c2a22edad2568e6635e190, the body test_real_ports_more.py ports with kAuto)
with ``kv_dt = kFp8E4M3`` (and kFp8E5M2, compiled), cache_t = uint8_t and scalar_t float,
uint16_t, __nv_bfloat16 as DISPATCH_BY_KV_CACHE_DTYPE instantiates "fp8": its
``scaled_vec_conversion`` specializations and ``scaled_convert`` from
csrc/quantization/fp8/nvidia/quant_utils.cuh at 03476e5c1184648abcfd1573b630bcd81741a555,
``half_to_float`` from csrc/attention/dtype_float16.cuh at
7e8f65be7b97eaf2ac11351f5eda5b1ff18dd997, and ``<cuda_fp8.h>`` as csrc/attention/dtype_fp8.cuh
includes it under ENABLE_FP8.

PyTorch (BSD-3), pytorch/pytorch, aten/src/ATen/native/cuda/Embedding.cu at
1c94016e03463593c53fcf4f1a4438eed1fc08ea: ``embedding_backward_feature_kernel<scalar_t,
accscalar_t, index_t>`` and ``renorm_kernel<scalar_t, accscalar_t, index_t>`` (double, float,
half, bfloat16 as AT_DISPATCH_FLOATING_TYPES_AND2; index_t int64_t and int32_t), with
aten/src/ATen/native/cuda/block_reduce.cuh at 0d1a44aee51d2a032e18b56604a0cd28c6b470b0,
``WARP_BALLOT``/``WARP_SHFL_DOWN`` from aten/src/ATen/cuda/DeviceUtils.cuh at
11bc1c8951711fd819725c7a6cb895618f84a7b4 and c10/macros/Macros.h's ``C10_WARP_SIZE``.

Every case is checked against a float64 NumPy reference written from the kernel's semantics, on
random inputs of odd sizes, with NaN-poisoned (or sentinel-filled) outputs so that what the
kernel must not write is seen unwritten. A case that fails on a backend stays here as a strict
xfail naming the error.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import real_kernels_headers as rk
import real_ports
from real_ports import Port, Ports, close
from test_real_ports_more import CUDA_COMPAT, RESHAPE_AND_CACHE_FLASH

import kernelkit

real_ports.SHORT.setdefault("u8", "uint8")  # vLLM's fp8 cache (uint8_t)
real_ports.SHORT.setdefault("f16", "float16")  # rope's float -> half destination

RNG = np.random.default_rng(2531)
GGML = "ggml-org/ggml"
GGML_COMMIT = "d99724f2b141fed9e1a9f402213506c081433465"
VLLM = "vllm-project/vllm"
TORCH = "pytorch/pytorch"
DTYPES4 = ("float64", "float32", "float16", "bfloat16")
ACC = {"float64": "float64"}  # at::acc_type<scalar_t, true>: float for everything else

# --- ggml ------------------------------------------------------------------------------------
# src/ggml-cuda/common.cuh, unary.cuh and the kernel files at GGML_COMMIT, each part unchanged

# common.cuh: WARP_SIZE, two arch numbers and the PDL helpers
GGML_PDL = r"""
#define WARP_SIZE 32
#define GGML_CUDA_CC_VOLTA           700
#define GGML_CUDA_CC_HOPPER          900


// PDL host-side support (cudaLaunchKernelEx) requires CUDART >= 11.8.
// However, this has been bugged in CTK < 12.3 for MSVC builds, see
// https://github.com/ggml-org/llama.cpp/pull/22522#discussion_r3302393293
// __CUDA_ARCH__  is undefined in host passes; GPU arch check happens in device-side code.
#if !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && \
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

# common.cuh: GGML_CUDA_RESTRICT
GGML_RESTRICT = """
// PDL and __restrict__ need to be mutually exclusive, see https://github.com/ggml-org/llama.cpp/pull/24030
# if (defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER)
# define GGML_CUDA_RESTRICT
# else
# define GGML_CUDA_RESTRICT __restrict__
# endif // defined(GGML_CUDA_USE_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= GGML_CUDA_CC_HOPPER
"""

# common.cuh: ggml_cuda_get_max_cpy_bytes
GGML_MAX_CPY = """
// Maximum number of bytes that can be copied in a single instruction.
static constexpr __device__ int ggml_cuda_get_max_cpy_bytes() {
#ifdef GGML_USE_HIP
    return 16;
#else
#if __CUDA_ARCH__ >= GGML_CUDA_CC_VOLTA
    return 16;
#else
    return 8;
#endif // __CUDA_ARCH__ >= GGML_CUDA_CC_VOLTA
#endif // GGML_USE_HIP
}
"""

# common.cuh: the float warp_reduce_sum and warp_reduce_max
GGML_WARP = rk.GGML_COMMON  # common.cuh's warp_reduce_sum/max (the same text, with WARP_SIZE)

# common.cuh: block_reduce and its policies
GGML_BLOCK_REDUCE = """
enum class block_reduce_method {
    MAX,
    SUM,
};

template<block_reduce_method method_t, typename T>
struct block_reduce_policy;

template <typename T, typename... Ts>
inline constexpr bool is_any = (std::is_same_v<T, Ts> || ...);

template<typename...>
inline constexpr bool ggml_cuda_dependent_false_v = false;

template <typename T> struct block_reduce_policy<block_reduce_method::SUM, T> {
    static __device__ T reduce(T val) {
        if constexpr(is_any<T, float, float2, half2, int>) {
            return warp_reduce_sum(val);
        } else {
            static_assert(ggml_cuda_dependent_false_v<T>, "Unsupported type for block reduce sum");
        }
    }

    static __device__ T sentinel() {
        if constexpr (std::is_same_v<T, float>) {
            return 0.0f;
        } else if constexpr (std::is_same_v<T, float2>) {
            return make_float2(0.0f, 0.0f);
        } else if constexpr (std::is_same_v<T, half2>) {
            return make_half2(0.0f, 0.0f);
        } else if constexpr (std::is_same_v<T, int>) {
            return 0;
        } else {
            static_assert(ggml_cuda_dependent_false_v<T>, "Unsupported type for block reduce sum");
        }
    }
};

template <typename T> struct block_reduce_policy<block_reduce_method::MAX, T> {
    static __device__ T reduce(T val) {
        if constexpr (is_any<T, float, half2>) {
            return warp_reduce_max(val);
        } else {
            static_assert(ggml_cuda_dependent_false_v<T>, "Unsupported type for block reduce max");
        }
    }

    static __device__ T sentinel() {
        if constexpr (std::is_same_v<T, float>) {
            return -INFINITY;
        } else if constexpr (std::is_same_v<T, half2>) {
            return make_half2(-INFINITY, -INFINITY);
        } else {
            static_assert(ggml_cuda_dependent_false_v<T>, "Unsupported type for block reduce max");
        }
    }
};

template <block_reduce_method reduce_method_t, const unsigned int block_size_template = 0, typename T>
static __device__ T block_reduce(T val, [[maybe_unused]] T * shared_vals) {
    // for multi-warp reductions, callers must not reuse shared_vals until all reads from this invocation have completed
    val                           = block_reduce_policy<reduce_method_t, T>::reduce(val);
    const unsigned int block_size = block_size_template == 0 ? blockDim.x : block_size_template;
    if (block_size > WARP_SIZE) {
        assert((block_size <= 1024) && (block_size % WARP_SIZE) == 0);
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            shared_vals[warp_id] = val;
        }
        __syncthreads();
        val = block_reduce_policy<reduce_method_t, T>::sentinel();
        if (lane_id < (static_cast<int>(block_size) / WARP_SIZE)) {
            val = shared_vals[lane_id];
        }
        return block_reduce_policy<reduce_method_t, T>::reduce(val);
    }

    return val;
}
"""

# common.cuh: get_alibi_slope
GGML_ALIBI = """
static __device__ __forceinline__ float get_alibi_slope(
    const float max_bias, const uint32_t h, const uint32_t n_head_log2, const float m0, const float m1
) {
    if (max_bias <= 0.0f) {
        return 1.0f;
    }
    const float base = h < n_head_log2 ? m0 : m1;
    const int   exph = h < n_head_log2 ? h + 1 : 2*(h - n_head_log2) + 1;

    return powf(base, exph);
}
"""

# common.cuh: ggml_cuda_memcpy_1
GGML_MEMCPY = """

// Aligned memory transfers of 8/16 bytes can be faster than 2 transfers with 4 bytes, especially on AMD.
// Important: do not use this function if dst and src both point at registers.
//     Due to the strict aliasing rule the compiler can do incorrect optimizations if src and dst have different types.
//     The function is intended for copies between registers and SRAM/VRAM to make the compiler emit the right instructions.
//     If dst and src point at different address spaces then they are guaranteed to not be aliased.
template <int nbytes, int alignment = 0>
static __device__ __forceinline__ void ggml_cuda_memcpy_1(void * __restrict__ dst, const void * __restrict__ src) {
    static_assert(
        nbytes <= ggml_cuda_get_max_cpy_bytes() || alignment == 0,
        "You are misusing the alignment parameter for ggml_cuda_memcpy_1. "
        "The intent is for the parameter is only as a workaround if either one of the pointers is not properly aligned. "
        "If you use it to do more bytes per copy than ggml_cuda_max_cpy_bytes() the reads and writes may not be coalesced. "
        "Call ggml_cuda_memcpy_1 in a loop instead.");
    if constexpr (alignment != 0) {
        static_assert(nbytes % alignment == 0, "bad alignment");
    }
    constexpr int nb_per_cpy = alignment == 0 ? nbytes : alignment;

#pragma unroll
    for (int i = 0; i < nbytes/nb_per_cpy; ++i) {
        if constexpr (nb_per_cpy == 1) {
            ((char *) dst)[i] = ((const char *) src)[i];
        } else if constexpr (nb_per_cpy == 2) {
            ((short *) dst)[i] = ((const short *) src)[i];
        } else if constexpr (nb_per_cpy == 4) {
            ((int *) dst)[i] = ((const int *) src)[i];
        } else if constexpr (nb_per_cpy == 8) {
            ((int2 *) dst)[i] = ((const int2 *) src)[i];
        } else if constexpr (nb_per_cpy == 16) {
            ((int4 *) dst)[i] = ((const int4 *) src)[i];
        } else {
            static_assert(nbytes == 0 && nbytes == -1, "bad nbytes");
        }
    }
}
"""

# unary.cuh: ggml_cuda_op_silu_single
GGML_SILU = """
__device__ __forceinline__ float ggml_cuda_op_silu_single(float x) {
    return x / (1.0f + expf(-x));
}
"""

# ssm-conv.cu: ssm_conv_f32<apply_silu, split_d_inner, d_conv>
SSM_CONV = """
    ggml_cuda_pdl_lc();
    const float * GGML_CUDA_RESTRICT src0 = src0_ptr;
    const float * GGML_CUDA_RESTRICT src1 = src1_ptr;
    const float * GGML_CUDA_RESTRICT bias = bias_ptr;
    float       * GGML_CUDA_RESTRICT dst  = dst_ptr;
    GGML_UNUSED(src0_nb0);
    const int tid  = threadIdx.x;
    const int bidx = blockIdx.x;
    const int bidy = blockIdx.y;

    const float * x_block = (const float *) ((const char *) src0 + bidx * src0_nb2 + bidy * split_d_inner * src0_nb1);
    const float * w_block = (const float *) ((const char *) src1 + bidy * split_d_inner * src1_nb1);
    float *       y_block = (float *) ((char *) dst + bidx * dst_nb2 + bidy * split_d_inner * dst_nb0);

    const int stride_x = src0_nb1 / sizeof(float);
    const int stride_w = src1_nb1 / sizeof(float);
    const int stride_y = dst_nb1 / sizeof(float);

    float x[d_conv] = { 0.0f };
    float w[d_conv] = { 0.0f };

    ggml_cuda_pdl_sync();
#pragma unroll
    for (size_t j = 0; j < d_conv; j++) {
        w[j] = w_block[tid * stride_w + j];
    }

    float b = bias != nullptr ? bias[bidy * split_d_inner + tid] : 0.0f;

    for (int64_t i = 0; i < n_t; i++) {
        float sumf = 0.0f;

        if (i == 0) {
            for (size_t j = 0; j < d_conv; j++) {
                x[j] = x_block[tid * stride_x + j];
            }
        } else {
            x[(i - 1) % d_conv] = x_block[tid * stride_x + i + d_conv - 1];
        }

#pragma unroll
        for (size_t j = 0; j < d_conv; j++) {
            sumf += x[(i + j) % d_conv] * w[j];
        }
        sumf += b;
        y_block[i * stride_y + tid] = apply_silu ? ggml_cuda_op_silu_single(sumf) : sumf;
    }
"""

# ssm-conv.cu: ssm_conv_long_token_f32<apply_silu, split_d_inner, d_conv, split_n_t>
SSM_CONV_LONG = """
    const int tid  = threadIdx.x;
    const int bidx = blockIdx.x;
    const int bidy = blockIdx.y;
    const int bidz = blockIdx.z;

    const float * x_block = (const float *) ((const char *) src0 + bidx * src0_nb2 + bidy * split_d_inner * src0_nb1 +
                                             bidz * split_n_t * src0_nb0);
    const float * w_block = (const float *) ((const char *) src1 + bidy * split_d_inner * src1_nb1);
    float *       y_block =
        (float *) ((char *) dst + bidx * dst_nb2 + bidz * split_n_t * dst_nb1 + bidy * split_d_inner * dst_nb0);

    const int stride_x = src0_nb1 / sizeof(float);
    const int stride_w = src1_nb1 / sizeof(float);
    const int stride_y = dst_nb1 / sizeof(float);

    const int64_t local_n_t = min(split_n_t, n_t - bidz * split_n_t);
    const int     n_cols    = d_conv - 1 + split_n_t;

    extern __shared__ float smem[];

    constexpr int load_cols   = d_conv - 1 + split_n_t;
    constexpr int total_elems = split_d_inner * load_cols;
    int row = tid / load_cols;
    int col = tid % load_cols;
#pragma unroll
    for (int idx = 0; idx < total_elems; idx += split_d_inner) {
        if (row < (int)split_d_inner) {
            smem[row * n_cols + col] = x_block[row * stride_x + col];
        }

        col += split_d_inner;
        row += col / load_cols;
        col  = col % load_cols;
        if (idx >= total_elems - tid - split_d_inner) {
            break;
        }
    }
    __syncthreads();

    // Load weights into registers (done once, small)
    float w[d_conv] = { 0.0f };
#pragma unroll
    for (size_t j = 0; j < d_conv; j++) {
        w[j] = w_block[tid * stride_w + j];
    }

    float b = bias != nullptr ? bias[bidy * split_d_inner + tid] : 0.0f;

    // Compute from shared memory
    for (int64_t i = 0; i < local_n_t; i++) {
        float sumf = 0.0f;
#pragma unroll
        for (size_t j = 0; j < d_conv; j++) {
            sumf += smem[tid * n_cols + i + j] * w[j];
        }
        sumf += b;
        y_block[i * stride_y + tid] = apply_silu ? ggml_cuda_op_silu_single(sumf) : sumf;
    }
"""

# ssm-scan.cu: its first lines (CUB where CUDART_VERSION >= 11070)
SSM_SCAN_TOP = """
#if !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && CUDART_VERSION >= 11070
#define USE_CUB
#endif // !defined(GGML_USE_HIP) && !defined(GGML_USE_MUSA) && CUDART_VERSION >= 11070

#ifdef USE_CUB
#include <cub/cub.cuh>
using namespace cub;
#endif // USE_CUB
"""

# ssm-scan.cu: ssm_scan_f32<splitD, N, L_template> (Mamba-1)
SSM_SCAN = """
    const float   * GGML_CUDA_RESTRICT src0 = src0_ptr;
    const float   * GGML_CUDA_RESTRICT src1 = src1_ptr;
    const float   * GGML_CUDA_RESTRICT src2 = src2_ptr;
    const float   * GGML_CUDA_RESTRICT src3 = src3_ptr;
    const float   * GGML_CUDA_RESTRICT src4 = src4_ptr;
    const float   * GGML_CUDA_RESTRICT src5 = src5_ptr;
    const int32_t * GGML_CUDA_RESTRICT src6 = src6_ptr;
    float         * GGML_CUDA_RESTRICT dst  = dst_ptr;
    const size_t L = L_template == 0 ? L_param : L_template;
    ggml_cuda_pdl_sync();
    const float *s0_block = (const float *)((const char *)src0 + src6[blockIdx.x] * src0_nb3 + blockIdx.y * splitD * src0_nb2);
    const float *x_block = (const float *)((const char *)src1 + (blockIdx.x * src1_nb3) + blockIdx.y * splitD * sizeof(float));
    const float *dt_block = (const float *)((const char *)src2 + (blockIdx.x * src2_nb2) + blockIdx.y * splitD * sizeof(float));
    const float *A_block = (const float *)((const char *)src3 + blockIdx.y * splitD * src3_nb1);
    const float *B_block = (const float *)((const char *)src4 + (blockIdx.x * src4_nb3));
    const float *C_block = (const float *)((const char *)src5 + (blockIdx.x * src5_nb3));
    float *y_block = (float *)((char *)dst + (blockIdx.x * d_inner * L * sizeof(float)) + blockIdx.y * splitD * sizeof(float));
    float *s_block = (float *)((char *)dst + s_off + blockIdx.x * src0_nb3 + blockIdx.y * splitD * src0_nb2);

    const int stride_x = src1_nb2 / sizeof(float);
    const int stride_dt = src2_nb1 / sizeof(float);
    const int stride_B = src4_nb2 / sizeof(float);
    const int stride_C = src5_nb2 / sizeof(float);
    const int stride_y = d_inner;

    float regA[N];
    float regs0[N];

    __shared__ float smemB[N];
    __shared__ float smemC[N];

#ifdef USE_CUB
    using BlockLoad = cub::BlockLoad<float, splitD, N, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
    using BlockStore = cub::BlockStore<float, splitD, N, cub::BLOCK_STORE_WARP_TRANSPOSE>;

    union CubTempStorage {
        typename BlockLoad::TempStorage load_temp;
        typename BlockStore::TempStorage store_temp;
    };
    __shared__ CubTempStorage cub_temp_storage;

    BlockLoad(cub_temp_storage.load_temp).Load(A_block, regA);
    __syncthreads();
    BlockLoad(cub_temp_storage.load_temp).Load(s0_block, regs0);
#else
    const int stride_s0 = src0_nb2 / sizeof(float);
    const int stride_A = src3_nb1 / sizeof(float);
#pragma unroll
    for (size_t n = 0; n < N; ++n)
    {
        regA[n] = A_block[threadIdx.x * stride_A + n];
        regs0[n] = s0_block[threadIdx.x * stride_s0 + n];
    }
#endif

#pragma unroll
    for (size_t i = 0; i < L; i++)
    {
        if (threadIdx.x < N)
        {
            smemB[threadIdx.x] = B_block[i * stride_B + threadIdx.x];
            smemC[threadIdx.x] = C_block[i * stride_C + threadIdx.x];
        }
        __syncthreads();

        float dt_soft_plus = dt_block[i * stride_dt + threadIdx.x];
        if (dt_soft_plus <= 20.0f)
        {
            dt_soft_plus = log1pf(expf(dt_soft_plus));
        }
        float x_dt = x_block[i * stride_x + threadIdx.x] * dt_soft_plus;

        float sumf = 0.0f;
#pragma unroll
        for (size_t n = 0; n < N; n++)
        {
            float state = regs0[n] * expf(dt_soft_plus * regA[n]) + smemB[n] * x_dt;
            sumf += state * smemC[n];
            regs0[n] = state;
        }
        y_block[i * stride_y + threadIdx.x] = sumf;
        __syncthreads();
    }

#ifdef USE_CUB
    BlockStore(cub_temp_storage.store_temp).Store(s_block, regs0);
#else
    const int stride_s = stride_s0;
#pragma unroll
    for (size_t n = 0; n < N; ++n)
    {
        s_block[threadIdx.x * stride_s + n] = regs0[n];
    }
#endif
"""

# ssm-scan.cu: ssm_scan_f32_group<c_factor, d_state> (Mamba-2)
SSM_SCAN_GROUP = """
    const float   * GGML_CUDA_RESTRICT src0 = src0_ptr;
    const float   * GGML_CUDA_RESTRICT src1 = src1_ptr;
    const float   * GGML_CUDA_RESTRICT src2 = src2_ptr;
    const float   * GGML_CUDA_RESTRICT src3 = src3_ptr;
    const float   * GGML_CUDA_RESTRICT src4 = src4_ptr;
    const float   * GGML_CUDA_RESTRICT src5 = src5_ptr;
    const int32_t * GGML_CUDA_RESTRICT src6 = src6_ptr;
    float         * GGML_CUDA_RESTRICT dst  = dst_ptr;

    const int warp     = threadIdx.x / WARP_SIZE;
    const int lane     = threadIdx.x % WARP_SIZE;
    const int warp_idx = blockIdx.x  * c_factor + warp;

    const int head_idx =  warp_idx / d_head;
    const int head_off = (warp_idx % d_head) * sizeof(float);
    const int seq_idx  = blockIdx.y;

    const int group_off = (head_idx / (n_head / n_group)) * d_state * sizeof(float);

    ggml_cuda_pdl_sync();
    // TODO: refactor strides to be in elements/floats instead of bytes to be cleaner and consistent with the rest of the codebase
    const float * s0_warp = (const float *) ((const char *) src0 + src6[seq_idx] * src0_nb3 + head_idx * src0_nb2 + head_off * d_state);
    const float * x_warp  = (const float *) ((const char *) src1 + (seq_idx * src1_nb3) + (warp_idx * sizeof(float)));
    const float * dt_warp = (const float *) ((const char *) src2 + (seq_idx * src2_nb2) + head_idx * sizeof(float));
    const float * A_warp  = (const float *) ((const char *) src3 + head_idx * src3_nb1);
    const float * B_warp  = (const float *) ((const char *) src4 + (seq_idx * src4_nb3) + (group_off));
    const float * C_warp  = (const float *) ((const char *) src5 + (seq_idx * src5_nb3) + (group_off));
    float *       y_warp  = dst + (seq_idx * n_tok * n_head * d_head) + warp_idx;
    float *       s_warp  = (float *) ((char *) dst + s_off + seq_idx * src0_nb3 + head_idx * src0_nb2 + head_off * d_state);

    // strides across n_seq_tokens
    const int stride_x  = src1_nb2 / sizeof(float);
    const int stride_dt = src2_nb1 / sizeof(float);
    const int stride_B  = src4_nb2 / sizeof(float);
    const int stride_C  = src5_nb2 / sizeof(float);
    const int stride_y  = n_head * d_head;

    float state[c_factor];
    float state_sum = 0.0f;

#pragma unroll
    for (int j = 0; j < c_factor; j++) {
        state[j] = s0_warp[WARP_SIZE * j + lane];
    }

    for (int64_t i = 0; i < n_tok; i++) {
        // NOTE: dt_soft_plus, dA and x_dt have the same value for a warp here.
        // Recalculation is intentional; sharing via shuffles/smem proved slower due to sync overhead.
        const float dt_soft_plus = (dt_warp[i * stride_dt] <= 20.0f ? log1pf(expf(dt_warp[i * stride_dt])) : dt_warp[i * stride_dt]);

        state_sum = 0.0f;
        const float dA   = expf(dt_soft_plus * A_warp[0]);
        const float x_dt = x_warp[i * stride_x] * dt_soft_plus;
#pragma unroll
        for (int j = 0; j < c_factor; j++) {
            const float B_val = B_warp[i * stride_B + WARP_SIZE * j + lane];
            const float C_val = C_warp[i * stride_C + WARP_SIZE * j + lane];
            state[j] = (state[j] * dA) + (B_val * x_dt);
            state_sum += state[j] * C_val;
        }

        // parallel accumulation for output
        state_sum = warp_reduce_sum(state_sum);

        if (lane == 0) {
            y_warp[i * stride_y] = state_sum;
        }

        // Slot 0 is the final state written below; slots 1..K-1 are rollback snapshots.
        const int64_t slot = n_tok - 1 - i;
        if (K > 1 && slot > 0 && slot < K) {
            float * s_snapshot_warp = (float *) ((char *) dst + s_off + (slot * gridDim.y + seq_idx) * src0_nb3 + head_idx * src0_nb2 + head_off * d_state);
#pragma unroll
            for (int j = 0; j < c_factor; j++) {
                s_snapshot_warp[WARP_SIZE * j + lane] = state[j];
            }
        }
    }

    // write back the state
#pragma unroll
    for (int j = 0; j < c_factor; j++) {
        s_warp[WARP_SIZE * j + lane] = state[j];
    }
"""

# argsort.cu: ggml_cuda_swap
ARGSORT_SWAP = """
// Bitonic sort implementation
template<typename T>
static inline __device__ void ggml_cuda_swap(T & a, T & b) {
    T tmp = a;
    a = b;
    b = tmp;
}
"""

# argsort.cu: k_argsort_f32_i32<order> (bitonic sort in shared memory)
ARGSORT = """
    // bitonic sort
    int col = threadIdx.x;
    int row = blockIdx.x;

    if (col >= ncols_pad) {
        return;
    }

    const float * x_row = x + row * ncols;
    extern __shared__ int dst_row[];

    // initialize indices
    dst_row[col] = col;

    __syncthreads();

    for (int k = 2; k <= ncols_pad; k *= 2) {
        for (int j = k / 2; j > 0; j /= 2) {
            int ixj = col ^ j;
            if (ixj > col) {
                if ((col & k) == 0) {
                    if (dst_row[col] >= ncols ||
                        (dst_row[ixj] < ncols && (order == GGML_SORT_ORDER_ASC ?
                            x_row[dst_row[col]] > x_row[dst_row[ixj]] :
                            x_row[dst_row[col]] < x_row[dst_row[ixj]]))
                    ) {
                        ggml_cuda_swap(dst_row[col], dst_row[ixj]);
                    }
                } else {
                    if (dst_row[ixj] >= ncols ||
                        (dst_row[col] < ncols && (order == GGML_SORT_ORDER_ASC ?
                            x_row[dst_row[col]] < x_row[dst_row[ixj]] :
                            x_row[dst_row[col]] > x_row[dst_row[ixj]]))
                    ) {
                        ggml_cuda_swap(dst_row[col], dst_row[ixj]);
                    }
                }
            }
            __syncthreads();
        }
    }

    // copy the result to dst without the padding
    if (col < ncols) {
        dst[row * ncols + col] = dst_row[col];
    }
"""

# softmax.cu: t2f32 and soft_max_params
SOFTMAX_TOP = """
template <typename T>
static __device__ __forceinline__ float t2f32(T val) {
    return (float) val;
}

template <>
__device__ float __forceinline__ t2f32<half>(half val) {
    return __half2float(val);
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
"""

# softmax.cu: soft_max_f32<use_shared, ncols_template, block_size_template, T>
SOFTMAX = """
    const int ncols = ncols_template == 0 ? p.ncols : ncols_template;

    const int tid  = threadIdx.x;

    const int64_t i03 = blockIdx.z;
    const int64_t i02 = blockIdx.y;
    const int64_t i01 = blockIdx.x;

    //TODO: noncontigous inputs/outputs
    const int rowx = blockIdx.x + blockIdx.y * gridDim.x + blockIdx.z * gridDim.x * gridDim.y;

    const int64_t i11 = i01;
    const int64_t i12 = i02 % p.ne12;
    const int64_t i13 = i03 % p.ne13;

    x    += int64_t(rowx)*ncols;
    mask += (i11*p.nb11 + i12*p.nb12 + i13*p.nb13) / sizeof(T) * (mask != nullptr);
    dst  += int64_t(rowx)*ncols;

    const int block_size = block_size_template == 0 ? blockDim.x : block_size_template;

    const float slope = get_alibi_slope(p.max_bias, i02, p.n_head_log2, p.m0, p.m1);

    extern __shared__ float data_soft_max_f32[];
    float * buf_iw = data_soft_max_f32; // shared memory buffer for inter-warp communication
    // shared memory buffer to cache values between iterations:
    float * vals = use_shared ? buf_iw + WARP_SIZE : dst;

    float max_val = sinks ? sinks[i02] : -INFINITY;

#pragma unroll
    for (int col0 = 0; col0 < ncols; col0 += block_size) {
        const int col = col0 + tid;

        if (ncols_template == 0 && col >= ncols) {
            break;
        }

        const float val = x[col]*p.scale + (mask ? slope*t2f32(mask[col]) : 0.0f);

        vals[col] = val;
        max_val = max(max_val, val);
    }

    // find the max value in the block
    max_val = block_reduce<block_reduce_method::MAX, block_size_template>(max_val, buf_iw);

    float tmp = 0.0f; // partial sum

#pragma unroll
    for (int col0 = 0; col0 < ncols; col0 += block_size) {
        const int col = col0 + tid;

        if (ncols_template == 0 && col >= ncols) {
            break;
        }

        const float val = expf(vals[col] - max_val);
        tmp += val;
        vals[col] = val;
    }

    if (block_size > WARP_SIZE) {
        // sync is needed as we reuse buf_iw across block_reduce invocations, see #26385
        // for block_size <= WARP_SIZE, block_reduce does not access buf_iw
        __syncthreads();
    }
    // find the sum of exps in the block
    tmp = block_reduce<block_reduce_method::SUM, block_size_template>(tmp, buf_iw);

    if (sinks) {
        tmp += expf(sinks[i02] - max_val);
    }

    const float inv_sum = 1.0f / tmp;

#pragma unroll
    for (int col0 = 0; col0 < ncols; col0 += block_size) {
        const int col = col0 + tid;

        if (ncols_template == 0 && col >= ncols) {
            return;
        }

        dst[col] = vals[col] * inv_sum;
    }
"""

# rope.cu: rope_corr_dims, mrope_sections, rope_yarn_ramp, rope_yarn
ROPE_TOP = """
struct rope_corr_dims {
    float v[2];
};


struct mrope_sections {
    int v[4];
};

static __device__ float rope_yarn_ramp(const float low, const float high, const int i0) {
    const float y = (i0 / 2 - low) / max(0.001f, high - low);
    return 1.0f - min(1.0f, max(0.0f, y));
}

// YaRN algorithm based on LlamaYaRNScaledRotaryEmbedding.py from https://github.com/jquesnelle/yarn
// MIT licensed. Copyright (c) 2023 Jeffrey Quesnelle and Bowen Peng.
template<bool forward>
static __device__ void rope_yarn(
        const float theta_extrap, const float freq_scale, const rope_corr_dims corr_dims, const int64_t i0, const float ext_factor,
        float mscale, float & cos_theta, float & sin_theta) {
    // Get n-d rotational scaling corrected for extrapolation
    float theta_interp = freq_scale * theta_extrap;
    float theta = theta_interp;
    if (ext_factor != 0.0f) {
        float ramp_mix = rope_yarn_ramp(corr_dims.v[0], corr_dims.v[1], i0) * ext_factor;
        theta = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;

        // Get n-d magnitude scaling corrected for interpolation
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    cos_theta = cosf(theta) * mscale;
    sin_theta = sinf(theta) * mscale;
    if (!forward) {
        sin_theta *= -1.0f;
    }
}
"""

# rope.cu: rope_norm<forward, has_ff, T, D>
ROPE_NORM = """
    const int i0 = 2*(blockDim.y*blockIdx.y + threadIdx.y);

    if (i0 >= ne00) {
        return;
    }

    const int row_dst = blockDim.x*blockIdx.x + threadIdx.x;

    const uint32_t i3 = row_dst / (ne01 * ne02);
    const uint32_t i2 = (row_dst - i3 * ne01 * ne02) / ne01;
    const uint32_t i1 = row_dst - i3 * ne01 * ne02 - i2 * ne01;

    int       idst = i0 + i1 * s1  + i2 * s2  + i3 * s3;
    const int ix   = i0 + i1 * s01 + i2 * s02 + i3 * s03;
    // Fusion optimization: ROPE + VIEW + SET_ROWS.
    // The rope output is viewed as a 1D tensor and offset based on a row index in row_indices.
    if (set_rows_stride != 0) {
        idst = i1 * s1 + i0;
        idst += row_indices[i2] * set_rows_stride;
    }

    const auto & store_coaelsced = [&](float x0, float x1) {
        if constexpr (std::is_same_v<float, D>) {
            float2 v = make_float2(x0, x1);
            ggml_cuda_memcpy_1<8>(dst + idst, &v);
        } else if constexpr (std::is_same_v<half, D>) {
            half2 v = make_half2(x0, x1);
            ggml_cuda_memcpy_1<4>(dst + idst, &v);
        }
    };
    if (i0 < n_offs || i0 >= n_offs + n_dims) {
        if (inplace) {
            return;
        }
        store_coaelsced(x[ix + 0], x[ix + 1]);
        return;
    }

    const int iw = i0 - n_offs; // relative idx

    const float theta_base = pos[i2]*powf(theta_scale, iw/2.0f);

    const float freq_factor = has_ff ? freq_factors[iw/2] : 1.0f;

    float cos_theta;
    float sin_theta;

    rope_yarn<forward>(theta_base/freq_factor, freq_scale, corr_dims, iw, ext_factor, attn_factor, cos_theta, sin_theta);

    const float x0 = x[ix + 0];
    const float x1 = x[ix + 1];

    store_coaelsced(x0 * cos_theta - x1 * sin_theta, x0 * sin_theta + x1 * cos_theta);
"""

# include/ggml.h: GGML_UNUSED, and the sort order argsort.cu's template takes
GGML_UNUSED = """
#define GGML_UNUSED(x) (void)(x)
"""
GGML_SORT_ORDER = """
    enum ggml_sort_order {
        GGML_SORT_ORDER_ASC,
        GGML_SORT_ORDER_DESC,
    };
"""

# what common.cuh includes (vendors/cuda.h's fp16 header among them), then its parts above
GGML_HEADER = (
    "#include <cassert>\n#include <cfloat>\n#include <cmath>\n#include <cstdint>\n"
    "#include <type_traits>\n#include <cuda_fp16.h>\n"
    + GGML_UNUSED + GGML_PDL + GGML_RESTRICT + GGML_MAX_CPY + GGML_WARP + GGML_BLOCK_REDUCE + GGML_ALIBI
    + GGML_MEMCPY + GGML_SILU
)  # fmt: skip
GGML_EDITS = (
    "only the signature removed (with __launch_bounds__ where it has one)",
    "the header holds ggml.h's, common.cuh's and unary.cuh's helpers the body calls, after the "
    "standard and cuda_fp16.h includes common.cuh makes",
)


def ggml_port(name, path, inputs, outputs, body, header, **kw):
    return Port(
        name, GGML, f"src/ggml-cuda/{path}", GGML_COMMIT, inputs, outputs, body,
        GGML_HEADER + header, edits=GGML_EDITS, **kw,
    )  # fmt: skip


SSM_CONV_ARGS = (
    "src0_ptr:f32*", "src1_ptr:f32*", "bias_ptr:f32*", "src0_nb0:i32", "src0_nb1:i32",
    "src0_nb2:i32", "src1_nb1:i32", "dst_nb0:i32", "dst_nb1:i32", "dst_nb2:i32", "n_t:i64",
)  # fmt: skip
SSM_CONV_PORT = ggml_port(
    "ssm_conv_f32", "ssm-conv.cu", SSM_CONV_ARGS, ("dst_ptr:f32*",), SSM_CONV, "",
    fixed=(("apply_silu", (True, False)), ("split_d_inner", (128,)),
           ("d_conv", (4, 3, 5, 9, 15))),
    optional=("bias_ptr",),
)  # fmt: skip
SSM_CONV_LONG_PORT = ggml_port(
    "ssm_conv_long_token_f32", "ssm-conv.cu",
    tuple(a.replace("_ptr", "") for a in SSM_CONV_ARGS), ("dst:f32*",), SSM_CONV_LONG, "",
    fixed=(("apply_silu", (True, False)), ("split_d_inner", (128,)),
           ("d_conv", (4, 3, 5, 9, 15)), ("split_n_t", (32,))),
    optional=("bias",),
)  # fmt: skip
SCAN_ARGS = (
    "src0_ptr:f32*", "src1_ptr:f32*", "src2_ptr:f32*", "src3_ptr:f32*", "src4_ptr:f32*",
    "src5_ptr:f32*", "src6_ptr:i32*", "src0_nb2:i32", "src0_nb3:i32", "src1_nb2:i32",
    "src1_nb3:i32", "src2_nb1:i32", "src2_nb2:i32", "src3_nb1:i32", "src4_nb2:i32",
    "src4_nb3:i32", "src5_nb2:i32", "src5_nb3:i32", "s_off:i64",
)  # fmt: skip
SSM_SCAN_PORT = ggml_port(
    "ssm_scan_f32", "ssm-scan.cu", (*SCAN_ARGS, "d_inner:i64", "L_param:i64"),
    ("dst_ptr:f32*",), SSM_SCAN, SSM_SCAN_TOP,
    fixed=(("splitD", (128,)), ("N", (16,)), ("L_template", (0, 1, 2, 3, 4, 5, 6, 7, 8))),
)  # fmt: skip
SSM_SCAN_GROUP_PORT = ggml_port(
    "ssm_scan_f32_group", "ssm-scan.cu",
    (*SCAN_ARGS, "n_head:i64", "d_head:i64", "n_group:i64", "n_tok:i64", "K:i64"),
    ("dst_ptr:f32*",), SSM_SCAN_GROUP, SSM_SCAN_TOP,
    fixed=(("c_factor", (4, 8)), ("d_state", (128, 256))),
)  # fmt: skip
ASC = kernelkit.cxx("GGML_SORT_ORDER_ASC")
DESC = kernelkit.cxx("GGML_SORT_ORDER_DESC")
ARGSORT_PORT = ggml_port(
    "k_argsort_f32_i32", "argsort.cu", ("x:f32*", "ncols:i32", "ncols_pad:i32"), ("dst:i32*",),
    ARGSORT, GGML_SORT_ORDER + ARGSORT_SWAP, fixed=(("order", (ASC, DESC)),),
)  # fmt: skip
SOFTMAX_PORT = ggml_port(
    "soft_max_f32", "softmax.cu", ("x:f32*", "mask:T*", "sinks:f32*", "p:struct"),
    ("dst:f32*",), SOFTMAX, SOFTMAX_TOP, template=("T",), dtypes=("float32", "float16"),
    fixed=(("use_shared", (True, False)), ("ncols_template", (0, 64, 2048)),
           ("block_size_template", (0, 64, 1024))),
    structs=(("p", "soft_max_params", 128),), optional=("mask", "sinks"),
)  # fmt: skip
ROPE_PORT = ggml_port(
    "rope_norm", "rope.cu",
    ("x:T*", "ne00:i32", "ne01:i32", "ne02:i32", "s01:i32", "s02:i32", "s03:i32", "s1:i32",
     "s2:i32", "s3:i32", "n_dims:i32", "n_offs:i32", "pos:i32*", "freq_scale:f32",
     "ext_factor:f32", "attn_factor:f32", "corr_dims:struct", "theta_scale:f32",
     "freq_factors:f32*", "row_indices:i64*", "set_rows_stride:i32", "inplace:bool"),
    ("dst:T*",), ROPE_NORM, ROPE_TOP, template=("T",), dtypes=("float32", "float16"),
    fixed=(("forward", (True, False)), ("has_ff", (False, True))),
    structs=(("corr_dims", "rope_corr_dims", 8),), optional=("freq_factors", "row_indices"),
)  # fmt: skip
# rope_norm<forward, has_ff, float, half>: the fused ROPE + VIEW + SET_ROWS into an f16 cache
ROPE_F16_PORT = dataclasses.replace(ROPE_PORT, outputs=("dst:f16*",), dtypes=("float32",))

# --- vLLM: the KV cache in fp8 ---------------------------------------------------------------

# csrc/attention/dtype_fp8.cuh's fp8 include (ENABLE_FP8 is vLLM's build flag for CUDA), the
# Fp8KVCacheDataType it declares, dtype_float16.cuh's half_to_float (at
# 7e8f65be7b97eaf2ac11351f5eda5b1ff18dd997), and from quant_utils.cuh at
# 03476e5c1184648abcfd1573b630bcd81741a555 the generic scaled_vec_conversion, its three
# "-> fp8" specializations and scaled_convert, in their namespaces
FP8_HEADER = (
    "#define ENABLE_FP8\n#include <cassert>\n#include <cstdint>\n#include <cuda_fp16.h>\n"
    "#include <cuda_bf16.h>\n"
    + CUDA_COMPAT
    + r"""
#ifdef ENABLE_FP8
  #ifndef USE_ROCM
    #include <cuda_fp8.h>
  #endif  // USE_ROCM
#endif    // ENABLE_FP8

namespace vllm {

enum class Fp8KVCacheDataType {
  kAuto = 0,
  kFp8E4M3 = 1,
  kFp8E5M2 = 2,
};

inline __device__ float half_to_float(uint16_t h) {
  float f;
#ifndef USE_ROCM
  asm volatile("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
#else
  asm volatile("v_cvt_f32_f16 %0, %1;" : "=v"(f) : "v"(h));
#endif
  return f;
}

#ifndef USE_ROCM

namespace fp8 {
  #ifdef ENABLE_FP8

template <typename Tout, typename Tin>
__inline__ __device__ Tout scaled_vec_conversion(
    const Tin& x, const float scale, const __nv_fp8_interpretation_t fp8_type) {
  return x;
}

// half -> fp8
template <>
__inline__ __device__ uint8_t scaled_vec_conversion<uint8_t, uint16_t>(
    const uint16_t& a, const float scale,
    const __nv_fp8_interpretation_t fp8_type) {
  __nv_fp8_storage_t res =
      __nv_cvt_float_to_fp8(half_to_float(a) / scale, __NV_SATFINITE, fp8_type);
  return (uint8_t)res;
}

// bf16 -> fp8
template <>
__inline__ __device__ uint8_t scaled_vec_conversion<uint8_t, __nv_bfloat16>(
    const __nv_bfloat16& a, const float scale,
    const __nv_fp8_interpretation_t fp8_type) {
    #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  assert(false);
    #else
  __nv_fp8_storage_t res = __nv_cvt_float_to_fp8(__bfloat162float(a) / scale,
                                                 __NV_SATFINITE, fp8_type);
  return (uint8_t)res;
    #endif
  __builtin_unreachable();  // Suppress missing return statement warning
}

// float -> fp8
template <>
__inline__ __device__ uint8_t scaled_vec_conversion<uint8_t, float>(
    const float& a, const float scale,
    const __nv_fp8_interpretation_t fp8_type) {
  __nv_fp8_storage_t res =
      __nv_cvt_float_to_fp8(a / scale, __NV_SATFINITE, fp8_type);
  return (uint8_t)res;
}
  #endif  // ENABLE_FP8

template <typename Tout, typename Tin, Fp8KVCacheDataType kv_dt>
__inline__ __device__ Tout scaled_convert(const Tin& x, const float scale) {
  #ifdef ENABLE_FP8
  if constexpr (kv_dt == Fp8KVCacheDataType::kFp8E4M3) {
    return scaled_vec_conversion<Tout, Tin>(x, scale, __NV_E4M3);
  } else if constexpr (kv_dt == Fp8KVCacheDataType::kFp8E5M2) {
    return scaled_vec_conversion<Tout, Tin>(x, scale, __NV_E5M2);
  }
  #endif
  assert(false);
  __builtin_unreachable();  // Suppress missing return statement warning
}

}  // namespace fp8
#endif  // not USE_ROCM
}  // namespace vllm
using namespace vllm;
"""
)
KV_E4M3 = kernelkit.cxx("vllm::Fp8KVCacheDataType::kFp8E4M3")
KV_E5M2 = kernelkit.cxx("vllm::Fp8KVCacheDataType::kFp8E5M2")
FP8_CACHE_PORT = Port(
    "reshape_and_cache_flash_kernel", VLLM, "csrc/cache_kernels.cu",
    "693083ae80680811c9c2a22edad2568e6635e190",
    ("key:T*", "value:T*", "slot_mapping:i64*", "block_stride:i32", "key_stride:i32",
     "value_stride:i32", "num_heads:i32", "head_size:i32", "block_size:i32", "k_scale:f32",
     "v_scale:f32"),
    ("key_cache:u8*", "value_cache:u8*"), RESHAPE_AND_CACHE_FLASH, FP8_HEADER, ("scalar_t",),
    ("float32", "uint16", "bfloat16"), (("cache_t", ("uint8",)), ("kv_dt", (KV_E4M3, KV_E5M2))),
    edits=(
        "only the signature removed",
        "the header defines ENABLE_FP8 (vLLM's CMake does for CUDA) and holds, from the vLLM "
        "headers named in the module docstring, what the fp8 path calls (the rest of "
        "quant_utils.cuh's conversions left out), ending with `using namespace vllm;`",
    ),
)  # fmt: skip

# --- PyTorch: Embedding.cu -------------------------------------------------------------------

TORCH_HEADER = """
#include <cstdint>
#include <cmath>

// c10/macros/Macros.h
#ifdef __HIP_PLATFORM_HCC__
#define C10_WARP_SIZE 64
#else
#define C10_WARP_SIZE 32
#endif

// aten/src/ATen/cuda/DeviceUtils.cuh at 11bc1c8951711fd819725c7a6cb895618f84a7b4
#if defined(__HIP_PLATFORM_HCC__)
__device__ __forceinline__ unsigned long long int WARP_BALLOT(int predicate)
{
return __ballot(predicate);
}
#else
__device__ __forceinline__ unsigned int WARP_BALLOT(int predicate, unsigned int mask = 0xffffffff)
{
#ifndef __HIP_PLATFORM_HCC__
    return __ballot_sync(mask, predicate);
#else
    return __ballot(predicate);
#endif
}
#endif

template <typename T>
__device__ __forceinline__ T WARP_SHFL_DOWN(T value, unsigned int delta, int width = warpSize, unsigned int mask = 0xffffffff)
{
#ifndef __HIP_PLATFORM_HCC__
    return __shfl_down_sync(mask, value, delta, width);
#else
    return __shfl_down(value, delta, width);
#endif
}

// aten/src/ATen/native/cuda/block_reduce.cuh at 0d1a44aee51d2a032e18b56604a0cd28c6b470b0
namespace at {
namespace native {
namespace cuda_utils {

constexpr int kCUDABlockReduceNumThreads = 512;
// Algorithmic limitation: BlockReduce does two WarpReduce calls, each
// of which reduces C10_WARP_SIZE elements. So, at most
// C10_WARP_SIZE**2 elements can be reduced at a time.
// NOTE: This is >= the max block size on current hardware anyway (1024).
constexpr int kCUDABlockReduceMaxThreads = C10_WARP_SIZE * C10_WARP_SIZE;

// Sums `val` accross all threads in a warp.
//
// Assumptions:
//   - The size of each block should be a multiple of `C10_WARP_SIZE`
template <typename T>
__inline__ __device__ T WarpReduceSum(T val) {
#pragma unroll
  for (int offset = (C10_WARP_SIZE >> 1); offset > 0; offset >>= 1) {
    val += WARP_SHFL_DOWN(val, offset);
  }
  return val;
}

struct Block1D {
    static __forceinline__ __device__ int Tid() { return threadIdx.x; }

    static __forceinline__ __device__ int Warps() {
        return blockDim.x / C10_WARP_SIZE;
    }
};

struct Block2D {
    static __forceinline__ __device__ int Tid() {
        return threadIdx.x + threadIdx.y * blockDim.x;
    }

    static __forceinline__ __device__ int Warps() {
        return blockDim.x * blockDim.y / C10_WARP_SIZE;
    }
};

// Sums `val` across all threads in a block.
//
// Assumptions:
//   - The size of each block should be a multiple of `C10_WARP_SIZE`
//   - `shared` should be a pointer to shared memory with size of, at least,
//     `sizeof(T) * number_of_warps`
template <typename T, typename B = Block1D>
__inline__ __device__ T BlockReduceSum(T val, T* shared) {
  const int tid = B::Tid();
  const int lid = tid % C10_WARP_SIZE;
  const int wid = tid / C10_WARP_SIZE;
  val = WarpReduceSum(val);
  __syncthreads();
  if (lid == 0) {
    shared[wid] = val;
  }
  __syncthreads();
  val = (tid < B::Warps()) ? shared[lid] : T(0);
  if (wid == 0) {
    val = WarpReduceSum(val);
  }
  return val;
}

} // namespace cuda_utils
} // namespace native
} // namespace at
using namespace at::native;
"""

EMBEDDING_BACKWARD = """
  extern __shared__ char buf[];
  accscalar_t* smem = (accscalar_t*)buf;
  accscalar_t* my_s = smem + C10_WARP_SIZE*threadIdx.y;
  int* indices_batch = (int*)(buf + sizeof(accscalar_t)*C10_WARP_SIZE*blockDim.y);

  const int s = (int)stride; // OK to make int, we don't expect 2 billion+ embedding row size

  const int f = threadIdx.x + blockIdx.x*blockDim.x; // feature_dim

  for(int batch_start = 0; batch_start < n; batch_start += blockDim.x*blockDim.y)
  {
    // Entire block cooperates to load a batch of 1024 indices to process
    int tid = threadIdx.x + threadIdx.y*blockDim.x;
    if(batch_start + tid < n)
      indices_batch[tid] = (int)indices[batch_start + tid];

    int batch_end = batch_start + blockDim.x*blockDim.y < n ?
                    batch_start + blockDim.x*blockDim.y : n;

    // Loop over the batch of <= 1024 loaded indices in chunks of blockDim.y = 32
    for(int chunk_start = batch_start; chunk_start < batch_end; chunk_start += blockDim.y)
    {
      // This does double duty:  it makes sure indices_batch is ready, and it makes sure match-group
      // leaders are done with their accumulates before other warps start loading again.
      __syncthreads();

      int n_this_chunk = (batch_end - chunk_start) < blockDim.y ?
                         (batch_end - chunk_start) : blockDim.y;

      int src_row = chunk_start + threadIdx.y;
      int dst_row = indices_batch[src_row - batch_start]; // This warp's target row in grad_weight

      // All warps load their smem segments with incoming grad data
      if(src_row < n && f < s && dst_row != padding_idx)
        my_s[threadIdx.x] = static_cast<accscalar_t>(grad[src_row*stride + f]);

      __syncthreads();

      // To ensure determinism, we can't just have each warp add its grad data to its dst_row.
      // We need to check if any other warps pulled grad data targeting dst_row.
      // If so, we elect the first warp in each matching group as the leader.
      // Each leader warp serializes the accumulates targeting dst_row in shared memory,
      // then finishes by adding the accumulated buffer to dst_row in grad_weight.
      if(dst_row != padding_idx && src_row < n) // Per-warp exit condition, safe with ballot_sync
      {
        int match_found_this_thread = 0;
        if(threadIdx.x < n_this_chunk)
          match_found_this_thread = (dst_row == indices_batch[chunk_start - batch_start + threadIdx.x]);
#if defined(USE_ROCM)
        unsigned long long int matchmask = WARP_BALLOT(match_found_this_thread);
        int first_remaining_peer = __ffsll(matchmask) - 1;
#else
        unsigned int matchmask = WARP_BALLOT(match_found_this_thread);
        int first_remaining_peer = __ffs(matchmask) - 1;
#endif

        if(threadIdx.y == first_remaining_peer) // Nominate lowest-indexed warp as the leader
        {
          matchmask ^= (1 << first_remaining_peer);
          while(matchmask)
          {
#if defined(USE_ROCM)
            first_remaining_peer = __ffsll(matchmask) - 1;
#else
            first_remaining_peer = __ffs(matchmask) - 1;
#endif
            my_s[threadIdx.x] += smem[threadIdx.x + C10_WARP_SIZE*first_remaining_peer];
            matchmask ^= (1 << first_remaining_peer);
          }
          if(f < s)
            grad_weight[dst_row*stride + f] += static_cast<scalar_t>(my_s[threadIdx.x]);
        }
      }
    }
  }
"""

RENORM = """
  if (blockIdx.x >= *num_unique_indices) {
    return;
  }

  // Some casting hacks since dynamic shared memory and templates don't work together:
  extern __shared__ unsigned char smem[];
  auto sdata = reinterpret_cast<accscalar_t*>(smem);

  int tid = threadIdx.x;
  int base_index = indices[blockIdx.x] * weights_stride0;

  accscalar_t v = 0;
  for (int i = tid; i < dim; i += blockDim.x) {
    auto x = static_cast<accscalar_t>(weights[base_index + i * weights_stride1]);
    if (norm_type == 1) {
      v += std::abs(x);
    } else if (norm_type == 2) {
      v += x * x;
    } else {
      v += std::pow(x, norm_type);
    }
  }

  v = cuda_utils::BlockReduceSum(v, sdata);

  if (tid == 0) {
    sdata[0] = std::pow(v, static_cast<accscalar_t>(1.0 / norm_type));
  }
  __syncthreads();

  // now we renormalize the blocks that need it
  if (sdata[0] > max_norm) {
    auto factor = static_cast<scalar_t>(max_norm / (sdata[0] + 1e-7));
    for (int i = tid; i < dim; i += blockDim.x) {
      weights[base_index + i * weights_stride1] *= factor;
    }
  }
"""

TORCH_EDITS = (
    "only the signature removed",
    "the header holds the c10/ATen helpers the bodies call (copied, the c10::Half and "
    "c10::complex overloads left out) and ends with `using namespace at::native;`",
)
EMBEDDING_PORT = Port(
    "embedding_backward_feature_kernel", TORCH, "aten/src/ATen/native/cuda/Embedding.cu",
    "1c94016e03463593c53fcf4f1a4438eed1fc08ea",
    ("indices:i64*", "grad:T*", "n:i32", "stride:i64", "padding_idx:i32"), ("grad_weight:T*",),
    EMBEDDING_BACKWARD, TORCH_HEADER, ("scalar_t",), DTYPES4, (("index_t", ("int64",)),),
    edits=TORCH_EDITS,
)  # fmt: skip
EMBEDDING_I32_PORT = dataclasses.replace(
    EMBEDDING_PORT, inputs=("indices:i32*", *EMBEDDING_PORT.inputs[1:]),
    fixed=(("index_t", ("int32",)),),
)  # fmt: skip
RENORM_ARGS = ("indices:i64*", "max_norm:f32", "norm_type:f32", "dim:i64",
               "weights_stride0:i64", "weights_stride1:i64", "num_unique_indices:i64*")  # fmt: skip
RENORM_PORT = Port(
    "renorm_kernel", TORCH, "aten/src/ATen/native/cuda/Embedding.cu",
    "1c94016e03463593c53fcf4f1a4438eed1fc08ea", RENORM_ARGS, ("weights:T*",), RENORM,
    TORCH_HEADER, ("scalar_t",), ("float32", "float16", "bfloat16"), (("index_t", ("int64",)),),
    edits=TORCH_EDITS,
)  # fmt: skip
# accscalar_t is double for double: max_norm and norm_type are doubles there
RENORM_F64_PORT = dataclasses.replace(
    RENORM_PORT,
    inputs=tuple(a.replace(":f32", ":f64") for a in RENORM_ARGS), dtypes=("float64",),
)  # fmt: skip

# every port but ssm_conv_long_token_f32, which NVRTC refuses (test_ssm_conv_long_token_nvrtc:
# tests/unit/test_real_ports_nvrtc.py compiles each of PORTS and cannot mark one xfail)
PORTS = (
    SSM_CONV_PORT, SSM_CONV_LONG_PORT, SSM_SCAN_PORT, SSM_SCAN_GROUP_PORT, ARGSORT_PORT, SOFTMAX_PORT, ROPE_PORT,
    ROPE_F16_PORT, FP8_CACHE_PORT, EMBEDDING_PORT, EMBEDDING_I32_PORT, RENORM_PORT,
    RENORM_F64_PORT,
)  # fmt: skip


def template_for(port, dtype):
    """The launcher's template values of ``port`` (the first of each) for ``dtype``: at::acc_type
    for PyTorch's accscalar_t, rope's D (the destination's type)."""
    values = [(n, v[0]) for n, v in port.fixed]
    if port.repo == TORCH:
        values.append(("accscalar_t", ACC.get(dtype, "float32")))
    if port.name == "rope_norm":
        values.append(("D", "float16" if port is ROPE_F16_PORT else dtype))
    return values


@pytest.fixture
def ports(backend):
    return Ports(backend)


def threads(blocks, block):
    """kernelkit's geometry (grid in threads) of a CUDA launch <<<blocks, block>>>."""
    blocks = tuple(blocks) + (1,) * (3 - len(blocks))
    block = tuple(block) + (1,) * (3 - len(block))
    return {"grid": tuple(g * b for g, b in zip(blocks, block, strict=True)), "threadgroup": block}


# --- ggml Mamba: ssm_conv --------------------------------------------------------------------


def _silu(y):
    return y / (1 + np.exp(-y))


def _ssm_conv_reference(x, w, b, n_t, silu):
    """y[s, t, r] = sum_j x[s, r, t + j] w[r, j] (+ b[r]), SiLU'd when fused."""
    nc = w.shape[1]
    y = np.stack([(x[:, :, t : t + nc] * w).sum(-1) for t in range(n_t)], 1)
    y = y + (0 if b is None else b)
    return _silu(y) if silu else y


def _ssm_conv_case(nc, n_t, n_s, nr=256, w_pad=0):
    x = RNG.standard_normal((n_s, nr, nc - 1 + n_t)).astype(np.float32).astype(np.float64)
    w = RNG.standard_normal((nr, nc + w_pad)).astype(np.float32).astype(np.float64)
    b = RNG.standard_normal(nr).astype(np.float32).astype(np.float64)
    strides = [4, x.shape[2] * 4, nr * x.shape[2] * 4, w.shape[1] * 4, 4, nr * 4, n_t * nr * 4]
    return x, w, b, strides


@pytest.mark.parametrize(
    ("silu", "bias", "nc", "n_t", "n_s"),
    [(False, False, 4, 1, 3), (True, True, 4, 13, 2), (True, False, 9, 32, 1)],
)
def test_ssm_conv(ports, silu, bias, nc, n_t, n_s):
    """ssm_conv_f32_cuda's short path (n_t <= 32): blocks (n_s, nr / 128) of 128 threads; the
    weights' rows padded (src1_nb1 past d_conv)."""
    x, w, b, strides = _ssm_conv_case(nc, n_t, n_s, w_pad=3)
    args = [x, w, b if bias else None, *strides[:4], *strides[4:], n_t]
    (y,) = ports.run(
        SSM_CONV_PORT, "float32", args, [(n_s, n_t, 256)],
        template=[("apply_silu", silu), ("split_d_inner", 128), ("d_conv", nc)],
        **threads((n_s, 2), (128,)),
    )  # fmt: skip
    want = _ssm_conv_reference(x, w[:, :nc], b if bias else None, n_t, silu)
    close(y, want, "float32")


@pytest.mark.parametrize(("silu", "nc", "n_t"), [(True, 4, 64), (False, 3, 96)])
def test_ssm_conv_long_token(ports, silu, nc, n_t):
    """The long-sequence path: blocks (n_s, nr / 128, n_t / 32), each staging its x tile in
    dynamic shared memory (128 * (d_conv - 1 + 32) floats). (n_t a multiple of 32: the last
    tile of a shorter one reads up to 31 floats past its row, past x for the last row.)"""
    n_s = 2
    x, w, b, strides = _ssm_conv_case(nc, n_t, n_s)
    args = [x, w, b if silu else None, *strides, n_t]
    (y,) = ports.run(
        SSM_CONV_LONG_PORT, "float32", args, [(n_s, n_t, 256)],
        template=[("apply_silu", silu), ("split_d_inner", 128), ("d_conv", nc),
                  ("split_n_t", 32)],
        shared_memory=128 * (nc - 1 + 32) * 4, **threads((n_s, 2, -(-n_t // 32)), (128,)),
    )  # fmt: skip
    close(y, _ssm_conv_reference(x, w, b if silu else None, n_t, silu), "float32")


# --- ggml Mamba: ssm_scan --------------------------------------------------------------------


def _softplus(dt):
    return np.where(dt <= 20.0, np.log1p(np.exp(np.minimum(dt, 20.0))), dt)


def _f32(*shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize(("n_tok", "l_template"), [(3, 3), (11, 0)])
def test_ssm_scan(ports, n_tok, l_template):
    """Mamba-1 (ssm_scan_f32_cuda's A with d_state columns): blocks (n_seq, d_inner / 128) of
    128 threads, each thread one channel with its 16 states (CUB's blocked loads and stores);
    y then the new states in one dst, the old states picked by src6 from n_rs slots."""
    n_seq, n_rs, d_inner, N = 2, 3, 256, 16
    s0 = _f32(n_rs, d_inner, N)
    x, B, C = _f32(n_seq, n_tok, d_inner), _f32(n_seq, n_tok, N), _f32(n_seq, n_tok, N)
    dt = _f32(n_seq, n_tok, d_inner, scale=2.0, shift=-1.0)
    dt[0, 0, :5] = 25.0  # past softplus' threshold: used as is
    A = -np.exp(_f32(d_inner, N, scale=0.5))
    ids = np.array([2, 0], np.int32)
    s_off = n_seq * n_tok * d_inner * 4
    args = [s0, x, dt, A, B, C, ids, N * 4, d_inner * N * 4, d_inner * 4, n_tok * d_inner * 4,
            d_inner * 4, n_tok * d_inner * 4, N * 4, N * 4, n_tok * N * 4, N * 4, n_tok * N * 4,
            s_off, d_inner, n_tok]  # fmt: skip
    (dst,) = ports.run(
        SSM_SCAN_PORT, "float32", args, [(n_seq * n_tok * d_inner + n_seq * d_inner * N,)],
        template=[("splitD", 128), ("N", 16), ("L_template", l_template)],
        **threads((n_seq, d_inner // 128), (128,)),
    )  # fmt: skip
    y, states = np.empty((n_seq, n_tok, d_inner)), np.empty((n_seq, d_inner, N))
    for s in range(n_seq):
        h = s0[ids[s]].copy()
        for t in range(n_tok):
            sp = _softplus(dt[s, t])[:, None]
            h = h * np.exp(sp * A) + B[s, t] * (x[s, t][:, None] * sp)
            y[s, t] = (h * C[s, t]).sum(1)
        states[s] = h
    close(dst, np.concatenate([y.ravel(), states.ravel()]), "float32", scale=8)


@pytest.mark.parametrize(("d_state", "slots_k"), [(128, 1), (128, 3)])
def test_ssm_scan_group(ports, d_state, slots_k):
    """Mamba-2 (A one value a head): a warp per (head, head_dim) pair, d_state / 32 states a
    lane, y summed over the warp; with K > 1 the states after the last K - 1 tokens but the
    final one go to rollback slots 1..K-1 after slot 0 (the final state)."""
    n_seq, n_rs, n_head, d_head, n_group, n_tok = 2, 3, 6, 6, 2, 5
    c = d_state // 32
    s0 = _f32(n_rs, n_head, d_head, d_state)
    x = _f32(n_seq, n_tok, n_head, d_head)
    dt = _f32(n_seq, n_tok, n_head, scale=2.0, shift=-1.0)
    dt[1, 2, 3] = 21.0
    A = -np.exp(_f32(n_head, scale=0.5))
    B, C = _f32(n_seq, n_tok, n_group, d_state), _f32(n_seq, n_tok, n_group, d_state)
    ids = np.array([1, 2], np.int32)
    s_nb3 = n_head * d_head * d_state * 4
    s_off = n_seq * n_tok * n_head * d_head * 4
    bs = n_group * d_state * 4
    args = [s0, x, dt, A, B, C, ids, d_head * d_state * 4, s_nb3, n_head * d_head * 4,
            n_tok * n_head * d_head * 4, n_head * 4, n_tok * n_head * 4, 4, bs, n_tok * bs, bs,
            n_tok * bs, s_off, n_head, d_head, n_group, n_tok, slots_k]  # fmt: skip
    size = n_seq * n_tok * n_head * d_head + slots_k * n_seq * n_head * d_head * d_state
    (dst,) = ports.run(
        SSM_SCAN_GROUP_PORT, "float32", args, [(size,)],
        template=[("c_factor", c), ("d_state", d_state)],
        **threads((n_head * d_head // 4, n_seq), (128,)),
    )  # fmt: skip
    y = np.empty((n_seq, n_tok, n_head, d_head))
    slots = np.full((slots_k, n_seq, n_head, d_head, d_state), np.nan)
    for s in range(n_seq):
        h = s0[ids[s]].copy()
        g = np.arange(n_head) // (n_head // n_group)
        for t in range(n_tok):
            sp = _softplus(dt[s, t])[:, None, None]
            h = h * np.exp(sp * A[:, None, None]) + B[s, t][g][:, None, :] * (
                x[s, t][..., None] * sp
            )
            y[s, t] = (h * C[s, t][g][:, None, :]).sum(-1)
            if 0 < n_tok - 1 - t < slots_k:
                slots[n_tok - 1 - t, s] = h
        slots[0, s] = h
    close(dst, np.concatenate([y.ravel(), slots.ravel()]), "float32", scale=8)


# --- ggml argsort ----------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("ncols", [37, 300])
def test_argsort(ports, order, ncols):
    """argsort_f32_i32_cuda_bitonic: a block of ncols_pad (the next power of 2) threads a row,
    ncols_pad ints of dynamic shared memory; padded indices sort last."""
    nrows = 3
    pad = 1 << (ncols - 1).bit_length()
    x = RNG.permutation(nrows * ncols).reshape(nrows, ncols) * 0.25 - 40  # distinct values
    (dst,) = ports.run(
        ARGSORT_PORT, "float32", [x, ncols, pad], [(nrows, ncols)],
        template=[("order", ASC if order == "asc" else DESC)], shared_memory=pad * 4,
        **threads((nrows,), (pad,)),
    )  # fmt: skip
    want = np.argsort(x if order == "asc" else -x, axis=1)
    np.testing.assert_array_equal(dst, want)


# --- ggml soft_max ---------------------------------------------------------------------------

# soft_max_params as C lays it out (n_head_log2 is followed by 4 bytes of padding)
SOFTMAX_PARAMS = np.dtype(
    [("nheads", "<i8"), ("n_head_log2", "<u4"), ("ncols", "<i8"), ("nrows_x", "<i8"),
     ("nrows_y", "<i8"), ("ne00", "<i8"), ("ne01", "<i8"), ("ne02", "<i8"), ("ne03", "<i8"),
     ("nb11", "<i8"), ("nb12", "<i8"), ("nb13", "<i8"), ("ne12", "<i8"), ("ne13", "<i8"),
     ("scale", "<f4"), ("max_bias", "<f4"), ("m0", "<f4"), ("m1", "<f4")],
    align=True,
)  # fmt: skip


def _softmax_params(ne, mask_shape, mask_item, scale, max_bias):
    """ggml_cuda_op_soft_max's parameters for x [ne03][ne02][ne01][ne00] and a mask of
    [ne13][ne12][ne11][ne10] (ne10 >= ne00: rows padded)."""
    ne03, ne02, ne01, ne00 = ne
    p = np.zeros((), SOFTMAX_PARAMS)
    n_head_log2 = 1 << int(np.floor(np.log2(np.float32(ne02))))
    p["nheads"], p["n_head_log2"], p["ncols"] = ne02, n_head_log2, ne00
    p["nrows_x"], p["nrows_y"] = ne01 * ne02 * ne03, ne01
    p["ne00"], p["ne01"], p["ne02"], p["ne03"] = ne00, ne01, ne02, ne03
    if mask_shape is None:
        p["nb11"] = p["nb12"] = p["nb13"] = 1
        p["ne12"] = p["ne13"] = 1
    else:
        ne13, ne12, ne11, ne10 = mask_shape
        p["nb11"], p["nb12"], p["nb13"] = (ne10 * mask_item, ne11 * ne10 * mask_item,
                                           ne12 * ne11 * ne10 * mask_item)  # fmt: skip
        p["ne12"], p["ne13"] = ne12, ne13
    p["scale"], p["max_bias"] = scale, max_bias
    p["m0"] = np.float32(2.0) ** np.float32(-max_bias / n_head_log2)
    p["m1"] = np.float32(2.0) ** np.float32(-(max_bias / 2.0) / n_head_log2)
    return p


def _softmax_reference(x, mask, sinks, p):
    ne03, ne02, ne01, ne00 = x.shape
    out = np.empty_like(x)
    nl2, m0, m1, bias = int(p["n_head_log2"]), float(p["m0"]), float(p["m1"]), p["max_bias"]
    for i3, i2, i1 in np.ndindex(ne03, ne02, ne01):
        slope = 1.0 if bias <= 0 else (m0 ** (i2 + 1) if i2 < nl2 else m1 ** (2 * (i2 - nl2) + 1))
        v = x[i3, i2, i1] * float(p["scale"])
        if mask is not None:
            v = v + slope * mask[i3 % mask.shape[0], i2 % mask.shape[1], i1, :ne00]
        top = max(v.max(), sinks[i2]) if sinks is not None else v.max()
        e = np.exp(v - top)
        total = e.sum() + (np.exp(sinks[i2] - top) if sinks is not None else 0.0)
        out[i3, i2, i1] = e / total
    return out


SOFTMAX_CASES = [
    # ne, mask (ne13, ne12, pad), sinks, scale, max_bias, (use_shared, ncols_t, block_t), block
    ((2, 3, 5, 37), (1, 1, 3), True, 0.8, 8.0, (True, 0, 0), 64, "37-alibi-sinks"),
    ((1, 4, 3, 64), (1, 2, 0), False, 0.7, 0.0, (True, 64, 64), 64, "64-template"),
    ((1, 1, 2, 2048), None, False, 1.0, 0.0, (True, 2048, 1024), 1024, "2048-no-mask"),
    ((1, 3, 2, 300), (1, 3, 5), True, 1.3, 2.0, (False, 0, 0), 512, "300-no-smem"),
]


@pytest.mark.parametrize(
    ("dtype", "ne", "mask", "sinks", "scale", "bias", "tpl", "block"),
    [
        pytest.param(d, *c[:-1], id=f"{c[-1]}-{d}")
        for c in SOFTMAX_CASES
        for d in SOFTMAX_PORT.dtypes
        if c[1] is not None or d == "float32"  # T is the mask's type: no mask, one case
    ],
)
def test_soft_max(ports, dtype, ne, mask, sinks, scale, bias, tpl, block):
    """soft_max_f32_cuda's launches: blocks (ne01, ne02, ne03) of nth threads (a power of 2 from
    32 up to ncols, at most 1024); the templated column counts, the default <true, 0, 0>, and
    <false, 0, 0> (values kept in dst) with WARP_SIZE floats of shared memory. Masks hold -inf
    (a causal pattern), rows padded past ncols, broadcast over heads (i02 % ne12)."""
    ne03, ne02, ne01, ne00 = ne
    x = _f32(*ne, scale=3.0)
    m = None
    if mask is not None:
        ne13, ne12, pad = mask
        m = ports.round(RNG.standard_normal((ne13, ne12, ne01, ne00 + pad)) * 2, dtype)
        m[..., 1:, :3] = -np.inf  # a few masked positions, never a whole row
    sk = _f32(ne02) if sinks else None
    item = 2 if dtype == "float16" else 4
    p = _softmax_params(ne, None if m is None else m.shape, item, scale, bias)
    use_shared, ncols_t, block_t = tpl
    smem = ((-(-ne00 // 32) * 32) + 32) * 4 if use_shared else 32 * 4
    (y,) = ports.run(
        SOFTMAX_PORT, dtype, [x, m, sk, p.tobytes()], [ne],
        template=[("use_shared", use_shared), ("ncols_template", ncols_t),
                  ("block_size_template", block_t)],
        shared_memory=smem, **threads((ne01, ne02, ne03), (block,)),
    )  # fmt: skip
    close(y, _softmax_reference(x, m, sk, p), "float32")


# --- ggml rope_norm --------------------------------------------------------------------------


def _rope_reference(x, pos, n_dims, n_offs, freq_scale, ext_factor, attn_factor, corr,
                    theta_scale, ff, forward):  # fmt: skip
    """rope_norm on x [ne03][ne02][ne01][ne00] (pairs (i0, i0 + 1) rotated for i0 in
    [n_offs, n_offs + n_dims)), in float64."""
    out = x.copy()
    for iw in range(0, n_dims, 2):
        base = pos * theta_scale ** (iw / 2)
        theta_extrap = base / (ff[iw // 2] if ff is not None else 1.0)
        theta = freq_scale * theta_extrap
        mscale = attn_factor
        if ext_factor != 0:
            y = (iw // 2 - corr[0]) / max(0.001, corr[1] - corr[0])
            ramp = (1 - min(1.0, max(0.0, y))) * ext_factor
            theta = theta * (1 - ramp) + theta_extrap * ramp
            mscale *= 1 + 0.1 * np.log(1 / freq_scale)
        cos, sin = np.cos(theta) * mscale, np.sin(theta) * mscale * (1 if forward else -1)
        i0 = n_offs + iw
        x0, x1 = x[..., i0], x[..., i0 + 1]
        out[..., i0] = x0 * cos[:, None] - x1 * sin[:, None]
        out[..., i0 + 1] = x0 * sin[:, None] + x1 * cos[:, None]
    return out


def _rope_args(ports, dtype, ne, x_pad, forward, has_ff):
    ne03, ne02, ne01, ne00 = ne
    n_dims, n_offs = 24, 8
    x = ports.round(RNG.standard_normal((ne03, ne02, ne01, ne00 + x_pad)), dtype)
    pos = RNG.integers(0, 40, ne02).astype(np.int32)
    ff = _f32(n_dims // 2, scale=0.5, shift=2.0) if has_ff else None
    theta_scale = float(np.float32(10000.0) ** np.float32(-2.0 / n_dims))
    corr = np.array([2.0, 9.0], np.float32)
    s01 = ne00 + x_pad
    scalars = dict(n_dims=n_dims, n_offs=n_offs, freq_scale=0.5, ext_factor=0.7, attn_factor=1.25,
                   corr=corr.astype(np.float64), theta_scale=theta_scale, ff=ff, forward=forward)  # fmt: skip
    args = [x, ne00, ne01, ne02, s01, s01 * ne01, s01 * ne01 * ne02]
    tail = [n_dims, n_offs, pos, 0.5, 0.7, 1.25, corr.tobytes(), theta_scale, ff]
    return x, pos, args, tail, scalars


@pytest.mark.parametrize("dtype", ROPE_PORT.dtypes)
@pytest.mark.parametrize(
    ("forward", "has_ff", "inplace"), [(True, False, False), (False, True, True)]
)
def test_rope_norm(ports, dtype, forward, has_ff, inplace):
    """rope_norm_cuda: blocks (rows, ne00 / 512) of (1, 256) threads, a pair per thread; channels
    outside [n_offs, n_offs + n_dims) copied, or left alone in place (dst aliases x there:
    here a NaN-poisoned dst shows them unwritten); x rows padded (s01 > ne00)."""
    ne = (2, 5, 3, 40)
    ne03, ne02, ne01, ne00 = ne
    x, pos, args, tail, sc = _rope_args(ports, dtype, ne, 4, forward, has_ff)
    args += [ne00, ne00 * ne01, ne00 * ne01 * ne02, *tail, None, 0, inplace]
    (y,) = ports.run(
        ROPE_PORT, dtype, args, [ne],
        template=[("forward", forward), ("has_ff", has_ff), ("D", dtype)],
        **threads((ne01 * ne02 * ne03, 1), (1, 256)),
    )  # fmt: skip
    want = _rope_reference(x[..., :ne00], pos[None, :, None], **sc)
    if inplace:
        keep = np.r_[0 : sc["n_offs"], sc["n_offs"] + sc["n_dims"] : ne00]
        want[..., keep] = np.nan
    np.testing.assert_allclose(y, ports.round(want, dtype), rtol=8 * real_ports.TOL[dtype],
                               atol=8 * real_ports.TOL[dtype])  # fmt: skip


def test_rope_norm_set_rows_into_f16(ports):
    """The fused ROPE + VIEW + SET_ROWS (float x, half dst): token i2's heads go to row
    row_indices[i2] of a cache of set_rows_stride halves; the other rows stay unwritten."""
    ne = (1, 5, 3, 40)
    ne03, ne02, ne01, ne00 = ne
    x, pos, args, tail, sc = _rope_args(ports, "float32", ne, 0, True, True)
    rows = RNG.permutation(9)[:ne02].astype(np.int64)
    stride = ne01 * ne00
    args += [ne00, 0, 0, *tail, rows, stride, False]
    (y,) = ports.run(
        ROPE_F16_PORT, "float32", args, [(9, ne01, ne00)],
        template=[("forward", True), ("has_ff", True), ("D", "float16")],
        **threads((ne01 * ne02 * ne03, 1), (1, 256)),
    )  # fmt: skip
    want = np.full((9, ne01, ne00), np.nan)
    want[rows] = _rope_reference(x, pos[None, :, None], **sc)[0]
    np.testing.assert_allclose(y, ports.round(want, "float16"), rtol=2e-3, atol=2e-3)


# --- vLLM fp8 KV cache -----------------------------------------------------------------------


def _e4m3(v):
    """float32 -> fp8 e4m3 bits, saturating to +-448 (__NV_SATFINITE), round to nearest even."""
    torch = pytest.importorskip("torch")
    v = np.clip(np.asarray(v, np.float32), -448.0, 448.0)
    return torch.from_numpy(v).to(torch.float8_e4m3fn).view(torch.uint8).numpy().astype(np.float64)


CPU_PTX = (
    "the header's half_to_float (vLLM's dtype_float16.cuh, for the uint16_t case) is PTX asm "
    "with no __CUDA_ARCH__ guard, which the CPU backend refuses by design (the asm error names "
    "it and the fix); <cuda_fp8.h> itself the CPU backend has (tests/backend/test_fp8.py)"
)


@pytest.mark.parametrize("dtype", FP8_CACHE_PORT.dtypes)
def test_reshape_and_cache_flash_fp8(ports, request, dtype):
    """DISPATCH_BY_KV_CACHE_DTYPE's "fp8" (e4m3) caches: each key/value divided by its scale and
    stored as e4m3 bits; some values past 448 * scale saturate. Slots -1 are padding."""
    if ports.backend == "cpu":
        request.applymarker(pytest.mark.xfail(strict=True, raises=kernelkit.CompileError,
                                              reason=CPU_PTX))  # fmt: skip
    tokens, heads, head_size, block_size, num_blocks = 7, 2, 20, 3, 4
    n = heads * head_size
    kv = RNG.standard_normal((tokens, 2, n)) * 60
    kv[0, 0, :4] = [2000.0, -2000.0, 950.0, -5000.0]
    if dtype == "uint16":
        kv16 = kv.astype(np.float16)
        vals, flat = kv16.astype(np.float64), kv16.view(np.uint16).astype(np.float64).reshape(-1)
    else:
        vals = ports.round(kv, dtype)
        flat = vals.reshape(-1)
    slots = RNG.permutation(num_blocks * block_size)[:tokens]
    slots[[1, 5]] = -1
    caches = [np.full((num_blocks, block_size, heads, head_size), 255.0) for _ in range(2)]
    k_scale, v_scale = 0.5, 2.0
    args = [flat, flat[n:], slots, block_size * n, 2 * n, 2 * n, heads, head_size, block_size,
            k_scale, v_scale]  # fmt: skip
    gk, gv = ports.run(
        FP8_CACHE_PORT, dtype, args, caches,
        template=[("cache_t", "uint8"), ("kv_dt", KV_E4M3)], **threads((tokens,), (n,)),
    )  # fmt: skip
    want = [c.copy() for c in caches]
    for t, s in enumerate(slots):
        if s >= 0:
            b, o = divmod(s, block_size)
            for w, part, scale in zip(want, (0, 1), (k_scale, v_scale), strict=True):
                q = (vals[t, part].astype(np.float32) / np.float32(scale)).astype(np.float32)
                w[b, o] = _e4m3(q).reshape(heads, head_size)
    np.testing.assert_array_equal(gk, want[0])
    np.testing.assert_array_equal(gv, want[1])


# --- PyTorch embedding backward and renorm ---------------------------------------------------


def _embedding_backward_reference(ports, dtype, idx, grad, init, padding_idx):
    """embedding_backward_feature_kernel's sums in its order: per chunk of 32 rows, the rows of
    each destination summed in accscalar_t (lowest row first), then added to grad_weight in
    scalar_t (rounded there)."""
    acc = np.float64 if dtype == "float64" else np.float32
    gw = init.copy()
    for c0 in range(0, len(idx), 32):
        groups = {}
        for r in range(c0, min(c0 + 32, len(idx))):
            if idx[r] != padding_idx:
                groups.setdefault(int(idx[r]), []).append(r)
        for d, rs in groups.items():
            s = grad[rs[0]].astype(acc)
            for r in rs[1:]:
                s = (s + grad[r].astype(acc)).astype(acc)
            part = ports.round(s.astype(np.float64), dtype)
            if dtype == "float32":
                gw[d] = (gw[d].astype(np.float32) + part.astype(np.float32)).astype(np.float64)
            else:
                gw[d] = ports.round(gw[d] + part, dtype)
    return gw


EMBEDDING_CASES = [
    *(pytest.param(EMBEDDING_PORT, d, id=f"{d}-int64") for d in DTYPES4),
    pytest.param(EMBEDDING_I32_PORT, "float32", id="float32-int32"),
]


@pytest.mark.parametrize(("port", "dtype"), EMBEDDING_CASES)
@pytest.mark.parametrize(("n", "padding_idx"), [(1500, 4), (77, -1)])
def test_embedding_backward_feature(ports, port, dtype, n, padding_idx):
    """embedding_dense_backward_cuda's small path (num_indices <= 3072): blocks of (32, 32)
    threads over the features, batches of 1024 indices staged in shared memory, the warps of a
    chunk with one destination electing a leader by ballot; grad_weight starts random (the
    kernel adds to it), 13 rows for many repeats, 45 features (a partial warp)."""
    num_weights, stride = 13, 45
    idx = RNG.integers(0, num_weights, n)
    grad = ports.round(RNG.standard_normal((n, stride)), dtype)
    init = ports.round(RNG.standard_normal((num_weights, stride)), dtype)
    acc = 8 if dtype == "float64" else 4
    index_t = "int32" if port is EMBEDDING_I32_PORT else "int64"
    (gw,) = ports.run(
        port, dtype, [idx, grad, n, stride, padding_idx], [init],
        template=[("accscalar_t", ACC.get(dtype, "float32")), ("index_t", index_t)],
        shared_memory=acc * 32 * 32 + 4 * 32 * 32, **threads((-(-stride // 32),), (32, 32)),
    )  # fmt: skip
    want = _embedding_backward_reference(ports, dtype, idx, grad, init, padding_idx)
    close(gw, want, dtype, scale=1.0)


RENORM_CASES = [
    *(pytest.param(RENORM_PORT, d, id=d) for d in RENORM_PORT.dtypes),
    pytest.param(RENORM_F64_PORT, "float64", id="float64"),
]


@pytest.mark.parametrize(("port", "dtype"), RENORM_CASES)
@pytest.mark.parametrize(("norm_type", "dim"), [(2.0, 300), (1.0, 37), (3.0, 70)])
def test_embedding_renorm(ports, port, dtype, norm_type, dim):
    """embedding_renorm_cuda_: a block of 128 threads (num_threads()) a unique index, as many
    blocks as indices (those past *num_unique_indices return), (128 / 32) accscalar_t of
    shared memory; rows whose p-norm passes max_norm scaled by max_norm / (norm + 1e-7) rounded
    to scalar_t. (p = 3 raises x to p without abs, as the kernel does: positive rows there.)"""
    rows, unique = 11, 6
    w = RNG.standard_normal((rows, dim))
    if norm_type == 3.0:
        w = np.abs(w)
    w = ports.round(w, dtype)
    chosen = np.sort(RNG.choice(rows, unique, replace=False))
    indices = np.concatenate([chosen, RNG.integers(0, rows, 4)])  # a tail past the unique ones
    norms = (np.abs(w) ** norm_type).sum(1) ** (1 / norm_type)
    gaps = np.sort(norms[chosen])
    max_norm = float((gaps[2] + gaps[3]) / 2)  # half the chosen rows are renormalized
    args = [indices, max_norm, norm_type, dim, dim, 1, np.array([unique])]
    acc = "float64" if dtype == "float64" else "float32"
    (got,) = ports.run(
        port, dtype, args, [w], template=[("accscalar_t", acc), ("index_t", "int64")],
        shared_memory=(128 // 32) * (8 if acc == "float64" else 4),
        **threads((len(indices),), (128,)),
    )  # fmt: skip
    want = w.copy()
    for u in chosen:
        if norms[u] > max_norm:
            factor = ports.round(max_norm / (norms[u] + 1e-7), dtype)
            want[u] = ports.round(w[u] * factor, dtype)
    close(got, want, dtype, scale=2.0)


# --- the launchers' other template values, under NVRTC ----------------------------------------

# tests/unit/test_real_ports_nvrtc.py compiles each port with the first of its template values
# (template_for); these are the others the launchers instantiate.
VARIANTS = [
    *(pytest.param(SSM_CONV_PORT, [("apply_silu", s), ("split_d_inner", 128), ("d_conv", d)],
                   id=f"ssm_conv-{s}-{d}") for s, d in ((False, 3), (True, 15))),
    *(pytest.param(SSM_SCAN_PORT, [("splitD", 128), ("N", 16), ("L_template", n)],
                   id=f"ssm_scan-L{n}") for n in (1, 8)),
    pytest.param(SSM_SCAN_GROUP_PORT, [("c_factor", 8), ("d_state", 256)], id="ssm_scan_group-256"),
    pytest.param(ARGSORT_PORT, [("order", DESC)], id="argsort-desc"),
    pytest.param(SOFTMAX_PORT, [("use_shared", True), ("ncols_template", 4096),
                                ("block_size_template", 1024)], id="soft_max-4096"),
    pytest.param(SOFTMAX_PORT, [("use_shared", False), ("ncols_template", 0),
                                ("block_size_template", 0)], id="soft_max-no-smem"),
    pytest.param(ROPE_PORT, [("forward", False), ("has_ff", True), ("D", None)], id="rope-back-ff"),
    pytest.param(ROPE_F16_PORT, [("forward", False), ("has_ff", False), ("D", "float16")],
                 id="rope-f16-back"),
    pytest.param(FP8_CACHE_PORT, [("cache_t", "uint8"), ("kv_dt", KV_E5M2)], id="fp8-e5m2"),
]  # fmt: skip


def _compile_for_sm90(cuda, port, fixed):
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.render import render_request

    for dtype in port.dtypes:
        k = port.kernel(dtype)
        inputs = [
            ("struct", None) if kind == "struct"
            else ("scalar", DTYPES["bool"]) if kind == "bool"
            else ("array" if kind.endswith("*") else "scalar",
                  DTYPES[real_ports.dtype_of(kind, dtype)])
            for kind in (p.split(":")[1] for p in port.inputs)
        ]  # fmt: skip
        outputs = [DTYPES[real_ports.dtype_of(p.split(":")[1], dtype)] for p in port.outputs]
        values = [(n, dtype if v is None else v) for n, v in fixed]
        template = [(t, dtype) for t in port.template] + values
        _, req = render_request(
            k.spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
        )
        assert cuda.compile(req).kind == "cubin"


@pytest.mark.parametrize(("port", "fixed"), VARIANTS)
def test_other_template_values_compile_for_sm90(cuda, port, fixed):
    _compile_for_sm90(cuda, port, fixed)


@pytest.mark.parametrize(
    "fixed",
    [
        pytest.param([(n, v[0]) for n, v in SSM_CONV_LONG_PORT.fixed], id="first"),
        pytest.param([("apply_silu", False), ("split_d_inner", 128), ("d_conv", 15),
                      ("split_n_t", 32)], id="15"),
    ],
)  # fmt: skip
def test_ssm_conv_long_token_nvrtc(cuda, fixed):
    """What test_ssm_conv_long_token runs on the CPU backend, for sm_90 (as
    tests/unit/test_real_ports_nvrtc.py compiles the other ports)."""
    _compile_for_sm90(cuda, SSM_CONV_LONG_PORT, fixed)
