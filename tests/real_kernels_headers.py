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


# --- ggml-cuda ----------------------------------------------------------------------------------
GGML = "ggml-org/llama.cpp"
# common.cuh's names the bodies use (WARP_SIZE, <cfloat>, warp_reduce_sum/max): restated here.
GGML_COMMON = """
#include <cfloat>
#include <cstdint>
#define WARP_SIZE 32

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
COMMON_EDIT = "common.cuh's WARP_SIZE, <cfloat> and warp_reduce_sum/max restated in the header"

ARGMAX = RealKernel(
    name="ggml_argmax_f32",
    repo=GGML,
    path="ggml/src/ggml-cuda/argmax.cu",
    commit="02838c7abfab171d96f642e217f59349ed58c100",
    inputs=("x", "ncols"),
    outputs=("dst",),
    header="#include <algorithm>\n#include <cstdint>\n" + GGML_COMMON,
    edits=("only the signature removed", COMMON_EDIT),
    body="""
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
""",
)

CE_COMMIT = "34a50172faa24b5139ce1e754d2c26795ddca25f"
CE_HEADER = GGML_COMMON + "\n#include <cmath>\n#include <cstdint>\n"
CROSS_ENTROPY = RealKernel(
    name="ggml_cross_entropy_loss_f32",
    repo=GGML,
    path="ggml/src/ggml-cuda/cross-entropy-loss.cu",
    commit=CE_COMMIT,
    inputs=("logits", "labels", "nclasses", "k"),
    outputs=("dst",),
    template=("use_shared",),
    header=CE_HEADER,
    edits=("only the signature removed", COMMON_EDIT),
    body="""
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
""",
)

CROSS_ENTROPY_BACK = RealKernel(
    name="ggml_cross_entropy_loss_back_f32",
    repo=GGML,
    path="ggml/src/ggml-cuda/cross-entropy-loss.cu",
    commit=CE_COMMIT,
    inputs=("grad", "logits", "labels", "nclasses"),
    outputs=("dst",),
    template=("use_shared",),
    header=CE_HEADER,
    edits=("only the signature removed", COMMON_EDIT),
    body="""
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
""",
)

# --- vLLM activations -----------------------------------------------------------------------------
VLLM_ACT = "00ccbd42dc1f40412cc711c5737cc4be0e7a8145"
# The file's device functions (namespace vllm) and cuda_compat.h's VLLM_LDG, unchanged.
VLLM_ACT_HEADER = """
#include <cmath>
#define VLLM_LDG(arg) __ldg(arg)

namespace vllm {

template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&),
          bool act_first>
__device__ __forceinline__ scalar_t compute(const scalar_t& x,
                                            const scalar_t& y) {
  return act_first ? ACT_FN(x) * y : x * ACT_FN(y);
}

template <typename scalar_t, scalar_t (*ACT_FN)(const scalar_t&),
          bool act_first>
__device__ void _act_and_mul_kernel(
    scalar_t* __restrict__ out,          // [..., d]
    const scalar_t* __restrict__ input,  // [..., 2, d]
    const int d, const int64_t token_idx) {
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = VLLM_LDG(&input[token_idx * 2 * d + idx]);
    const scalar_t y = VLLM_LDG(&input[token_idx * 2 * d + d + idx]);
    out[token_idx * d + idx] = compute<scalar_t, ACT_FN, act_first>(x, y);
  }
}

template <typename T>
__device__ __forceinline__ T silu_kernel(const T& x) {
  // x * sigmoid(x)
  return (T)(((float)x) / (1.0f + expf((float)-x)));
}

template <typename T>
__device__ __forceinline__ T gelu_kernel(const T& x) {
  const float f = (float)x;
  constexpr float ALPHA = M_SQRT1_2;
  return (T)(f * 0.5f * (1.0f + ::erf(f * ALPHA)));
}

