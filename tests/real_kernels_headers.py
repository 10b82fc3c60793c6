"""Real CUDA kernels that include standard headers or CUB, shared by the CPU backend's run
(tests/backend/test_real_kernels_headers.py) and the NVRTC compile for sm_90
(tests/unit/test_real_kernels_headers_nvrtc.py).

Each entry is the kernel's body as its project ships it, with only the signature removed (its
parameters become kernelkit inputs and outputs of the same names); `header` is the file's own
includes and helpers the body needs. Any other edit is listed in the entry's `edits`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RealKernel:
    name: str
    repo: str
    path: str
    commit: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    header: str
    body: str
    template: tuple[str, ...] = ()  # template names set per case (dtype names)
    edits: tuple[str, ...] = field(default=("only the signature removed",))


VLLM_LAYERNORM = "0112cf233e0c60674c2844a09695ddeb2b901dc0"
VLLM_MOE_ALIGN = "00e6fb6d7193804fd96d84c850fd6505574e8e0d"

RMS_NORM = RealKernel(
    name="vllm_rms_norm",
    repo="vllm-project/vllm",
    path="csrc/layernorm_kernels.cu",
    commit=VLLM_LAYERNORM,
    inputs=("input", "input_stride", "weight", "epsilon", "num_tokens", "hidden_size"),
    outputs=("out",),
    template=("scalar_t",),
    # the file's CUDA (#ifndef USE_ROCM) includes
    header="""
#include <cub/cub.cuh>
#include <cuda/std/functional>
using AddOp = cuda::std::plus<>;
""",
    body="""
  __shared__ float s_variance;
  float variance = 0.0f;

  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    const float x = (float)input[blockIdx.x * input_stride + idx];
    variance += x * x;
  }

  using BlockReduce = cub::BlockReduce<float, 1024>;
  __shared__ typename BlockReduce::TempStorage reduceStore;
  variance = BlockReduce(reduceStore).Reduce(variance, AddOp{}, blockDim.x);

  if (threadIdx.x == 0) {
    s_variance = rsqrtf(variance / hidden_size + epsilon);
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < hidden_size; idx += blockDim.x) {
    float x = (float)input[blockIdx.x * input_stride + idx];
    out[blockIdx.x * hidden_size + idx] =
        ((scalar_t)(x * s_variance)) * weight[idx];
  }
""",
)

BATCHED_MOE_ALIGN = RealKernel(
    name="vllm_batched_moe_align_block_size",
    repo="vllm-project/vllm",
    path="csrc/moe/moe_align_sum_kernels.cu",
    commit=VLLM_MOE_ALIGN,
    inputs=("num_batches", "max_tokens_per_batch", "block_size", "batch_num_tokens"),
    outputs=("sorted_ids", "block_ids", "num_tokens_post_pad"),
    header="""
#include <cub/cub.cuh>
#define CEILDIV(x, y) (((x) + (y) - 1) / (y))
""",
    body="""
  // TODO(varun): This is a naive implementation. Could be optimized.

  size_t const batch_id = threadIdx.x;
  size_t const stride = blockDim.x * gridDim.x;
  int32_t const sorted_ids_size =
      num_batches * max(block_size, max_tokens_per_batch);
  int32_t const block_ids_size = sorted_ids_size / block_size;
  int32_t const SENTINEL =
      num_batches * max_tokens_per_batch;  // To denote invalid entries.
  // Intialize sorted_ids
  for (size_t i = threadIdx.x; i < sorted_ids_size; i += stride) {
    sorted_ids[i] = SENTINEL;
  }
  // Intialize expert_ids with -1
  for (size_t i = threadIdx.x; i < block_ids_size; i += stride) {
    block_ids[i] = -1;
  }

  int32_t b_num_tokens = 0;
  if (batch_id < num_batches) {
    b_num_tokens = batch_num_tokens[batch_id];
  }
  int32_t const ceil_b_num_tokens =
      CEILDIV(b_num_tokens, block_size) * block_size;

  // Compute prefix sum over token counts per expert
  using BlockScan = cub::BlockScan<int32_t, 1024>;
  __shared__ typename BlockScan::TempStorage temp_storage;
  int cumsum_val;
  BlockScan(temp_storage).ExclusiveSum(ceil_b_num_tokens, cumsum_val);
  __syncthreads();

  bool const is_last_batch = batch_id == (num_batches - 1);
  if (is_last_batch) {
    *num_tokens_post_pad = cumsum_val + ceil_b_num_tokens;
  }

  if (batch_id < num_batches) {
    int32_t const batch_offset = batch_id * max_tokens_per_batch;
    for (size_t i = 0; i < b_num_tokens; ++i) {
      sorted_ids[cumsum_val + i] = batch_offset + i;
    }

    int32_t const block_start = cumsum_val / block_size;
    int32_t const num_blocks = ceil_b_num_tokens / block_size;
    for (size_t i = 0; i < num_blocks; ++i) {
      block_ids[block_start + i] = batch_id;
    }
  }
