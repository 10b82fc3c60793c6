"""benchmarks/autotune.py runs on the CPU backend with tiny sizes (it is written for a GPU): the
sweep, the chosen/best ratio and a fresh process that replays the database with no timing.
Asserts no timing figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "autotune.py"


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
def test_autotune_benchmark_runs_on_cpu(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--backend",
            "cpu",
            "--shapes",
            "20x24x16",
            "--db",
            str(tmp_path / "db"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout
    assert "worst chosen/best ratio" in out.stdout
    assert "not ok" not in out.stdout
    assert "decisions from ['database'], timings taken: 0, tunings: 0" in out.stdout
