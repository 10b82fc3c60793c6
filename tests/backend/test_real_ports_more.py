# ruff: noqa: E501 - the kernels are the projects' text, unchanged
"""More real CUDA kernels ported as a user would (issue 25), as an independent check that what
runs on the CPU backend compiles and runs the same under NVRTC: each body is the kernel as its
project ships it, only the signature removed; any other edit is in the port's ``edits``.

vLLM (Apache-2.0), vllm-project/vllm:

- csrc/pos_encoding_kernels.cu at 0f5257e245116449bfbe78a87c22aeef632eba8f:
  ``rotary_embedding_kernel<scalar_t, cache_t, IS_NEOX>`` (neox and gpt-j; float, half,
  bfloat16 as VLLM_STABLE_DISPATCH_FLOATING_TYPES instantiates them; cache_t = scalar_t).
- csrc/cache_kernels.cu at 693083ae80680811c9c2a22edad2568e6635e190:
  ``reshape_and_cache_kernel`` and ``reshape_and_cache_flash_kernel`` with ``kv_dt = kAuto``,
  for the three types DISPATCH_BY_KV_CACHE_DTYPE gives "auto": float, uint16_t (half's bits)
  and __nv_bfloat16.
- csrc/moe/topk_softmax_kernels.cu at 0112cf233e0c60674c2844a09695ddeb2b901dc0:
  ``moeSoftmax<256>``, ``moeTopK<256, IndType>`` and ``topkGatingSoftmax<VPT, NUM_EXPERTS, 4,
  BYTES_PER_LDG, 32, IndType>`` (float logits; IndType int, uint32_t, int64_t as topk_softmax
  dispatches on the indices' dtype).
- csrc/cuda_compat.h at 1aaced583034421993c397c17c73b48accfaa433 (all but its commented-out
  tail), in every vLLM header.

ggml (MIT), ggml-org/llama.cpp:

- ggml/src/ggml-cuda/norm.cu at 0129866abecd5d7f83839ff7c404370386db7709: ``group_norm_f32``
  (block_size 32 and 1024, as group_norm_f32_cuda launches it), with common.cuh's
  ``WARP_SIZE`` and float ``warp_reduce_sum`` at 00108827d87949b538ad1821f81a6b111827fcda.
- ggml/src/ggml-cuda/getrows.cu at 009626c9f8effd13a17085e1a45c27e90d0491be:
  ``k_get_rows_float<src0_t, float>`` (src0 float, half, nv_bfloat16, int32_t), with
  convert.cuh's ``ggml_cuda_convert_val`` at the same commit.

PyTorch (BSD-3), pytorch/pytorch, aten/src/ATen/native/cuda/AdaptiveAveragePooling.cu at
01f9ef32eae5ef513002dd44902c23cbe6be3aae: ``adaptive_average_pool<scalar_t>`` (NCHW) and
``adaptive_average_pool_nhwc<int32_t, scalar_t>`` (channels last, dynamic shared memory), for
double, float, half and bfloat16 (AT_DISPATCH_FLOATING_TYPES_AND2).

Every case is checked against a float64 NumPy reference written from the kernel's semantics,
on random inputs of odd sizes, with NaN-poisoned (or sentinel-filled) outputs so that what the
kernel must not write is seen unwritten. (moeTopK found the CPU backend's CUB without
``cub::KeyValuePair`` and ``cub::ArgMax``, which NVRTC's CCCL has; they were added.)
"""

from __future__ import annotations

import numpy as np
import pytest
import real_kernels_headers as rk
import real_ports
from real_ports import Port, Ports, close, dtype_of

import kernelkit

# ``const bool* finished`` (vLLM's MoE kernels): an array kind the shared table lacks
real_ports.SHORT.setdefault("bool", "bool")

RNG = np.random.default_rng(2511)
DTYPES3 = ("float32", "float16", "bfloat16")
DTYPES4 = ("float64", "float32", "float16", "bfloat16")
IND = ("int32", "uint32", "int64")  # topk_softmax's IndType: int, uint32_t, int64_t

VLLM = "vllm-project/vllm"
GGML = "ggml-org/llama.cpp"
TORCH = "pytorch/pytorch"

# --- vLLM ------------------------------------------------------------------------------------

# csrc/cuda_compat.h at 1aaced583034421993c397c17c73b48accfaa433, whole
CUDA_COMPAT = """
#pragma once

#ifdef USE_ROCM
  #include <hip/hip_runtime.h>
#endif

#ifndef USE_ROCM
  #define WARP_SIZE 32
#else
  #define WARP_SIZE warpSize
#endif

#ifndef USE_ROCM
  #define VLLM_LDG(arg) __ldg(arg)
#else
  #define VLLM_LDG(arg) *(arg)
#endif

#ifndef USE_ROCM
  #define VLLM_SHFL_XOR_SYNC(var, lane_mask) \\
    __shfl_xor_sync(uint32_t(-1), var, lane_mask)
  #define VLLM_SHFL_XOR_SYNC_WIDTH(var, lane_mask, width) \\
    __shfl_xor_sync(uint32_t(-1), var, lane_mask, width)
#else
  #define VLLM_SHFL_XOR_SYNC(var, lane_mask) __shfl_xor(var, lane_mask)
  #define VLLM_SHFL_XOR_SYNC_WIDTH(var, lane_mask, width) \\
    __shfl_xor(var, lane_mask, width)
#endif

#ifndef USE_ROCM
  #define VLLM_SHFL_SYNC(var, src_lane) __shfl_sync(uint32_t(-1), var, src_lane)
#else
  #define VLLM_SHFL_SYNC(var, src_lane) __shfl(var, src_lane)
#endif

#ifndef USE_ROCM
  #define VLLM_SHFL_DOWN_SYNC(var, lane_delta) \\
    __shfl_down_sync(uint32_t(-1), var, lane_delta)
#else
  #define VLLM_SHFL_DOWN_SYNC(var, lane_delta) __shfl_down(var, lane_delta)
#endif

#ifndef USE_ROCM
  #define VLLM_DevFuncAttribute_SET_MaxDynamicSharedMemorySize(FUNC, VAL) \\
    cudaFuncSetAttribute(FUNC, cudaFuncAttributeMaxDynamicSharedMemorySize, VAL)
#else
  #define VLLM_DevFuncAttribute_SET_MaxDynamicSharedMemorySize(FUNC, VAL) \\
    hipFuncSetAttribute(FUNC, hipFuncAttributeMaxDynamicSharedMemorySize, VAL)
#endif
"""

# csrc/pos_encoding_kernels.cu at 0f5257e245116449bfbe78a87c22aeef632eba8f: the two device
# functions, in their namespace vllm
ROPE_HEADER = (
    "#include <cstdint>\n"
    + CUDA_COMPAT
    + """
namespace vllm {

template <typename scalar_t, typename cache_t, bool IS_NEOX>
inline __device__ void apply_token_rotary_embedding(
    scalar_t* __restrict__ arr, const cache_t* __restrict__ cos_ptr,
    const cache_t* __restrict__ sin_ptr, int rot_offset, int embed_dim,
    const bool inverse) {
  int x_index, y_index;
  float cos_f, sin_f;
  if (IS_NEOX) {
    x_index = rot_offset;
    y_index = embed_dim + rot_offset;
    cos_f = static_cast<float>(VLLM_LDG(cos_ptr + x_index));
    sin_f = static_cast<float>(VLLM_LDG(sin_ptr + x_index));
  } else {
    x_index = 2 * rot_offset;
    y_index = 2 * rot_offset + 1;
    cos_f = static_cast<float>(VLLM_LDG(cos_ptr + x_index / 2));
    sin_f = static_cast<float>(VLLM_LDG(sin_ptr + x_index / 2));
  }
  if (inverse) {
    sin_f = -sin_f;
  }
  const float x_f = static_cast<float>(arr[x_index]);
  const float y_f = static_cast<float>(arr[y_index]);
  arr[x_index] = static_cast<scalar_t>(x_f * cos_f - y_f * sin_f);
  arr[y_index] = static_cast<scalar_t>(y_f * cos_f + x_f * sin_f);
}

template <typename scalar_t, typename cache_t, bool IS_NEOX>
inline __device__ void apply_rotary_embedding(
    scalar_t* __restrict__ query,  // [batch_size, seq_len, num_heads,
                                   // head_size] or [num_tokens, num_heads,
                                   // head_size]
    scalar_t* __restrict__ key,    // nullptr or
                                   // [batch_size, seq_len, num_kv_heads,
                                   // head_size] or [num_tokens, num_kv_heads,
                                   // head_size]
    const cache_t* cache_ptr, const int head_size, const int num_heads,
    const int num_kv_heads, const int rot_dim, const int token_idx,
    const int64_t query_stride, const int64_t key_stride,
    const int64_t head_stride, const int64_t rope_dim_offset,
    const bool inverse) {
  const int embed_dim = rot_dim / 2;
  const cache_t* cos_ptr = cache_ptr;
  const cache_t* sin_ptr = cache_ptr + embed_dim;

  const int nq = num_heads * embed_dim;
  for (int i = threadIdx.x; i < nq; i += blockDim.x) {
    const int head_idx = i / embed_dim;
    const int64_t token_head =
        token_idx * query_stride + head_idx * head_stride + rope_dim_offset;
    const int rot_offset = i % embed_dim;
    apply_token_rotary_embedding<scalar_t, cache_t, IS_NEOX>(
        query + token_head, cos_ptr, sin_ptr, rot_offset, embed_dim, inverse);
  }

  if (key != nullptr) {
    const int nk = num_kv_heads * embed_dim;
    for (int i = threadIdx.x; i < nk; i += blockDim.x) {
      const int head_idx = i / embed_dim;
      const int64_t token_head =
          token_idx * key_stride + head_idx * head_stride + rope_dim_offset;
      const int rot_offset = i % embed_dim;
      apply_token_rotary_embedding<scalar_t, cache_t, IS_NEOX>(
          key + token_head, cos_ptr, sin_ptr, rot_offset, embed_dim, inverse);
    }
  }
}

}  // namespace vllm
using namespace vllm;
"""
)

