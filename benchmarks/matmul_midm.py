"""Question: at M = 17-256, does ``matmul/midm`` (kernelkit's weight-streaming tensor-core tiles,
K split over a cluster) read the weight faster than cuBLAS, and by how much?

For each M and weight [N, K] (a linear layer's, ``transpose_b=True``): cuBLAS (``F.linear``),
kernelkit's ``mma`` and ``wgmma`` tiles with their heuristics' configs (for reference: what
these M ran on before for CuPy and JAX), midm with its heuristic's config, and the best of a
small sweep of midm's configs (the BM that holds M, BN 64-256, 4 or 8 warps, 4 stages (6 for
small tiles, 3 where 4 do not fit), the SPLITs that make 96-300 blocks). Device time: one CUDA
graph of 20 calls, replayed 5 times, the best replay / 20; the weights rotate through copies
past twice the L2 size, so every call reads its weight from DRAM. % = weight bytes / time over
the device-to-device copy rate measured in the same run; ratio = cuBLAS time / midm's best
(> 1: midm ahead); err: relative error of midm's best against float64.

    PYTHONPATH=src python3 benchmarks/matmul_midm.py [17,32,64,128,256] [bfloat16|float16]
    PYTHONPATH=src python3 benchmarks/matmul_midm.py one M N K [CONFIG]

The second form runs cuBLAS and midm (CONFIG as printed in the best config column, e.g.
BM=64,BN=128,WM=1,WN=4,STAGES=4,SPLIT=4; else its heuristic's) 5 times each on one shape, bf16,
and nothing else: a run for Nsight Compute (``ncu``) to profile.

About 2-3 minutes on an H100 (most of it compiling the ~80 swept configs once).
"""

from __future__ import annotations

import sys
import time

import torch

# the copy rate of an eager copy timed by events (this script's own timed a copy captured in a
# CUDA graph, which measured 2432-2710 GB/s where the eager one measures about 3000 on an H100
# and 4260 on an H200)
from _common import copy_rate_gbs, cuda_or_skip

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _matmul_midm as MID

WEIGHTS = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]  # (N, K)


