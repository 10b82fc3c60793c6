"""Question: does ``ops.elementwise`` on broadcast and sliced inputs (a bias of [N] added to
[M, N], a per-row scale of [M, 1], rows sliced out of a wider array) move its bytes as fast as on
contiguous inputs of the output's shape, and how does it compare with torch eager?

One process, one GPU. Per layout and dtype: device time (a CUDA graph of 10 calls, median of 9
replays) of ``y = a * silu(b) + c``, as a percentage of a torch copy of the bytes the call must
move (each distinct input byte read once, y written once) measured in the same run; torch eager's
``a * F.silu(b) + c`` on the same arrays and its time over kernelkit's; the implementation chosen;
then the time a call costs as users call it (CUDA events around 20 back-to-back eager calls, the
host included: what a decode step's sizes, ``--rows 16``, are bound by), both.

    PYTHONPATH=src python3 benchmarks/elementwise_layouts.py [--rows M] [--cols N]
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import cuda_or_skip, graph_us, time_us

from kernelkit import ops

F = torch.nn.functional
FUSED = ops.elementwise("y = a * silu(b) + c")


def layouts(m: int, n: int, dtype: torch.dtype) -> dict[str, tuple]:
    """name -> (a, b, c, bytes the call must move)."""

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", dtype=dtype)

    e = torch.tensor([], dtype=dtype).element_size()
    wide = r(m, 2 * n)
    return {
        "contiguous": (r(m, n), r(m, n), r(m, n), 4 * m * n * e),
        "bias [N]": (r(m, n), r(m, n), r(n), (3 * m * n + n) * e),
        "per-row [M, 1]": (r(m, n), r(m, 1), r(m, n), (3 * m * n + m) * e),
        "sliced rows": (wide[:, :n], wide[:, n:], r(m, n), 4 * m * n * e),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--cols", type=int, default=4096)
    args = parser.parse_args()
    if not cuda_or_skip("elementwise_layouts.py"):
        return 0
    m, n = args.rows, args.cols
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; [{m}, {n}]; "
          "device time: CUDA graph of 10 calls, median of 9 replays")  # fmt: skip
    for dtype in (torch.bfloat16, torch.float32):
        src = torch.randn(m * n * 4, device="cuda", dtype=dtype)
        dst = torch.empty_like(src)
        for name, (a, b, c, nbytes) in layouts(m, n, dtype).items():
            k = nbytes // 2 // src.element_size()  # the same bytes: half read, half written
            t_copy = graph_us(lambda k=k, s=src, d=dst: d[:k].copy_(s[:k]), 10, 9)
            y = FUSED(a, b, c)
            ref = a.double() * F.silu(b.double()) + c.double()
            err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            t = graph_us(lambda a=a, b=b, c=c: FUSED(a, b, c), 10, 9)
            te = graph_us(lambda a=a, b=b, c=c: a * F.silu(b) + c, 10, 9)
            impl = FUSED.explain(a, b, c).choice.impl.split("/")[-1]
            assert t is not None
            assert te is not None
            assert t_copy is not None
            call = time_us(lambda a=a, b=b, c=c: FUSED(a, b, c))
            call_e = time_us(lambda a=a, b=b, c=c: a * F.silu(b) + c)
            print(
                f"  {str(dtype)[6:]:<9} {name:<15} kk {t:8.2f} us {100 * t_copy / t:5.1f}% "
                f"({impl}) | torch eager {te:8.2f} us ({te / t:4.2f}x) | per call: kk "
                f"{call:7.2f} us, torch eager {call_e:7.2f} ({call_e / call:4.2f}x) | err {err:.1e}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