ROTARY = """
  const int token_idx = blockIdx.x;
  int64_t pos = positions[token_idx];
  const cache_t* cache_ptr = cos_sin_cache + pos * rot_dim;

  apply_rotary_embedding<scalar_t, cache_t, IS_NEOX>(
      query, key, cache_ptr, head_size, num_heads, num_kv_heads, rot_dim,
      token_idx, query_stride, key_stride, head_stride, rope_dim_offset,
      inverse);
"""

# Fp8KVCacheDataType as csrc/attention/dtype_fp8.cuh declares it, and scaled_convert from
# csrc/quantization/fp8/nvidia/quant_utils.cuh at 03476e5c1184648abcfd1573b630bcd81741a555
# (ENABLE_FP8 undefined, as for "auto" caches nothing else is needed)
CACHE_HEADER = (
    "#include <cassert>\n#include <cstdint>\n"
    + CUDA_COMPAT
    + """
namespace vllm {

enum class Fp8KVCacheDataType {
  kAuto = 0,
  kFp8E4M3 = 1,
  kFp8E5M2 = 2,
};

namespace fp8 {

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
}  // namespace vllm
using namespace vllm;
"""
)

RESHAPE_AND_CACHE = """
  const int64_t token_idx = blockIdx.x;
  const int64_t slot_idx = slot_mapping[token_idx];
  if (slot_idx < 0) {
    // Padding token that should be ignored.
    return;
  }

  const int64_t block_idx = slot_idx / block_size;
  const int64_t block_offset = slot_idx % block_size;

  const int n = num_heads * head_size;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t src_key_idx = token_idx * key_stride + i;
    const int64_t src_value_idx = token_idx * value_stride + i;

    const int head_idx = i / head_size;
    const int head_offset = i % head_size;
    const int x_idx = head_offset / x;
    const int x_offset = head_offset % x;

    const int64_t tgt_key_idx =
        block_idx * num_heads * (head_size / x) * block_size * x +
        head_idx * (head_size / x) * block_size * x + x_idx * block_size * x +
        block_offset * x + x_offset;
    const int64_t tgt_value_idx =
        block_idx * num_heads * head_size * block_size +
        head_idx * head_size * block_size + head_offset * block_size +
        block_offset;
    scalar_t tgt_key = key[src_key_idx];
    scalar_t tgt_value = value[src_value_idx];
    if constexpr (kv_dt == Fp8KVCacheDataType::kAuto) {
      key_cache[tgt_key_idx] = tgt_key;
      value_cache[tgt_value_idx] = tgt_value;
    } else {
      key_cache[tgt_key_idx] =
          fp8::scaled_convert<cache_t, scalar_t, kv_dt>(tgt_key, k_scale);
      value_cache[tgt_value_idx] =
          fp8::scaled_convert<cache_t, scalar_t, kv_dt>(tgt_value, v_scale);
    }
  }
"""

RESHAPE_AND_CACHE_FLASH = """
  const int64_t token_idx = blockIdx.x;
  const int64_t slot_idx = slot_mapping[token_idx];
  // NOTE: slot_idx can be -1 if the token is padded
  if (slot_idx < 0) {
    return;
  }
  const int64_t block_idx = slot_idx / block_size;
  const int64_t block_offset = slot_idx % block_size;
  const int n = num_heads * head_size;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t src_key_idx = token_idx * key_stride + i;
    const int64_t src_value_idx = token_idx * value_stride + i;
    const int head_idx = i / head_size;
    const int head_offset = i % head_size;
    const int64_t tgt_key_value_idx = block_idx * block_stride +
                                      block_offset * num_heads * head_size +
                                      head_idx * head_size + head_offset;
    scalar_t tgt_key = key[src_key_idx];
    scalar_t tgt_value = value[src_value_idx];
    if constexpr (kv_dt == Fp8KVCacheDataType::kAuto) {
      key_cache[tgt_key_value_idx] = tgt_key;
      value_cache[tgt_key_value_idx] = tgt_value;
    } else {
      key_cache[tgt_key_value_idx] =
          fp8::scaled_convert<cache_t, scalar_t, kv_dt>(tgt_key, k_scale);
      value_cache[tgt_key_value_idx] =
          fp8::scaled_convert<cache_t, scalar_t, kv_dt>(tgt_value, v_scale);
    }
  }
"""

# csrc/moe/topk_softmax_kernels.cu at 0112cf233e0c60674c2844a09695ddeb2b901dc0: its includes
# (torch's replaced by the C headers the kernels use), op aliases, macros and AlignedArray
MOE_HEADER = (
    "#include <cassert>\n#include <cfloat>\n#include <cstdint>\n"
    + CUDA_COMPAT
    + """
#ifndef USE_ROCM
    #include <cub/util_type.cuh>
    #include <cub/cub.cuh>
    #include <cuda/std/functional>
    using AddOp = cuda::std::plus<>;
    using MaxOp = cuda::maximum<>;
#else
    #include <hipcub/util_type.hpp>
    #include <hipcub/hipcub.hpp>
    using AddOp = cub::Sum;
    using MaxOp = cub::Max;
#endif

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define MIN(a, b) ((a) < (b) ? (a) : (b))

namespace vllm {
namespace moe {

/// Aligned array type
template <
    typename T,
    /// Number of elements in the array
    int N,
    /// Alignment requirement in bytes
    int Alignment = sizeof(T) * N
>
class alignas(Alignment) AlignedArray {
    float data[N];
};

}  // namespace moe
}  // namespace vllm
using namespace vllm::moe;
"""
)

MOE_SOFTMAX = """
    using BlockReduce = cub::BlockReduce<float, TPB>;
    __shared__ typename BlockReduce::TempStorage tmpStorage;

    __shared__ float normalizing_factor;
    __shared__ float float_max;

    const int thread_row_offset = blockIdx.x * num_cols;

    float threadData(-FLT_MAX);

    // Don't touch finished rows.
    if ((finished != nullptr) && finished[blockIdx.x])
    {
        return;
    }

    for (int ii = threadIdx.x; ii < num_cols; ii += TPB)
    {
        const int idx = thread_row_offset + ii;
        threadData = max(static_cast<float>(input[idx]), threadData);
    }

    const float maxElem = BlockReduce(tmpStorage).Reduce(threadData, MaxOp());
    if (threadIdx.x == 0)
    {
        float_max = maxElem;
    }
    __syncthreads();

    threadData = 0;

    for (int ii = threadIdx.x; ii < num_cols; ii += TPB)
    {
        const int idx = thread_row_offset + ii;
        threadData += exp((static_cast<float>(input[idx]) - float_max));
    }

    const auto Z = BlockReduce(tmpStorage).Reduce(threadData, AddOp());

    if (threadIdx.x == 0)
    {
        normalizing_factor = 1.f / Z;
    }
    __syncthreads();

    for (int ii = threadIdx.x; ii < num_cols; ii += TPB)
    {
        const int idx = thread_row_offset + ii;
        const float val = exp((static_cast<float>(input[idx]) - float_max)) * normalizing_factor;
        output[idx] = val;
    }
"""

