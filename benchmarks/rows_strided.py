"""Question: does a row op on rows that are apart in memory (the query and key heads of a fused
QKV projection, normed per head as Qwen3 and Gemma 3 do; columns sliced out of a wider array)
cost what it costs on contiguous rows, and how does it compare with torch?

One process, one GPU, bfloat16. Each case runs kernelkit on the view itself (its rows read where
they are), on ``view.contiguous()`` (a copy first: what a row op did before it read rows at
strides), on a contiguous array of the same shape (the floor), and torch's own op on the view.
Two times each: device time (a CUDA graph of 10 calls, median of 9 replays) and per call as users
call it (CUDA events around 20 back-to-back eager calls, the host included).

    PYTHONPATH=src python3 benchmarks/rows_strided.py [--tokens 1 16 128 2048]
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import cuda_or_skip, graph_us, time_us

from kernelkit import ops

F = torch.nn.functional
HEADS, KV_HEADS, HEAD_DIM, HIDDEN = 32, 8, 128, 4096


def cases(tokens: int) -> dict[str, tuple]:
    """name -> (kernelkit's op of x, torch's op of (x, *params), x: the view, params)."""
    dt = torch.bfloat16
    qkv = torch.randn(tokens, (HEADS + 2 * KV_HEADS) * HEAD_DIM, device="cuda", dtype=dt)
    q = qkv[:, : HEADS * HEAD_DIM].view(tokens, HEADS, HEAD_DIM)
    k = qkv[:, HEADS * HEAD_DIM : (HEADS + KV_HEADS) * HEAD_DIM].view(tokens, KV_HEADS, HEAD_DIM)
    w = torch.randn(HEAD_DIM, device="cuda", dtype=dt)
    wide = torch.randn(tokens, 2 * HIDDEN, device="cuda", dtype=dt)
    wh, bh = (torch.randn(HIDDEN, device="cuda", dtype=dt) for _ in range(2))
    cols, soft = wide[:, :HIDDEN], wide[:, HIDDEN:]
    return {
        "rms_norm q heads": (lambda x: ops.rms_norm(x, w, 1e-6),
                             lambda x, w: F.rms_norm(x, (HEAD_DIM,), w, 1e-6), q, (w,)),
        "rms_norm k heads": (lambda x: ops.rms_norm(x, w, 1e-6),
                             lambda x, w: F.rms_norm(x, (HEAD_DIM,), w, 1e-6), k, (w,)),
        "layer_norm cols": (lambda x: ops.layer_norm(x, wh, bh, 1e-5),
                            lambda x, w, b: F.layer_norm(x, (HIDDEN,), w, b, 1e-5), cols,
                            (wh, bh)),
        "softmax cols": (ops.softmax, lambda x: torch.softmax(x, -1), soft, ()),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 128, 2048])
    args = parser.parse_args()
    if not cuda_or_skip("rows_strided.py"):
        return 0
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; bfloat16; "
          "µs, device (CUDA graph of 10) / per call (events around 20 eager calls)")  # fmt: skip
    for tokens in args.tokens:
        for name, (kk, th, view, params) in cases(tokens).items():
            ref = th(view.double(), *(p.double() for p in params))
            err = ((kk(view).double() - ref).abs().max() / ref.abs().max()).item()
            dense = view.contiguous()
            variants = {
                "in place": lambda f=kk, v=view: f(v),
                "copy first": lambda f=kk, v=view: f(v.contiguous()),
                "contiguous": lambda f=kk, v=dense: f(v),
                "torch": lambda f=th, v=view, p=params: f(v, *p),
            }
            cells = []
            for label, fn in variants.items():
                dev = graph_us(fn, 10, 9)
                call = time_us(fn)
                cells.append(f"{label} {dev if dev is not None else float('nan'):7.2f}/{call:6.2f}")
            print(f"  T={tokens:<5} {name:<17} " + " | ".join(cells) + f" | err {err:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
