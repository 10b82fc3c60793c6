"""kernelkit inside PyTorch on a CUDA GPU: CUDA-graph capture and replay with new input values
(a bare ``out=`` call, the torch op, a first call, a new geometry and a new shared-memory size
inside the capture), ``torch.compile`` in default and ``reduce-overhead`` modes, and gradients
in float32 against torch's own ops."""

from __future__ import annotations

import uuid

import pytest
from torch_examples import EACH, op_name, softmax_op, softplus_op

import kernelkit
from kernelkit import ops

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
F = torch.nn.functional
N = 4096


def _fresh(name: str, body: str, inputs=("x",), **kw) -> kernelkit.Kernel:
    """A kernel no cache or loaded program has seen (a fresh comment in its source)."""
    return kernelkit.kernel(name, list(inputs), ["y"], f"// {uuid.uuid4().hex}\n{body}", **kw)


def _captured(fn):
    """``fn`` captured in a CUDA graph after a warm-up call on a side stream (torch's recipe);
    returns the graph and what the captured call returned."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    return graph, result


def test_an_out_call_allocates_nothing_and_replays_with_new_values():
    k = _fresh("graph_exp", EACH + "y[i] = scale * expf(x[i]);", inputs=("x", "scale"))
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)

    def call():
        k([x, 2.0], out=[y], grid=(N, 1, 1), threadgroup=(256, 1, 1))

    call()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.set_sync_debug_mode("error")  # any synchronizing torch call raises
    try:
        for _ in range(10):
            call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.cuda.memory_allocated() == before
    graph, _ = _captured(call)
    for _ in range(3):
        x.copy_(torch.randn_like(x))  # new values in the captured input
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2.0 * torch.exp(x))


def test_first_call_new_geometry_and_new_shared_memory_inside_the_capture():
    warm = _fresh("graph_warm", EACH + "y[i] = x[i];")
    x = torch.randn(N, device="cuda")
    y, z, w = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    warm([x], out=[y], grid=(N, 1, 1), threadgroup=(256, 1, 1))  # the backend is up
    torch.cuda.synchronize()
    cold = _fresh("graph_cold", EACH + "y[i] = x[i] + 1.0f;")
    staged = _fresh(
        "graph_smem",
        "extern __shared__ float buf[];\n"
        "uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "buf[threadIdx.x * 64] = i < x_shape[0] ? x[i] : 0.0f;\n"
        "__syncthreads();\n"
        "if (i < x_shape[0]) y[i] = 2.0f * buf[threadIdx.x * 64];\n",
    )
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cold([x], out=[y], grid=(N, 1, 1), threadgroup=(128, 1, 1))  # compile + load here
        cold([x], out=[z], grid=(N, 1, 1), threadgroup=(64, 1, 1))  # a geometry never seen
        staged([x], out=[w], grid=(N, 1, 1), threadgroup=(256, 1, 1), shared_memory=256 * 256)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x + 1)
    torch.testing.assert_close(z, x + 1)
    torch.testing.assert_close(w, 2 * x)


def test_the_torch_op_captured_out_and_functional():
    k = _fresh("graph_op", EACH + "y[i] = scale * expf(x[i]);", inputs=("x", "scale"))
    op = k.as_torch_op(
        op_name("graph_op"), output_shapes="x", output_dtypes="x", grid="x",
        scalars={"scale": float},
    )  # fmt: skip
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)

    def step():
        op(x, 2.0, out=y)
        return op(x, 3.0)  # allocates from the graph's private pool

    graph, z = _captured(step)
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2.0 * torch.exp(x))
        torch.testing.assert_close(z, 3.0 * torch.exp(x))


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_torch_compile_fullgraph_with_kernels_and_builtin_ops(mode):
    from torch._dynamo.utils import counters

    every = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0] * x_shape[1]) "
    k = _fresh("compiled_exp", every + "y[i] = scale * expf(x[i]);", inputs=("x", "scale"))
    op = k.as_torch_op(
        op_name("compiled"), output_shapes="x", output_dtypes="x", grid="x",
        scalars={"scale": float},
    )  # fmt: skip
    w = torch.randn(256, device="cuda")

    def model(x):
        h = ops.softmax(ops.rms_norm(x, w, 1e-6))
        return op(h, 2.0).sum(-1)

    def reference(x):
        return (2.0 * torch.exp(torch.softmax(F.rms_norm(x, (256,), w, 1e-6), -1))).sum(-1)

    counters.clear()
    compiled = torch.compile(model, fullgraph=True, mode=mode)
    for _ in range(5):  # reduce-overhead records the graph on a later call
        x = torch.randn(64, 256, device="cuda")
        torch.testing.assert_close(compiled(x).clone(), reference(x), atol=1e-5, rtol=1e-5)
    if mode == "reduce-overhead":
        assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_gradients_in_float32_match_torch():
    sp, sm = softplus_op(), softmax_op()
    x = torch.randn(32, 128, device="cuda", requires_grad=True)
    w = torch.randn(32 * 128, device="cuda", requires_grad=True)

    def model(x, w):
        return sm(sp(x.reshape(-1), w, 1.5).reshape(32, 128))

    def reference(x, w):
        return torch.softmax((w * F.softplus(x.reshape(-1), beta=1.5)).reshape(32, 128), -1)

    probe = torch.randn(32, 128, device="cuda")
    want = torch.autograd.grad((reference(x, w) * probe).sum(), (x, w))
    for fn in (model, torch.compile(model, fullgraph=True)):
        out = fn(x, w)
        torch.testing.assert_close(out, reference(x, w), atol=1e-5, rtol=1e-5)
        got = torch.autograd.grad((out * probe).sum(), (x, w))
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


def test_builtin_op_gradients_in_float32_match_torch():
    x = torch.randn(16, 512, device="cuda", requires_grad=True)
    w = torch.randn(512, device="cuda", requires_grad=True)
    b = torch.randn(512, device="cuda", requires_grad=True)

    def model(x, w, b):
        return ops.softmax(ops.layer_norm(ops.rms_norm(x, w), w, b))

    def reference(x, w, b):
        h = F.layer_norm(F.rms_norm(x, (512,), w, 1e-6), (512,), w, b, 1e-5)
        return torch.softmax(h, -1)

    probe = torch.randn(16, 512, device="cuda")
    want = torch.autograd.grad((reference(x, w, b) * probe).sum(), (x, w, b))
    got = torch.autograd.grad((model(x, w, b) * probe).sum(), (x, w, b))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)