MOE_TOPK = """

    using cub_kvp = cub::KeyValuePair<int, float>;
    using BlockReduce = cub::BlockReduce<cub_kvp, TPB>;
    __shared__ typename BlockReduce::TempStorage tmpStorage;

    cub_kvp thread_kvp;
    cub::ArgMax arg_max;

    const int num_rows = gridDim.x;
    const int block_row = blockIdx.x;

    const bool row_is_active = finished ? !finished[block_row] : true;
    const int thread_read_offset = blockIdx.x * num_experts;
    for (int k_idx = 0; k_idx < k; ++k_idx)
    {
        thread_kvp.key = 0;
        thread_kvp.value = -1.f; // This is OK because inputs are probabilities

        cub_kvp inp_kvp;
        for (int expert = threadIdx.x; expert < num_experts; expert += TPB)
        {
            const int idx = thread_read_offset + expert;
            inp_kvp.key = expert;
            inp_kvp.value = inputs_after_softmax[idx];

            for (int prior_k = 0; prior_k < k_idx; ++prior_k)
            {
                const int prior_winning_expert = indices[k * block_row + prior_k];

                if (prior_winning_expert == expert)
                {
                    inp_kvp = thread_kvp;
                }
            }

            thread_kvp = arg_max(inp_kvp, thread_kvp);
        }

        const cub_kvp result_kvp = BlockReduce(tmpStorage).Reduce(thread_kvp, arg_max);
        if (threadIdx.x == 0)
        {
            // Ignore experts the node isn't responsible for with expert parallelism
            const int expert = result_kvp.key;
            const bool node_uses_expert = expert >= start_expert && expert < end_expert;
            const bool should_process_row = row_is_active && node_uses_expert;

            const int idx = k * block_row + k_idx;
            output[idx] = result_kvp.value;
            indices[idx] = should_process_row ? (expert - start_expert) : num_experts;
            assert(indices[idx] >= 0);
            source_rows[idx] = k_idx * num_rows + block_row;
        }
        __syncthreads();
    }
"""

TOPK_GATING_SOFTMAX = """
    // We begin by enforcing compile time assertions and setting up compile time constants.
    static_assert(BYTES_PER_LDG == (BYTES_PER_LDG & -BYTES_PER_LDG), "BYTES_PER_LDG must be power of 2");
    static_assert(BYTES_PER_LDG <= 16, "BYTES_PER_LDG must be leq 16");

    // Number of bytes each thread pulls in per load
    static constexpr int ELTS_PER_LDG = BYTES_PER_LDG / sizeof(float);
    static constexpr int ELTS_PER_ROW = NUM_EXPERTS;
    static constexpr int THREADS_PER_ROW = ELTS_PER_ROW / VPT;
    static constexpr int LDG_PER_THREAD = VPT / ELTS_PER_LDG;

    // Restrictions based on previous section.
    static_assert(VPT % ELTS_PER_LDG == 0, "The elements per thread must be a multiple of the elements per ldg");
    static_assert(WARP_SIZE_PARAM % THREADS_PER_ROW == 0, "The threads per row must cleanly divide the threads per warp");
    static_assert(THREADS_PER_ROW == (THREADS_PER_ROW & -THREADS_PER_ROW), "THREADS_PER_ROW must be power of 2");
    static_assert(THREADS_PER_ROW <= WARP_SIZE_PARAM, "THREADS_PER_ROW can be at most warp size");

    // We have NUM_EXPERTS elements per row. We specialize for small #experts
    static constexpr int ELTS_PER_WARP = WARP_SIZE_PARAM * VPT;
    static constexpr int ROWS_PER_WARP = ELTS_PER_WARP / ELTS_PER_ROW;
    static constexpr int ROWS_PER_CTA = WARPS_PER_CTA * ROWS_PER_WARP;

    // Restrictions for previous section.
    static_assert(ELTS_PER_WARP % ELTS_PER_ROW == 0, "The elts per row must cleanly divide the total elt per warp");

    // ===================== From this point, we finally start computing run-time variables. ========================

    // Compute CTA and warp rows. We pack multiple rows into a single warp, and a block contains WARPS_PER_CTA warps.
    // This, each block processes a chunk of rows. We start by computing the start row for each block.
    const int cta_base_row = blockIdx.x * ROWS_PER_CTA;

    // Now, using the base row per thread block, we compute the base row per warp.
    const int warp_base_row = cta_base_row + threadIdx.y * ROWS_PER_WARP;

    // The threads in a warp are split into sub-groups that will work on a row.
    // We compute row offset for each thread sub-group
    const int thread_row_in_warp = threadIdx.x / THREADS_PER_ROW;
    const int thread_row = warp_base_row + thread_row_in_warp;

    // Threads with indices out of bounds should early exit here.
    if (thread_row >= num_rows)
    {
        return;
    }
    const bool row_is_active = finished ? !finished[thread_row] : true;

    // We finally start setting up the read pointers for each thread. First, each thread jumps to the start of the
    // row it will read.
    const float* thread_row_ptr = input + thread_row * ELTS_PER_ROW;

    // Now, we compute the group each thread belong to in order to determine the first column to start loads.
    const int thread_group_idx = threadIdx.x % THREADS_PER_ROW;
    const int first_elt_read_by_thread = thread_group_idx * ELTS_PER_LDG;
    const float* thread_read_ptr = thread_row_ptr + first_elt_read_by_thread;

    // Determine the pointer type to use to read in the data depending on the BYTES_PER_LDG template param. In theory,
    // this can support all powers of 2 up to 16.
    // NOTE(woosuk): The original implementation uses CUTLASS aligned array here.
    // We defined our own aligned array and use it here to avoid the dependency on CUTLASS.
    using AccessType = AlignedArray<float, ELTS_PER_LDG>;

    // Finally, we pull in the data from global mem
    float row_chunk[VPT];
    AccessType* row_chunk_vec_ptr = reinterpret_cast<AccessType*>(&row_chunk);
    const AccessType* vec_thread_read_ptr = reinterpret_cast<const AccessType*>(thread_read_ptr);
#pragma unroll
    for (int ii = 0; ii < LDG_PER_THREAD; ++ii)
    {
        row_chunk_vec_ptr[ii] = vec_thread_read_ptr[ii * THREADS_PER_ROW];
    }

    // First, we perform a max reduce within the thread. We can do the max in fp16 safely (I think) and just
    // convert to float afterwards for the exp + sum reduction.
    float thread_max = row_chunk[0];
#pragma unroll
    for (int ii = 1; ii < VPT; ++ii)
    {
        thread_max = max(thread_max, row_chunk[ii]);
    }

// Now, we find the max within the thread group and distribute among the threads. We use a butterfly reduce.
#pragma unroll
    for (int mask = THREADS_PER_ROW / 2; mask > 0; mask /= 2)
    {
        thread_max = max(thread_max, VLLM_SHFL_XOR_SYNC_WIDTH(thread_max, mask, THREADS_PER_ROW));
    }

    // From this point, thread max in all the threads have the max within the row.
    // Now, we subtract the max from each element in the thread and take the exp. We also compute the thread local sum.
    float row_sum = 0;
#pragma unroll
    for (int ii = 0; ii < VPT; ++ii)
    {
        row_chunk[ii] = expf(row_chunk[ii] - thread_max);
        row_sum += row_chunk[ii];
    }

// Now, we perform the sum reduce within each thread group. Similar to the max reduce, we use a bufferfly pattern.
#pragma unroll
    for (int mask = THREADS_PER_ROW / 2; mask > 0; mask /= 2)
    {
        row_sum += VLLM_SHFL_XOR_SYNC_WIDTH(row_sum, mask, THREADS_PER_ROW);
    }

    // From this point, all threads have the max and the sum for their rows in the thread_max and thread_sum variables
    // respectively. Finally, we can scale the rows for the softmax. Technically, for top-k gating we don't need to
    // compute the entire softmax row. We can likely look at the maxes and only compute for the top-k values in the row.
    // However, this kernel will likely not be a bottle neck and it seems better to closer match torch and find the
    // argmax after computing the softmax.
    const float reciprocal_row_sum = 1.f / row_sum;

#pragma unroll
    for (int ii = 0; ii < VPT; ++ii)
    {
        row_chunk[ii] = row_chunk[ii] * reciprocal_row_sum;
    }

    // Now, softmax_res contains the softmax of the row chunk. Now, I want to find the topk elements in each row, along
    // with the max index.
    int start_col = first_elt_read_by_thread;
    static constexpr int COLS_PER_GROUP_LDG = ELTS_PER_LDG * THREADS_PER_ROW;

    for (int k_idx = 0; k_idx < k; ++k_idx)
    {
        // First, each thread does the local argmax
        float max_val = row_chunk[0];
        int expert = start_col;
#pragma unroll
        for (int ldg = 0, col = start_col; ldg < LDG_PER_THREAD; ++ldg, col += COLS_PER_GROUP_LDG)
        {
#pragma unroll
            for (int ii = 0; ii < ELTS_PER_LDG; ++ii)
            {
                float val = row_chunk[ldg * ELTS_PER_LDG + ii];

                // No check on the experts here since columns with the smallest index are processed first and only
                // updated if > (not >=)
                if (val > max_val)
                {
                    max_val = val;
                    expert = col + ii;
                }
            }
        }

// Now, we perform the argmax reduce. We use the butterfly pattern so threads reach consensus about the max.
// This will be useful for K > 1 so that the threads can agree on "who" had the max value. That thread can
// then blank out their max with -inf and the warp can run more iterations...
#pragma unroll
        for (int mask = THREADS_PER_ROW / 2; mask > 0; mask /= 2)
        {
            float other_max = VLLM_SHFL_XOR_SYNC_WIDTH(max_val, mask, THREADS_PER_ROW);
            int other_expert = VLLM_SHFL_XOR_SYNC_WIDTH(expert, mask, THREADS_PER_ROW);

            // We want lower indices to "win" in every thread so we break ties this way
            if (other_max > max_val || (other_max == max_val && other_expert < expert))
            {
                max_val = other_max;
                expert = other_expert;
            }
        }

        // Write the max for this k iteration to global memory.
        if (thread_group_idx == 0)
        {
            // Add a guard to ignore experts not included by this node
            const bool node_uses_expert = expert >= start_expert && expert < end_expert;
            const bool should_process_row = row_is_active && node_uses_expert;

            // The lead thread from each sub-group will write out the final results to global memory. (This will be a
            // single) thread per row of the input/output matrices.
            const int idx = k * thread_row + k_idx;
            output[idx] = max_val;
            indices[idx] = should_process_row ? (expert - start_expert) : NUM_EXPERTS;
            source_rows[idx] = k_idx * num_rows + thread_row;
        }

        // Finally, we clear the value in the thread with the current max if there is another iteration to run.
        if (k_idx + 1 < k)
        {
            const int ldg_group_for_expert = expert / COLS_PER_GROUP_LDG;
            const int thread_to_clear_in_group = (expert / ELTS_PER_LDG) % THREADS_PER_ROW;

            // Only the thread in the group which produced the max will reset the "winning" value to -inf.
            if (thread_group_idx == thread_to_clear_in_group)
            {
                const int offset_for_expert = expert % ELTS_PER_LDG;
                // Safe to set to any negative value since row_chunk values must be between 0 and 1.
                row_chunk[ldg_group_for_expert * ELTS_PER_LDG + offset_for_expert] = -10000.f;
            }
        }
    }
"""

