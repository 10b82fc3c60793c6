"""PyTorch ATen's NLL-loss kernels, ported: pytorch/pytorch, aten/src/ATen/native/cuda/Loss.cu at
00e3254d33da268c08133d662510079a77804b29 (BSD-3). Each body is the kernel as shipped, only the
signature removed; ``scalar_t`` (float, double, half, bfloat16 as
AT_DISPATCH_FLOATING_TYPES_AND2 instantiates it), ``accscalar_t`` (at::acc_type: float for the
16-bit types) and ``index_t`` (int64_t, the Long target) are ``template=`` types. ``weights``
is an optional input (the launcher passes nullptr without a weight).

The header holds what the bodies use from elsewhere: Loss.cu's ``NLL_LOSS_THREADS``, and
c10/macros/Macros.h's Linux ``C10_UNLIKELY`` and ``CUDA_KERNEL_ASSERT`` (which calls
``__assert_fail``, declared there too), written as c10 writes them.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_ports import Port, Ports, close

COMMIT = "00e3254d33da268c08133d662510079a77804b29"
RNG = np.random.default_rng(19)
DTYPES4 = ("float32", "float64", "float16", "bfloat16")

HEADER = """
#include <cassert>
#include <cstdint>
#include <limits>

// c10/macros/Macros.h
#define C10_UNLIKELY(expr) (__builtin_expect(static_cast<bool>(expr), 0))
#if defined(NDEBUG)
extern "C" {
#if defined(__CUDA_ARCH__) || defined(__HIP_ARCH__) || defined(__HIP__)
__host__ __device__
#endif // __CUDA_ARCH__
    void
    __assert_fail(
        const char* assertion,
        const char* file,
        unsigned int line,
        const char* function) noexcept __attribute__((__noreturn__));
}
#endif // NDEBUG
#define CUDA_KERNEL_ASSERT(cond)                                         \\
  if (C10_UNLIKELY(!(cond))) {                                           \\
    __assert_fail(                                                       \\
        #cond, __FILE__, static_cast<unsigned int>(__LINE__), __func__); \\
  }

// aten/src/ATen/native/cuda/Loss.cu
constexpr int NLL_LOSS_THREADS = 32;
"""

FORWARD_1D = """
  CUDA_KERNEL_ASSERT(threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0);

  int64_t t = static_cast<int64_t>(*target);
  if (t != ignore_index) {
    CUDA_KERNEL_ASSERT(t >= 0 && t < n_classes);
    const auto cur_weight = weights != nullptr ? weights[t] : scalar_t{1};
    *total_weight = cur_weight;

    if (size_average) {
      // If we try to normalize a zero then we return a NaN
      if (cur_weight == 0) {
        *output = std::numeric_limits<scalar_t>::quiet_NaN();
      } else {
        *output = -input[t];
      }
    } else {
      *output = -cur_weight * input[t];
    }
  } else {
    // If the only element was omited, we get 0. See the discussion in
    // https://github.com/pytorch/pytorch/pull/64572#issuecomment-926504162
    *output = scalar_t{0};
    *total_weight = scalar_t{0};
  }
"""

FORWARD_2D = """
  // NOLINTNEXTLINE(cppcoreguidelines-init-variables)
  __shared__ accscalar_t sh_inputs[NLL_LOSS_THREADS],
      acc_weight[NLL_LOSS_THREADS];

  sh_inputs[threadIdx.x] = static_cast<accscalar_t>(0);
  acc_weight[threadIdx.x] = static_cast<accscalar_t>(0);
  for (int i = threadIdx.x; i < nframe; i += NLL_LOSS_THREADS) {
    int64_t t = target[i];
    if (t != ignore_index) {
      CUDA_KERNEL_ASSERT(t >= 0 && t < n_classes);
      scalar_t cur_weight =
          weights != nullptr ? weights[t] : static_cast<scalar_t>(1);
      sh_inputs[threadIdx.x] -= input[i * ndim + t] * cur_weight;
      acc_weight[threadIdx.x] += cur_weight;
    }
  }

  __syncthreads();

  if (threadIdx.x == 0) {
    accscalar_t output_acc = 0;
    accscalar_t total_weight_acc = 0;
    for (int i = 0; i < NLL_LOSS_THREADS; ++i) {
      output_acc += sh_inputs[i];
      total_weight_acc += acc_weight[i];
    }
    *total_weight = static_cast<scalar_t>(total_weight_acc);
    if (size_average) {
      *output = static_cast<scalar_t>(output_acc / total_weight_acc);
    } else {
      *output = static_cast<scalar_t>(output_acc);
    }
  }
"""

BACKWARD_1D = """
  const int64_t t = *target;
  if (t != ignore_index) {
    CUDA_KERNEL_ASSERT(t >= 0 && t < n_classes);
    const auto grad = -(size_average ? *grad_output / *total_weight : *grad_output);
    grad_input[t] = weights != nullptr ? weights[t] * grad : grad;
  }
"""

BACKWARD_2D = """
  const auto grad = -(size_average ? *grad_output / *total_weight
                                   : *grad_output);

  for (int i = threadIdx.x; i < nframe; i += NLL_LOSS_THREADS) {
    const int64_t t = target[i];
    if (t != ignore_index) {
      CUDA_KERNEL_ASSERT(t >= 0 && t < n_classes);
      // NOTE(crcrpar): this index could overflow in int64_t as `t` itself can be close to the max.
      const uint64_t index = static_cast<uint64_t>(i) * ndim + t;
      CUDA_KERNEL_ASSERT(index >= 0);
      grad_input[index] = weights != nullptr ? weights[t] * grad : grad;
    }
  }
"""


def port(name, inputs, outputs, body, template):
    return Port(
        name, "pytorch/pytorch", "aten/src/ATen/native/cuda/Loss.cu", COMMIT, inputs, outputs,
        body, HEADER, template, DTYPES4, fixed=(("index_t", ("int64",)),), optional=("weights",),
    )  # fmt: skip


CLS = ("size_average:bool", "n_classes:i64", "ignore_index:i64")
FORWARD_1D_PORT = port(
    "nll_loss_forward_reduce_cuda_kernel_1d",
    ("input:T*", "target:i64*", "weights:T*", *CLS), ("output:T*", "total_weight:T*"),
    FORWARD_1D, ("scalar_t",),
)  # fmt: skip
FORWARD_2D_PORT = port(
    "nll_loss_forward_reduce_cuda_kernel_2d",
    ("input:T*", "target:i64*", "weights:T*", "size_average:bool", "nframe:i64", "ndim:i64",
     "n_classes:i64", "ignore_index:i64"),
    ("output:T*", "total_weight:T*"), FORWARD_2D, ("scalar_t",),
)  # fmt: skip
BACKWARD_1D_PORT = port(
    "nll_loss_backward_reduce_cuda_kernel_1d",
    ("grad_output:T*", "weights:T*", "target:i64*", "total_weight:T*", *CLS), ("grad_input:T*",),
    BACKWARD_1D, ("scalar_t",),
)  # fmt: skip
BACKWARD_2D_PORT = port(
    "nll_loss_backward_reduce_cuda_kernel_2d",
    ("grad_output:T*", "target:i64*", "weights:T*", "total_weight:T*", "size_average:bool",
     "nframe:i32", "ndim:i32", "n_classes:i64", "ignore_index:i64"),
    ("grad_input:T*",), BACKWARD_2D, ("scalar_t",),
)  # fmt: skip
PORTS = (FORWARD_1D_PORT, FORWARD_2D_PORT, BACKWARD_1D_PORT, BACKWARD_2D_PORT)
ACC = {"float64": "float64"}  # at::acc_type<scalar_t, true>: float for everything else


def template_for(port, dtype):
    acc = [("accscalar_t", ACC.get(dtype, "float32"))] if port is FORWARD_2D_PORT else []
    return [*acc, ("index_t", "int64")]


@pytest.fixture
def ports(backend):
    return Ports(backend)


ONE = {"grid": (1, 1, 1), "threadgroup": (1, 1, 1)}
NLL = {"grid": (32, 1, 1), "threadgroup": (32, 1, 1)}  # <<<1, NLL_LOSS_THREADS>>>
IGNORE = -100


@pytest.mark.parametrize("dtype", DTYPES4)
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("mean", [True, False])
def test_nll_loss_2d_forward_and_backward(ports, dtype, weighted, mean):
    nframe, ncls = 77, 13
    x = ports.round(RNG.standard_normal((nframe, ncls)), dtype)
    target = RNG.integers(0, ncls, nframe)
    target[::7] = IGNORE
    w = ports.round(RNG.random(ncls) + 0.5, dtype) if weighted else None
    keep = target != IGNORE
    wt = (w if weighted else np.ones(ncls))[target[keep]]
    total = wt.sum()
    loss = -(x[keep, target[keep]] * wt).sum() / (total if mean else 1)
    args = [x, target, w, mean, nframe, ncls, ncls, IGNORE]
    out, tw = ports.run(
        FORWARD_2D_PORT, dtype, args, [(1,), (1,)], template=template_for(FORWARD_2D_PORT, dtype),
        **NLL,
    )  # fmt: skip
    close(out, [loss], dtype, scale=16)
    close(tw, [total], dtype, scale=16)
    g = np.array([1.5])
    args = [g, target, w, tw, mean, nframe, ncls, ncls, IGNORE]
    (gi,) = ports.run(
        BACKWARD_2D_PORT, dtype, args, [np.zeros((nframe, ncls))], template=template_for(
            BACKWARD_2D_PORT, dtype), **NLL,
    )  # fmt: skip
    want = np.zeros((nframe, ncls))
    grad = ports.round(-(1.5 / tw[0] if mean else 1.5), dtype)
    want[np.nonzero(keep)[0], target[keep]] = (w[target[keep]] if weighted else 1) * grad
    close(gi, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES4)
@pytest.mark.parametrize(("t", "weight_t"), [(4, 0.75), (4, 0.0), (IGNORE, 0.5)])
def test_nll_loss_1d_forward_and_backward(ports, dtype, t, weight_t):
    ncls = 9
    x = ports.round(RNG.standard_normal(ncls), dtype)
    w = np.full(ncls, 0.5)
    w[4] = weight_t
    w = ports.round(w, dtype)
    args = [x, np.array([t]), w, True, ncls, IGNORE]
    out, tw = ports.run(
        FORWARD_1D_PORT, dtype, args, [(1,), (1,)], template=template_for(FORWARD_1D_PORT, dtype),
        **ONE,
    )  # fmt: skip
    if t == IGNORE:
        np.testing.assert_array_equal([out[0], tw[0]], [0, 0])
    elif weight_t == 0:  # "If we try to normalize a zero then we return a NaN"
        assert np.isnan(out[0]) and tw[0] == 0
    else:
        np.testing.assert_array_equal([out[0], tw[0]], [-x[t], w[t]])
    args = [np.array([2.0]), w, np.array([t]), np.array([0.75]), False, ncls, IGNORE]
    (gi,) = ports.run(
        BACKWARD_1D_PORT, dtype, args, [np.zeros(ncls)],
        template=template_for(BACKWARD_1D_PORT, dtype), **ONE,
    )  # fmt: skip
    want = np.zeros(ncls)
    if t != IGNORE:
        want[t] = ports.round(-2.0 * w[t], dtype)
    np.testing.assert_array_equal(gi, want)
