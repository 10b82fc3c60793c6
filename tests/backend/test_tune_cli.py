"""``kernelkit tune`` on the CPU backend: a candidate that faults (checked mode), one that
crashes its worker (a wild pointer), one that hangs (killed at the timeout) and one that gives
wrong results are each recorded, and the run goes on to store the winner, write a table and
(with matplotlib) a plot; ``kernelkit explain`` then reports the database's choice."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

import kernelkit

SRC = str(Path(kernelkit.__file__).parents[1])  # this checkout's, in child processes too

pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

MODULE = '''
import kernelkit

BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (MODE == 1) { y[i + 100000] = 0; }
if (MODE == 2) { while (true) { } }
if (MODE == 4) { *(volatile int*)(uintptr_t)8 = 1; }
if (MODE == 5) { __builtin_trap(); }
for (; i < x_shape[0]; i += STEP) y[i] = (MODE == 3 ? 3.0f : 2.0f) * x[i];
"""
k = kernelkit.kernel("cli_twice", ["x"], ["y"], BODY)
configs = [{"MODE": m, "STEP": s, "threadgroup": (s,)} for m, s in
           [(0, 64), (1, 64), (2, 64), (3, 64), (4, 64), (5, 64), (0, 128)]]
twice = kernelkit.autotune(k, configs=configs, key=["x.shape[0]:pow2"],
                           grid=lambda p, c: (c.threadgroup[0],))
'''


def test_tune_isolates_faults_crashes_and_hangs(tmp_path):
    (tmp_path / "kern.py").write_text(MODULE)
    spec = {
        "module": "kern.py",
        "object": "twice",
        "backend": "cpu",
        "timeout_s": 8,
        "check": True,
        "shapes": [{"inputs": {"x": {"shape": [1000]}}, "outputs": {"y": {"shape": [1000]}}}],
        "output": {"table": "table.json"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from kernelkit import _config
        from kernelkit._select.tuning import db
        db._current = (_config.config, db.TuningDB({str(tmp_path / "tuning")!r}))
        from kernelkit.cli import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    args = ["spec.json", "--quiet"]
    try:
        import matplotlib  # noqa: F401

        args += ["--plot", "out.png"]
    except ImportError:
        pass
    # the parent stores the records (workers only run candidates): one private database
    run = subprocess.run(
        [sys.executable, "-c", script, "tune", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    out = run.stdout
    assert run.returncode == 0, run.stderr[-3000:] + out
    lines = {line.split("MODE=")[1][:1]: line for line in out.splitlines() if "MODE=" in line}
    assert "KernelFault" in lines["1"] and "out-of-bounds write" in lines["1"]
    assert "timed out after 8 s" in lines["2"]
    assert "rejected" in lines["3"] and "differs from the reference" in lines["3"]
    # a segfault in a worker ends its launch with a fault (the worker lives); SIGILL kills it
    assert "KernelFault" in lines["4"] and "segmentation fault" in lines["4"]
    assert "worker died" in lines["5"]
    rows = [line for line in out.splitlines() if "MODE=0" in line]
    assert all(" ok " in row for row in rows)
    assert sum(row.lstrip().startswith("*") for row in rows) == 1  # the winner is a good one
    assert "1 record(s) stored" in out
    table = json.loads((tmp_path / "table.json").read_text())
    (entry,) = table["entries"]
    # the op is the file's default (one op per table file), which its entries then leave out
    assert table["op"] == "cli_twice" and "op" not in entry
    assert entry["config"]["template"]["MODE"] == 0
    if "--plot" in args:
        assert (tmp_path / "out.png").stat().st_size > 1000
    explained = subprocess.run(
        [sys.executable, "-c", script, "explain", "spec.json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert explained.returncode == 0, explained.stderr[-3000:]
    assert "from database" in explained.stdout


def test_tune_refuses_a_bad_spec(tmp_path):
    (tmp_path / "spec.json").write_text(json.dumps({"module": "x.py", "shapes": []}))
    run = subprocess.run(
        [sys.executable, "-m", "kernelkit", "tune", "spec.json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 2 and "needs 'object'" in run.stderr
