"""Differentiable torch ops from kernels, shared by the CPU-backend tests (tests/backend) and
the GPU tests (tests/gpu): a fused scaled softplus and a row softmax, each with its backward
kernel, paired through ``kernelkit.custom_vjp``. The kernels are templated on the element type
(float32, float64)."""

from __future__ import annotations

import itertools

import kernelkit

_ids = itertools.count()

EACH = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) "
# y = w * softplus(beta * x) / beta, with a threshold as torch's softplus has
SOFTPLUS = (
    EACH
    + """{
    T z = beta * x[i];
    y[i] = w[i] * (z > 20 ? x[i] : log1p(exp(z)) / beta);
}"""
)
SOFTPLUS_BWD = (
    EACH
    + """{
    T z = beta * x[i];
    T sig = 1 / (1 + exp(-z));
    grad_x[i] = grad_y[i] * w[i] * (z > 20 ? 1 : sig);
    grad_w[i] = grad_y[i] * (z > 20 ? x[i] : log1p(exp(z)) / beta);
}"""
)
# one block per row; each thread strides over the row; a shared-memory tree reduction
ROW_REDUCE = """
template <class T>
__device__ T block_reduce(T v, T* red, bool take_max) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            T o = red[threadIdx.x + s];
            red[threadIdx.x] = take_max ? (o > red[threadIdx.x] ? o : red[threadIdx.x])
                                        : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    T r = red[0];
    __syncthreads();
    return r;
}
"""
SOFTMAX = """
__shared__ T red[128];
const long n = x_shape[1];
const T* xr = x + blockIdx.x * n;
T* yr = y + blockIdx.x * n;
T m = -INFINITY;
for (long j = threadIdx.x; j < n; j += blockDim.x) m = xr[j] > m ? xr[j] : m;
m = block_reduce(m, red, true);
T s = 0;
for (long j = threadIdx.x; j < n; j += blockDim.x) s += exp(xr[j] - m);
s = block_reduce(s, red, false);
for (long j = threadIdx.x; j < n; j += blockDim.x) yr[j] = exp(xr[j] - m) / s;
"""
SOFTMAX_BWD = """
__shared__ T red[128];
const long n = y_shape[1];
const T* yr = y + blockIdx.x * n;
const T* gr = grad_y + blockIdx.x * n;
T* dx = grad_x + blockIdx.x * n;
T dot = 0;
for (long j = threadIdx.x; j < n; j += blockDim.x) dot += yr[j] * gr[j];
dot = block_reduce(dot, red, false);
for (long j = threadIdx.x; j < n; j += blockDim.x) dx[j] = yr[j] * (gr[j] - dot);
"""


def op_name(stem: str) -> str:
    return f"kk_examples::{stem}_{next(_ids)}"


def dtype_template(*args):
    return [("T", args[0].dtype)]


def softplus_op() -> kernelkit.TorchOp:
    same = dict(output_shapes="x", output_dtypes="x", grid="x", template=dtype_template)
    fwd = kernelkit.kernel("scaled_softplus", ["x", "w", "beta"], ["y"], SOFTPLUS)
    bwd = kernelkit.kernel(
        "scaled_softplus_bwd", ["x", "w", "beta", "grad_y"], ["grad_x", "grad_w"], SOFTPLUS_BWD
    )
    scalar = {"beta": float}
    return kernelkit.custom_vjp(
        fwd.as_torch_op(op_name("softplus"), scalars=scalar, **same),
        bwd.as_torch_op(op_name("softplus_bwd"), scalars=scalar, **same),
    )


def softmax_op() -> kernelkit.TorchOp:
    rows = dict(threadgroup=(128,), template=dtype_template)
    fwd = kernelkit.kernel("row_softmax", ["x"], ["y"], SOFTMAX, header=ROW_REDUCE)
    bwd = kernelkit.kernel(
        "row_softmax_bwd", ["y", "grad_y"], ["grad_x"], SOFTMAX_BWD, header=ROW_REDUCE
    )
    return kernelkit.custom_vjp(
        fwd.as_torch_op(
            op_name("softmax"),
            output_shapes="x",
            output_dtypes="x",
            grid=lambda x: (x.shape[0] * 128,),
            **rows,
        ),
        bwd.as_torch_op(
            op_name("softmax_bwd"),
            output_shapes="y",
            output_dtypes="y",
            grid=lambda y, g: (y.shape[0] * 128,),
            **rows,
        ),
    )
