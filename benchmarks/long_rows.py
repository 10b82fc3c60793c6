"""Question: do softmax, rms_norm and layer_norm on long rows (a vocabulary, 32K-256K elements)
read x from DRAM once and run at the copy rate, ahead of torch eager and torch.compile?

One process, one GPU. Per op, shape and dtype: device time of kernelkit's chosen kernel (a CUDA
graph of 20 calls, median of 15 replays), and as a percentage of a torch copy of the same bytes
measured in the same run (read + write: what a kernel that reads x once and writes y once cannot
beat); torch eager and torch.compile (graphs too) and their ratios to kernelkit; the register
kernel (``rows``, which reads a long row twice) forced, for the before/after; the choice.

    PYTHONPATH=src python3 benchmarks/long_rows.py [--fp16] [--no-compile] [--sweep]
        [--shape ROWSxN ...]

``--sweep`` also times every rows_smem / rows_cluster config (forced) and prints the best three
with the chosen one's ratio to the best (what the heuristic leaves on the table).
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import cuda_or_skip, graph_us

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops._rows_long import CLUSTER_CONFIGS, SMEM_CONFIGS

SHAPES = [(1024, 32000), (512, 65536), (4096, 128256), (64, 262144)]
F = torch.nn.functional


def cases(x: torch.Tensor) -> list[tuple]:
    """(name, kernelkit call, torch call, explain, float32 reference)."""
    n = x.shape[-1]
    w = torch.randn(n, device="cuda", dtype=x.dtype)
    b = torch.randn(n, device="cuda", dtype=x.dtype)
    xf, wf, bf = x.float(), w.float(), b.float()
    return [
        ("softmax", lambda: ops.softmax(x), lambda: torch.softmax(x, -1),
         lambda: ops.softmax.explain(x), lambda: torch.softmax(xf, -1)),
        ("rms_norm", lambda: ops.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6),
         lambda: ops.rms_norm.explain(x, w, 1e-6), lambda: F.rms_norm(xf, (n,), wf, 1e-6)),
        ("layer_norm", lambda: ops.layer_norm(x, w, b, 1e-5),
         lambda: F.layer_norm(x, (n,), w, b, 1e-5), lambda: ops.layer_norm.explain(x, w, b, 1e-5),
         lambda: F.layer_norm(xf, (n,), wf, bf, 1e-5)),
    ]  # fmt: skip


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
    for c in (*SMEM_CONFIGS, *CLUSTER_CONFIGS):
        impl = "rows_smem" if c.values["CL"] == 1 else "rows_cluster"
        try:
            with force(name, impl, {**c.values, "threadgroup": c.threadgroup}):
                t = graph_us(kk, batch=10, reps=5)
        except kernelkit.KernelkitError:
            continue  # a slice that does not fit, or no clusters here
        if t is not None:
            times.append((t, c.describe()))
    times.sort()
    best = ", ".join(f"{d} {t:.1f}" for t, d in times[:3])
    print(f"    sweep of {len(times)}: {best}; chosen/best {t_chosen / times[0][0]:.2f}x")


def bench(shape, dtype, args) -> None:
    x = torch.randn(shape, device="cuda", dtype=dtype)
    nbytes = 2 * x.numel() * x.element_size()  # x read once, y written once
    dst = torch.empty_like(x)
    t_copy = graph_us(lambda: dst.copy_(x))
    assert t_copy is not None
    label = f"{shape[0]}x{shape[1]} {str(dtype).split('.')[-1]}"
    print(f"{label}: copy of the same bytes {t_copy:.1f} us ({nbytes / t_copy / 1e3:.0f} GB/s)")
    for name, kk, eager, explain, ref in cases(x):
        err = (kk().float() - ref()).abs().max().item()
        g_kk, g_eager = graph_us(kk), graph_us(eager)
        g_comp = None
        if not args.no_compile:
            torch._dynamo.reset()  # each case compiles fresh: no recompile limit (8) reached
            compiled = torch.compile(eager, dynamic=False)
            compiled()
            g_comp = graph_us(compiled)
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
        print(f"    choice: {explain().choice.describe()}")
        if args.sweep:
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
