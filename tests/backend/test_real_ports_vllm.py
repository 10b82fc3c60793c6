"""vLLM's activation kernels, ported: vllm-project/vllm, csrc/activation_kernels.cu at
00ccbd42dc1f40412cc711c5737cc4be0e7a8145 (Apache-2.0). Each body is the kernel as shipped, only
the signature removed; ``scalar_t`` is a ``template=`` type (float, half, bfloat16, as
VLLM_DISPATCH_FLOATING_TYPES instantiates them), ``ACT_FN`` a function template value through
``kernelkit.cxx`` (``vllm::silu_kernel<__half>``), ``act_first`` a bool.

The header is the file's device helpers unchanged, in their ``namespace vllm``, with
cuda_compat.h's CUDA ``VLLM_LDG``. One edit: the kernels sit in ``namespace vllm`` and call
``_act_and_mul_kernel`` unqualified, while a kernelkit body sits outside any namespace, so the
header ends with ``using namespace vllm;``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import real_kernels_headers as rk
from real_ports import Port, Ports, close

import kernelkit
from kernelkit._dtypes import DTYPES

COMMIT = rk.VLLM_ACT
RNG = np.random.default_rng(17)
DTYPES3 = ("float32", "float16", "bfloat16")

HEADER = rk.VLLM_ACT_HEADER  # the file's device helpers, shared with the #include ports

ACT_AND_MUL = """
  const int64_t token_idx = blockIdx.x;
  _act_and_mul_kernel<scalar_t, ACT_FN, act_first>(out, input, d, token_idx);
"""

ACT_AND_MUL_WITH_PARAM = """
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = VLLM_LDG(&input[token_idx * 2 * d + idx]);
    const scalar_t y = VLLM_LDG(&input[token_idx * 2 * d + d + idx]);
    out[token_idx * d + idx] = ACT_FN(x, param) * y;
  }
"""

ACTIVATION = """
  const int64_t token_idx = blockIdx.x;
  for (int64_t idx = threadIdx.x; idx < d; idx += blockDim.x) {
    const scalar_t x = VLLM_LDG(&input[token_idx * d + idx]);
    out[token_idx * d + idx] = ACT_FN(x);
  }
"""

BATCHED_ACT_AND_MUL = """
  ;
  const int64_t batch_idx = blockIdx.x;
  const int64_t num_tokens = valid_tokens_array[batch_idx];
  if (num_tokens == 0) {
    return;
  }

  const int64_t token_idx = blockIdx.y;
  if (token_idx >= num_tokens) {
    return;
  }

  const int64_t max_num_tokens = gridDim.y;
  scalar_t* __restrict__ batch_out = &out[batch_idx * max_num_tokens * d];
  const scalar_t* __restrict__ batch_input =
      &input[batch_idx * max_num_tokens * d * 2];
  _act_and_mul_kernel<scalar_t, ACT_FN, act_first>(batch_out, batch_input, d,
                                                   token_idx);
