"""Gradients from backward kernels (``kernelkit.custom_vjp``) on the CPU backend: gradcheck in
float64, the same gradients under ``torch.compile``, pairing by name and its errors."""

from __future__ import annotations

import pytest
from conftest import CPU_AVAILABLE
from torch_examples import EACH, dtype_template, op_name, softmax_op, softplus_op

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")


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
    cube = k.as_torch_op(op_name("cube"), output_shapes="x", output_dtypes="x", grid="x",
                         template=dtype_template)  # fmt: skip
    kernelkit.custom_vjp(cube, lambda x, grad_y: {"grad_x": 3 * x * x * grad_y})
    x = torch.randn(40, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(cube, (x,))


def test_pairing_errors_name_the_offending_name():
    same = dict(output_shapes="x", output_dtypes="x", grid="x")
    fwd = kernelkit.kernel("pair_f", ["x", "n"], ["y"], EACH + "y[i] = x[i] * n;")
    f = fwd.as_torch_op(op_name("f"), scalars={"n": int}, **same)
    reads_z = kernelkit.kernel("pair_b1", ["x", "z"], ["grad_x"], "")
    with pytest.raises(kernelkit.ArgumentError, match="reads 'z'"):
        kernelkit.custom_vjp(f, reads_z.as_torch_op(op_name("b"), **same))
    grad_of_scalar = kernelkit.kernel("pair_b2", ["x", "grad_y"], ["grad_n"], "")
    with pytest.raises(kernelkit.ArgumentError, match="writes 'grad_n'"):
        kernelkit.custom_vjp(f, grad_of_scalar.as_torch_op(op_name("b"), **same))
    good = kernelkit.kernel("pair_b3", ["x", "n", "grad_y"], ["grad_x"], "")
    b1 = good.as_torch_op(op_name("b"), scalars={"n": int}, **same)
    b2 = good.as_torch_op(op_name("b"), scalars={"n": int}, **same)
    with pytest.raises(kernelkit.ArgumentError, match="written by both"):
        kernelkit.custom_vjp(f, b1, b2)
    with pytest.raises(kernelkit.ArgumentError, match="takes 'q'"):
        kernelkit.custom_vjp(f, lambda q: {})
    with pytest.raises(kernelkit.ArgumentTypeError, match="TorchOp"):
        kernelkit.custom_vjp(fwd, b1)  # a Kernel, not its torch op
    kernelkit.custom_vjp(f, b1)
    with pytest.raises(kernelkit.ArgumentError, match="already has gradients"):
        kernelkit.custom_vjp(f, b2)
