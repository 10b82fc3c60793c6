"""Question: a table row covers a bucket of M (matmul: 2, 3-4, 5-8, 9-16, 17-64, 65-128, ...)
but was tuned at one M of it; at the other M of the bucket, is the shipped choice still at least
level with cuBLAS?

For each weight [N, K] (default: the Llama-3-8B/70B, Mixtral-8x7B, Qwen2-7B and Llama-2-7B
weights of ``tables_vs_sweep.py``) and each M (default: M the tuning runs did not time),
``ops.matmul``'s shipped choice (tables, then rules) against ``F.linear`` (cuBLAS) on torch
tensors, bf16 (``--dtype float16``: fp16): device time of CUDA graphs of 20 calls, weights
rotated past twice L2, each timed twice alternately. Printed per problem: both times, cuBLAS's
over kernelkit's (above 1: kernelkit faster), the implementation and where the choice came
from; then the geometric mean and the extremes.

    PYTHONPATH=src python3 benchmarks/tables_held_out.py [--ms 2,6,12,32,48,96]
        [--weights 4096x4096,...] [--dtype bfloat16|float16]
"""

from __future__ import annotations

import argparse
import math
import sys

from _common import cuda_or_skip, graph_us, rotating

# [N, K] of the q/k/v (fused), o, up and down projections
WEIGHTS = [
    (6144, 4096), (4096, 4096), (14336, 4096), (4096, 14336),  # Llama-3-8B, Mixtral-8x7B
    (10240, 8192), (8192, 8192), (28672, 8192), (8192, 28672),  # Llama-3-70B
    (4608, 3584), (3584, 3584), (18944, 3584), (3584, 18944),  # Qwen2-7B
    (12288, 4096), (11008, 4096), (4096, 11008),  # Llama-2-7B (and decode_block.py's H = 11008)
]  # fmt: skip


def main() -> int:
    if not cuda_or_skip("tables_held_out.py"):
        return 0
    import torch

    from kernelkit import ops

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="2,6,12,32,48,96")
    ap.add_argument("--weights", help="NxK,... (default: the models' weights)")
    ap.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16")
    args = ap.parse_args()
    ms = [int(v) for v in args.ms.split(",")]
    weights = WEIGHTS
    if args.weights:
        weights = [tuple(int(d) for d in w.split("x")) for w in args.weights.split(",")]
    dtype = getattr(torch, args.dtype)
    print(torch.cuda.get_device_name(), args.dtype, flush=True)
    linear = torch.nn.functional.linear
    kk = lambda x, w: ops.matmul(x, w, transpose_b=True)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    ratios = []
    for n, k in weights:
        copies = max(2, -(-2 * l2 // (n * k * 2)) + 1)
        ws = [torch.randn(n, k, device="cuda").div_(k**0.5).to(dtype)
              for _ in range(copies)]  # fmt: skip
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            choice = ops.matmul.explain(x, ws[0], transpose_b=True).choice
            times = [graph_us(rotating(f, x, ws)) for f in (linear, kk, linear, kk)]
            if any(t is None for t in times):
                print(f"{m}x{n}x{k}: not capturable in a CUDA graph", flush=True)
                continue
            ref, own = times[0] + times[2], times[1] + times[3]
            ratios.append(ref / own)
            print(
                f"{m}x{n}x{k}: cuBLAS {times[0]:.1f}/{times[2]:.1f} us, kernelkit "
                f"{times[1]:.1f}/{times[3]:.1f} us: {ref / own:.3f}x ({choice.impl}, from "
                f"{choice.source})",
                flush=True,
            )
        ws.clear()
        torch.cuda.empty_cache()
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(
            f"== {len(ratios)} problems, cuBLAS over kernelkit: geomean {geo:.3f}x, worst "
            f"{min(ratios):.3f}x, best {max(ratios):.3f}x, behind by over 3% in "
            f"{sum(r < 0.97 for r in ratios)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