""",
)

MOE_ALIGN = RealKernel(
    name="vllm_moe_align_block_size",
    repo="vllm-project/vllm",
    path="csrc/moe/moe_align_sum_kernels.cu",
    commit=VLLM_MOE_ALIGN,
    inputs=(
        "topk_ids",
        "num_experts",
        "padded_num_experts",
        "experts_per_warp",
        "block_size",
        "numel",
        "max_num_tokens_padded",
    ),
    outputs=("sorted_token_ids", "expert_ids", "total_tokens_post_pad", "cumsum"),
    template=("scalar_t",),
    header="""
#include <cub/cub.cuh>
#define CEILDIV(x, y) (((x) + (y) - 1) / (y))
""",
    edits=("only the signature removed (outputs follow inputs in kernelkit's order)",),
    body="""
  extern __shared__ int32_t shared_counts[];

  // Initialize sorted_token_ids with numel
  for (size_t it = threadIdx.x; it < max_num_tokens_padded; it += blockDim.x) {
    sorted_token_ids[it] = numel;
  }

  const int warp_id = threadIdx.x / WARP_SIZE;
  const int my_expert_start = warp_id * experts_per_warp;

  for (int i = 0; i < experts_per_warp; ++i) {
    if (my_expert_start + i < padded_num_experts) {
      shared_counts[warp_id * experts_per_warp + i] = 0;
    }
  }

  __syncthreads();

  const size_t tid = threadIdx.x;
  const size_t stride = blockDim.x;

  for (size_t i = tid; i < numel; i += stride) {
    int expert_id = topk_ids[i];
    if (expert_id >= num_experts) {
      continue;
    }
    int warp_idx = expert_id / experts_per_warp;
    int expert_offset = expert_id % experts_per_warp;
    atomicAdd(&shared_counts[warp_idx * experts_per_warp + expert_offset], 1);
  }

  __syncthreads();

  // Compute prefix sum over token counts per expert
  using BlockScan = cub::BlockScan<int32_t, 1024>;
  __shared__ typename BlockScan::TempStorage temp_storage;

  int expert_count = 0;
  int expert_id = threadIdx.x;
  if (expert_id < num_experts) {
    int warp_idx = expert_id / experts_per_warp;
    int expert_offset = expert_id % experts_per_warp;
    expert_count = shared_counts[warp_idx * experts_per_warp + expert_offset];
    expert_count = CEILDIV(expert_count, block_size) * block_size;
  }

  int cumsum_val;
  BlockScan(temp_storage).ExclusiveSum(expert_count, cumsum_val);
  if (expert_id <= num_experts) {
    cumsum[expert_id] = cumsum_val;
  }

  if (expert_id == num_experts) {
    *total_tokens_post_pad = cumsum_val;
  }

  __syncthreads();

  if (threadIdx.x < num_experts) {
    for (int i = cumsum[threadIdx.x]; i < cumsum[threadIdx.x + 1];
         i += block_size) {
      expert_ids[i / block_size] = threadIdx.x;
    }
  }

  // Fill remaining expert_ids with 0
  const size_t fill_start_idx = cumsum[num_experts] / block_size + threadIdx.x;
  const size_t expert_ids_size = CEILDIV(max_num_tokens_padded, block_size);
  for (size_t i = fill_start_idx; i < expert_ids_size; i += blockDim.x) {
    expert_ids[i] = 0;
  }
""",
)
