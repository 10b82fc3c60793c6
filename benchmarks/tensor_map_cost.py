"""Question: what do tensor maps cost the host, and what does the TMA ``wgmma`` (WS = 2), which
makes two per call, cost per eager call against the cp.async one (WS = 1)?

On a Hopper GPU with torch: ``kernelkit.tensor_map`` on the same array again (a cache lookup)
and on a new address each time (the driver's encode), in µs per call; then eager
``ops.matmul`` (x[M, K] @ w[N, K].T, bf16, no graph) forced to ``wgmma`` with WS = 1 and with
WS = 2, host time per call (median of rounds of back-to-back calls, synchronized once a
round) and device time (CUDA-graph replays) side by side, with cuBLAS beside them.

    PYTHONPATH=src python3 benchmarks/tensor_map_cost.py [M] [N] [K]
"""

from __future__ import annotations

import sys

import torch
from _common import cuda_or_skip, graph_us, interleaved_us

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_wgmma as W


def main() -> int:
    if not cuda_or_skip("tensor_map_cost.py"):
        return 0
    m, n, k = (int(v) for v in (sys.argv[1:4] if len(sys.argv) > 3 else (128, 4096, 4096)))
    print(torch.cuda.get_device_name(), f"M={m} N={n} K={k} bfloat16", flush=True)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    pool = torch.empty(1000 * 64 + 4096, device="cuda", dtype=torch.bfloat16)
    views = [pool[i * 64 : i * 64 + 4096].view(64, 64) for i in range(1000)]  # 1000 addresses
    state = {"i": 0}

    def fresh() -> object:  # a new address each call: more than the cache keeps
        state["i"] = (state["i"] + 1) % len(views)
        return kernelkit.tensor_map(views[state["i"]], (64, 64))

    host = interleaved_us(
        {"cached": lambda: kernelkit.tensor_map(x, (64, 64)), "encoded": fresh},
        torch.cuda.synchronize, calls=2000, rounds=5,
    )  # fmt: skip
    print(f"tensor_map: {host['cached']:.2f} µs cached, {host['encoded']:.2f} µs encoded")
    options = MM._prepare(x, w, None, None, True)[3]
    problem = MM._RUNNER.problem([x, w, None], x.dtype, None, options)[0]
    with force("matmul", "wgmma"):
        tma = ops.matmul.explain(x, w, transpose_b=True).choice.config
    v = tma.values
    copy = W.wgmma_config(v["WG"], v["BN"], v["KB"], v["S"], v["SPLIT"], 1)
    if W.wgmma_fits(problem, copy) is not None:  # this tile's copies do not fit a warpgroup
        copy = W.wgmma_config(v["WG"], v["BN"], 1, v["S"], v["SPLIT"], 1)
    calls = {"cuBLAS": lambda: torch.nn.functional.linear(x, w)}
    for name, config in (("wgmma WS=1", copy), ("wgmma WS=2", tma)):

        def call(config=config) -> object:
            with force("matmul", "wgmma", config):
                return ops.matmul(x, w, transpose_b=True)

        calls[name] = call
    eager = interleaved_us(calls, torch.cuda.synchronize, calls=500, rounds=7)
    for name, fn in calls.items():
        config = "" if name == "cuBLAS" else f"[{(copy if 'WS=1' in name else tma).describe()}]"
        print(f"{name:12} eager {eager[name]:7.2f} µs/call, device {graph_us(fn):7.2f} µs {config}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
