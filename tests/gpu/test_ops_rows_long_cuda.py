"""Long rows read once on CUDA (rows_smem, and rows_cluster on sm_90): the benchmark's shapes
(fewer rows) as the heuristics choose them, every config forced on one row length, against
float64 with NaN-poisoned outputs; the kernels clean under compute-sanitizer's memcheck,
racecheck and synccheck (``sanitized_rows_long.py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from kernelkit import ops  # noqa: E402
from kernelkit._choices import force  # noqa: E402
from kernelkit.ops import _norms, _rows_split, _softmax  # noqa: E402

F = torch.nn.functional
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
HERE = Path(__file__).parent


def _inputs(rows, n, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(*s, device="cuda", generator=g).to(dtype) for s in ((rows, n), (n,), (n,))]


def _check(name, x, w, b, out):
    xd, wd, bd, n = x.double(), w.double(), b.double(), x.shape[-1]
    ref = {
        "softmax": lambda: torch.softmax(xd, -1),
        "rms_norm": lambda: F.rms_norm(xd, (n,), wd, 1e-5),
        "layer_norm": lambda: F.layer_norm(xd, (n,), wd, bd, 1e-5),
    }[name]()
    assert torch.isfinite(out).all(), (name, "unwritten elements")
    err = ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
    assert err <= TOL[x.dtype], (name, tuple(x.shape), x.dtype, err)


def _call(name, x, w, b, out):
    return {
        "softmax": lambda: ops.softmax(x, out=out),
        "rms_norm": lambda: ops.rms_norm(x, w, 1e-5, out=out),
        "layer_norm": lambda: ops.layer_norm(x, w, b, 1e-5, out=out),
    }[name]()


SHAPES = [(41, 32000), (9, 32000), (5, 65536), (3, 128256), (2, 262144), (3, 131073)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_chosen_kernel_reads_long_rows_right(shape, dtype):
    x, w, b = _inputs(*shape, dtype)
    for name in ("softmax", "rms_norm", "layer_norm"):
        out = torch.full_like(x, float("nan"))
        _call(name, x, w, b, out)
        _check(name, x, w, b, out)
    choice = ops.softmax.explain(x).choice
    if torch.cuda.get_device_capability() >= (9, 0):  # before: rows that fit one block only
        few = shape[0] <= _rows_split.FEW_ROWS
        if few and shape[1] * x.element_size() >= _rows_split.FEW_ROW_BYTES:
            assert choice.impl == "softmax/rows_split", choice  # a vocabulary row or four
        else:
            assert choice.impl in ("softmax/rows_smem", "softmax/rows_cluster"), choice
            if shape[1] >= 65536:
                assert choice.impl == "softmax/rows_cluster", choice


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_every_config_that_fits(dtype):
    x, w, b = _inputs(7, 40001, dtype, seed=1)
    x2, w2, b2 = _inputs(7, 40000, dtype, seed=2)
    sm90 = torch.cuda.get_device_capability() >= (9, 0)
    ran = 0
    ops_ = {"softmax": _softmax.OP, "rms_norm": _norms.RMS_OP, "layer_norm": _norms.LAYER_OP}
    impls = ("rows_smem", "rows_cluster") if sm90 else ("rows_smem",)
    for name, op in ops_.items():  # every config the op lists (a row of 40001 fits each)
        listed = [(i.name, c) for i in op.implementations if i.name in impls for c in i.configs]
        for impl, c in listed:
            for xs, ws, bs in ((x, w, b), (x2, w2, b2)):  # the element and the vector path
                out = torch.full_like(xs, float("nan"))
                with force(name, impl, {**c.values, "threadgroup": c.threadgroup}):
                    _call(name, xs, ws, bs, out)
                _check(name, xs, ws, bs, out)
                ran += 1
    assert ran >= (108 if sm90 else 18)


_CUDA_BIN = "/usr/local/cuda/bin/compute-sanitizer"
SANITIZER = shutil.which("compute-sanitizer") or (_CUDA_BIN if os.path.exists(_CUDA_BIN) else None)


@pytest.mark.skipif(SANITIZER is None, reason="compute-sanitizer is not installed")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_long_row_kernels_are_clean_under_compute_sanitizer(tool):
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONUNBUFFERED": "1"}
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    script = [sys.executable, str(HERE / "sanitized_rows_long.py")]
    plain = subprocess.run(script, env=env, capture_output=True, text=True, timeout=900)
    assert plain.returncode == 0, plain.stdout[-4000:] + plain.stderr[-4000:]  # compiled, right
    flags = ["--tool", tool, "--error-exitcode", "97", "--print-limit", "20"]
    if tool == "memcheck":
        flags += ["--report-api-errors", "no", "--leak-check", "no"]
    done = subprocess.run([SANITIZER, *flags, *script], env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    log = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, log
    summary = re.search(r"(ERROR|RACECHECK) SUMMARY: .*", done.stdout + done.stderr)
    assert summary is not None and re.search(r"\b0 errors?\b", summary.group(0)), log
    assert re.search(r"cases, 0 failed;", done.stdout), log
