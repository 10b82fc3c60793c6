"""Question: do kernelkit's memory-bound ops run at the bandwidth limit, next to torch eager and
torch.compile on the same inputs?

One process, one GPU. For each op and shape: time per call (CUDA events around batches of 20
back-to-back calls, median of 15 batches, after warm-up), the fraction of the device-to-device
copy rate measured in the same run (bytes read + written once each), the ratio to torch eager and
to torch.compile, and the KernelChoice behind kernelkit's result. Inputs of these sizes (32-256
MiB) are far larger than L2, so every batch reads from HBM.

    PYTHONPATH=src python3 benchmarks/ops.py [--no-compile] [--quick] [--sweep] [--only rows|matmul]
        [--max-autotune] [--nk NxK ...]

matmul: ``x[M, K] @ w[N, K].T`` in bfloat16 for the anchor shapes, kernelkit vs torch (cuBLAS),
with the weights rotated among copies that together exceed twice L2 (each call reads its weight
from HBM), per-call time and the fraction of the copy rate for reading the weight once.

For M > 16 further rows time ``matmul/mma`` (the sm_80+ tensor-core tile kernel) and
``matmul/wgmma`` (sm_90a warpgroup MMA; torch tensors otherwise take cuBLAS), forced with their
heuristics' configs, with their KernelChoices.

``--sweep`` also times every legal row config (forced) per op and shape and prints the best next
to the heuristic's choice: how far the untuned choice is from an exhaustive sweep (for matmul:
gemv and gemv_tc for M <= 16, mma's tile configs above).
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import copy_rate_gbs, cuda_or_skip, graph_us, rotating, time_us

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops._rowops import CONFIGS

SHAPES = [
    ((4096, 4096), torch.bfloat16),
    ((16384, 1024), torch.bfloat16),
    ((8192, 8192), torch.bfloat16),
    ((4096, 4096), torch.float32),
    ((16384, 1024), torch.float32),
    ((8192, 8192), torch.float32),
]


SWIGLU = ops.elementwise("y = a * silu(b)")


def cases(shape, dtype):
    """(name, kernelkit call, torch call, kernelkit explain, (got, want) check, bytes moved)."""
    x = torch.randn(shape, device="cuda", dtype=dtype)
    g = torch.randn(shape, device="cuda", dtype=dtype)
    n = shape[-1]
    w = torch.randn(n, device="cuda", dtype=dtype)
    b = torch.randn(n, device="cuda", dtype=dtype)
    size = x.numel() * x.element_size()
    F = torch.nn.functional
    return [
        (
            "softmax",
            lambda: ops.softmax(x),
            lambda: torch.softmax(x, -1),
            lambda: ops.softmax.explain(x),
            lambda: (ops.softmax(x).float(), torch.softmax(x.float(), -1)),
            2 * size,  # x read once, y written once
        ),
        (
            "rms_norm",
            lambda: ops.rms_norm(x, w, 1e-6),
            lambda: F.rms_norm(x, (n,), w, 1e-6),
            lambda: ops.rms_norm.explain(x, w, 1e-6),
            lambda: (
                ops.rms_norm(x, w, 1e-6).float(),
                F.rms_norm(x.float(), (n,), w.float(), 1e-6),
            ),
            2 * size,
        ),
        (
            "layer_norm",
            lambda: ops.layer_norm(x, w, b, 1e-5),
            lambda: F.layer_norm(x, (n,), w, b, 1e-5),
            lambda: ops.layer_norm.explain(x, w, b, 1e-5),
            lambda: (
                ops.layer_norm(x, w, b, 1e-5).float(),
                F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5),
            ),
            2 * size,
        ),
        (
            "silu(a)*b",
            lambda: SWIGLU(a=g, b=x),
            lambda: g * F.silu(x),
            lambda: SWIGLU.explain(a=g, b=x),
            lambda: (SWIGLU(a=g, b=x).float(), g.float() * F.silu(x.float())),
            3 * size,  # a and b read once, y written once
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--quick", action="store_true", help="the first shape only")
    parser.add_argument("--sweep", action="store_true", help="time every legal row config too")
    parser.add_argument("--only", choices=("rows", "matmul"), help="one family only")
    parser.add_argument(
        "--max-autotune", action="store_true", help="matmul: torch.compile max-autotune too"
    )
    parser.add_argument(
        "--nk", action="append", help="matmul: only this weight shape, e.g. 4096x4096 (repeatable)"
    )
    args = parser.parse_args()
    if not cuda_or_skip("ops.py"):
        return 0
    rate = copy_rate_gbs()
    print(
        f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; kernelkit "
        f"{kernelkit.__version__}; copy rate {rate:.0f} GB/s; CUDA events, batches of 20, "
        "median of 15; inputs larger than L2"
    )
    print(
        "per call: the host's cost included (what a caller gets); graph: the same calls replayed "
        "from a CUDA graph (device time alone)"
    )
    print(
        f"{'op':<11}{'shape':<22}{'kk us':>9}{'eager us':>10}{'comp us':>9}"
        f"{'kk %copy':>10}{'eager %':>9}{'comp %':>8}{'eager/kk':>10}{'comp/kk':>9}  max err"
    )
    if args.only == "matmul":
        return bench_matmul(rate, args)
    for shape, dtype in SHAPES[:1] if args.quick else SHAPES:
        for name, kk, eager, explain, check, nbytes in cases(shape, dtype):
            got, want = check()
            err = (got - want).abs().max().item()
            t_kk, t_eager = time_us(kk), time_us(eager)
            t_comp = None
            if not args.no_compile:
                compiled = torch.compile(eager, dynamic=False)
                t_comp = time_us(compiled)

            def pct(t: float, nbytes: int = nbytes) -> float:
                return 100 * nbytes / (t * 1e-6) / 1e9 / rate

            comp = f"{t_comp:9.1f}" if t_comp else f"{'-':>9}"
            comp_pct = f"{pct(t_comp):7.0f}%" if t_comp else f"{'-':>8}"
            ratio_c = f"{t_comp / t_kk:8.2f}x" if t_comp else f"{'-':>9}"
            label = f"{'x'.join(map(str, shape))} {str(dtype).split('.')[-1]}"
            print(
                f"{name:<11}{label:<22}{t_kk:9.1f}{t_eager:10.1f}{comp}"
                f"{pct(t_kk):9.0f}%{pct(t_eager):8.0f}%{comp_pct}{t_eager / t_kk:9.2f}x{ratio_c}"
                f"  {err:.2e}"
            )
            g_kk, g_eager = graph_us(kk), graph_us(eager)
            g_comp = graph_us(compiled) if t_comp else None
            if g_kk and g_eager:
                comp_g = (
                    f", compile {g_comp:.1f} us ({pct(g_comp):.0f}%), compile/kk "
                    f"{g_comp / g_kk:.2f}x"
                    if g_comp
                    else ""
                )
                print(
                    f"{'':<11}graph: kk {g_kk:.1f} us ({pct(g_kk):.0f}% of copy), eager "
                    f"{g_eager:.1f} us ({pct(g_eager):.0f}%), eager/kk {g_eager / g_kk:.2f}x"
                    f"{comp_g}"
                )
            print(f"{'':<11}choice: {explain().choice.describe()}")
            if args.sweep and name in ("softmax", "rms_norm", "layer_norm"):
                sweep(name, kk, g_kk or t_kk)
    return 0


MATMUL_NK = [(4096, 4096), (8192, 8192), (14336, 4096)]
MATMUL_M = [1, 4, 8, 16, 128, 3500, 8192]


def matrix_rate_tflops() -> float:
    """cuBLAS's bf16 rate on 8192 x 8192 x 8192 (the matrix-unit ceiling of this run)."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time_us(lambda: a @ b, batch=5, reps=7)
    return 2 * 8192**3 / (t * 1e-6) / 1e12


