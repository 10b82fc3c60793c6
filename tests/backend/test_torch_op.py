"""Kernels as torch ops (``Kernel.as_torch_op``) on the CPU backend with torch CPU tensors: the
functional, ``out=`` and in-place forms, the rules, the errors, ``torch.library.opcheck`` and
``torch.compile(fullgraph=True)`` (the inductor CPU backend: it needs a C++ compiler, as the CPU
backend does)."""

from __future__ import annotations

import itertools

import pytest
from conftest import CPU_AVAILABLE

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

EACH = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) "
_ids = itertools.count()


def _name(stem: str) -> str:
    """A fresh op name: torch ops live for the process, and names must not repeat."""
    return f"kk_test::{stem}_{next(_ids)}"


def _scaled_exp() -> kernelkit.TorchOp:
    body = EACH + "y[i] = scale * expf(x[i]);"
    k = kernelkit.kernel("top_scaled_exp", ["x", "scale"], ["y"], body)
    return k.as_torch_op(
        _name("scaled_exp"),
        output_shapes="x",
        output_dtypes="x",
        grid="x",
        scalars={"scale": float},
    )


def test_functional_call_returns_a_tensor_and_the_schema_names_the_inputs():
    op = _scaled_exp()
    x = torch.randn(1000)
    torch.testing.assert_close(op(x, 2.0), 2.0 * torch.exp(x))
    assert str(op.default._schema).endswith("(Tensor x, float scale) -> Tensor")
    assert str(op.out._schema).endswith("(Tensor x, float scale, Tensor(a!) y) -> ()")
    torch.testing.assert_close(op.default(x, 3.0), 3.0 * torch.exp(x))  # torch.ops.<ns>.<name>


def test_out_writes_into_the_given_tensor_and_in_place_works():
    op = _scaled_exp()
    x = torch.randn(300)
    y = torch.full_like(x, float("nan"))
    ptr, version = y.data_ptr(), y._version
    assert op(x, 2.0, out=y) is y
    assert y.data_ptr() == ptr and y._version > version  # autograd sees the write
    torch.testing.assert_close(y, 2.0 * torch.exp(x))
    z = x.clone()
    op(z, 0.5, out=z)  # in place: the input is its own output
    torch.testing.assert_close(z, 0.5 * torch.exp(x))


def test_rules_are_functions_of_the_inputs_and_several_outputs_come_back_as_a_tuple():
    body = """
    uint r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < x_shape[0]) {
        T s = 0;
        float m = -INFINITY;
        for (int j = 0; j < x_shape[1]; ++j) { s += x[r * x_shape[1] + j];
                                               m = fmaxf(m, (float)x[r * x_shape[1] + j]); }
        total[r] = s * (bias != NULL ? (T)bias[0] : (T)1);
        peak[r] = m;
    }
    """
    k = kernelkit.kernel(
        "top_rows", ["x", "bias"], ["total", "peak"], body, optional_inputs={"bias": "float32"}
    )
    seen = []

    def grid(x, bias):
        seen.append(x.shape)
        return (x.shape[0],)

    op = k.as_torch_op(
        _name("rows"),
        output_shapes=lambda x, bias: [(x.shape[0],), (x.shape[0],)],
        output_dtypes=lambda x, bias: [x.dtype, torch.float32],
        grid=grid,
        threadgroup=lambda x, bias: (32,),
        template=lambda x, bias: [("T", x.dtype)],
    )
    assert "Tensor? bias" in str(op.default._schema)
    x = torch.randn(5, 7, dtype=torch.float64)
    total, peak = op(x, None)
    assert total.dtype == torch.float64 and peak.dtype == torch.float32
    torch.testing.assert_close(total, x.sum(1))
    torch.testing.assert_close(peak, x.max(1).values.float())
    total2, peak2 = torch.empty(5, dtype=torch.float64), torch.empty(5)
    out = (total2, peak2)
    assert op(x, torch.tensor([2.0]), out=out) is out
    torch.testing.assert_close(total2, 2 * x.sum(1))
    assert seen == [(5, 7), (5, 7)]


def test_a_wrong_out_shape_is_refused_before_launching():
    op = _scaled_exp()
    with pytest.raises(kernelkit.ArgumentError, match="out\\[0\\] has shape"):
        op(torch.randn(8), 1.0, out=torch.empty(4))


