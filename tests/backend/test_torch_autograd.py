"""Gradients from backward kernels (``kernelkit.custom_vjp``) on the CPU backend: gradcheck in
float64, the same gradients under ``torch.compile``, pairing by name and its errors."""

from __future__ import annotations

import itertools

import pytest
from conftest import CPU_AVAILABLE

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

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


def _name(stem: str) -> str:
    return f"kk_grad::{stem}_{next(_ids)}"


def _dtype_of(*args):
    return [("T", args[0].dtype)]


def softplus_op() -> kernelkit.TorchOp:
    same = dict(output_shapes="x", output_dtypes="x", grid="x", template=_dtype_of)
    fwd = kernelkit.kernel("scaled_softplus", ["x", "w", "beta"], ["y"], SOFTPLUS)
    bwd = kernelkit.kernel(
        "scaled_softplus_bwd", ["x", "w", "beta", "grad_y"], ["grad_x", "grad_w"], SOFTPLUS_BWD
    )
    scalar = {"beta": float}
    return kernelkit.custom_vjp(
        fwd.as_torch_op(_name("softplus"), scalars=scalar, **same),
        bwd.as_torch_op(_name("softplus_bwd"), scalars=scalar, **same),
    )


def softmax_op() -> kernelkit.TorchOp:
    rows = dict(threadgroup=(128,), template=_dtype_of)
    fwd = kernelkit.kernel("row_softmax", ["x"], ["y"], SOFTMAX, header=ROW_REDUCE)
    bwd = kernelkit.kernel(
        "row_softmax_bwd", ["y", "grad_y"], ["grad_x"], SOFTMAX_BWD, header=ROW_REDUCE
    )
    return kernelkit.custom_vjp(
        fwd.as_torch_op(
            _name("softmax"),
            output_shapes="x",
            output_dtypes="x",
            grid=lambda x: (x.shape[0] * 128,),
            **rows,
        ),
        bwd.as_torch_op(
            _name("softmax_bwd"),
            output_shapes="y",
            output_dtypes="y",
            grid=lambda y, g: (y.shape[0] * 128,),
            **rows,
        ),
    )


def test_fused_softplus_gradcheck_float64():
    op = softplus_op()
    assert op.differentiable
    x = torch.randn(200, dtype=torch.float64, requires_grad=True)
    w = torch.randn(200, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: op(x, w, 1.5), (x, w))
    ref = w * torch.nn.functional.softplus(x, beta=1.5)
    torch.testing.assert_close(op(x, w, 1.5), ref)


def test_row_softmax_with_its_backward_kernel_gradcheck_float64():
    op = softmax_op()
    x = torch.randn(6, 300, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(op(x), torch.softmax(x, -1))
    assert torch.autograd.gradcheck(op, (x,))


def test_only_wanted_gradients_are_computed_and_only_read_values_are_saved():
    op = softplus_op()
    x = torch.randn(50, requires_grad=True)
    w = torch.randn(50)  # no gradient wanted for w
    op(x, w, 1.0).sum().backward()
    torch.testing.assert_close(x.grad, w * torch.sigmoid(x))
    assert w.grad is None


def test_gradients_under_torch_compile_match_eager():
    sp, sm = softplus_op(), softmax_op()

    def model(x, w):
        return (sm(sp(x, w, 2.0).reshape(4, 64)) * torch.arange(64.0)).sum()

    x = torch.randn(256, requires_grad=True)
    w = torch.randn(256, requires_grad=True)
    expected = torch.autograd.grad(model(x, w), (x, w))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got = torch.autograd.grad(compiled(x, w), (x, w))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_a_backward_function_written_with_torch_ops():
    k = kernelkit.kernel("cube", ["x"], ["y"], EACH + "y[i] = x[i] * x[i] * x[i];")
    cube = k.as_torch_op(_name("cube"), output_shapes="x", output_dtypes="x", grid="x",
                         template=_dtype_of)  # fmt: skip
    kernelkit.custom_vjp(cube, lambda x, grad_y: {"grad_x": 3 * x * x * grad_y})
    x = torch.randn(40, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(cube, (x,))


def test_pairing_errors_name_the_offending_name():
    same = dict(output_shapes="x", output_dtypes="x", grid="x")
    fwd = kernelkit.kernel("pair_f", ["x", "n"], ["y"], EACH + "y[i] = x[i] * n;")
    f = fwd.as_torch_op(_name("f"), scalars={"n": int}, **same)
    reads_z = kernelkit.kernel("pair_b1", ["x", "z"], ["grad_x"], "")
    with pytest.raises(kernelkit.ArgumentError, match="reads 'z'"):
        kernelkit.custom_vjp(f, reads_z.as_torch_op(_name("b"), **same))
    grad_of_scalar = kernelkit.kernel("pair_b2", ["x", "grad_y"], ["grad_n"], "")
    with pytest.raises(kernelkit.ArgumentError, match="writes 'grad_n'"):
        kernelkit.custom_vjp(f, grad_of_scalar.as_torch_op(_name("b"), **same))
    good = kernelkit.kernel("pair_b3", ["x", "n", "grad_y"], ["grad_x"], "")
    b1 = good.as_torch_op(_name("b"), scalars={"n": int}, **same)
    b2 = good.as_torch_op(_name("b"), scalars={"n": int}, **same)
    with pytest.raises(kernelkit.ArgumentError, match="written by both"):
        kernelkit.custom_vjp(f, b1, b2)
    with pytest.raises(kernelkit.ArgumentError, match="takes 'q'"):
        kernelkit.custom_vjp(f, lambda q: {})
    with pytest.raises(kernelkit.ArgumentTypeError, match="TorchOp"):
        kernelkit.custom_vjp(fwd, b1)  # a Kernel, not its torch op
    kernelkit.custom_vjp(f, b1)
    with pytest.raises(kernelkit.ArgumentError, match="already has gradients"):
        kernelkit.custom_vjp(f, b2)
