"""Inductor calls the built-in ops' eager paths directly (``_integrations/torch_inductor``):
the generated code names ``torch.ops.kernelkit._direct_v1_<op>`` instead of the torch ops (no trip
through torch's dispatcher), the results and layouts are the fallback's, symbolic sizes work,
C++ wrappers keep the fallback, and code loaded from Inductor's cache in a fresh process runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch._inductor")

from test_torch_compile_ops import _block  # noqa: E402 - the same block as compiled there

import kernelkit  # noqa: E402
from kernelkit import ops  # noqa: E402
from kernelkit._integrations import torch_inductor  # noqa: E402

NO_CACHE = {"fx_graph_cache": False}


def _args(m=5):
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 32, generator=g)
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    up, down = torch.randn(48, 32, generator=g) / 6, torch.randn(32, 48, generator=g) / 7
    return x, w, b, up, down


def _compiled_code(fn, *args, **compile_kw):
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with torch._inductor.config.patch(NO_CACHE):
        y, code = run_and_get_code(torch.compile(fn, fullgraph=True, **compile_kw), *args)
    return y, "\n".join(code)


def _calls(code):
    """The ops a generated wrapper calls: (direct names, torch ops of kernelkit's)."""
    prefix = torch_inductor.PREFIX
    direct = re.findall(rf"torch\.ops\.kernelkit\.{prefix}(\w+)\(", code)
    through = re.findall(r"torch\.ops\.kernelkit\.(\w+)\.default\(", code)
    return direct, through


def test_a_compiled_block_calls_every_op_directly_and_matches_eager():
    args = _args()
    eager = _block(*args)
    y, code = _compiled_code(_block, *args)
    direct, through = _calls(code)
    assert torch_inductor.installed(), torch_inductor.WHY_NOT
    assert through == [], code
    assert sorted(set(direct)) == ["layer_norm", "matmul_runtime", "rms_norm", "softmax"], code
    assert len(direct) == 6  # rms_norm, layer_norm, three matmuls, softmax
    assert torch.allclose(y, eager, atol=1e-5, rtol=1e-5)


def test_a_direct_call_runs_the_op_s_prepared_call_not_the_dispatcher(monkeypatch):
    args = _args()
    fn = torch.compile(lambda x, w: ops.rms_norm(x, w, 1e-6), fullgraph=True)
    torch._dynamo.reset()
    with torch._inductor.config.patch(NO_CACHE):
        want = fn(args[0], args[1])
    seen = []
    name = torch_inductor.PREFIX + "rms_norm"
    run = getattr(torch.ops.kernelkit, name)
    counted = lambda *a: seen.append(a) or run(*a)
    monkeypatch.setattr(torch.ops.kernelkit, name, counted)
    y = fn(args[0], args[1])
    assert len(seen) == 1 and seen[0][2:] == (1e-6, None)  # eps, then out=None
    assert torch.equal(y, want)


def test_symbolic_sizes_take_the_direct_calls():
    fn = torch.compile(_block, fullgraph=True, dynamic=True)
    torch._dynamo.reset()
    with torch._inductor.config.patch(NO_CACHE):
        for m in (2, 3, 7):
            args = _args(m)
            assert torch.allclose(fn(*args), _block(*args), atol=1e-5, rtol=1e-5)
    _, code = _compiled_code(_block, *_args(3), dynamic=True)
    direct, through = _calls(code)
    assert through == [] and len(direct) == 6, code


@pytest.mark.parametrize("dim", [0, 1])
def test_layouts_other_than_row_major_come_back_as_the_fallback_s(dim):
    x = torch.randn(24, 40)[:, ::2]  # a strided view
    xt = torch.randn(20, 24).t()  # column-major

    def f(x, xt):
        return ops.softmax(x, dim), ops.softmax(xt * 2, dim)

    (y, yt), code = _compiled_code(f, x, xt)
    assert _calls(code)[1] == [], code
    want, want_t = ops.softmax(x, dim), ops.softmax(xt * 2, dim)
    assert torch.allclose(y, want, atol=1e-6) and torch.allclose(yt, want_t, atol=1e-6)
    assert y.stride() == want.stride() and yt.stride() == want_t.stride()


def test_a_matmul_with_a_bias_passes_it_as_an_input():
    a, w, bias = torch.randn(3, 16), torch.randn(8, 16), torch.randn(8)

    def f(a, w, bias):
        return ops.matmul(a, w, bias=bias, transpose_b=True, activation="relu")

    y, code = _compiled_code(f, a, w, bias)
    call = rf"{torch_inductor.PREFIX}matmul_runtime\(\w+, \w+, \w+, 'relu', True, None\)"
    assert re.search(call, code), code
    assert torch.allclose(y, torch.relu(a @ w.T + bias), atol=1e-5)


def test_a_gradient_graph_keeps_the_ops_with_gradients():
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.randn(16)

    def f(x, w):
        return ops.rms_norm(x, w, 1e-6).sum()

    torch._dynamo.reset()
    with torch._inductor.config.patch(NO_CACHE):
        y = torch.compile(f, fullgraph=True)(x, w)
        y.backward()
    x2 = x.detach().clone().requires_grad_(True)
    f(x2, w).backward()
    assert torch.allclose(x.grad, x2.grad, atol=1e-5)


@pytest.mark.parametrize(
    "config",
    [
        {"cpp_wrapper": True},
        {"custom_should_partition_ops": ["kernelkit::rms_norm_inference"]},
    ],
    ids=["cpp_wrapper", "partition_op"],
)
def test_where_inductor_needs_the_op_itself_the_fallback_stays(config):
    x, w = torch.randn(3, 16), torch.randn(16)
    torch._dynamo.reset()
    with torch._inductor.config.patch({**NO_CACHE, **config}):
        y, code = _compiled_code(lambda x, w: ops.rms_norm(x, w, 1e-6), x, w)
    assert torch_inductor.PREFIX not in code and "rms_norm_inference" in code, code
    want = torch.nn.functional.rms_norm(x, (16,), w, 1e-6)
    assert torch.allclose(y, want, atol=1e-5)


def test_a_failing_inductor_leaves_the_fallback_and_tracing_intact(monkeypatch):
    """Whatever goes wrong while the lowerings are installed is a reason, never a failed
    trace: a backend without Inductor (aot_eager) still compiles the op."""
    monkeypatch.setattr(torch_inductor, "WHY_NOT", "not installed yet")

    def broken(ops):
        raise RuntimeError("a broken Triton")

    monkeypatch.setattr(torch_inductor, "_install", broken)
    assert "a broken Triton" in torch_inductor.install({})
    assert not torch_inductor.installed()
    x, w = torch.randn(3, 16), torch.randn(16)
    torch._dynamo.reset()
    y = torch.compile(lambda x, w: ops.rms_norm(x, w, 1e-6), backend="aot_eager")(x, w)
    assert torch.allclose(y, torch.nn.functional.rms_norm(x, (16,), w, 1e-6), atol=1e-5)


def test_code_from_inductor_s_cache_calls_directly_in_a_fresh_process(tmp_path):
    code = textwrap.dedent(
        """
        import sys, torch
        sys.path.insert(0, %r)
        from test_torch_inductor import _args, _block
        from torch._dynamo.utils import counters
        from kernelkit._integrations.torch_inductor import PREFIX
        calls = []
        args = _args()
        want = _block(*args)
        run = getattr(torch.ops.kernelkit, PREFIX + "softmax")
        setattr(torch.ops.kernelkit, PREFIX + "softmax", lambda *a: calls.append(1) or run(*a))
        y = torch.compile(_block, fullgraph=True)(*args)
        assert torch.allclose(y, want, atol=1e-5, rtol=1e-5)
        print("direct calls", len(calls), "cache hits", counters["inductor"]["fxgraph_cache_hit"])
        """
        % str(Path(__file__).parent)
    )
    src = str(Path(kernelkit.__file__).parent.parent)  # this checkout's kernelkit
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
    }
    for hits in (0, 1):  # the second process loads the first one's code
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"direct calls 1 cache hits {hits}" in done.stdout, done.stdout


def test_the_names_compiled_code_calls_stay():
    """Code in Inductor's FX graph cache outlives a kernelkit version (its key is the graph):
    every name it may call stays, with the arguments in the schema's order, then out."""
    import inspect

    from kernelkit._integrations.torch_ops import INFERENCE

    assert torch_inductor.PREFIX == "_direct_v1_"
    for name in ("softmax", "rms_norm", "layer_norm", "matmul", "matmul_runtime"):
        run = getattr(torch.ops.kernelkit, f"_direct_v1_{name}")
        params = [n for n, _ in INFERENCE[name].schema.params]
        assert list(inspect.signature(run).parameters) == [*params, "out"], name