template <typename T>
__device__ __forceinline__ T gelu_tanh_kernel(const T& x) {
  const float f = (float)x;
  constexpr float BETA = M_SQRT2 * M_2_SQRTPI * 0.5f;
  constexpr float KAPPA = 0.044715;
  float x_cube = f * f * f;
  float inner = BETA * (f + KAPPA * x_cube);
  return (T)(0.5f * f * (1.0f + ::tanhf(inner)));
}

template <typename T>
__device__ __forceinline__ T fatrelu_kernel(const T& x, const float threshold) {
  const float f = (float)x;
  return (T)(f > threshold ? f : 0.0f);
}

template <typename T>
__device__ __forceinline__ T gelu_new_kernel(const T& x) {
  const float x3 = (float)(x * x * x);
  const T t = (T)tanhf((T)(0.79788456f * (float)(x + (T)(0.044715f * x3))));
  return ((T)0.5) * x * (((T)1.0) + t);
}

template <typename T>
__device__ __forceinline__ T gelu_fast_kernel(const T& x) {
  const float f = (float)x;
  const T t =
      (T)tanhf(((T)(f * 0.79788456f)) * (((T)1.0) + (T)(0.044715f * f) * x));
  return ((T)0.5) * x * (((T)1.0) + t);
}

template <typename T>
__device__ __forceinline__ T gelu_quick_kernel(const T& x) {
  // x * sigmoid(1.702 * x)
  return (T)(((float)x) / (1.0f + expf(-1.702f * (float)x)));
}

}  // namespace vllm
using namespace vllm;
"""
ACT_EDITS = (
    "only the signature removed",
    "the header ends with `using namespace vllm;` (the body sits outside namespace vllm)",
    "the template argument ACT_FN is `#define ACT_FN vllm::<act>_kernel<scalar_t>` in the header "
    "(kernelkit templates take types and numbers)",
)
ACT_AND_MUL_BODY = """
  const int64_t token_idx = blockIdx.x;
  _act_and_mul_kernel<scalar_t, ACT_FN, act_first>(out, input, d, token_idx);
"""
ACTIVATION_BODY = """
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = VLLM_LDG(&input[token_idx * d + idx]);
    out[token_idx * d + idx] = ACT_FN(x);
  }
"""
WITH_PARAM_BODY = """
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = VLLM_LDG(&input[token_idx * 2 * d + idx]);
    const scalar_t y = VLLM_LDG(&input[token_idx * 2 * d + d + idx]);
    out[token_idx * d + idx] = ACT_FN(x, param) * y;
  }
"""


def _vllm_act(act: str, body: str, inputs: tuple[str, ...], template: tuple[str, ...]):
    return RealKernel(
        name=f"vllm_{act}",
        repo="vllm-project/vllm",
        path="csrc/activation_kernels.cu",
        commit=VLLM_ACT,
        inputs=inputs,
        outputs=("out",),
        template=template,
        header=VLLM_ACT_HEADER + f"#define ACT_FN vllm::{act}_kernel<scalar_t>\n",
        edits=ACT_EDITS,
        body=body,
    )


GATED = {a: _vllm_act(a, ACT_AND_MUL_BODY, ("input", "d"), ("scalar_t", "act_first"))
         for a in ("silu", "gelu", "gelu_tanh")}  # fmt: skip
ELEMENTWISE = {a: _vllm_act(a, ACTIVATION_BODY, ("input", "d"), ("scalar_t",))
               for a in ("gelu_new", "gelu_fast", "gelu_quick")}  # fmt: skip
FATRELU = _vllm_act("fatrelu", WITH_PARAM_BODY, ("input", "d", "param"), ("scalar_t",))

ALL = [RMS_NORM, BATCHED_MOE_ALIGN, MOE_ALIGN, ARGMAX, CROSS_ENTROPY, CROSS_ENTROPY_BACK,
       *GATED.values(), *ELEMENTWISE.values(), FATRELU]  # fmt: skip
