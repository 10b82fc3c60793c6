"""kernelkit.ops on torch CPU tensors through their torch ops (``torch.ops.kernelkit.*``):
``torch.compile(fullgraph=True)`` with no graph break, gradients against torch's own ops, and the
eager path left as it was for tensors that need neither."""

from __future__ import annotations

import pytest
from conftest import CPU_AVAILABLE

from kernelkit import ops
from kernelkit._integrations import torch_route

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
F = torch.nn.functional
N = 48


def model(x, w, b, lin):
    h = ops.rms_norm(x, w, 1e-6)
    h = ops.layer_norm(h, w, b, 1e-5)
    h = ops.softmax(h * 2)
    h = ops.softmax(h, dim=0)
    return ops.matmul(h, lin, bias=b[:8], activation="silu", transpose_b=True)


def reference(x, w, b, lin):
    h = F.rms_norm(x, (N,), w, 1e-6)
    h = F.layer_norm(h, (N,), w, b, 1e-5)
    h = torch.softmax(torch.softmax(h * 2, -1), 0)
    return F.silu(F.linear(h, lin, b[:8]))


def _args(requires_grad: bool):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, N), (N,), (N,), (8, N)]
    return [torch.randn(s, generator=g).requires_grad_(requires_grad) for s in shapes]


def test_eager_calls_without_autograd_keep_the_direct_path():
    args = _args(False)
    assert not torch_route.wants(*args)
    torch.testing.assert_close(model(*args), reference(*args), atol=1e-5, rtol=1e-5)
    import numpy as np

    assert not torch_route.wants(np.zeros(3))


def test_gradients_match_torch_in_float32():
    args = _args(True)
    assert torch_route.wants(*args)
    got = torch.autograd.grad(model(*args).square().sum(), args)
    want = torch.autograd.grad(reference(*args).square().sum(), args)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_torch_compile_fullgraph_inductor_forward_and_backward():
    args = _args(True)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(*args)
    torch.testing.assert_close(out, reference(*args), atol=1e-5, rtol=1e-5)
    got = torch.autograd.grad(out.sum(), args)
    want = torch.autograd.grad(reference(*args).sum(), args)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_out_under_torch_compile_and_the_registered_ops():
    def f(x, y):
        ops.softmax(x, out=y)
        return y * 2

    x, y = torch.randn(4, 33), torch.empty(4, 33)
    torch.testing.assert_close(
        torch.compile(f, fullgraph=True, backend="aot_eager")(x, y), 2 * torch.softmax(x, -1)
    )
    torch.testing.assert_close(y, torch.softmax(x, -1))
    for name in ("softmax", "rms_norm", "layer_norm", "matmul"):
        assert hasattr(torch.ops.kernelkit, name)


def test_opcheck_of_the_builtin_ops():
    from kernelkit._integrations.torch_ops import OPS

    x, w, b, lin = _args(True)
    cases = {
        "softmax": (x, 0),
        "rms_norm": (x, w, 1e-6),
        "layer_norm": (x, w, b, 1e-5),
        "matmul": (x, lin, None, "gelu", True),
    }
    for name, args in cases.items():
        result = torch.library.opcheck(OPS[name].default, args)
        assert set(result.values()) == {"SUCCESS"}, (name, result)


def test_torch_compile_mixes_builtin_ops_and_a_kernel_op_over_every_element():
    """The GPU test's model on CPU tensors: a 2-D tensor through rms_norm, softmax and a kernel
    op that must write all of its elements (the output is uninitialized memory otherwise)."""
    from torch_examples import op_name

    import kernelkit

    every = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0] * x_shape[1]) "
    k = kernelkit.kernel("mixed_exp", ["x", "scale"], ["y"], every + "y[i] = scale * expf(x[i]);")
    op = k.as_torch_op(
        op_name("mixed"), output_shapes="x", output_dtypes="x", grid="x", scalars={"scale": float}
    )
    w = torch.randn(N)

    def mixed(x):
        return op(ops.softmax(ops.rms_norm(x, w, 1e-6)), 2.0).sum(-1)

    compiled = torch.compile(mixed, fullgraph=True)
    for _ in range(3):
        x = torch.randn(7, N)
        want = (2.0 * torch.exp(torch.softmax(F.rms_norm(x, (N,), w, 1e-6), -1))).sum(-1)
        torch.testing.assert_close(compiled(x), want, atol=1e-5, rtol=1e-5)
