"""Question: how much faster does a tune-spec sweep run through Ray on two GPUs than on one, and
what does a Ray task per candidate cost against the local worker pool?

The sweep: the tiled SGEMM of benchmarks/autotune.py (24 configs, 4 of them illegal) over
--shapes, as a tune spec on the CUDA backend. Each run is its own process with the GPUs it may
use (CUDA_VISIBLE_DEVICES) and a fresh start (``fresh``: nothing read back): first the local
pool on one GPU (it also fills the compile cache, so every later run compiles nothing), then Ray
on one GPU and on two (a local Ray cluster started by the run, ``num_gpus`` = the GPUs), then
the local pool on two GPUs (``--devices 0,1``). Printed: wall seconds per run (Ray's start
included), the speed-ups, and whether every run picked the same winners (timing noise may swap
configs within a few percent of each other).

Run (2 GPUs, Ray installed):  PYTHONPATH=src python3 benchmarks/tune_ray.py
     (CPU smoke test, tiny sizes):  PYTHONPATH=src python3 benchmarks/tune_ray.py --backend cpu
Options: --shapes MxNxK,... --workers N (the "several" count, default 2)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GPU_SHAPES = "2048x2048x2048,4096x4096x1024"
CPU_SHAPES = "48x40x32,64x64x64"


def write_spec(folder: Path, shapes: str, backend: str) -> Path:
    entries = []
    for text in shapes.split(","):
        m, n, k = (int(v) for v in text.split("x"))
        entries.append(
            {
                "inputs": {"a": {"shape": [m, k]}, "b": {"shape": [k, n]}},
                "outputs": {"c": {"shape": [m, n]}},
            }
        )
    spec = {
        "module": str(HERE / "autotune.py"),
        "object": "tuned",
        "backend": backend,
        "timeout_s": 300,
        "shapes": entries,
    }
    path = folder / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def child(spec: str, how: str, workers: int, backend: str) -> None:
    """One run in this process: print wall seconds and the winners as one JSON line."""
    import kernelkit

    t0 = time.perf_counter()
    if how == "ray":
        import ray

        cpu = backend == "cpu"
        ray.init(
            num_cpus=workers if cpu else None,
            num_gpus=None if cpu else workers,
            include_dashboard=False,
            log_to_driver=False,
        )
        tuning = kernelkit.tune_spec(spec, ray=True, fresh=True, store=False, quiet=True)
        ray.shutdown()
    else:
        devices = None if workers == 1 else [str(i) for i in range(workers)]
        tuning = kernelkit.tune_spec(spec, devices=devices, fresh=True, store=False, quiet=True)
    seconds = time.perf_counter() - t0
    winners = [r.config.describe() for r in tuning.records]
    print(json.dumps({"seconds": seconds, "measured": tuning.measured, "winners": winners}))


def run(spec: Path, how: str, workers: int, backend: str, cache: str) -> dict:
    env = dict(os.environ, KERNELKIT_CACHE_DIR=cache)
    if backend != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(workers))
    args = [sys.executable, __file__, "--child", how, "--workers", str(workers)]
    args += ["--spec", str(spec), "--backend", backend]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{how} x{workers} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _cuda_devices() -> int:
    """CUDA devices this process sees (0 without torch's CUDA)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--shapes")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--child", choices=("ray", "pool"), help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.spec, args.child, args.workers, args.backend)
        return 0
    if args.backend == "cuda" and not _cuda_devices():
        print("skip: tune_ray.py needs a CUDA GPU (or --backend cpu for the smoke run)")
        return 0
    shapes = args.shapes or (CPU_SHAPES if args.backend == "cpu" else GPU_SHAPES)
    with tempfile.TemporaryDirectory() as tmp:
        spec = write_spec(Path(tmp), shapes, args.backend)
        cache = str(Path(tmp) / "cache")
        n = args.workers
        unit = "CPU" if args.backend == "cpu" else "GPU"
        order = [("pool", 1), ("ray", 1), ("ray", n), ("pool", n)]
        results = {}
        for how, w in order:  # each run's line as it ends (a cut-off session keeps them)
            results[(how, w)] = r = run(spec, how, w, args.backend, cache)
            print(f"done: {how} on {w} {unit}(s) in {r['seconds']:.1f} s", flush=True)
    print(f"sweep: {shapes} ({args.backend}), every candidate measured once per run")
    for (how, w), r in results.items():
        name = f"{'Ray' if how == 'ray' else 'local pool'}, {w} {unit}{'s' if w > 1 else ''}"
        print(f"  {name:22} {r['seconds']:8.1f} s  ({r['measured']} candidates)")
    ray1, rayn = results[("ray", 1)]["seconds"], results[("ray", n)]["seconds"]
    pool1, pooln = results[("pool", 1)]["seconds"], results[("pool", n)]["seconds"]
    print(f"Ray speed-up, {n} {unit}s vs 1: {ray1 / rayn:.2f}x")
    print(f"local pool speed-up, {n} {unit}s vs 1: {pool1 / pooln:.2f}x")
    print(f"Ray on {n} {unit}s vs local pool on 1: {pool1 / rayn:.2f}x")
    same = len({tuple(r["winners"]) for r in results.values()}) == 1
    print(f"same winners in every run: {'yes' if same else 'no (timing noise; see records)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