"""


def port(name, inputs, outputs, body, fixed):
    return Port(
        name, "vllm-project/vllm", "csrc/activation_kernels.cu", COMMIT, inputs, outputs, body,
        HEADER, ("scalar_t",), DTYPES3, fixed,
    )  # fmt: skip


def fn(name, dtype):
    """``vllm::<name><scalar_t>`` as a template value (the C++ type of the case's dtype)."""
    return kernelkit.cxx(f"vllm::{name}<{DTYPES[dtype].ctype}>")


ACT_AND_MUL_PORT = port(
    "act_and_mul_kernel", ("input:T*", "d:i32"), ("out:T*",), ACT_AND_MUL,
    (("ACT_FN", ("silu_kernel",)), ("act_first", (True,))),
)  # fmt: skip
WITH_PARAM_PORT = port(
    "act_and_mul_kernel_with_param", ("input:T*", "d:i32", "param:f32"), ("out:T*",),
    ACT_AND_MUL_WITH_PARAM, (("ACT_FN", ("fatrelu_kernel",)),),
)  # fmt: skip
ACTIVATION_PORT = port(
    "activation_kernel", ("input:T*", "d:i32"), ("out:T*",), ACTIVATION,
    (("ACT_FN", ("gelu_new_kernel",)),),
)  # fmt: skip
BATCHED_PORT = port(
    "batched_act_and_mul_kernel", ("input:T*", "valid_tokens_array:i32*", "d:i32"), ("out:T*",),
    BATCHED_ACT_AND_MUL, (("ACT_FN", ("silu_kernel",)), ("act_first", (True,))),
)  # fmt: skip
PORTS = (ACT_AND_MUL_PORT, WITH_PARAM_PORT, ACTIVATION_PORT, BATCHED_PORT)


def template_for(port, dtype):
    """The launcher's template values of ``port`` (its first of each) for ``dtype``."""
    return [(n, fn(v[0], dtype) if n == "ACT_FN" else v[0]) for n, v in port.fixed]


@pytest.fixture
def ports(backend):
    return Ports(backend)


def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


GATES = {"silu_kernel": _silu, "gelu_kernel": _gelu, "gelu_tanh_kernel": _gelu_tanh}


def launch(tokens, d):
    """LAUNCH_ACTIVATION_GATE_KERNEL's geometry: a block of min(d, 1024) threads per token."""
    block = min(d, 1024)
    return {"grid": (tokens * block, 1, 1), "threadgroup": (block, 1, 1)}


@pytest.mark.parametrize("dtype", DTYPES3)
@pytest.mark.parametrize(
    ("act", "act_first", "d"),
    [("silu_kernel", True, 37), ("silu_kernel", False, 1100), ("gelu_kernel", True, 300),
     ("gelu_tanh_kernel", True, 129)],
)  # fmt: skip
def test_act_and_mul(ports, dtype, act, act_first, d):
    tokens = 3
    x = ports.round(2 * RNG.standard_normal((tokens, 2 * d)), dtype)
    (y,) = ports.run(
        ACT_AND_MUL_PORT, dtype, [x, d], [(tokens, d)],
        template=[("ACT_FN", fn(act, dtype)), ("act_first", act_first)], **launch(tokens, d),
    )  # fmt: skip
    a, b = x[:, :d], x[:, d:]
    g = GATES[act]
    # ACT_FN's result is rounded to scalar_t before the product, as in the kernel
    want = ports.round(g(a), dtype) * b if act_first else a * ports.round(g(b), dtype)
    close(y, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES3)
def test_fatrelu_and_mul(ports, dtype):
    tokens, d, threshold = 4, 77, 0.25
    x = ports.round(RNG.standard_normal((tokens, 2 * d)), dtype)
    (y,) = ports.run(
        WITH_PARAM_PORT, dtype, [x, d, threshold], [(tokens, d)],
        template=template_for(WITH_PARAM_PORT, dtype), **launch(tokens, d),
    )  # fmt: skip
    a, b = x[:, :d], x[:, d:]
    close(y, np.where(a > threshold, a, 0) * b, dtype)


@pytest.mark.parametrize("dtype", DTYPES3)
@pytest.mark.parametrize("act", ["gelu_new_kernel", "gelu_fast_kernel", "gelu_quick_kernel"])
def test_activation(ports, dtype, act):
    tokens, d = 3, 203
    x = ports.round(2 * RNG.standard_normal((tokens, d)), dtype)
    (y,) = ports.run(
        ACTIVATION_PORT, dtype, [x, d], [x.shape], template=[("ACT_FN", fn(act, dtype))],
        **launch(tokens, d),
    )  # fmt: skip
    want = x / (1 + np.exp(-1.702 * x)) if act == "gelu_quick_kernel" else _gelu_tanh(x)
    # gelu_new and gelu_fast round x**3 and tanh to scalar_t on the way: a few ulps in 16 bits
    close(y, want, dtype, scale=4.0 if dtype == "float32" else 8.0)


@pytest.mark.parametrize("dtype", DTYPES3)
def test_batched_silu_and_mul(ports, dtype):
    batches, max_tokens, d = 3, 5, 45
    x = ports.round(RNG.standard_normal((batches, max_tokens, 2 * d)), dtype)
    valid = np.array([5, 0, 2], np.int32)
    block = min(d, 1024)
    (y,) = ports.run(
        BATCHED_PORT, dtype, [x, valid, d], [(batches, max_tokens, d)],
        template=template_for(BATCHED_PORT, dtype),
        grid=(batches * block, max_tokens, 1), threadgroup=(block, 1, 1),
    )  # fmt: skip
    want = ports.round(_silu(x[..., :d]), dtype) * x[..., d:]
    for b, n in enumerate(valid):
        close(y[b, :n], want[b, :n], dtype)
        assert np.isnan(y[b, n:]).all()  # rows past the valid tokens are not written