VLLM_EDITS = (
    "only the signature removed",
    "the header ends with `using namespace vllm;` (the body sits outside the file's namespace)",
)
ROTARY_PORT = Port(
    "rotary_embedding_kernel", VLLM, "csrc/pos_encoding_kernels.cu",
    "0f5257e245116449bfbe78a87c22aeef632eba8f",
    ("positions:i64*", "cos_sin_cache:T*", "rot_dim:i32", "query_stride:i64", "key_stride:i64",
     "head_stride:i64", "num_heads:i32", "num_kv_heads:i32", "head_size:i32",
     "rope_dim_offset:i64", "inverse:bool"),
    ("query:T*", "key:T*"), ROTARY, ROPE_HEADER, ("scalar_t", "cache_t"), DTYPES3,
    (("IS_NEOX", (True, False)),), edits=VLLM_EDITS,
)  # fmt: skip
KV_AUTO = kernelkit.cxx("vllm::Fp8KVCacheDataType::kAuto")
CACHE_DTYPES = ("float32", "uint16", "bfloat16")  # DISPATCH_BY_KV_CACHE_DTYPE's "auto" types
CACHE_EDITS = (
    *VLLM_EDITS,
    "the header declares Fp8KVCacheDataType and fp8::scaled_convert (copied, ENABLE_FP8 off) "
    "in place of quant_utils.cuh's include chain",
)
RESHAPE_PORT = Port(
    "reshape_and_cache_kernel", VLLM, "csrc/cache_kernels.cu",
    "693083ae80680811c9c2a22edad2568e6635e190",
    ("key:T*", "value:T*", "slot_mapping:i64*", "key_stride:i32", "value_stride:i32",
     "num_heads:i32", "head_size:i32", "block_size:i32", "x:i32", "k_scale:f32", "v_scale:f32"),
    ("key_cache:T*", "value_cache:T*"), RESHAPE_AND_CACHE, CACHE_HEADER,
    ("scalar_t", "cache_t"), CACHE_DTYPES, (("kv_dt", (KV_AUTO,)),), edits=CACHE_EDITS,
)  # fmt: skip
RESHAPE_FLASH_PORT = Port(
    "reshape_and_cache_flash_kernel", VLLM, "csrc/cache_kernels.cu",
    "693083ae80680811c9c2a22edad2568e6635e190",
    ("key:T*", "value:T*", "slot_mapping:i64*", "block_stride:i32", "key_stride:i32",
     "value_stride:i32", "num_heads:i32", "head_size:i32", "block_size:i32", "k_scale:f32",
     "v_scale:f32"),
    ("key_cache:T*", "value_cache:T*"), RESHAPE_AND_CACHE_FLASH, CACHE_HEADER,
    ("scalar_t", "cache_t"), CACHE_DTYPES, (("kv_dt", (KV_AUTO,)),), edits=CACHE_EDITS,
)  # fmt: skip
MOE_EDITS = (
    "only the signature removed (with its __launch_bounds__(TPB))",
    "torch's includes give way to <cassert>, <cfloat>, <cstdint>; the header ends with "
    "`using namespace vllm::moe;`",
)
MOE_SOFTMAX_PORT = Port(
    "moeSoftmax", VLLM, "csrc/moe/topk_softmax_kernels.cu",
    "0112cf233e0c60674c2844a09695ddeb2b901dc0",
    ("input:f32*", "finished:bool*", "num_cols:i32"), ("output:f32*",), MOE_SOFTMAX,
    MOE_HEADER, (), ("float32",), (("TPB", (256,)),), optional=("finished",), edits=MOE_EDITS,
)  # fmt: skip
MOE_TOPK_PORT = Port(
    "moeTopK", VLLM, "csrc/moe/topk_softmax_kernels.cu",
    "0112cf233e0c60674c2844a09695ddeb2b901dc0",
    ("inputs_after_softmax:f32*", "finished:bool*", "num_experts:i32", "k:i32",
     "start_expert:i32", "end_expert:i32"),
    ("output:f32*", "indices:T*", "source_rows:i32*"), MOE_TOPK, MOE_HEADER, ("IndType",), IND,
    (("TPB", (256,)),), optional=("finished",), edits=MOE_EDITS,
)  # fmt: skip
GATING_PORT = Port(
    "topkGatingSoftmax", VLLM, "csrc/moe/topk_softmax_kernels.cu",
    "0112cf233e0c60674c2844a09695ddeb2b901dc0",
    ("input:f32*", "finished:bool*", "num_rows:i32", "k:i32", "start_expert:i32",
     "end_expert:i32"),
    ("output:f32*", "indices:T*", "source_rows:i32*"), TOPK_GATING_SOFTMAX, MOE_HEADER,
    ("IndType",), IND,
    (("VPT", (4,)), ("NUM_EXPERTS", (8,)), ("WARPS_PER_CTA", (4,)), ("BYTES_PER_LDG", (16,)),
     ("WARP_SIZE_PARAM", (32,))),
    optional=("finished",), edits=MOE_EDITS,
)  # fmt: skip

# --- ggml ------------------------------------------------------------------------------------

