"""The cache benchmark runs on the CPU backend without a GPU (issue: it must run in CI too).
This checks that it runs and reports every scenario; it asserts no timing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "cache.py"


def test_cache_benchmark_runs_on_cpu(tmp_path):
    out = subprocess.run(
        [sys.executable, str(BENCH), "--backend", "cpu", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for scenario in (
        "compile (new kernel, warm process)",
        "warm disk, fresh process",
        "bundle, fresh process",
        "import kernelkit",
    ):
        assert scenario in out.stdout, out.stdout
    assert "ok=False" not in out.stdout
