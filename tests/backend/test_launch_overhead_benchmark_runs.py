"""benchmarks/launch_overhead.py --backend cpu runs (NumPy, and torch CPU tensors through the
bare call and the kernel's torch op). Asserts no timing figure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "launch_overhead.py"


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
def test_launch_overhead_benchmark_runs_on_cpu(tmp_path):
    env = {**os.environ, "KERNELKIT_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run(
        [sys.executable, str(BENCH), "--backend", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout
    assert "kernelkit cpu, out=, known size" in out.stdout
    pytest.importorskip("torch")
    assert "torch op, eager, out=" in out.stdout and "torch op over the bare call" in out.stdout