def graph_best_us(fn, calls: int = 20, replays: int = 5) -> float:
    """Best of ``replays`` replays of one CUDA graph of ``calls`` calls, per call."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    best = float("inf")
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / calls)
    return best


def rotating(fn, x, weights):
    """A no-argument call of ``fn(x, w)`` taking the next weight each time."""
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(weights)
        return fn(x, weights[state["i"]])

    return call


def sweep(m: int, n: int) -> list:
    """The configs tried for (m, n): see the module's docstring."""
    bm = next((b for b in (32, 64, 128) if m <= b), 128)
    out = []
    for c in MID.MIDM_CONFIGS:
        v = c.values
        if v["BM"] != bm or v["BN"] < 64:
            continue
        stage, st = (v["BM"] + v["BN"]) * 64 * 2, v["STAGES"]
        small, big = 6 * stage <= 120 * 1024, 4 * stage > 200 * 1024
        if not (st == 4 or (st == 6 and small) or (st == 3 and big)):
            continue
        blocks = -(-m // bm) * -(-n // v["BN"]) * v["SPLIT"]
        if 96 <= blocks <= 300:
            out.append(c)
    return out


def linear(x, w):
    return ops.matmul(x, w, transpose_b=True)


def timed(x, ws, config, impl: str = "midm") -> float | None:
    """``impl``'s device time with ``config`` (None: its heuristic's), or None (reported) if it
    cannot run here (e.g. a cluster the GPU cannot place, wgmma before sm_90a)."""
    try:
        with force("matmul", impl, config):
            return graph_best_us(rotating(linear, x, ws))
    except Exception as e:  # noqa: BLE001 - report, do not stop the benchmark
        what = "heuristic" if config is None else config.describe()
        print(f"  ({impl} {what}: {type(e).__name__}: {str(e)[:200]})", flush=True)
        torch.cuda.synchronize()
        return None


def us(t: float | None) -> str:
    return "n/a" if t is None else f"{t:.1f}"


def one(m: int, n: int, k: int, spec: str | None) -> int:
    """cuBLAS and midm 5 times each on one shape (for ncu); prints midm's choice."""
    config = None
    if spec:
        v = dict(item.split("=") for item in spec.split(","))
        keys = ("BM", "BN", "WM", "WN", "STAGES", "SPLIT")
        config = MID.midm_config(*(int(v[key]) for key in keys))
    x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda") / 8).to(torch.bfloat16)
    with force("matmul", "midm", config):
        print(ops.matmul.explain(x, w, transpose_b=True).explain())
        for _ in range(5):
            torch.nn.functional.linear(x, w)
            linear(x, w)
    torch.cuda.synchronize()
    return 0


def main() -> int:
    if not cuda_or_skip("matmul_midm.py"):
        return 0
    if len(sys.argv) > 4 and sys.argv[1] == "one":
        m, n, k = (int(v) for v in sys.argv[2:5])
        return one(m, n, k, sys.argv[5] if len(sys.argv) > 5 else None)
    ms = [int(v) for v in sys.argv[1].split(",")] if len(sys.argv) > 1 else [17, 32, 64, 128, 256]
    dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.bfloat16
    rate = copy_rate_gbs()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {dtype}, "
          f"copy rate {rate:.0f} GB/s", flush=True)  # fmt: skip
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{'weight':>12} {'M':>4} {'cuBLAS us':>10} {'%':>4} {'mma':>7} {'wgmma':>7} "
          f"{'midm heur':>10} {'midm best':>10} {'%':>4} {'ratio':>6} {'err':>8}  "
          "best config")  # fmt: skip
    t_start = time.time()
    for n, k in WEIGHTS:
        wbytes = n * k * 2
        copies = max(2, -(-2 * l2 // wbytes) + 1)
        ws = [(torch.randn(n, k, device="cuda") / 8).to(dtype) for _ in range(copies)]

        def pct(t: float, wbytes: int = wbytes) -> float:
            return 100 * wbytes / (t * 1e-6) / (rate * 1e9)

        for m in ms:
            x = torch.randn(m, k, device="cuda").to(dtype)
            ref = x.double() @ ws[0].double().T
            d_ref = graph_best_us(rotating(torch.nn.functional.linear, x, ws))
            d_heur = timed(x, ws, None)
            d_mma, d_wg = timed(x, ws, None, "mma"), timed(x, ws, None, "wgmma")
            times = [(t, c) for c in sweep(m, n) if (t := timed(x, ws, c)) is not None]
            if not times:
                print(f"{n:>6}x{k:<5} {m:>4} {d_ref:>10.1f}: midm ran no config", flush=True)
                continue
            d, best = min(times, key=lambda tc: tc[0])
            with force("matmul", "midm", best):
                y = linear(x, ws[0])
            err = ((y.double() - ref).norm() / ref.norm()).item()
            v = best.values
            what = (f"BM={v['BM']},BN={v['BN']},WM={v['WM']},WN={v['WN']},"
                    f"STAGES={v['STAGES']},SPLIT={v['SPLIT']} (of {len(times)})")  # fmt: skip
            print(f"{n:>6}x{k:<5} {m:>4} {d_ref:>10.1f} {pct(d_ref):>4.0f} {us(d_mma):>7} "
                  f"{us(d_wg):>7} {us(d_heur):>10} "
                  f"{d:>10.1f} {pct(d):>4.0f} {d_ref / d:>5.2f}x {err:>8.1e}  {what}",
                  flush=True)  # fmt: skip
            runners_up = sorted(times, key=lambda tc: tc[0])[1:3]
            print("      next: " + "; ".join(f"{t:.1f} [{c.describe()}]" for t, c in runners_up))
        ws.clear()
        torch.cuda.empty_cache()
    print(f"({time.time() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