# ggml/src/ggml-cuda/common.cuh at 00108827d87949b538ad1821f81a6b111827fcda (what norm.cu uses)
GGML_COMMON = rk.GGML_COMMON  # common.cuh's WARP_SIZE and warp reductions (the same text)

# group_norm_f32, ggml/src/ggml-cuda/norm.cu at 0129866abecd5d7f83839ff7c404370386db7709
GROUP_NORM = """
    // blockIdx.x: num_groups idx
    // threadIdx.x: block_size idx
    const int start =     blockIdx.x*group_size + threadIdx.x;
    const int end   = min(blockIdx.x*group_size + group_size,  ne_elements);

    float tmp = 0.0f; // partial sum for thread in warp

    for (int j = start; j < end; j += block_size) {
        tmp += x[j];
    }

    tmp = warp_reduce_sum(tmp);
    if constexpr (block_size > WARP_SIZE) {
        static_assert(block_size == 1024, "unexpected block_size");
        __shared__ float s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = s_sum[lane_id];
        tmp = warp_reduce_sum(tmp);
    }

    const float mean = tmp / group_size;
    tmp = 0.0f;

    for (int j = start; j < end; j += block_size) {
        const float xi = x[j] - mean;
        dst[j] = xi;
        tmp += xi * xi;
    }

    tmp = warp_reduce_sum(tmp);
    if (block_size > WARP_SIZE) {
        __shared__ float s_sum[32];
        const int warp_id = threadIdx.x / WARP_SIZE;
        const int lane_id = threadIdx.x % WARP_SIZE;
        if (lane_id == 0) {
            s_sum[warp_id] = tmp;
        }
        __syncthreads();
        tmp = s_sum[lane_id];
        tmp = warp_reduce_sum(tmp);
    }

    const float variance = tmp / group_size;
    const float scale = rsqrtf(variance + eps);
    for (int j = start; j < end; j += block_size) {
        dst[j] *= scale;
    }
"""

# ggml/src/ggml-cuda/convert.cuh at 009626c9f8effd13a17085e1a45c27e90d0491be: the conversion
# getrows.cu uses (with vendors/cuda.h's fp16/bf16 headers)
GGML_CONVERT = """
#include <cstdint>
#include <type_traits>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template<typename src_t, typename dest_t>
 __host__ __device__ inline dest_t ggml_cuda_convert_val(src_t x) {
    if constexpr (std::is_same_v<src_t, dest_t>) {
        return x;
    } else {
        return float(x);
    }
}

template<>
__host__ __device__ inline float ggml_cuda_convert_val<nv_bfloat16, float>(nv_bfloat16 x) {
    return __bfloat162float(x);
}

template<>
__host__ __device__ inline nv_bfloat16 ggml_cuda_convert_val<float, nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}

template<>
__host__ __device__ inline half ggml_cuda_convert_val<nv_bfloat16, half>(nv_bfloat16 x) {
    return half(__bfloat162float(x));
}

template<>
__host__ __device__ inline nv_bfloat16 ggml_cuda_convert_val<half, nv_bfloat16>(half x) {
    return __float2bfloat16(float(x));
}

template<>
__host__ __device__ inline int ggml_cuda_convert_val<nv_bfloat16, int>(nv_bfloat16 x) {
    return int(__bfloat162float(x));
}

template<>
__host__ __device__ inline nv_bfloat16 ggml_cuda_convert_val<int, nv_bfloat16>(int x) {
    return __float2bfloat16(float(x));
}
"""

# k_get_rows_float, ggml/src/ggml-cuda/getrows.cu at 009626c9f8effd13a17085e1a45c27e90d0491be
GET_ROWS_FLOAT = """

    // The x and y dimensions of the grid are swapped because the maximum allowed grid size for x is higher.
    const int i00 = blockIdx.y * blockDim.x + threadIdx.x;
    const int i10 = blockIdx.x;
    const int i11 = blockIdx.z / ne12;
    const int i12 = blockIdx.z % ne12;

    if (i00 >= ne00) {
        return;
    }

    const int i01 = src1[i10*s10 + i11*s11 + i12*s12];

    dst_t * dst_row = dst + i10*s1 + i11*s2 + i12*s3;
    const src0_t * src0_row = (const src0_t *)((const char *) src0 + i01*nb01 + i11*nb02 + i12*nb03);

    dst_row[i00] = ggml_cuda_convert_val<src0_t, dst_t>(src0_row[i00]);
"""

GROUP_NORM_PORT = Port(
    "group_norm_f32", GGML, "ggml/src/ggml-cuda/norm.cu",
    "0129866abecd5d7f83839ff7c404370386db7709",
    ("x:f32*", "group_size:i32", "ne_elements:i32", "eps:f32"), ("dst:f32*",), GROUP_NORM,
    GGML_COMMON, (), ("float32",), (("block_size", (32, 1024)),),
)  # fmt: skip
GET_ROWS_PORT = Port(
    "k_get_rows_float", GGML, "ggml/src/ggml-cuda/getrows.cu",
    "009626c9f8effd13a17085e1a45c27e90d0491be",
    ("src0:T*", "src1:i32*", "ne00:i64", "ne12:i64", "s1:u64", "s2:u64", "s3:u64", "nb01:u64",
     "nb02:u64", "nb03:u64", "s10:u64", "s11:u64", "s12:u64"),
    ("dst:f32*",), GET_ROWS_FLOAT, GGML_CONVERT, ("src0_t",),
    ("float32", "float16", "bfloat16", "int32"), (("dst_t", ("float32",)),),
)  # fmt: skip

# --- PyTorch ---------------------------------------------------------------------------------

# aten/src/ATen/native/cuda/AdaptiveAveragePooling.cu at 01f9ef32eae5ef513002dd44902c23cbe6be3aae:
# its index macros; aten/src/ATen/OpMathType.h's opmath_type and c10/macros/Macros.h's
# C10_LAUNCH_BOUNDS_1 for CUDA
POOL_HEADER = """
#include <cstdint>
#include <cfloat>
#include <cmath>
#include <algorithm>

namespace at {
template <typename scalar_t>
struct OpMathType {
  using type = scalar_t;
};
template <>
struct OpMathType<__half> {
  using type = float;
};
template <>
struct OpMathType<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using opmath_type = typename OpMathType<T>::type;
}  // namespace at

#define START_IND(a,b,c) ((int64_t)((a / b) * c + ((a % b) * c) / b))
#define END_IND(a,b,c) (1 + ((int64_t)(a + 1) * c - 1) / b)

#define START_IND_INT(a,b,c) ((a * c) / b)
#define END_IND_INT(a,b,c) (((a + 1) * c + b - 1) / b)

#define CUDA_MAX_THREADS 1024 // this is safe, in reality 256 is our limit
#define BLOCK_STRIDE 2 // increasing block_stride to lower # of blocks launched
"""

ADAPTIVE_AVG_POOL = """
    using opmath_t = at::opmath_type<scalar_t>;
    // iterators on output pixels
    int oh, ow;

    // select input/output plane based on thread/block ID
    int o_plane = blockIdx.x;
    int i_plane = o_plane;

    output = output + o_plane*osizeH*osizeW;
    input = input + i_plane*istrideD;

    int ostartH = blockDim.y*blockIdx.y + threadIdx.y;
    int oendH = osizeH;
    const int ostepH = blockDim.y*gridDim.y;

    int ostartW = threadIdx.x;
    int oendW = osizeW;
    const int ostepW = blockDim.x;

    // For all output pixels...
    for(oh = ostartH; oh < oendH; oh += ostepH) {

      int istartH = START_IND(oh, osizeH, isizeH);
      int iendH   = END_IND(oh, osizeH, isizeH);
      int kH = iendH - istartH;

      for(ow = ostartW; ow < oendW; ow += ostepW) {

        int istartW = START_IND(ow, osizeW, isizeW);
        int iendW   = END_IND(ow, osizeW, isizeW);
        int kW = iendW - istartW;

        // Compute the average pooling over corresponding input pixels
        const scalar_t *ptr_input = input + istartH*istrideH + istartW*istrideW;
        scalar_t *ptr_output = output + oh*osizeW + ow;
        opmath_t sum = static_cast<opmath_t>(0);
        int ih, iw;
        for(ih = 0; ih < kH; ++ih) {
          for(iw = 0; iw < kW; ++iw) {
            scalar_t val = ptr_input[iw*istrideW];
            sum += val;
          }
          ptr_input += istrideH; // next input line
        }
        // Update output
        *ptr_output = sum / kH / kW;
      }
    }
"""

