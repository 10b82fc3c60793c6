"""Every built-in op under ``torch.compile(fullgraph=True)`` on CPU tensors (issue 26):
softmax, rms_norm, layer_norm, matmul through each implementation the CPU backend offers, and
elementwise (traced into torch operations), after eager calls have prepared the same
signatures and, in a fresh process, before any eager call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import kernelkit  # noqa: E402
from kernelkit import ops  # noqa: E402

SILU_MUL = ops.elementwise("y = a * b / (1 + exp(-b))")


def _block(x, w, b, up, down):
    h = ops.layer_norm(ops.rms_norm(x, w, 1e-6), w, b, 1e-5)
    g = ops.matmul(h, up, transpose_b=True)
    u = ops.matmul(h, up, transpose_b=True, activation="silu")
    y = ops.matmul(SILU_MUL(g, u), down, transpose_b=True)
    return ops.softmax(x + y, -1)


def _reference(x, w, b, up, down):
    h = torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)
    h = torch.nn.functional.layer_norm(h, (x.shape[-1],), w, b, 1e-5)
    g = h @ up.T
    u = torch.nn.functional.silu(h @ up.T)
    y = (g * u * torch.sigmoid(u)) @ down.T
    return torch.softmax(x + y, -1)


def _args():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 32, generator=g)
    w, b = torch.randn(32, generator=g), torch.randn(32, generator=g)
    up, down = torch.randn(48, 32, generator=g) / 6, torch.randn(32, 48, generator=g) / 7
    return x, w, b, up, down


@pytest.mark.parametrize("impl", [None, "gemv", "tiled"])
def test_every_op_compiles_fullgraph_after_eager_calls(impl):
    args = _args()
    want = _reference(*args)
    ctx = kernelkit.force("matmul", impl) if impl else _Nothing()
    with ctx:
        eager = _block(*args)  # prepares every signature (and the traced versions)
        torch._dynamo.reset()
        compiled = torch.compile(_block, fullgraph=True)(*args)
    assert torch.allclose(eager, want, atol=1e-4, rtol=1e-4)
    assert torch.allclose(compiled, eager, atol=1e-5, rtol=1e-5)


def test_elementwise_compiles_with_scalars_and_out():
    f = ops.elementwise("y = a * 2 + b")
    x = torch.randn(3, 8)
    out = torch.empty(3, 8)

    def g(x, out):
        f(x, 0.5, out=out)
        return f(a=x, b=x)

    torch._dynamo.reset()
    y = torch.compile(g, fullgraph=True)(x, out)
    assert torch.allclose(out, x * 2 + 0.5) and torch.allclose(y, x * 3)


def test_ops_compile_in_a_process_that_made_no_eager_call():
    code = textwrap.dedent(
        """
        import torch, sys
        sys.path.insert(0, %r)
        from test_torch_compile_ops import _args, _block, _reference
        args = _args()
        y = torch.compile(_block, fullgraph=True)(*args)
        assert torch.allclose(y, _reference(*args), atol=1e-4, rtol=1e-4)
        print("ok")
        """
        % str(Path(__file__).parent)
    )
    src = str(Path(kernelkit.__file__).parent.parent)  # this checkout's kernelkit
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


class _Nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
