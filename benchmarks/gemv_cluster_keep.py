"""Question: does ``gemv_cluster`` (K split over a thread-block cluster, sm_90) beat what
``ops.matmul`` picks without it on the long-K decode shapes it was made for? If not, it is
retired (the shipped tables no longer pick it).

For N = 4096, K = 14336 and 28672, M = 1-4, bf16, weight [N, K]: ``ops.matmul`` as shipped (the
table's or the heuristic's choice, printed), ``gemv_cluster`` forced with its heuristic's config
and with each of its configs that fits (best printed), and cuBLAS (``F.linear``). Device time
per call: a CUDA graph of 20 calls, replayed 5 times, the best replay / 20.

    PYTHONPATH=src python3 benchmarks/gemv_cluster_keep.py

The last line says KEEP (gemv_cluster's best is at least 3% faster than the pick on some shape)
or RETIRE. Needs an sm_90 GPU and torch; elsewhere it says so and exits 0.
"""

from __future__ import annotations

import sys

from _common import cuda_or_skip

SHAPES = [(4096, 14336), (4096, 28672)]  # (N, K)
MS = (1, 2, 3, 4)
MARGIN = 0.97  # gemv_cluster must take at most 97% of the pick's time to be kept


def graph_best_us(fn, calls: int = 20, replays: int = 5) -> float:
    """Best of ``replays`` replays of a CUDA graph of ``calls`` calls, µs per call."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    best = float("inf")
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    return best


def _measure(x, w) -> bool:
    """Print one shape's row; True when gemv_cluster is ahead of the pick there."""
    import torch.nn.functional as F

    from kernelkit import ops
    from kernelkit._select.override import force
    from kernelkit.ops import _matmul as MM
    from kernelkit.ops import _matmul_cluster as C

    def call():
        return ops.matmul(x, w, transpose_b=True)

    pick = ops.matmul.explain(x, w, transpose_b=True).choice
    t_pick = graph_best_us(call)
    t_cublas = graph_best_us(lambda: F.linear(x, w))
    with force("matmul", "gemv_cluster"):
        t_heur = graph_best_us(call)
    options = MM._prepare(x, w, None, None, True)[3]
    problem = MM._RUNNER.problem([x, w, None], x.dtype, None, options)[0]
    best = (float("inf"), "")
    for c in C.CLUSTER_CONFIGS:
        if C.cluster_fits(problem, c) is None:
            with force("matmul", "gemv_cluster", c):
                best = min(best, (graph_best_us(call), c.describe()))
    (m, k), n = x.shape, w.shape[0]
    print(
        f"N={n} K={k} M={m}: pick {pick.impl} [{pick.config.describe()}] {t_pick:.2f}; "
        f"gemv_cluster heuristic {t_heur:.2f}, best {best[0]:.2f} [{best[1]}]; "
        f"cuBLAS {t_cublas:.2f}; best/pick {best[0] / t_pick:.3f}",
        flush=True,
    )
    return min(best[0], t_heur) <= MARGIN * t_pick


def main() -> int:
    if not cuda_or_skip("gemv_cluster_keep.py"):
        return 0
    import torch

    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        print(
            f"skip: gemv_cluster_keep.py needs an sm_90 GPU (gemv_cluster's), not sm_{major}{minor}"
        )
        return 0

    print(torch.cuda.get_device_name(), "bf16, µs per call (graph of 20, best of 5)", flush=True)
    ahead = []
    for n, k in SHAPES:
        weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for m in MS:
            if _measure(torch.randn(m, k, device="cuda", dtype=torch.bfloat16), weight):
                ahead.append((n, k, m))
        del weight
        torch.cuda.empty_cache()
    verdict = f"KEEP (ahead on {ahead})" if ahead else "RETIRE (never 3% ahead of the pick)"
    print(f"gemv_cluster: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
