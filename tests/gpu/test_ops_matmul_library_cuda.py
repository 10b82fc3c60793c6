"""matmul's framework route on CUDA torch tensors with ``out=`` (``_matmul_library``): warm
calls write into a contiguous out through torch's ``linear`` (``aten::linear.out``), every other
out= through the general path, and an out= that meets an input is refused on a warm call as on
the first."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from profiled import entered  # noqa: E402

import kernelkit  # noqa: E402
from kernelkit import ops  # noqa: E402
from kernelkit._errors import ArgumentError  # noqa: E402


def _want(a, w, bias=None, activation=None):
    y = a.double() @ w.double().T
    if bias is not None:
        y = y + bias.double()
    return torch.relu(y) if activation == "relu" else y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "case", ["plain", "bias", "bias other dtype", "relu", "strided out", "3-d"]
)
def test_warm_out_calls_through_the_framework_route(dtype, case):
    g = torch.Generator(device="cuda").manual_seed(0)
    m, k, n = 5, 96, 72
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    w = torch.randn(n, k, device="cuda", generator=g).to(dtype) / 8
    bias = None
    if case.startswith("bias"):
        bias = torch.randn(n, device="cuda", generator=g).to(dtype)
        if case == "bias other dtype" and dtype != torch.float32:
            bias = bias.float()
    activation = "relu" if case == "relu" else None
    shape = (2, 3, k) if case == "3-d" else (m, k)
    if case == "3-d":
        a = torch.randn(*shape, device="cuda", generator=g).to(dtype)
    out_shape = (*a.shape[:-1], n)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    with kernelkit.force("matmul", "framework"):
        for _ in range(3):  # the first call prepares, the later ones take the prepared run
            if case == "strided out":
                out = torch.empty(n, m, device="cuda", dtype=dtype).t()  # column-major
            else:
                out = torch.empty(out_shape, device="cuda", dtype=dtype)
            out.fill_(float("nan"))
            if bias is not None and bias.dtype != dtype:  # torch's matmul cannot add it
                with pytest.raises(ArgumentError, match=r"forced 'framework'.*bias of x's dtype"):
                    ops.matmul(a, w, bias=bias, transpose_b=True, out=out)
                return
            y = ops.matmul(a, w, bias=bias, activation=activation, transpose_b=True, out=out)
            assert y is out
            want = _want(a.reshape(-1, k), w, bias, activation).reshape(out_shape)
            assert torch.allclose(out.double(), want, atol=tol * 10, rtol=tol), case


def test_a_warm_framework_out_call_refuses_an_out_that_meets_an_input():
    a = torch.randn(4, 64, device="cuda")
    w = torch.randn(64, 64, device="cuda")
    with kernelkit.force("matmul", "framework"):
        for _ in range(3):
            ops.matmul(a, w, transpose_b=True, out=torch.empty(4, 64, device="cuda"))
        x = torch.randn(4, 64, device="cuda")
        before = x.clone()
        with pytest.raises(ArgumentError, match="out= overlaps input 'a'"):
            ops.matmul(x, w, transpose_b=True, out=x)
        assert torch.equal(x, before)
        w_buf = torch.randn(68, 64, device="cuda")
        with pytest.raises(ArgumentError, match="out= overlaps input 'b'"):
            ops.matmul(a, w_buf[:64], transpose_b=True, out=w_buf[60:64])


@pytest.mark.parametrize("bias", [False, True])
def test_a_warm_framework_out_call_is_the_op_and_torch_s_linear(bias):
    """A warm out= call into a contiguous out: the op's frame, the overlap check's frame and
    torch's ``linear`` into out (no launcher or writer frame, no view of w made in Python)."""
    g = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(3, 64, device="cuda", generator=g)
    w = torch.randn(48, 64, device="cuda", generator=g)
    b = torch.randn(48, device="cuda", generator=g) if bias else None
    out = torch.empty(3, 48, device="cuda")
    with kernelkit.force("matmul", "framework"):
        for _ in range(3):
            ops.matmul(a, w, bias=b, transpose_b=True, out=out)
        out.fill_(float("nan"))
        y, seen = entered(lambda: ops.matmul(a, w, bias=b, transpose_b=True, out=out))
    assert y is out and seen == ["<lambda>", "matmul", "checked_one"], seen
    assert torch.allclose(out.double(), _want(a, w, b), atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_bias_of_another_dtype_runs_on_kernelkit_s_kernels(compiled):
    """torch's matmul refuses a float32 bias with bfloat16 operands; such a call (M = 64,
    where torch tensors otherwise take the framework route) runs kernelkit's kernels."""
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(64, 256, device="cuda", generator=g).bfloat16()
    w = (torch.randn(128, 256, device="cuda", generator=g) / 16).bfloat16()
    bias = torch.randn(128, device="cuda", generator=g)
    s = ops.matmul.explain(a, w, bias=bias, transpose_b=True)
    assert s.choice.impl != "matmul/framework", s
    fn = lambda a, w, bias: ops.matmul(a, w, bias=bias, transpose_b=True)
    if compiled:
        torch._dynamo.reset()
        fn = torch.compile(fn, fullgraph=True)
    y = fn(a, w, bias)
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.double(), _want(a, w, bias), atol=5e-2, rtol=2e-2)
