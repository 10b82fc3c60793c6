"""Question: does autotuning pick a config within 5% of the best of an exhaustive sweep, how long
does it take, and does a fresh process replay the database without timing anything?

A shared-memory tiled SGEMM (C = A @ B, float32, row-major) with template TILE (output tile
edge), R (rows per thread) and BK (K slice per shared-memory stage): 24 configs, 4 of which
exceed 1024 threads per block and are skipped. Per shape: the first call tunes (parallel
compile, output checks, event timing); then every config is timed again in the same run (an
exhaustive sweep) and the chosen config's time is compared with the sweep's best. Then a fresh
process calls the kernel for every shape from the database and prints how many timings it took.

Run (GPU):  PYTHONPATH=src python3 benchmarks/autotune.py
     (CPU smoke test, tiny sizes): PYTHONPATH=src python3 benchmarks/autotune.py --backend cpu
Options: --db DIR (tuning database; default: a fresh temporary directory), --shapes MxNxK,...
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import cuda_or_skip

import kernelkit
from kernelkit import _config
from kernelkit._select.tuning import db as tuning
from kernelkit._tune import timing

BODY = """
const int M = a_shape[0], K = a_shape[1], N = b_shape[1];
__shared__ float As[TILE][BK + 1];
__shared__ float Bs[BK][TILE];
const int threads = TILE * TILE / R;
const int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE;
const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
float acc[R];
for (int r = 0; r < R; ++r) acc[r] = 0.0f;
for (int k0 = 0; k0 < K; k0 += BK) {
    for (int i = threadIdx.x; i < TILE * BK; i += threads) {
        int r = i / BK, c = i % BK;
        As[r][c] = (row0 + r < M && k0 + c < K) ? a[(long)(row0 + r) * K + k0 + c] : 0.0f;
    }
    for (int i = threadIdx.x; i < BK * TILE; i += threads) {
        int r = i / TILE, c = i % TILE;
        Bs[r][c] = (k0 + r < K && col0 + c < N) ? b[(long)(k0 + r) * N + col0 + c] : 0.0f;
    }
    __syncthreads();
    for (int kk = 0; kk < BK; ++kk) {
        float bv = Bs[kk][tx];
        for (int r = 0; r < R; ++r) acc[r] += As[ty * R + r][kk] * bv;
    }
    __syncthreads();
}
for (int r = 0; r < R; ++r) {
    int row = row0 + ty * R + r, col = col0 + tx;
    if (row < M && col < N) c[(long)row * N + col] = acc[r];
}
"""

sgemm = kernelkit.kernel("bench_sgemm_tiled", ["a", "b"], ["c"], BODY)
CONFIGS = [
    {"TILE": t, "R": r, "BK": bk, "threadgroup": (t * t // r,)}
    for t, r, bk in itertools.product((16, 32, 64), (1, 2, 4, 8), (8, 16))
]


def grid(problem, config):
    """Threads: one block of TILE*TILE/R threads per TILE x TILE tile of C."""
    v = config.values
    m, n = problem.arg("a").shape[0], problem.arg("b").shape[1]
    tiles_n, tiles_m = -(-n // v["TILE"]), -(-m // v["TILE"])
    return (tiles_n * config.threadgroup[0], tiles_m, 1)


tuned = kernelkit.autotune(
    sgemm,
    configs=CONFIGS,
    key=["a.shape[0]:pow2", "b.shape[1]:pow2", "a.shape[1]:pow2"],
    grid=grid,
    quiet=True,
)

GPU_SHAPES = "1024x1024x1024,2048x2048x2048,4096x4096x1024,256x4096x4096,8192x512x512"
CPU_SHAPES = "48x40x32,64x64x64"


def arrays(m: int, n: int, k: int, backend: str, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if backend == "cpu":
        return a, b, ref
    import torch

    return torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), ref


def host(x):
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def tune_all(shapes: list[tuple[int, int, int]], backend: str) -> int:
    print(f"kernelkit {kernelkit.__version__}, backend {backend}; {len(CONFIGS)} configs")
    header = (
        f"{'M x N x K':>18} {'chosen config':>28} {'chosen us':>10} {'best us':>10} "
        f"{'ratio':>6} {'tuning s':>8} {'rel err':>8}"
    )
    print(header)
    worst = 1.0
    for m, n, k in shapes:
        a, b, ref = arrays(m, n, k, backend, seed=m + n + k)
        call = dict(output_shapes=[(m, n)], output_dtypes=["float32"])
        t0 = time.perf_counter()
        (c,) = tuned([a, b], **call)
        first_s = time.perf_counter() - t0
        err = np.linalg.norm(host(c) - ref) / np.linalg.norm(ref)
        choice = tuned.explain([a, b], **call).choice
        sweep = tuned.tune([a, b], **call, store=False, quiet=True)
        times = {x.config: x.time_s for x in sweep.candidates if x.time_s is not None}
        best = min(times.values())
        mine = times.get(choice.config)
        ratio = mine / best if mine else float("nan")
        worst = max(worst, ratio) if mine else worst
        record = tuning.current_db().records()
        spent = next((r.tuning_s for r in record if r.key == choice.key), first_s)
        v = choice.config.values
        desc = f"TILE={v['TILE']} R={v['R']} BK={v['BK']}"
        print(
            f"{f'{m}x{n}x{k}':>18} {desc:>28} {mine * 1e6 if mine else float('nan'):10.1f} "
            f"{best * 1e6:10.1f} {ratio:6.3f} {spent:8.2f} {err:8.1e}"
        )
        skipped = sum(x.status == "skipped" for x in sweep.candidates)
        bad = [x for x in sweep.candidates if x.status in ("failed", "rejected")]
        if bad:
            print("   not ok: " + "; ".join(f"{x.config.describe()}: {x.detail}" for x in bad))
        print(f"   ({skipped} configs skipped: over the device's threads per block)")
    print(f"worst chosen/best ratio: {worst:.3f} (target <= 1.05)")
    print(f"timings in this process: {timing.count()}; tunings: {tuned.tunings}")
    return 0


def replay(shapes: list[tuple[int, int, int]], backend: str) -> int:
    sources = []
    for m, n, k in shapes:
        a, b, ref = arrays(m, n, k, backend, seed=1)
        call = dict(output_shapes=[(m, n)], output_dtypes=["float32"])
        (c,) = tuned([a, b], **call)
        assert np.linalg.norm(host(c) - ref) / np.linalg.norm(ref) < 1e-4
        sources.append(tuned.explain([a, b], **call).choice.source)
    print(
        f"fresh process replaying the database: {len(shapes)} shapes, decisions from "
        f"{sorted(set(sources))}, timings taken: {timing.count()}, tunings: {tuned.tunings}"
    )
    return 0 if timing.count() == 0 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--shapes", default=None, help="MxNxK,... (default depends on the backend)")
    p.add_argument("--db", default=None, help="tuning database directory (default: temporary)")
    p.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    text = args.shapes or (CPU_SHAPES if args.backend == "cpu" else GPU_SHAPES)
    shapes = [tuple(int(v) for v in s.split("x")) for s in text.split(",")]
    if args.backend == "cuda" and not cuda_or_skip("autotune.py (or --backend cpu)"):
        return 0
    folder = args.db or tempfile.mkdtemp(prefix="kernelkit-autotune-db-")
    tuning._current = (_config.config, tuning.TuningDB(folder))  # this run's own database
    if args.replay:
        return replay(shapes, args.backend)  # type: ignore[arg-type]
    status = tune_all(shapes, args.backend)  # type: ignore[arg-type]
    again = [sys.executable, *sys.argv, "--replay", "--db", folder]
    env = dict(os.environ, KERNELKIT_TUNE="serve")  # serve: replay only, never time
    done = subprocess.run(again, env=env, capture_output=True, text=True)
    print(done.stdout.strip() or done.stderr[-2000:])
    return status or done.returncode


if __name__ == "__main__":
    sys.exit(main())
