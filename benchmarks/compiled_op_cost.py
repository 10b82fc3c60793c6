"""Host cost per call of one built-in op inside a compiled graph (issue 26): for softmax, rms_norm,
layer_norm and matmul, a ``torch.compile(fullgraph=True)`` function of the op called through its
torch op with gradients (``torch.ops.kernelkit.<op>``: torch's Python autograd layer runs on
every call), through its inference twin (``<op>_inference``, what the public op traces to where
no gradient is needed), and the public op itself; for elementwise, the public op (traced into
torch operations) against the eager kernel call. Best of several batches, µs per call.

    python benchmarks/compiled_op_cost.py                 # CPU tensors (the CPU backend)
    python benchmarks/compiled_op_cost.py --device cuda   # per-call host time on a GPU
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelkit import ops

K = torch.ops.kernelkit


def best_us(fn: Callable[[], Any], calls: int, reps: int = 7) -> float:
    for _ in range(10):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return min(samples)


def cases(x: Any, w: Any, b: Any, m: Any) -> dict[str, dict[str, Callable[..., Any]]]:
    swiglu = ops.elementwise("y = a * silu(b)")
    return {
        "softmax": {
            "autograd op": lambda: K.softmax.default(x, -1),
            "inference op": lambda: K.softmax_inference.default(x, -1),
            "ops.softmax": lambda: ops.softmax(x, -1),
        },
        "rms_norm": {
            "autograd op": lambda: K.rms_norm.default(x, w, 1e-6),
            "inference op": lambda: K.rms_norm_inference.default(x, w, 1e-6),
            "ops.rms_norm": lambda: ops.rms_norm(x, w, 1e-6),
        },
        "layer_norm": {
            "autograd op": lambda: K.layer_norm.default(x, w, b, 1e-5),
            "inference op": lambda: K.layer_norm_inference.default(x, w, b, 1e-5),
            "ops.layer_norm": lambda: ops.layer_norm(x, w, b, 1e-5),
        },
        "matmul": {
            "autograd op": lambda: K.matmul.default(x, m, None, None, True),
            "inference op": lambda: K.matmul_inference.default(x, m, None, None, True),
            "ops.matmul": lambda: ops.matmul(x, m, transpose_b=True),
        },
        "elementwise": {"ops.elementwise (traced)": lambda: swiglu(x, x)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shape", default="1,64", help="x's rows,columns")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--only", nargs="*", help="ops to measure (default: all)")
    args = ap.parse_args()
    rows, cols = (int(v) for v in args.shape.split(","))
    dtype = getattr(torch, args.dtype)
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g).to(device=args.device, dtype=dtype)

    x, w, b, m = rand(rows, cols), rand(cols) + 2, rand(cols), rand(32, cols)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else lambda: None
    print(f"# compiled one-op functions on {args.device} {args.dtype} {rows}x{cols}, µs per call")
    for name, variants in cases(x, w, b, m).items():
        if args.only and name not in args.only:
            continue
        for label, fn in variants.items():
            torch._dynamo.reset()
            compiled = torch.compile(fn, fullgraph=True)
            torch.testing.assert_close(compiled(), fn(), atol=1e-3, rtol=1e-3)
            us = best_us(lambda c=compiled: c(), args.calls)
            sync()
            print(f"{name:12s} {label:26s} compiled {us:8.1f}", flush=True)
        eager = next(iter(variants.values())) if name == "elementwise" else variants[f"ops.{name}"]
        print(f"{name:12s} {'eager public op':26s}          {best_us(eager, args.calls):8.1f}")


if __name__ == "__main__":
    main()
