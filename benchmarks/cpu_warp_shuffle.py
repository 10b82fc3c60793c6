"""CPU backend: cost of warp shuffles. A warp sum of 2^20 floats through five full-mask
__shfl_down_sync (the common case), and the same sum done by each half-warp under its own mask.

Run: ``KERNELKIT_CACHE_DIR=... PYTHONPATH=src python3 benchmarks/cpu_warp_shuffle.py [--tiny]``.
Prints the median of several runs after a warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kernelkit

HEAD = "const unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31u;\n"
FULL = kernelkit.kernel(
    "warp_sum_full",
    ["x"],
    ["y"],
    HEAD + "float v = x[i];\n"
    "for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);\n"
    "if (lane == 0) y[i / 32] = v;",
)
HALVES = kernelkit.kernel(
    "warp_sum_halves",
    ["x"],
    ["y"],
    HEAD + "const unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;\nfloat v = x[i];\n"
    "for (int o = 8; o > 0; o >>= 1) v += __shfl_down_sync(m, v, o, 16);\n"
    "v += __shfl_down_sync(0xffffffffu, v, 16);\n"
    "if (lane == 0) y[i / 32] = v;",
)


def median_s(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    n = 2**12 if args.tiny else 2**20
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    ref = x.reshape(-1, 32).sum(1)
    wrong = []
    for label, k in (("full mask", FULL), ("half-warp masks", HALVES)):

        def call(k=k):
            return k(
                [x],
                output_shapes=[(n // 32,)],
                output_dtypes=[np.float32],
                grid=(n, 1, 1),
                threadgroup=(256, 1, 1),
                backend="cpu",
            )[0]

        ok = np.allclose(call(), ref, rtol=1e-4, atol=1e-4)
        if not ok:
            wrong.append(label)
        s = median_s(call, args.repeat)
        print(
            f"warp sum, {label:<16} n={n}: {s * 1e3:8.2f} ms  ({s * 1e9 / n:5.1f} ns/element)"
            f"{'' if ok else '  WRONG RESULT'}"
        )
    if wrong:
        raise SystemExit(f"wrong warp sums: {', '.join(wrong)}")


if __name__ == "__main__":
    main()
