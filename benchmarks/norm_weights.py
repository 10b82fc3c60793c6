"""Question: do rms_norm and layer_norm on bfloat16 rows run as fast with float32 weights (what
autocast leaves a norm's weight, and mixed-precision checkpoints keep) as with bfloat16 ones,
and how do they compare with torch eager on the same arrays?

One process, one GPU. Per shape and weight dtype: device time of kernelkit's chosen kernel (a
CUDA graph of 10 calls, median of 9 replays) and as a percentage of a torch copy of x's bytes
(read + write) measured in the same run, the error against float64, and torch eager's time on
the same arrays (or the error it raises: its fused layer_norm wants weights of x's type).

    PYTHONPATH=src python3 benchmarks/norm_weights.py [--shape ROWSxN ...]

Every timed call reads x from DRAM: the captured calls take turns over copies of x (each with
its own weights) that together hold at least 256 MiB.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
from _common import cuda_or_skip, graph_us

from kernelkit import ops

SHAPES = [(1, 4096), (16, 4096), (4096, 4096), (8192, 8192), (1024, 32000), (512, 65536),
          (64, 262144), (4096, 128256)]  # fmt: skip
ROTATE_BYTES = 256 << 20
F = torch.nn.functional


def in_turns(fn, args: list[tuple]):
    """``fn`` called on the next of ``args`` at each call (each captured call its own inputs)."""
    it = itertools.cycle(args)
    return lambda: fn(*next(it))


def bench(shape: tuple[int, int]) -> None:
    n = shape[1]
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    size = x.numel() * x.element_size()
    copies = min(64, -(-ROTATE_BYTES // size))
    xs = [x, *(torch.randn_like(x) for _ in range(copies - 1))]
    outs = [torch.empty_like(v) for v in xs]
    t_copy = graph_us(in_turns(lambda s, d: d.copy_(s), list(zip(xs, outs))), 10, 9)
    assert t_copy is not None
    for wdtype in (torch.bfloat16, torch.float32):
        ws = [tuple(torch.randn(n, device="cuda", dtype=wdtype) for _ in range(2)) for _ in xs]
        for name, kk, ref in (
            ("rms_norm", lambda x, w, _b, o: ops.rms_norm(x, w, 1e-6, out=o),
             lambda x, w, _b: F.rms_norm(x, (n,), w, 1e-6)),
            ("layer_norm", lambda x, w, b, o: ops.layer_norm(x, w, b, 1e-5, out=o),
             lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5)),
        ):  # fmt: skip
            out = torch.full_like(x, float("nan"))
            kk(xs[0], *ws[0], out)
            exact = ref(xs[0].double(), *(v.double() for v in ws[0]))
            err = ((out.double() - exact).abs().max() / exact.abs().max()).item()
            t = graph_us(in_turns(kk, [(v, *wb, o) for v, wb, o in zip(xs, ws, outs)]), 10, 9)
            assert t is not None
            try:
                te = graph_us(in_turns(ref, [(v, *wb) for v, wb in zip(xs, ws)]), 10, 9)
                torch_cell = f"torch eager {te:9.2f} us ({te / t:5.2f}x)" if te else "-"
            except RuntimeError as e:
                torch_cell = f"torch eager: {str(e).splitlines()[0][:60]}"
            print(f"  {name:<10} {shape[0]:>5}x{n:<7} w {str(wdtype)[6:]:<8} kk {t:9.2f} us "
                  f"{100 * t_copy / t:5.1f}% err {err:.1e} | {torch_cell}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="only ROWSxN (repeatable)")
    args = parser.parse_args()
    if not cuda_or_skip("norm_weights.py"):
        return 0
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else SHAPES
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; bfloat16 x; "
          "device time: CUDA graph of 10 calls, median of 9 replays")  # fmt: skip
    for shape in shapes:
        bench(shape)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
