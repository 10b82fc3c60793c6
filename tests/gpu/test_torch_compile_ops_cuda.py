"""Every built-in op under ``torch.compile(fullgraph=True)`` on CUDA tensors (issue 26), in
default and reduce-overhead modes: softmax, rms_norm, layer_norm, elementwise and matmul through
each implementation that runs on this GPU (the framework's cuBLAS, and kernelkit's kernels
forced), bf16 at decode shapes; and the eager ops' prepared calls inside a CUDA graph."""

from __future__ import annotations

import re

import pytest

import kernelkit
from kernelkit import ops

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
F = torch.nn.functional
SILU_MUL = ops.elementwise("y = a * b / (1 + exp(-b))")


def _block(x, w, up, down):
    h = ops.softmax(ops.layer_norm(ops.rms_norm(x, w, 1e-6), w, w, 1e-5), -1) * 512
    g = ops.matmul(h, up, transpose_b=True)
    return x + ops.matmul(SILU_MUL(g, g), down, transpose_b=True)


def _args(m: int):
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16
    d = 2048  # K = 2048 in both matmuls: every route's shape rules take it (gemv_slab's too)
    x = torch.randn(m, d, device="cuda", generator=g).to(bf)
    w = (torch.rand(d, device="cuda", generator=g) + 0.5).to(bf)
    up = (torch.randn(d, d, device="cuda", generator=g) / d**0.5).to(bf)
    down = (torch.randn(d, d, device="cuda", generator=g) / d**0.5).to(bf)
    return x, w, up, down


def _close(a, b) -> bool:
    return bool(((a.float() - b.float()).abs().max() / b.float().abs().max()) < 2e-2)


# every mode at decode and prefill sizes with the tables' choice; each route where it applies
# (the gemv family at M = 16, the tile kernels at M = 128), in default mode (bounded run time)
CASES = [
    *[(mode, None, m) for mode in ("default", "reduce-overhead") for m in (1, 16, 128)],
    *[("default", r, 16) for r in ("framework", "gemv", "gemv_tc", "gemv_slab_tc")],
    ("default", "gemv_slab", 4),
    *[("default", r, 128) for r in ("framework", "mma", "wgmma", "tiled")],
]


@pytest.mark.parametrize(("mode", "route", "m"), CASES)
def test_the_block_compiles_fullgraph_on_cuda(mode, route, m):
    args = _args(m)
    with kernelkit.force("matmul", route) if route else _Nothing():
        try:
            eager = _block(*args)
        except kernelkit.KernelkitError as e:  # a route this GPU or shape cannot run
            pytest.skip(f"{route} at M={m}: {e}")
        torch._dynamo.reset()
        compiled = torch.compile(_block, fullgraph=True, mode=mode)
        with _no_inductor_caches():  # each forced route compiled anew, not a cached graph
            for _ in range(3):  # reduce-overhead records its graph on a later call
                y = compiled(*args)
        torch.cuda.synchronize()
    assert _close(y, eager)


def _no_inductor_caches():
    """Inductor's caches key on the graph, which is the same for every forced route."""
    import contextlib

    stack = contextlib.ExitStack()
    stack.enter_context(torch._inductor.config.patch(fx_graph_cache=False))
    stack.enter_context(torch._functorch.config.patch(enable_autograd_cache=False))
    return stack


@pytest.mark.parametrize("m", [1, 16])
def test_inductor_calls_cublas_itself_where_the_tables_choose_it(m):
    from torch._inductor.utils import run_and_get_code

    from kernelkit.ops import _matmul

    args = _args(m)
    h = _block(*args)  # (prepares the eager signatures too)
    framework = _matmul.routes(args[0], args[2], None, None, True) == {"framework"}
    torch._dynamo.reset()
    with _no_inductor_caches():
        y, code = run_and_get_code(torch.compile(_block, fullgraph=True), *args)
    code = "\n".join(code)
    call = r"torch\.ops\.kernelkit\.(?:_direct_v\d+_matmul\w*|matmul\w*\.default)\("
    assert (re.search(call, code) is None) == framework, code[-3000:]
    assert "torch.ops.kernelkit.elementwise" not in code  # traced into Inductor's loops
    assert _close(y, h)


def _mlp(x, p):
    h = ops.rms_norm(x, p["norm"], 1e-6)
    y = ops.matmul(SILU_MUL(ops.matmul(h, p["up"], transpose_b=True), h[..., :1]), p["down"],
                   transpose_b=True)  # fmt: skip
    return x + y


def _torch_mlp(x, p):
    h = F.rms_norm(x, (x.shape[-1],), p["norm"], 1e-6)
    u = F.linear(h, p["up"])
    return x + F.linear(u * torch.sigmoid(h[..., :1]) * h[..., :1], p["down"])


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_second_weight_size_recompiles_as_torch_does_and_eager_calls_none(mode):
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16

    def params(h):
        r = lambda *s: (torch.randn(*s, device="cuda", generator=g) / s[-1] ** 0.5).to(bf)
        return {"norm": (torch.rand(2048, device="cuda", generator=g) + 0.5).to(bf),
                "up": r(h, 2048), "down": r(2048, h)}  # fmt: skip

    x = torch.randn(1, 2048, device="cuda", generator=g).to(bf)
    sizes = [params(2816), params(3584), params(4096)]
    counts = []
    for block in (_torch_mlp, _mlp):
        torch._dynamo.reset()
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        compiled = torch.compile(block, fullgraph=True, mode=mode)
        for i, p in enumerate(sizes):
            for _ in range(3):
                y = compiled(x, p)
            block(x.repeat(3, 1), p)  # eager: new signatures in kernelkit's tables
            with torch._dynamo.config.patch(error_on_recompile=True):
                y = compiled(x, p)
            assert _close(y, block(x, p)), (block.__name__, i)
        counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"] - before)
    assert counts[1] <= counts[0], counts


def test_the_block_compiles_before_any_eager_call_in_a_new_process():
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, torch; sys.path.insert(0, %r)\n"
        "from test_torch_compile_ops_cuda import _args, _block\n"
        "args = _args(16)\n"
        "y = torch.compile(_block, fullgraph=True)(*args)\n"
        "torch.cuda.synchronize(); print('ok')\n" % str(Path(__file__).parent)
    )
    env = {**os.environ, "PYTHONPATH": str(Path(kernelkit.__file__).parent.parent)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("m", [1, 16])
def test_the_eager_block_replays_in_a_cuda_graph(m):
    args = _args(m)
    want = _block(*args)  # prepares every signature
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = _block(*args)
    args[0].copy_(args[0] * 0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert _close(want, _block(*_args(m))) and _close(y, _block(*args))


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
