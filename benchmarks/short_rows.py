"""Question: on short rows (a router's softmax over 4-64 experts, a norm over a head of 64-128),
does the heuristic's config reach the copy rate and beat torch, and how far is it from the best
register config?

One process, one GPU. For each op (softmax, rms_norm, layer_norm), dtype (bfloat16, float32) and
shape: the heuristic's choice, device time (a CUDA graph of 10 calls, median of 9 replays) as a
fraction of the copy rate for the bytes the op must move (timed in the same run), torch eager's
device time, and with ``--sweep`` every register config that holds the row (forced), best first.
Each result is checked against float64 first.

    PYTHONPATH=src python3 benchmarks/short_rows.py [--sweep] [--shape 65536x8 ...]
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import cuda_or_skip, graph_us

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops._rowops import CONFIGS

F = torch.nn.functional
SHAPES = ("16x8", "4096x8", "65536x8", "262144x8", "65536x16", "65536x32", "65536x64",
          "65536x128", "32x64")  # fmt: skip


def _ops(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict[str, tuple]:
    """name -> (kernelkit's call, torch's call, float64 reference, the op's arguments)."""
    n, x64 = x.shape[-1], x.double()
    return {
        "softmax": (lambda: ops.softmax(x), lambda: torch.softmax(x, -1),
                    torch.softmax(x64, -1), (x,)),
        "rms_norm": (lambda: ops.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6),
                     F.rms_norm(x64, (n,), w.double(), 1e-6), (x, w)),
        "layer_norm": (lambda: ops.layer_norm(x, w, b, 1e-5),
                       lambda: F.layer_norm(x, (n,), w, b, 1e-5),
                       F.layer_norm(x64, (n,), w.double(), b.double(), 1e-5), (x, w, b)),
    }  # fmt: skip


def _sweep(name: str, fn, x: torch.Tensor) -> list[tuple[float, str]]:
    """(µs, BLOCKxITEMSxROWS) of every register config that holds the row, fastest first."""
    vec, n = 16 // x.element_size(), x.shape[-1]
    found = []
    for c in CONFIGS:
        v = c.values
        if v["ITEMS"] == 0 or v["BLOCK"] * v["ITEMS"] * vec < n or v["BLOCK"] > 64:
            continue
        with force(name, "rows", {**v, "threadgroup": c.threadgroup}):
            t = graph_us(fn, 10, 9)
        if t is not None:
            found.append((t, f"{v['BLOCK']}x{v['ITEMS']}x{v['ROWS']}"))
    return sorted(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="ROWSxN (repeatable)")
    parser.add_argument("--sweep", action="store_true", help="also every register config")
    args = parser.parse_args()
    if not cuda_or_skip("short_rows.py"):
        return 0
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; µs device time "
          "(CUDA graph of 10), % of the copy rate; config BLOCKxITEMSxROWS")  # fmt: skip
    for dtype in (torch.bfloat16, torch.float32):
        for shape in args.shape or SHAPES:
            rows, n = (int(v) for v in shape.split("x"))
            x = torch.randn(rows, n, device="cuda", dtype=dtype)
            w, b = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
            half = x.numel() * x.element_size()  # read once, written once
            copy = graph_us(lambda k=half: dst[:k].copy_(src[:k]), 10, 9) or float("nan")
            for name, (kk, th, ref, arrays) in _ops(x, w, b).items():
                err = ((kk().double() - ref).norm() / ref.norm()).item()
                v = getattr(ops, name).explain(*arrays).choice.config.values
                chosen = f"{v['BLOCK']}x{v['ITEMS']}x{v.get('ROWS', 1)}"
                t, tt = graph_us(kk, 10, 9) or float("nan"), graph_us(th, 10, 9) or float("nan")
                line = (f"{str(dtype)[6:]:8} {name:10} {shape:>10} {chosen:>9} {t:7.2f} "
                        f"({100 * copy / t:5.1f}%)  torch {tt:7.2f} ({tt / t:4.2f}x)  "
                        f"err {err:.1e}")  # fmt: skip
                if args.sweep:
                    best = _sweep(name, kk, x)[:4]
                    line += "  best " + " ".join(f"{c}:{s:.2f}" for s, c in best)
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
