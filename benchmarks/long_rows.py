"""Question: do softmax, rms_norm and layer_norm on long rows (a vocabulary, 32K-256K elements)
read x from DRAM once and run at the copy rate, ahead of torch eager and torch.compile?

One process, one GPU. Per op, shape and dtype: device time of kernelkit's chosen kernel (a CUDA
graph of 20 calls, median of 15 replays), and as a percentage of a torch copy of the same bytes
measured in the same run (read + write: what a kernel that reads x once and writes y once cannot
beat); torch eager and torch.compile (graphs too) and their ratios to kernelkit; the register
kernel (``rows``, which reads a long row twice) forced, for the before/after; the choice.

    PYTHONPATH=src python3 benchmarks/long_rows.py [--fp16] [--no-compile] [--sweep]
        [--shape ROWSxN ...]

``--sweep`` also times every rows_smem / rows_cluster / rows_split config (forced) and prints the
best three with the chosen one's ratio to the best (what the heuristic leaves on the table).

Every timed call reads x from DRAM, not from L2 (50 MB on an H100, larger than some of these
inputs): the captured calls take turns over copies of x (and the weights) that together hold
at least 256 MiB, and the copy they are measured against does the same.
"""

from __future__ import annotations

import argparse
import itertools
import sys

import torch
from _common import cuda_or_skip, graph_us

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _norms, _softmax

SHAPES = [(1024, 32000), (512, 65536), (4096, 128256), (64, 262144)]
OPS = {"softmax": _softmax.OP, "rms_norm": _norms.RMS_OP, "layer_norm": _norms.LAYER_OP}
SWEPT = ("rows_smem", "rows_cluster", "rows_split")
F = torch.nn.functional
ROTATE_BYTES = 256 << 20  # the copies of x the timed calls take turns over hold at least this
MAX_COPIES = 64  # (a tiny --shape: the calls' own launches dominate, L2 or not)


def cases(n: int) -> list[tuple]:
    """(name, kernelkit op, torch op, explain), each taking (x, w, b)."""
    return [
        ("softmax", lambda x, *_: ops.softmax(x), lambda x, *_: torch.softmax(x, -1),
         lambda x, *_: ops.softmax.explain(x)),
        ("rms_norm", lambda x, w, _: ops.rms_norm(x, w, 1e-6),
         lambda x, w, _: F.rms_norm(x, (n,), w, 1e-6),
         lambda x, w, _: ops.rms_norm.explain(x, w, 1e-6)),
        ("layer_norm", lambda x, w, b: ops.layer_norm(x, w, b, 1e-5),
         lambda x, w, b: F.layer_norm(x, (n,), w, b, 1e-5),
         lambda x, w, b: ops.layer_norm.explain(x, w, b, 1e-5)),
    ]  # fmt: skip


def in_turns(fn, args: list[tuple]):
    """``fn`` called on the next of ``args`` at each call (each captured call its own inputs)."""
    it = itertools.cycle(args)
    return lambda: fn(*next(it))


def forced_us(name: str, impl: str, values: dict | None, kk) -> float | None:
    """Device time of ``kk`` forced onto ``impl`` (its heuristic's config when ``values`` is
    None)."""
    try:
        with force(name, impl, values):
            return graph_us(kk)
    except kernelkit.KernelkitError as e:
        print(f"    ({impl} {values}: {e})")
        return None


def sweep(name: str, kk, t_chosen: float) -> None:
    times = []
    listed = [(i.name, c) for i in OPS[name].implementations if i.name in SWEPT for c in i.configs]
    for impl, c in listed:
        try:
            with force(name, impl, {**c.values, "threadgroup": c.threadgroup}):
                t = graph_us(kk, batch=10, reps=5)
        except kernelkit.KernelkitError:
            continue  # a slice that does not fit, or no clusters here
        if t is not None:
            times.append((t, f"{impl} {c.describe()}"))
    times.sort()
    best = ", ".join(f"{d} {t:.1f}" for t, d in times[:3])
    print(f"    sweep of {len(times)}: {best}; chosen/best {t_chosen / times[0][0]:.2f}x")


def bench(shape, dtype, args_) -> None:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    size, n = x.numel() * x.element_size(), shape[-1]
    copies = min(MAX_COPIES, -(-ROTATE_BYTES // size))
    xs = [x, *(torch.randn_like(x) for _ in range(copies - 1))]
    args = [(v, torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda",
             dtype=dtype)) for v in xs]  # fmt: skip
    nbytes = 2 * size  # x read once, y written once
    outs = [torch.empty_like(v) for v in xs]
    t_copy = graph_us(in_turns(lambda src, dst: dst.copy_(src), list(zip(xs, outs))))
    assert t_copy is not None
    label = f"{shape[0]}x{shape[1]} {str(dtype).split('.')[-1]}"
    print(f"{label}: copy of the same bytes {t_copy:.1f} us ({nbytes / t_copy / 1e3:.0f} GB/s);"
          f" the calls take turns over {len(xs)} copies of x")  # fmt: skip
    first = [t.float() for t in args[0]]
    for name, kk_op, torch_op, explain_op in cases(n):
        err = (kk_op(*args[0]).float() - torch_op(*first)).abs().max().item()
        kk, eager = in_turns(kk_op, args), in_turns(torch_op, args)
        g_kk, g_eager = graph_us(kk), graph_us(eager)
        g_comp = None
        if not args_.no_compile:
            torch._dynamo.reset()  # each case compiles fresh: no recompile limit (8) reached
            compiled = torch.compile(torch_op, dynamic=False)
            compiled(*args[0])
            g_comp = graph_us(in_turns(compiled, args))
        g_old = forced_us(name, "rows", None, kk)  # the register kernel's heuristic config
        if g_kk is None or g_eager is None:
            print(f"  {name}: graph capture failed")
            continue

        def cell(t: float | None, base: float = g_kk) -> str:
            return f"{t:8.1f} {100 * t_copy / t:4.0f}% {t / base:5.2f}x" if t else f"{'-':>21}"

        print(
            f"  {name:<11}kk {g_kk:8.1f} us {100 * t_copy / g_kk:4.0f}% | eager {cell(g_eager)} |"
            f" compile {cell(g_comp)} | rows (before) {cell(g_old)} | err {err:.1e}"
        )
        print(f"    choice: {explain_op(*args[0]).choice.describe()}")
        if args_.sweep:
            sweep(name, kk, g_kk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp16", action="store_true", help="float16 too")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--sweep", action="store_true", help="time every long-row config too")
    parser.add_argument("--shape", action="append", help="only ROWSxN (repeatable)")
    args = parser.parse_args()
    if not cuda_or_skip("long_rows.py"):
        return 0
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] if args.shape else SHAPES
    dtypes = [torch.float32, torch.bfloat16] + ([torch.float16] if args.fp16 else [])
    print(
        f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; kernelkit "
        f"{kernelkit.__version__}; device time: CUDA graph of 20 calls, median of 15 replays"
    )
    print("each cell: us, % of the same-run copy of the same bytes (read + write), time / kk")
    for shape in shapes:
        for dtype in dtypes:
            bench(shape, dtype, args)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