def bench_matmul(rate: float, args: argparse.Namespace) -> int:
    """kernelkit's matmul (its choice per shape) vs cuBLAS through torch, weights rotated; with
    ``--max-autotune``, torch.compile(mode="max-autotune-no-cudagraphs") of F.linear too."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    mrate = matrix_rate_tflops()
    print(
        f"\nmatmul, bfloat16, x[M,K] @ w[N,K].T; weights rotated past 2x L2 ({l2 >> 20} MiB); "
        f"matrix rate (cuBLAS 8192^3) {mrate:.0f} TFLOP/s; %: of the copy rate for M <= 16 "
        "(bytes: weight + x + y once), of the matrix rate above"
    )
    print(
        "per call: the host's cost included; dev: device time from CUDA-graph replays; "
        "% and ratios from device times"
    )
    print(
        f"{'N, K':<14}{'M':>6}{'kk us':>8}{'cuBLAS':>8}{'kk dev':>8}{'cuBLAS dev':>11}"
        f"{'cuBLAS/kk':>10}{'kk %':>6}{'cuBLAS %':>9}{'max-at/kk':>10}  rel err  choice"
    )
    kk_fn = lambda x, w: ops.matmul(x, w, transpose_b=True)
    ref_fn = torch.nn.functional.linear
    shapes = MATMUL_NK[:1] if args.quick else MATMUL_NK
    if args.nk:
        shapes = [(n, k) for n, k in shapes if f"{n}x{k}" in args.nk]
    for n, k in shapes:
        wbytes = n * k * 2
        copies = max(2, -(-2 * l2 // wbytes) + 1)
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        for m in MATMUL_M:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            got = kk_fn(x, weights[0]).double()
            want = x.double() @ weights[0].double().T
            err = ((got - want).norm() / want.norm()).item()
            t_kk = time_us(rotating(kk_fn, x, weights))
            t_ref = time_us(rotating(ref_fn, x, weights))
            d_kk = graph_us(rotating(kk_fn, x, weights)) or t_kk
            d_ref = graph_us(rotating(ref_fn, x, weights)) or t_ref

            if m <= 16:  # bytes over the copy rate, else flops over the matrix rate
                work, ceiling = (wbytes + 2 * m * (n + k)) / 1e9, rate
            else:
                work, ceiling = 2 * m * n * k / 1e12, mrate

            def pct(t: float, work: float = work, ceiling: float = ceiling) -> float:
                return 100 * work / (t * 1e-6) / ceiling

            auto = ""
            if args.max_autotune:
                compiled = torch.compile(ref_fn, mode="max-autotune-no-cudagraphs", dynamic=False)
                d_auto = graph_us(rotating(compiled, x, weights))
                auto = f"{(d_auto or 0.0) / d_kk:9.2f}x"
            choice = ops.matmul.explain(x, weights[0], transpose_b=True).choice
            print(
                f"{f'{n}, {k}':<14}{m:>6}{t_kk:8.1f}{t_ref:8.1f}{d_kk:8.1f}{d_ref:11.1f}"
                f"{d_ref / d_kk:9.2f}x{pct(d_kk):5.0f}%{pct(d_ref):8.0f}%{auto:>10}  {err:.1e}  "
                f"{choice.describe()}"
            )
            if m > 16:  # torch tensors take cuBLAS: the tensor-core tile kernels, forced
                for impl in ("mma", "wgmma"):
                    tile_row(impl, x, weights, kk_fn, d_ref, pct)
            if args.sweep and m <= 16:
                for impl in ("gemv", "gemv_tc"):
                    gemv_sweep(impl, x, weights, kk_fn, d_ref)
            if args.sweep and m > 16:
                for impl in ("mma", "wgmma"):
                    gemv_sweep(impl, x, weights, kk_fn, d_ref)
        weights.clear()
        torch.cuda.empty_cache()
    return 0


def tile_row(impl: str, x, weights, kk_fn, d_ref: float, pct) -> None:
    """A tile kernel (``mma`` or ``wgmma``) forced with the config its heuristic gives this
    problem: per-call and device time, cuBLAS/it, % of the matrix rate, error and the
    KernelChoice; nothing where it cannot run (wgmma before or after sm_90)."""
    try:
        with force("matmul", impl):
            got = kk_fn(x, weights[0]).double()
            want = x.double() @ weights[0].double().T
            err = ((got - want).norm() / want.norm()).item()
            t = time_us(rotating(kk_fn, x, weights))
            d = graph_us(rotating(kk_fn, x, weights)) or t
            choice = ops.matmul.explain(x, weights[0], transpose_b=True).choice
    except kernelkit.ArgumentError:  # the implementation does not run on this GPU
        return
    print(
        f"{'':<14}{impl:>6}{t:8.1f}{'':>8}{d:8.1f}{'':>11}{d_ref / d:9.2f}x{pct(d):5.0f}%"
        f"{'':>9}{'':>10}  {err:.1e}  {choice.describe()}"
    )


def gemv_sweep(impl: str, x, weights, kk_fn, t_ref: float) -> None:
    """Every config of ``impl`` (forced) for this M, N, K: the best three by device time (graph
    replays), next to cuBLAS's."""
    from kernelkit.ops import _matmul_mma, _matmul_rules, _matmul_wgmma

    configs = {
        "gemv": _matmul_rules.GEMV_CONFIGS,
        "gemv_tc": _matmul_rules.GEMV_TC_CONFIGS,
        "mma": _matmul_mma.MMA_CONFIGS,
        "wgmma": _matmul_wgmma.WGMMA_CONFIGS,
    }[impl]
    times = []
    for config in configs:
        try:
            with force("matmul", impl, config):
                t = graph_us(rotating(kk_fn, x, weights), reps=5)
        except kernelkit.ArgumentError:  # the config or the implementation does not fit here
            continue
        times.append((t if t is not None else float("inf"), config.describe()))
    if not times:
        return
    times.sort()
    best = ", ".join(f"[{d}] {t:.1f}" for t, d in times[:3])
    print(f"{'':<20}{impl} sweep of {len(times)}: {best}; cuBLAS/best {t_ref / times[0][0]:.2f}x")


def sweep(name: str, kk, t_chosen: float) -> None:
    """Every config of the row op, forced, by device time (graph replays; a 20-70 µs kernel's
    per-call time is the host's); the best three and the chosen one's ratio to the best."""
    times = []
    for config in CONFIGS:
        forced = {**config.values, "threadgroup": config.threadgroup}
        try:
            with force(name, "rows", forced):
                t = graph_us(kk, batch=10, reps=5)
        except kernelkit.KernelkitError:
            continue  # a config that cannot hold this row
        if t is not None:
            times.append((t, config.describe()))
    times.sort()
    best = ", ".join(f"{d} {t:.1f}" for t, d in times[:3])
    print(f"{'':<11}sweep of {len(times)}: best {best}; chosen/best {t_chosen / times[0][0]:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