ADAPTIVE_AVG_POOL_NHWC = """
    using opmath_t = at::opmath_type<scalar_t>;
    extern __shared__ int smem[];
    opmath_t *out_cached = reinterpret_cast<opmath_t*>(smem);

    // flattening cta for pre-computation & smem initialization;
    int thread_id = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int block_size = blockDim.x * blockDim.y * blockDim.z;

    // use shared memory to store temporary output value. This is simply to
    // reduce register usage.
    for (index_t i = thread_id; i < kernel_size_C*blockDim.x*blockDim.y*blockDim.z; i+= block_size) {
      out_cached[i] = opmath_t(0.0);
    }

    __syncthreads();

    // each CTA handles a portion of a single slice on batch dimension;
    int batch_id = blockIdx.x % sizeB;
    int channel_id = blockIdx.x / sizeB;
    int channel_offset = threadIdx.x + channel_id * blockDim.x;

    // each CTA handles a single slice on batch dimension;
    // We use gridDim.x to handle striding on C as well.
    output = output + batch_id * osizeH * osizeW * sizeC;
    input = input + batch_id * istrideB;

    // split out_cached and exclusively it assigned to each thread;
    out_cached = &out_cached[(threadIdx.z * blockDim.y + threadIdx.y) * kernel_size_C * blockDim.x];

    // iterate on output H & W.
    // Each CTA handles a consecutive H & W section (TILE); Do NOT stride CTA on
    // tile so there's a better chance to hit L1 cache.
    index_t oH = (osizeH + gridDim.z-1) / gridDim.z;
    index_t oW = (osizeW + gridDim.y-1) / gridDim.y;
    index_t ostartH = threadIdx.z + blockIdx.z*oH;
    index_t oendH = ::min(ostartH+oH, osizeH);
    index_t ostartW = threadIdx.y + blockIdx.y*oW;
    index_t oendW = ::min(ostartW+oW, osizeW);

    // Stride for threads, each warp can reuse L1 as they go. So theoretically
    // better chance to survive cache eviction.
    for (int oh = ostartH; oh < oendH; oh+=blockDim.z) {
      int istartH = START_IND_INT(oh, osizeH, isizeH);
      int iendH = END_IND_INT(oh, osizeH, isizeH);
      for (int ow = ostartW; ow < oendW; ow+=blockDim.y) {
        int istartW = START_IND_INT(ow, osizeW, isizeW);
        int iendW = END_IND_INT(ow, osizeW, isizeW);
        scalar_t factor = scalar_t(1.0) / ((iendH-istartH) * (iendW-istartW));

        // loop on input: hierarchy h->w->c, use shared memory here hopefully
        // would not stall global memory read;
        for (index_t ih = istartH; ih < iendH; ih++) {
          for (index_t iw = istartW; iw < iendW; iw++) {
            int cached_index = threadIdx.x;
            const scalar_t *ptr_input = input + ih*istrideH + iw*istrideW;
            for (index_t c = channel_offset;
                 c < sizeC;
                 c += blockDim.x*kernel_stride_C) {
              out_cached[cached_index] += ptr_input[c*istrideC];
              cached_index += blockDim.x;
            }
          }
        }
        scalar_t *ptr_output = output + (oh * osizeW + ow) * sizeC;

        int cached_index = threadIdx.x;
        // write accumulated output to global memory;
        for (index_t c = channel_offset;
             c < sizeC;
             c += blockDim.x*kernel_stride_C) {
          // This causes numerical issueptr when unit test with NCHW kernel;
          // switch to could verify the correctness;
          // output[c] = out_cached[c] / (iendH-istartH) / (iendW-istartW);
          ptr_output[c] = out_cached[cached_index] * factor;
          out_cached[cached_index] = opmath_t(0.0);
          cached_index += blockDim.x;
        }
        // no need to __syncthreads() since out_cached is not shared.
      }
    }
"""

POOL_EDITS = (
    "only the signature removed (with adaptive_average_pool_nhwc's C10_LAUNCH_BOUNDS_1)",
    "the header's at::OpMathType is specialized for CUDA's __half and __nv_bfloat16 in place of "
    "at::Half and at::BFloat16 (kernelkit's 16-bit types)",
)
POOL_PORT = Port(
    "adaptive_average_pool", TORCH, "aten/src/ATen/native/cuda/AdaptiveAveragePooling.cu",
    "01f9ef32eae5ef513002dd44902c23cbe6be3aae",
    ("input:T*", "isizeH:i32", "isizeW:i32", "osizeH:i32", "osizeW:i32", "istrideD:i64",
     "istrideH:i64", "istrideW:i64"),
    ("output:T*",), ADAPTIVE_AVG_POOL, POOL_HEADER, ("scalar_t",), DTYPES4, edits=POOL_EDITS,
)  # fmt: skip
POOL_NHWC_PORT = Port(
    "adaptive_average_pool_nhwc", TORCH, "aten/src/ATen/native/cuda/AdaptiveAveragePooling.cu",
    "01f9ef32eae5ef513002dd44902c23cbe6be3aae",
    ("input:T*", "sizeB:i32", "sizeC:i32", "isizeH:i32", "isizeW:i32", "osizeH:i32",
     "osizeW:i32", "kernel_stride_C:i32", "kernel_size_C:i32", "istrideB:i32", "istrideC:i32",
     "istrideH:i32", "istrideW:i32"),
    ("output:T*",), ADAPTIVE_AVG_POOL_NHWC, POOL_HEADER, ("scalar_t",), DTYPES4,
    (("index_t", ("int32",)),), edits=POOL_EDITS,
)  # fmt: skip

PORTS = (
    ROTARY_PORT, RESHAPE_PORT, RESHAPE_FLASH_PORT, MOE_SOFTMAX_PORT, MOE_TOPK_PORT, GATING_PORT,
    GROUP_NORM_PORT, GET_ROWS_PORT, POOL_PORT, POOL_NHWC_PORT,
)  # fmt: skip


@pytest.fixture
def ports(backend):
    return Ports(backend)


def threads(blocks, block):
    """kernelkit's geometry (grid in threads) of a CUDA launch <<<blocks, block>>>."""
    blocks = tuple(blocks) + (1,) * (3 - len(blocks))
    block = tuple(block) + (1,) * (3 - len(block))
    return {"grid": tuple(g * b for g, b in zip(blocks, block, strict=True)), "threadgroup": block}


# --- vLLM rotary embedding -------------------------------------------------------------------


def _rotary_reference(arr, pos, cache, rot_dim, stride, nheads, head_stride, offset, neox, inv):
    out = arr.copy()
    embed = rot_dim // 2
    for t, p in enumerate(pos):
        cos, sin = cache[p, :embed], cache[p, embed:] * (-1 if inv else 1)
        for h in range(nheads):
            base = t * stride + h * head_stride + offset
            j = np.arange(embed)
            xi, yi = (base + j, base + embed + j) if neox else (base + 2 * j, base + 2 * j + 1)
            x, y = arr[xi], arr[yi]
            out[xi], out[yi] = x * cos - y * sin, y * cos + x * sin
    return out


