"""Every script in benchmarks/ runs: the CPU ones in a tiny mode here (their own output checked,
no timing figure asserted), the GPU-only ones, with no GPU visible, to a clear skip message and
exit status 0; scripts with a test of their own are named with it. A new script fails
``test_every_script_is_listed`` until it is given a row here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

# script -> the test file that runs it
OWN_TEST = {
    "autotune.py": "test_autotune_benchmark_runs.py",
    "cache.py": "test_cache_benchmark_runs.py",
    "cpu_backend.py": "test_cpu_backend_benchmark_runs.py",
    "cpu_warp_shuffle.py": "test_cpu_backend_benchmark_runs.py",
    "decode_block.py": "test_decode_block_benchmark_runs.py",
    "launch_overhead.py": "test_launch_overhead_benchmark_runs.py",
}
# script -> (arguments of its tiny CPU run, a line its output must have)
CPU_RUNS = {
    "cpu_cooperative.py": (["--tiny"], "grid reduction, cooperative,    8 blocks"),
    "kernel_churn.py": (["--kernels", "6", "--distinct", "2", "--every", "3"], "6 kernels  rss"),
    "ops_host_cost.py": (["--tiny"], "matmul M=1, out="),
    "compiled_op_cost.py": (["--calls", "3"], "ops.elementwise (traced)"),
    "tables_vs_sweep.py": (["--backend", "cpu"], "== softmax: 2 problems, shipped over best"),
}
# GPU-only scripts (with their arguments, if any): skipped where torch sees no GPU
GPU_ONLY = {
    "compile_time.py": [],
    "decode_sweep.py": [],
    "elementwise_layouts.py": [],
    "long_rows.py": [],
    "matmul_vendor.py": [],
    "matmul_midm.py": [],
    "norm_weights.py": [],
    "tables_held_out.py": [],
    "op_call_frameworks.py": [],
    "ops.py": ["--quick"],
    "rows_strided.py": [],
    "short_rows.py": ["--sweep"],
    "tensor_map_cost.py": [],
    "tune_ray.py": [],
    "weight_stream.py": [],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every CPU and GPU-only script's run, started at once (the runs overlap: the whole file
    takes about as long as its slowest script)."""
    tmp = tmp_path_factory.mktemp("benchmarks")
    base = {
        **os.environ,
        "KERNELKIT_CACHE_DIR": str(tmp / "cache"),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    todo = {s: (args, base) for s, (args, _) in CPU_RUNS.items() if CPU_AVAILABLE}
    todo.update({s: (args, {**base, "CUDA_VISIBLE_DEVICES": ""}) for s, args in GPU_ONLY.items()})
    started = {
        script: subprocess.Popen(
            [sys.executable, str(BENCH / script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp,
            env=env,
        )
        for script, (args, env) in todo.items()
    }
    done = {}
    for script, proc in started.items():
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done[script] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def test_every_script_is_listed():
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    listed = set(OWN_TEST) | set(CPU_RUNS) | set(GPU_ONLY)
    assert scripts == listed, (
        f"unlisted: {sorted(scripts - listed)}, gone: {sorted(listed - scripts)}"
    )
    for script, test in OWN_TEST.items():
        assert script in (Path(__file__).parent / test).read_text(), (script, test)


@pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
@pytest.mark.parametrize("script", sorted(CPU_RUNS))
def test_cpu_script_runs_tiny(script, runs):
    if script == "ops_host_cost.py":
        pytest.importorskip("torch")
    out = runs[script]
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    assert CPU_RUNS[script][1] in out.stdout, out.stdout


@pytest.mark.parametrize("script", sorted(GPU_ONLY))
def test_gpu_script_skips_without_a_gpu(script, runs):
    pytest.importorskip("torch")
    out = runs[script]
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    assert out.stdout.startswith("skip: ") and script in out.stdout, out.stdout
    assert "a CUDA GPU" in out.stdout or "sm_90" in out.stdout, out.stdout
