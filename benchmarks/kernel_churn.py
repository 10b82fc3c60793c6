"""Create, call and drop many CPU kernels in one process: memory and mappings stay bounded.

Each kernel object is new, so its first call loads a library (from the in-memory artifact, or
compiled for the first ``--distinct`` ones) and dropping it unloads the library (its helper
threads joined, dlclose). Prints RSS, the count of /proc/self/maps lines and the time per
kernel every ``--every`` kernels.

    python benchmarks/kernel_churn.py --kernels 100000 --distinct 8
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

import numpy as np

import kernelkit

BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] * K;"


def maps_count() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def churn(kernels: int, distinct: int, every: int, report: bool = True) -> list[tuple]:
    """Rows (kernels so far, RSS MB, maps, ms per kernel over the last stretch)."""
    x = np.arange(64, dtype=np.float32)
    rows, t0 = [], time.perf_counter()
    for n in range(1, kernels + 1):
        k = kernelkit.kernel("churn", ["x"], ["y"], BODY)
        (y,) = k(
            [x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(64, 1, 1),
            threadgroup=(64, 1, 1), template=[("K", n % distinct + 1)],
        )  # fmt: skip
        if y[1] != n % distinct + 1:
            raise SystemExit(f"wrong result at kernel {n}")
        del k, y
        if n % every == 0:
            gc.collect()
            t1 = time.perf_counter()
            rows.append((n, rss_mb(), maps_count(), (t1 - t0) / every * 1e3))
            t0 = t1
            if report:
                print("%8d kernels  rss %7.1f MB  maps %6d  %.3f ms/kernel" % rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--distinct", type=int, default=8, help="template values (compiles)")
    ap.add_argument("--every", type=int, default=5000)
    a = ap.parse_args()
    print(f"kernelkit {kernelkit.__version__}: {a.kernels} kernels, {a.distinct} distinct")
    churn(a.kernels, a.distinct, a.every)


if __name__ == "__main__":
    main()