@pytest.mark.parametrize("dtype", DTYPES3)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize(
    ("heads", "kv_heads", "head_size", "rot_dim", "offset", "pad"),
    [(3, 1, 40, 24, 8, 5), (4, 2, 64, 64, 0, 0)],
)
def test_rotary_embedding(ports, dtype, neox, heads, kv_heads, head_size, rot_dim,
                          offset, pad):  # fmt: skip
    """In place on query and key; ``pad`` extra elements per token (a fused qkv's stride) and
    the head's channels outside [offset, offset + rot_dim) must come back unchanged."""
    tokens, max_pos = 7, 19
    qs, ks = heads * head_size + pad, kv_heads * head_size + pad
    pos = RNG.integers(0, max_pos, tokens)
    theta = np.outer(np.arange(max_pos), 1.0 / 10000 ** (np.arange(0, rot_dim, 2) / rot_dim))
    cache = ports.round(np.concatenate([np.cos(theta), np.sin(theta)], 1), dtype)
    q = ports.round(RNG.standard_normal(tokens * qs), dtype)
    k = ports.round(RNG.standard_normal(tokens * ks), dtype)
    for inverse in (False, True):
        args = [pos, cache, rot_dim, qs, ks, head_size, heads, kv_heads, head_size, offset,
                inverse]  # fmt: skip
        gq, gk = ports.run(
            ROTARY_PORT, dtype, args, [q, k], template=[("IS_NEOX", neox)],
            **threads((tokens,), (min(heads * rot_dim // 2, 512),)),
        )  # fmt: skip
        rest = (head_size, offset, neox, inverse)
        wq = _rotary_reference(q, pos, cache, rot_dim, qs, heads, *rest)
        wk = _rotary_reference(k, pos, cache, rot_dim, ks, kv_heads, *rest)
        close(gq, ports.round(wq, dtype), dtype)
        close(gk, ports.round(wk, dtype), dtype)


# --- vLLM KV cache ---------------------------------------------------------------------------


def _cache_values(ports, dtype, shape):
    """Random values of the cache's type: for uint16 (vLLM's half), half bits as integers."""
    x = RNG.standard_normal(shape)
    if dtype == "uint16":
        return x.astype(np.float16).view(np.uint16).astype(np.float64)
    return ports.round(x, dtype)


def _unwritten(dtype):
    """A value no copy writes: NaN, or for uint16 a half NaN's bits."""
    return 0xFFFF if dtype == "uint16" else np.nan


@pytest.mark.parametrize("dtype", CACHE_DTYPES)
def test_reshape_and_cache(ports, dtype):
    tokens, heads, head_size, block_size, num_blocks = 9, 3, 24, 5, 4
    x = 16 // (4 if dtype == "float32" else 2)  # key_cache.size(4): 16 bytes
    n = heads * head_size
    kv = _cache_values(ports, dtype, (tokens, 2, n))  # key and value interleaved per token
    flat = kv.reshape(-1)
    slots = RNG.permutation(num_blocks * block_size)[:tokens]
    slots[[2, 6]] = -1  # padding tokens
    key_cache = np.full((num_blocks, heads, head_size // x, block_size, x), _unwritten(dtype))
    value_cache = np.full((num_blocks, heads, head_size, block_size), _unwritten(dtype))
    args = [flat, flat[n:], slots, 2 * n, 2 * n, heads, head_size, block_size, x, 1.0, 1.0]
    gk, gv = ports.run(
        RESHAPE_PORT, dtype, args, [key_cache, value_cache],
        template=[("kv_dt", KV_AUTO)], **threads((tokens,), (min(n, 512),)),
    )  # fmt: skip
    want_k, want_v = key_cache.copy(), value_cache.copy()
    for t, s in enumerate(slots):
        if s < 0:
            continue
        b, o = divmod(s, block_size)
        k = kv[t, 0].reshape(heads, head_size // x, x)
        want_k[b, :, :, o, :] = k
        want_v[b, :, :, o] = kv[t, 1].reshape(heads, head_size)
    np.testing.assert_array_equal(gk, want_k)
    np.testing.assert_array_equal(gv, want_v)


@pytest.mark.parametrize("dtype", CACHE_DTYPES)
def test_reshape_and_cache_flash(ports, dtype):
    tokens, heads, head_size, block_size, num_blocks = 11, 2, 36, 3, 5
    n = heads * head_size
    kv = _cache_values(ports, dtype, (tokens, 2, n))
    flat = kv.reshape(-1)
    slots = RNG.permutation(num_blocks * block_size)[:tokens]
    slots[[0, 7]] = -1
    shape = (num_blocks, block_size, heads, head_size)
    caches = [np.full(shape, _unwritten(dtype)) for _ in range(2)]
    args = [flat, flat[n:], slots, block_size * n, 2 * n, 2 * n, heads, head_size, block_size,
            1.0, 1.0]  # fmt: skip
    gk, gv = ports.run(
        RESHAPE_FLASH_PORT, dtype, args, caches, template=[("kv_dt", KV_AUTO)],
        **threads((tokens,), (min(n, 512),)),
    )  # fmt: skip
    want = [c.copy() for c in caches]
    for t, s in enumerate(slots):
        if s >= 0:
            b, o = divmod(s, block_size)
            for w, part in zip(want, (0, 1), strict=True):
                w[b, o] = kv[t, part].reshape(heads, head_size)
    np.testing.assert_array_equal(gk, want[0])
    np.testing.assert_array_equal(gv, want[1])


# --- vLLM MoE top-k softmax ------------------------------------------------------------------


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _separated_logits(rows, experts):
    """Logits whose softmax values differ by far more than float32 rounding (no near-ties)."""
    return np.stack([RNG.permutation(experts) * 0.05 for _ in range(rows)]) - 1.0


@pytest.mark.parametrize("finished", [False, True])
def test_moe_softmax(ports, finished):
    rows, cols = 6, 300  # more columns than TPB threads
    x = 3 * RNG.standard_normal((rows, cols))
    done = np.array([0, 1, 0, 0, 1, 0], bool) if finished else None
    (y,) = ports.run(
        MOE_SOFTMAX_PORT, "float32", [x, done, cols], [(rows, cols)], template=[("TPB", 256)],
        **threads((rows,), (256,)),
    )  # fmt: skip
    want = _softmax(ports.round(x, "float32"))
    if finished:
        want[done] = np.nan  # finished rows are not touched
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=1e-7)


def _moe_topk_reference(p, k, start, end, done):
    """moeTopK literally: experts whose index equals an earlier stored index are skipped."""
    rows, experts = p.shape
    values, idx = np.zeros((rows, k)), np.zeros((rows, k), np.int64)
    for r in range(rows):
        active = done is None or not done[r]
        for j in range(k):
            skip = set(idx[r, :j])
            cand = [e for e in range(experts) if e not in skip]
            best = max(cand, key=lambda e: (p[r, e], -e)) if cand else 0
            values[r, j] = p[r, best] if cand else -1.0
            idx[r, j] = best - start if (active and start <= best < end) else experts
    src = np.arange(k)[None, :] * rows + np.arange(rows)[:, None]
    return values, idx, src


@pytest.mark.parametrize("dtype", IND)
@pytest.mark.parametrize(("k", "start", "end", "finished"), [(3, 0, 77, False), (2, 20, 60, True)])
def test_moe_topk(ports, dtype, k, start, end, finished):
    rows, experts = 5, 77  # not a power of 2: the launcher's moeSoftmax + moeTopK path
    p = ports.round(_softmax(_separated_logits(rows, experts)), "float32")
    done = np.array([0, 0, 1, 0, 0], bool) if finished else None
    args = [p, done, experts, k, start, end]
    out, ind, src = ports.run(
        MOE_TOPK_PORT, dtype, args, [(rows, k)] * 3, template=[("TPB", 256)],
        **threads((rows,), (256,)),
    )  # fmt: skip
    wv, wi, ws = _moe_topk_reference(p, k, start, end, done)
    np.testing.assert_array_equal(out, wv)
    np.testing.assert_array_equal(ind, wi)
    np.testing.assert_array_equal(src, ws)


def gating_constants(experts, max_bytes=None):
    """topkGatingSoftmaxLauncherHelper's template values (detail::TopkConstants)."""
    if max_bytes is None:
        max_bytes = 16 if experts & (experts - 1) == 0 else 8
    ldg = min(max_bytes, 4 * experts)
    elts = ldg // 4
    vpt = max(1, experts // (elts * 32)) * elts
    rows_per_warp = 32 // (experts // vpt)
    return {"VPT": vpt, "NUM_EXPERTS": experts, "WARPS_PER_CTA": 4, "BYTES_PER_LDG": ldg,
            "WARP_SIZE_PARAM": 32}, rows_per_warp  # fmt: skip


def _gating_reference(x, k, start, end, done):
    rows, experts = x.shape
    p = _softmax(x)
    values, idx = np.zeros((rows, k)), np.zeros((rows, k), np.int64)
    for r in range(rows):
        order = sorted(range(experts), key=lambda e: (-p[r, e], e))[:k]
        active = done is None or not done[r]
        values[r] = p[r, order]
        idx[r] = [e - start if (active and start <= e < end) else experts for e in order]
    src = np.arange(k)[None, :] * rows + np.arange(rows)[:, None]
    return values, idx, src


@pytest.mark.parametrize("dtype", IND)
@pytest.mark.parametrize(
    ("experts", "k", "start", "end", "finished"),
    [(8, 2, 0, 8, False), (64, 4, 16, 48, True), (192, 3, 0, 192, False), (512, 5, 0, 512, True)],
)
def test_topk_gating_softmax(ports, dtype, experts, k, start, end, finished):
    rows = 37
    consts, rows_per_warp = gating_constants(experts)
    x = ports.round(_separated_logits(rows, experts), "float32")
    done = (RNG.random(rows) < 0.3) if finished else None
    warps = -(-rows // rows_per_warp)
    args = [x, done, rows, k, start, end]
    out, ind, src = ports.run(
        GATING_PORT, dtype, args, [(rows, k)] * 3, template=list(consts.items()),
        **threads((-(-warps // 4),), (32, 4)),
    )  # fmt: skip
    wv, wi, ws = _gating_reference(x, k, start, end, done)
    np.testing.assert_allclose(out, wv, rtol=2e-6, atol=1e-7)
    np.testing.assert_array_equal(ind, wi)
    np.testing.assert_array_equal(src, ws)


# --- the launchers' other template values, under NVRTC ----------------------------------------

# tests/unit/test_real_ports_nvrtc.py compiles each port with the first of its ``fixed``
# values; these are the others the launchers instantiate.
VARIANTS = [
    pytest.param(ROTARY_PORT, [("IS_NEOX", False)], id="rotary-gptj"),
    pytest.param(GROUP_NORM_PORT, [("block_size", 1024)], id="group_norm-1024"),
    *(pytest.param(GATING_PORT, list(gating_constants(e)[0].items()), id=f"gating-{e}")
      for e in (1, 64, 192, 256, 512, 576)),
]  # fmt: skip


@pytest.mark.parametrize(("port", "fixed"), VARIANTS)
def test_other_template_values_compile_for_sm90(cuda, port, fixed):
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.render import render_request

    for dtype in port.dtypes:
        k = port.kernel(dtype)
        inputs = [
            ("scalar", DTYPES["bool"]) if kind == "bool"
            else ("array" if kind.endswith("*") else "scalar", DTYPES[dtype_of(kind, dtype)])
            for kind in (p.split(":")[1] for p in port.inputs)
        ]  # fmt: skip
        outputs = [DTYPES[dtype_of(p.split(":")[1], dtype)] for p in port.outputs]
        template = [(t, dtype) for t in port.template] + fixed
        _, req = render_request(
            k.spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
        )
        assert cuda.compile(req).kind == "cubin"


# --- ggml ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("group_size", "ne_elements"), [(300, 1111), (2500, 9000)])
def test_group_norm(ports, group_size, ne_elements):
    """group_norm_f32_cuda's launch: a block of 32 threads under 1024 elements a group, else
    1024; the last group is cut at ne_elements but still divided by group_size, as in ggml."""
    groups = -(-ne_elements // group_size)
    block = 32 if group_size < 1024 else 1024
    x = ports.round(2 + 3 * RNG.standard_normal(ne_elements), "float32")
    (y,) = ports.run(
        GROUP_NORM_PORT, "float32", [x, group_size, ne_elements, 1e-5], [x.shape],
        template=[("block_size", block)], **threads((groups,), (block,)),
    )  # fmt: skip
    want = np.empty_like(x)
    for g in range(groups):
        part = x[g * group_size : (g + 1) * group_size]
        d = part - part.sum() / group_size
        want[g * group_size : (g + 1) * group_size] = d / np.sqrt((d * d).sum() / group_size + 1e-5)
    close(y, want, "float32", scale=8)


@pytest.mark.parametrize("dtype", GET_ROWS_PORT.dtypes)
def test_get_rows_float(ports, dtype):
    """get_rows_cuda_float's launch on a [ne12][ne11][ne01][ne00] source (ne02 = ne11,
    ne03 = ne12, as ggml broadcasts) and [ne12][ne11][ne10] row ids."""
    ne00, ne01, ne10, ne11, ne12 = 301, 9, 4, 3, 2  # ne00 past one 256-thread block
    size = {"float32": 4, "int32": 4}.get(dtype, 2)
    if dtype == "int32":
        src = RNG.integers(-1000, 1000, (ne12, ne11, ne01, ne00)).astype(np.float64)
    else:
        src = ports.round(RNG.standard_normal((ne12, ne11, ne01, ne00)), dtype)
    ids = RNG.integers(0, ne01, (ne12, ne11, ne10)).astype(np.int32)
    s1, s2, s3 = ne00, ne10 * ne00, ne11 * ne10 * ne00
    nb01, nb02, nb03 = ne00 * size, ne01 * ne00 * size, ne11 * ne01 * ne00 * size
    args = [src, ids, ne00, ne12, s1, s2, s3, nb01, nb02, nb03, 1, ne10, ne10 * ne11]
    (dst,) = ports.run(
        GET_ROWS_PORT, dtype, args, [(ne12, ne11, ne10, ne00)], template=[("dst_t", "float32")],
        **threads((ne10, -(-ne00 // 256), ne11 * ne12), (256,)),
    )  # fmt: skip
    want = src[np.arange(ne12)[:, None, None], np.arange(ne11)[None, :, None], ids]
    np.testing.assert_array_equal(dst, want)


# --- PyTorch adaptive average pooling --------------------------------------------------------


def _adaptive_avg(x, oh, ow):
    """[..., H, W] -> [..., oh, ow]: windows [floor(o*I/O), ceil((o+1)*I/O))."""
    h, w = x.shape[-2:]
    out = np.empty((*x.shape[:-2], oh, ow))
    for i in range(oh):
        h0, h1 = i * h // oh, -(-(i + 1) * h // oh)
        for j in range(ow):
            w0, w1 = j * w // ow, -(-(j + 1) * w // ow)
            out[..., i, j] = x[..., h0:h1, w0:w1].mean((-2, -1))
    return out


POOL_SCALE = {"float64": 1.0, "float32": 4.0, "float16": 4.0, "bfloat16": 4.0}


@pytest.mark.parametrize("dtype", DTYPES4)
@pytest.mark.parametrize(
    ("b", "c", "ih", "iw", "oh", "ow"), [(2, 3, 13, 17, 5, 7), (1, 2, 9, 40, 9, 33)]
)
def test_adaptive_average_pool(ports, dtype, b, c, ih, iw, oh, ow):
    """adaptive_avg_pool2d_out_cuda_template's contiguous path: blocks (B*C, max(16/C, 1)),
    threads (32, 8)."""
    x = ports.round(RNG.standard_normal((b, c, ih, iw)), dtype)
    args = [x, ih, iw, oh, ow, ih * iw, iw, 1]
    (y,) = ports.run(
        POOL_PORT, dtype, args, [(b, c, oh, ow)], **threads((b * c, max(16 // c, 1)), (32, 8))
    )
    close(y, ports.round(_adaptive_avg(x, oh, ow), dtype), dtype, scale=POOL_SCALE[dtype])


def _last_pow2(n):
    return 1 << (max(n, 1).bit_length() - 1)


@pytest.mark.parametrize("dtype", DTYPES4)
@pytest.mark.parametrize(
    ("b", "c", "ih", "iw", "oh", "ow"), [(2, 5, 11, 9, 4, 3), (1, 70, 7, 6, 3, 5)]
)
def test_adaptive_average_pool_nhwc(ports, dtype, b, c, ih, iw, oh, ow):
    """The channels-last path's launch configuration and dynamic shared memory, as the launcher
    computes them for an H200 (1024 threads, warp 32)."""
    x = ports.round(RNG.standard_normal((b, ih, iw, c)), dtype)  # NHWC in memory
    bx = min(_last_pow2(c), 32)
    by = min(_last_pow2(ow), 1024 // bx)
    bz = min(64, _last_pow2(oh), 1024 // bx // by)
    bx = min(_last_pow2(c), 1024 // by // bz)
    stride_c = -(-c // (bx * 4))
    size_c = -(-c // (bx * stride_c))
    grid = (b * stride_c, -(-ow // (by * 2)), -(-oh // (bz * 2)))
    opmath = 8 if dtype == "float64" else 4
    args = [x, b, c, ih, iw, oh, ow, stride_c, size_c, ih * iw * c, 1, iw * c, c]
    (y,) = ports.run(
        POOL_NHWC_PORT, dtype, args, [(b, oh, ow, c)], template=[("index_t", "int32")],
        shared_memory=size_c * bx * by * bz * opmath, **threads(grid, (bx, by, bz)),
    )  # fmt: skip
    want = _adaptive_avg(x.transpose(0, 3, 1, 2), oh, ow).transpose(0, 2, 3, 1)
    # the kernel multiplies by a factor rounded to scalar_t: a few ulps more in 16 bits
    close(y, ports.round(want, dtype), dtype, scale=2 * POOL_SCALE[dtype])
