"""CPU backend: what a cooperative launch (grid-wide sync) costs, and what the source-site
rendezvous of SIMD-group collectives costs against a run of the same kernel.

Run: ``PYTHONPATH=src python benchmarks/cpu_cooperative.py``. Prints the best of 5 runs after a
warm-up: a grid reduction (one ``cg::this_grid().sync()``) over 1M floats at 8, 64 and 132
blocks of 128 threads (132: one block per H100 SM, as ggml launches its cooperative softmax),
and a top-4 expert router (``simd_max``/``simd_min`` after data-dependent branches, E = 96) over
2048 tokens.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import kernelkit

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "backend"))
from test_collective_sites import ROUTING
from test_real_structs_coop import GRID_SUM


def best_ms(fn, runs=5):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main():
    grid_sum = kernelkit.kernel(
        "bench_grid_sum", ["x"], ["partial", "total"], GRID_SUM,
        header="#include <cooperative_groups.h>", cooperative=True, backend="cpu",
    )  # fmt: skip
    x = np.random.default_rng(0).standard_normal(1_000_003).astype(np.float32)
    for blocks in (8, 64, 132):
        ms = best_ms(
            lambda b=blocks: grid_sum(
                [x], output_shapes=[(b * 4,), (1,)], output_dtypes=[np.float32] * 2,
                grid=(b * 128, 1, 1), threadgroup=(128, 1, 1),
            )
        )  # fmt: skip
        print(f"grid reduction, cooperative, {blocks:4d} blocks x 128 threads: {ms:8.2f} ms")
    router = kernelkit.metal_kernel("bench_routing", ["scores"], ["inds", "weights"], ROUTING)
    s = np.random.default_rng(1).standard_normal((2048, 96)).astype(np.float32)
    ms = best_ms(
        lambda: router(
            [s], output_shapes=[(2048, 4)] * 2, output_dtypes=[np.int32, np.float32],
            grid=(32 * 2048, 1, 1), threadgroup=(32, 1, 1), template=[("E", 96), ("K", 4)],
        )
    )  # fmt: skip
    print(f"top-4 router, E = 96, 2048 tokens (simd_max/simd_min):          {ms:8.2f} ms")


if __name__ == "__main__":
    main()
