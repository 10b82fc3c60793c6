"""Kernel calls repeated in C (``_pipeline/repeat.py``) on a CUDA GPU: a decode-like loop of
``out=`` and allocating calls launched by ``kk_launch.Call`` (its count of launches checked),
against float64 references with the outputs poisoned first; on the current stream (a side
stream's work ordered, a CUDA graph captured and replayed with new values); another device
index, shape or stride taken by the run."""

from __future__ import annotations

import uuid

import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0] * x_shape[1]) y[i] = (T)(scale * (float)x[i] + (float)bias[i % bias_shape[0]]);
"""


def _kernel() -> kernelkit.Kernel:
    body = f"// {uuid.uuid4().hex}\n{BODY}"
    return kernelkit.kernel("rep_cuda", ["x", "bias", "scale"], ["y"], body)


def _call(k, x, bias, scale, **kw):
    return k([x, bias, scale], grid=(x.numel(), 1, 1), threadgroup=(128, 1, 1),
             template=[("T", x.dtype)], **kw)  # fmt: skip


def _want(x, bias, scale):
    return (scale * x.double() + bias.double()).to(x.dtype)


def _head(k):
    (plan,) = k._plans.values()
    assert plan.repeats is not None, "no calls repeated in C (native launch not built?)"
    return plan.repeats.head


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_decode_loop_launches_from_c_with_right_results(dtype):
    k = _kernel()
    x = torch.randn(3, 4097, device="cuda", dtype=dtype)
    bias = torch.randn(4097, device="cuda", dtype=dtype)
    y = torch.empty_like(x)
    for _ in range(2):  # the second call makes the Call
        _call(k, x, bias, 0.5, out=[y])
    head = _head(k)
    assert head is not None and k._last is head
    tol = {"atol": 1e-2, "rtol": 1e-2} if dtype != torch.float32 else {}
    for _ in range(20):
        x.normal_()
        y.fill_(float("nan"))
        assert _call(k, x, bias, 0.5, out=[y])[0] is y
        torch.testing.assert_close(y, _want(x, bias, 0.5), **tol)
    assert head.served == 20
    shapes = [x.shape]
    for _ in range(2):
        _call(k, x, bias, 0.5, output_shapes=shapes, output_dtypes=[dtype])
    for _ in range(5):
        (z,) = _call(k, x, bias, 0.5, output_shapes=shapes, output_dtypes=[dtype])
        torch.testing.assert_close(z, _want(x, bias, 0.5), **tol)
    assert _head_of_allocating(k).served == 5


def _head_of_allocating(k):
    heads = [p.repeats.head for p in k._plans.values() if not p.repeats.hot.has_out]
    assert len(heads) == 1
    return heads[0]


def _warm(rows: int, n: int, scale: float):
    """A new kernel called twice with ``out=`` on (rows, n) float32: (kernel, x, bias, y)."""
    k = _kernel()
    x = torch.randn(rows, n, device="cuda")
    bias = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    for _ in range(2):
        _call(k, x, bias, scale, out=[y])
    return k, x, bias, y


def test_calls_run_on_the_current_stream_and_inside_a_captured_graph():
    k, x, bias, y = _warm(2, 1000, 2.0)
    head = _head(k)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)  # the side stream busy: a launch elsewhere would run first
        x.fill_(1.0)
        y.fill_(float("nan"))
        _call(k, x, bias, 2.0, out=[y])
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(y, _want(x, bias, 2.0))
    graph = torch.cuda.CUDAGraph()
    served = head.served
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _call(k, x, bias, 2.0, out=[y])
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        _call(k, x, bias, 2.0, out=[y])
    assert head.served == served + 2  # the capture's launch too
    for value in (3.0, -1.0):
        x.fill_(value)
        y.fill_(float("nan"))
        graph.replay()
        torch.testing.assert_close(y, _want(x, bias, 2.0))


def test_another_shape_stride_or_device_goes_to_the_run():
    k, x, bias, y = _warm(4, 256, 1.5)
    cases = [torch.randn(2, 256, device="cuda"), torch.randn(256, 4, device="cuda").t()]
    if torch.cuda.device_count() > 1:
        cases.append(torch.randn(4, 256, device="cuda:1"))
    for other in cases:
        b = bias.to(other.device)
        out = torch.full(other.shape, float("nan"), device=other.device)
        with torch.cuda.device(other.device):
            _call(k, other, b, 1.5, out=[out])
        torch.testing.assert_close(out, _want(other.contiguous(), b, 1.5))
    y.fill_(float("nan"))
    _call(k, x, bias, 1.5, out=[y])
    torch.testing.assert_close(y, _want(x, bias, 1.5))


def test_a_new_grid_every_call_is_launched_from_c_with_its_own_geometry():
    """A growing grid (an attention kernel over a growing cache): the Call launches each new
    grid (and a shared memory size past the default limit) itself; only the asked-for threads
    write (the rest stays poisoned)."""
    k, x, bias, y = _warm(4, 1024, 2.0)
    head = _head(k)
    served = head.served
    for n in range(100, 4096, 97):
        y.fill_(float("nan"))
        k([x, bias, 2.0], grid=(n, 1, 1), threadgroup=(128, 1, 1), template=[("T", x.dtype)],
          out=[y], shared_memory=64 * 1024 if n % 2 else None)  # fmt: skip
        b = min(128, n)  # a grid smaller than a block runs as one block of it
        threads = -(-n // b) * b
        want = _want(x, bias, 2.0).flatten()
        torch.testing.assert_close(y.flatten()[:threads], want[:threads])
        assert y.flatten()[threads:].isnan().all()
    assert head.served - served == len(range(100, 4096, 97)) and _head(k) is head


def test_an_autotuned_kernel_s_stored_decision_launches_from_c(tmp_path, monkeypatch):
    """A decision stored by ``tune(store=True)`` (threadgroup 128, not the default 256: the
    block size is in the result) replaces the default's decided Call; its own serves."""
    from kernelkit import _config
    from kernelkit._select.tuning import db as tuning

    monkeypatch.setenv("KERNELKIT_TUNE", "serve")
    _config.reload()
    monkeypatch.setattr(tuning, "_current", (_config.config, tuning.TuningDB(tmp_path / "db")))
    try:
        body = BODY.replace("(float)bias[i % bias_shape[0]]",
                            "(float)bias[i % bias_shape[0]] + (float)blockDim.x")  # fmt: skip
        k = kernelkit.kernel("rep_cuda_tuned", ["x", "bias", "scale"], ["y"],
                             f"// {uuid.uuid4().hex}\n{body}")  # fmt: skip
        tuned = kernelkit.autotune(
            k, configs=[{"T": "float32", "threadgroup": (128,)}], key=["x.shape[0]"],
            grid=lambda problem, config: (problem.args[0].shape[0] * problem.args[0].shape[1],),
            default={"T": "float32", "threadgroup": (256,)}, quiet=True,
        )  # fmt: skip
        x = torch.randn(3, 4097, device="cuda")
        bias = torch.randn(4097, device="cuda")
        y = torch.empty_like(x)
        for _ in range(3):  # nothing stored: the default, kept as a decided Call
            tuned([x, bias, 0.25], out=[y])
        torch.testing.assert_close(y, _want(x, bias, 0.25) + 256)
        assert tuned._decided.head is not None
        result = tuned.tune([x, bias, 0.25], out=[y], store=True)
        assert result.record is not None and tuned._decided.head is None
        for _ in range(3):
            tuned([x, bias, 0.25], out=[y])
        head = tuned._decided.head
        assert head is not None
        served = head.served
        for _ in range(10):
            x.normal_()
            y.fill_(float("nan"))
            tuned([x, bias, 0.25], out=[y])
            torch.testing.assert_close(y, _want(x, bias, 0.25) + 128)
        assert head.served - served == 10
    finally:
        monkeypatch.undo()
        _config.reload()
