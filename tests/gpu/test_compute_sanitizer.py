"""compute-sanitizer over every GPU kernel of ``kernelkit.ops`` (``sanitized_ops.py``): no invalid
global or shared access (memcheck), no shared-memory race (racecheck), no illegal barrier use
(synccheck) and no read of uninitialized global memory (initcheck). The kernels are compiled by
a plain run first, so the sanitized runs load them from the disk cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).parent
_CUDA_BIN = "/usr/local/cuda/bin/compute-sanitizer"
SANITIZER = shutil.which("compute-sanitizer") or (_CUDA_BIN if os.path.exists(_CUDA_BIN) else None)
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(SANITIZER is None, reason="compute-sanitizer is not installed"),
]


def _run(prefix: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTHONUNBUFFERED": "1"}
    src = str(HERE.parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    cmd = [*prefix, sys.executable, str(HERE / "sanitized_ops.py")]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def compiled() -> None:
    """One plain run: every case correct, and every kernel in the disk cache."""
    done = _run([])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck", "initcheck"])
def test_ops_kernels_are_clean_under_compute_sanitizer(compiled, tool):
    flags = ["--tool", tool, "--error-exitcode", "97", "--print-limit", "20"]
    if tool == "memcheck":  # kernels only: cuda-bindings' start-up probes entry points with
        # cuGetProcAddress, and each miss would count as an error; torch keeps its allocations
        flags += ["--report-api-errors", "no", "--leak-check", "no"]
    done = _run([SANITIZER, *flags])
    log = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, log
    summary = re.search(r"(ERROR|RACECHECK) SUMMARY: .*", done.stdout + done.stderr)
    assert summary is not None and re.search(r"\b0 errors?\b", summary.group(0)), log
    assert re.search(r"cases, 0 failed;", done.stdout), log
