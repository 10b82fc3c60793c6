"""benchmarks/cpu_backend.py --tiny runs against the current backend contract (it once fell
behind backend API 2 unnoticed). Asserts no timing figure; the script checks its own results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "cpu_backend.py"


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
def test_cpu_backend_benchmark_runs(tmp_path):
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {
        **os.environ,
        "KERNELKIT_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tiny"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout
    assert "elementwise a*b+c" in out.stdout
    assert out.stdout.count("block sum") == 3
    assert "__syncthreads" in out.stdout


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
def test_cpu_warp_shuffle_benchmark_runs(tmp_path):
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {
        **os.environ,
        "KERNELKIT_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    bench = BENCH.with_name("cpu_warp_shuffle.py")
    out = subprocess.run(
        [sys.executable, str(bench), "--tiny", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout
    assert out.stdout.count("warp sum") == 2