def test_definition_errors_name_the_problem():
    k = kernelkit.kernel("top_err", ["x", "n"], ["y"], EACH + "y[i] = x[i] * n;")
    rules = dict(output_shapes="x", output_dtypes="x", grid="x")
    with pytest.raises(kernelkit.ArgumentError, match="namespace::op_name"):
        k.as_torch_op("no_namespace", **rules)
    with pytest.raises(kernelkit.ArgumentError, match="'m', which is not an input"):
        k.as_torch_op(_name("e"), scalars={"m": int}, **rules)
    with pytest.raises(kernelkit.ArgumentTypeError, match="float, int or bool"):
        k.as_torch_op(_name("e"), scalars={"n": complex}, **rules)
    with pytest.raises(kernelkit.ArgumentError, match="output_shapes must be an input name"):
        k.as_torch_op(_name("e"), output_shapes="z", output_dtypes="x", grid="x")
    name = _name("twice")
    k.as_torch_op(name, scalars={"n": int}, **rules)
    with pytest.raises(kernelkit.ArgumentError, match="already registered"):
        k.as_torch_op(name, scalars={"n": int}, **rules)
    only_scalar = kernelkit.kernel("top_err2", ["n"], ["y"], "y[0] = n;")
    with pytest.raises(kernelkit.ArgumentError, match="at least one required tensor input"):
        only_scalar.as_torch_op(_name("e"), output_shapes=[(1,)], output_dtypes=["int32"],
                                grid=(1,), scalars={"n": int})  # fmt: skip
    named_out = kernelkit.kernel("top_err3", ["out"], ["y"], "y[0] = out[0];")
    with pytest.raises(kernelkit.ArgumentError, match="named 'out'"):
        named_out.as_torch_op(_name("e"), output_shapes="out", output_dtypes="out", grid=(1,))


def test_an_op_without_gradients_refuses_inputs_that_require_grad():
    op = _scaled_exp()
    x = torch.randn(10, requires_grad=True)
    with pytest.raises(kernelkit.ArgumentError, match="requires grad, but the op has no gradient"):
        op(x, 1.0)
    with torch.no_grad():
        torch.testing.assert_close(op(x, 1.0), torch.exp(x))
    torch.testing.assert_close(op(x.detach(), 1.0), torch.exp(x.detach()))
    with pytest.raises(kernelkit.ArgumentError, match="out= calls are not differentiable"):
        op(torch.randn(10), 1.0, out=x)


def test_opcheck_passes_for_both_overloads():
    op = _scaled_exp()
    x = torch.randn(64)
    for args in ((op.default, (x, 2.0)), (op.out, (x, 2.0, torch.empty(64)))):
        result = torch.library.opcheck(*args)
        assert set(result.values()) == {"SUCCESS"}, result


def test_torch_compile_fullgraph_inductor_traces_functional_out_and_in_place_calls():
    op = _scaled_exp()

    def model(x):
        y = op(torch.sin(x), 2.0) + 1  # functional
        z = torch.empty_like(x)
        op(x, 0.5, out=z)  # out=
        w = x * 3
        op(w, 1.0, out=w)  # in place
        return y + z + w

    x = torch.randn(257)
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(compiled(x), model(x))
    x2 = torch.randn(257)
    torch.testing.assert_close(compiled(x2), model(x2))


def test_torch_compile_sees_one_graph_and_dynamic_shapes_reuse_it():
    from torch._dynamo.testing import CompileCounterWithBackend

    op = _scaled_exp()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(lambda x: op(x * 2, 1.5).sum(), backend=counter, dynamic=True)
    for n in (100, 333, 1000):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), (1.5 * torch.exp(x * 2)).sum())
    assert counter.frame_count == 1  # one graph for every size: the fake took symbolic shapes
    assert any(
        getattr(node.target, "name", lambda: "")() == op.default.name()
        for graph in counter.graphs
        for node in graph.graph.nodes
    )


def test_torch_export_keeps_both_overloads_as_ops():
    op = _scaled_exp()

    class Model(torch.nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            op(x, 2.0, out=y)
            return op(x, 1.0) + y

    exported = torch.export.export(Model(), (torch.randn(16),))
    code = exported.graph_module.code
    assert f"{op.name.replace('::', '.')}.out(" in code and ".default(" in code
    x = torch.randn(16)
    torch.testing.assert_close(exported.module()(x), 3.0 * torch.exp(x))
