"""benchmarks/decode_block.py --tiny runs on the CPU backend and writes its tables (issue 26).
Asserts no timing figure: only that every variant ran and agreed with torch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_block.py"


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
def test_decode_block_benchmark_runs_on_cpu(tmp_path):
    pytest.importorskip("torch")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "KERNELKIT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--out", str(tmp_path / "res")],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    results = json.loads((tmp_path / "res" / "decode_block.json").read_text())
    tables = results["tables"]
    assert "errors" not in tables, tables.get("errors")
    assert {r["M"] for r in tables["block"]} == {1, 4}
    for row in tables["block"]:
        for variant in ("kernelkit eager", "torch eager", "kernelkit default", "torch default"):
            assert row[f"{variant} µs"] is not None and row[f"{variant} err"] < 1e-4, row
            # timed paired: the median and its quartiles over the batches
            assert row[f"{variant} µs p25"] <= row[f"{variant} µs"] <= row[f"{variant} µs p75"]
        for variant in ("kernelkit default", "torch default"):  # compiled: also timed alone
            alone = row[f"{variant} alone µs"]
            assert row[f"{variant} alone µs p25"] <= alone <= row[f"{variant} alone µs p75"]
    ops = {r["op"] for r in tables["ops"] if r.get("kernelkit µs") is not None}
    assert {"softmax", "rms_norm", "layer_norm", "a*silu(b)", "matmul tiled"} <= ops
    for row in (r for r in tables["ops"] if r.get("kernelkit µs") is not None):
        assert row["ratio p25"] <= row["ratio"] <= row["ratio p75"], row
    md = (tmp_path / "res" / "decode_block.md").read_text()
    assert "| op | shape | kernelkit µs | torch eager µs | ratio | err |" in md
    assert re.search(r"\| softmax \| 1x64 \| [0-9.]+ \([0-9.]+-[0-9.]+\) \|", md), md
