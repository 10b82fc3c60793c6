"""Question: where does each sm_90 decode kernel (and the wgmma tile kernel at skinny M) stand
against cuBLAS on the decode shapes, with its untuned config and with the best of a sweep of its
configs?

For each weight [N, K] of the anchor table and each M: cuBLAS (``F.linear``), then
``gemv_slab``, ``gemv_slab_tc``, ``gemv_tc`` and ``wgmma`` forced with their
heuristics' configs (the ones that cannot run the shape are left out), then every config of
the swept implementations that fits (forced), best four printed. bf16, weights rotated past
twice L2, device time from CUDA-graph replays, % of the copy rate (weight + x + y once)
measured in the same run, and the relative error against float64.

    PYTHONPATH=src python3 benchmarks/decode_sweep.py [--ms 1,4,8,16] [--sweep gemv_slab_tc,wgmma]
        [--only WS=1,SPLIT=2] [--weights 10240x8192,...]

``--only`` keeps the swept configs that have each of its comma-separated settings; ``--sweep ''``
sweeps nothing. ``wgmma`` has no heuristic config at M <= 16: forced there, it runs its default.
``--weights`` takes other [N, K] weights: held-out shapes, which no table row covers, tell
whether matmul's rule for torch tensors (cuBLAS, unless a table row says otherwise) or a
decode kernel with its heuristic's config should run where nothing was tuned; the run ends
with each implementation's geometric mean and worst time over cuBLAS's.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from _common import copy_rate_gbs, cuda_or_skip, graph_us, rotating

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_rules as R
from kernelkit.ops import _matmul_slab_tc as STC
from kernelkit.ops import _matmul_wgmma as W

WEIGHTS = [(4096, 4096), (8192, 8192), (14336, 4096)]


def main() -> int:
    if not cuda_or_skip("decode_sweep.py"):
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="1,4,8,16")
    ap.add_argument("--sweep", default="gemv_slab_tc", help="implementations to sweep ('': none)")
    ap.add_argument("--only", default="", help="swept configs with these settings only")
    ap.add_argument("--weights", help="NxK,... (default: the anchor table's)")
    args = ap.parse_args()
    ms = [int(v) for v in args.ms.split(",")]
    swept = [v for v in args.sweep.split(",") if v]
    parts = [v for v in args.only.split(",") if v]
    weights = WEIGHTS
    if args.weights:
        weights = [tuple(int(d) for d in w.split("x")) for w in args.weights.split(",")]
    over: dict[str, list[float]] = {}  # implementation -> cuBLAS's time over its, per problem
    sweeps = {
        "gemv": (R.GEMV_CONFIGS, lambda _p, _c: None),  # every config runs every problem
        "gemv_slab_tc": (STC.SLAB_TC_CONFIGS, STC.slab_tc_fits),
        "wgmma": (W.WGMMA_CONFIGS, W.wgmma_fits),
    }
    # (implementation, config) -> the problem's best swept time over this config's, per problem
    swept_ratios: dict[tuple[str, str], list[float]] = {}
    rate = copy_rate_gbs()
    print(torch.cuda.get_device_name(), f"copy rate {rate:.0f} GB/s", flush=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    kk = lambda x, w: ops.matmul(x, w, transpose_b=True)
    for n, k in weights:
        wbytes = n * k * 2
        copies = max(2, -(-2 * l2 // wbytes) + 1)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in ms:
            t0 = time.time()
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = x.double() @ ws[0].double().T

            moved = wbytes + 2 * m * (n + k)  # bytes: the weight, x and y once

            def pct(t: float, moved: int = moved) -> float:
                return 100 * moved / (t * 1e-6) / (rate * 1e9)

            d_ref = graph_us(rotating(torch.nn.functional.linear, x, ws))
            shipped = ops.matmul.explain(x, ws[0], transpose_b=True)
            row = [
                f"{n}x{k} M={m}: cuBLAS {d_ref:.1f} ({pct(d_ref):.0f}%); shipped "
                f"{shipped.choice.impl} from {shipped.choice.source}"
            ]
            for impl in ("gemv", "gemv_slab", "gemv_slab_tc", "gemv_tc", "wgmma"):
                try:
                    with force("matmul", impl):
                        y = kk(x, ws[0])
                        d = graph_us(rotating(kk, x, ws))
                        choice = ops.matmul.explain(x, ws[0], transpose_b=True).choice
                except kernelkit.ArgumentError:  # this implementation cannot run the shape
                    continue
                err = ((y.double() - ref).norm() / ref.norm()).item()
                over.setdefault(impl, []).append(d_ref / d)
                row.append(
                    f"{impl} {d:.1f} ({pct(d):.0f}%, {d_ref / d:.2f}x, err {err:.1e}) "
                    f"[{choice.config.describe()}]"
                )
            print("; ".join(row), flush=True)
            options = MM._prepare(x, ws[0], None, None, True)[3]
            problem = MM._RUNNER.problem([x, ws[0], None], x.dtype, None, options)[0]
            for impl in swept:
                configs, fits = sweeps[impl]
                times = []
                for c in configs:
                    wanted = set(parts) <= set(c.describe().split())  # whole settings
                    if fits(problem, c) is not None or not wanted:
                        continue
                    with force("matmul", impl, c):
                        times.append((graph_us(rotating(kk, x, ws), reps=5), c.describe()))
                times.sort()
                for d, label in times:
                    swept_ratios.setdefault((impl, label), []).append(times[0][0] / d)
                best = "; ".join(
                    f"{d:.1f} ({pct(d):.0f}%, {d_ref / d:.2f}x) [{s}]" for d, s in times[:4]
                )
                print(f"   {impl} sweep {len(times)} ({time.time() - t0:.0f} s): {best}")
        ws.clear()
        torch.cuda.empty_cache()
    problems = max((len(v) for v in swept_ratios.values()), default=0)
    ranked = sorted(
        ((geo(v), impl, label) for (impl, label), v in swept_ratios.items() if len(v) == problems),
        reverse=True,
    )
    for mean, impl, label in ranked[:5]:
        print(f"== swept {impl} [{label}]: geomean {mean:.3f}x the best of each of {problems}")
    for impl, ratios in over.items():
        mean = geo(ratios)
        print(
            f"== {impl} (heuristic config) over cuBLAS: geomean {mean:.3f}x, worst "
            f"{min(ratios):.3f}x, best {max(ratios):.3f}x, ahead in {sum(r > 1 for r in ratios)} "
            f"of {len(ratios)} (> 1: faster than cuBLAS)"
        )
    return 0


def geo(values: list[float]) -> float:
    """The geometric mean (the summaries pool every M and weight of the run)."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


if __name__ == "__main__":
    sys.exit(main())
