"""Every built-in op under ``torch.compile(fullgraph=True)`` on CUDA tensors (issue 26), in
default and reduce-overhead modes: softmax, rms_norm, layer_norm, elementwise and matmul through
each implementation that runs on this GPU (the framework's cuBLAS, and kernelkit's kernels
forced), bf16 at decode shapes; and the eager ops' prepared calls inside a CUDA graph."""

from __future__ import annotations

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
        for _ in range(3):  # reduce-overhead records its graph on a later call
            y = compiled(*args)
        torch.cuda.synchronize()
    assert _close(y, eager)


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
