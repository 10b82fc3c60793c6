"""Question: how far is each built-in op's shipped choice (tables, then rules) from the best of an
exhaustive sweep, on the shapes of real models, and how long does the sweep take?

Per op, the problems of Llama-3-8B/70B, Mixtral-8x7B, Qwen2-7B and Llama-2-7B layers (matmul: the
attention and MLP weights at decode and prefill M; rms_norm/layer_norm: M x hidden; softmax:
M x vocabulary), in the models' dtype (bfloat16). Every config of every implementation that
matches a problem is compiled, checked against a float64 reference and timed
(``kernelkit.tune_op`` with no ``limit``: CUDA graphs, inputs rotated past L2, the fastest
timed again); the shipped choice is timed with them. Printed per problem: the shipped choice,
where it came from, the winner, and the shipped time over the best (target <= 1.05); per op:
the worst, the geometric mean, how many miss 1.05, and the sweep's wall and summed seconds.

Run (one GPU, or all GPUs through Ray):
    PYTHONPATH=src python3 benchmarks/tables_vs_sweep.py [--ray] [--ops matmul,rms_norm,...]
        [--models llama3-8b,...] [--m 1,16,128,2048] [--hidden 5120,...] [--limit N] [--out DIR]
CPU smoke test (tiny shapes, one config per implementation):
    PYTHONPATH=src python3 benchmarks/tables_vs_sweep.py --backend cpu
``--out DIR`` writes ``DIR/tables_vs_sweep.json``, and ``--table DIR [--device-name H100]``
writes or updates the winners as table files there (``kernelkit tune --table``, ready to
ship), after each problem (with ``--ray``, after each op and M): a run stopped by a time limit
keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

# hidden size, fused q/k/v rows, MLP width, vocabulary (from the models' config.json files)
MODELS = {
    "llama3-8b": (4096, 6144, 14336, 128256),
    "llama3-70b": (8192, 10240, 28672, 128256),
    "mixtral-8x7b": (4096, 6144, 14336, 32000),
    "qwen2-7b": (3584, 4608, 18944, 152064),
    "llama2-7b": (4096, 12288, 11008, 32000),
}
TINY = {"tiny": (64, 96, 160, 1000)}
OPS = ("matmul", "rms_norm", "layer_norm", "softmax")


def problems(op: str, models: list[tuple[int, int, int, int]], m: int) -> list[tuple[int, ...]]:
    """The distinct problems of ``op`` at ``m`` rows: matmul as (M, N, K) for x [M, K] and a
    weight [N, K] (q/k/v, o, up, down); the norms (M, hidden); softmax (M, vocabulary)."""
    found: list[tuple[int, ...]] = []
    for d, qkv, ffn, vocab in models:
        if op == "matmul":
            shapes: list[tuple[int, ...]] = [(m, qkv, d), (m, d, d), (m, ffn, d), (m, d, ffn)]
        elif op == "softmax":
            shapes = [(m, vocab)]
        else:
            shapes = [(m, d)]
        found += [s for s in shapes if s not in found]
    return found


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--models", help=f"default: {','.join(MODELS)} (CPU: tiny sizes)")
    ap.add_argument("--m", help="rows (matmul's M), comma-separated (default 1,16,128,2048)")
    ap.add_argument(
        "--hidden",
        help="row ops: these hidden sizes instead of the models' "
        "(held-out shapes: no table row covers them)",
    )
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--limit", type=int, help="at most N configs per implementation")
    ap.add_argument("--ray", action="store_true", help="each problem a Ray task on one GPU")
    ap.add_argument("--out", help="a folder for tables_vs_sweep.json")
    ap.add_argument("--table", help="a folder: the winners written as <op>.<device>.yaml rows")
    ap.add_argument("--device-name", help="table rows match devices whose name has this")
    args = ap.parse_args()
    cpu = args.backend == "cpu"
    if not cpu:
        from _common import cuda_or_skip

        if not cuda_or_skip("tables_vs_sweep.py"):
            return 0
    import kernelkit

    ops = args.ops.split(",")
    if args.hidden and not set(ops) <= {"rms_norm", "layer_norm"}:
        ap.error("--hidden sets the norms' sizes only: give --ops rms_norm,layer_norm")
    if args.models:
        models = [MODELS[n] for n in args.models.split(",")]
    else:  # the CPU smoke run: tiny sizes, one config per implementation
        models = list(TINY.values()) if cpu else list(MODELS.values())
    if args.hidden:
        models = [(int(h), 0, 0, 0) for h in args.hidden.split(",")]
    ms = [int(v) for v in (args.m or ("1,17" if cpu else "1,16,128,2048")).split(",")]
    limit = args.limit if args.limit is not None or not cpu else 1
    report: dict = {"dtype": args.dtype, "limit": limit, "ray": args.ray, "ops": {}}
    if args.ray:  # one cluster for every tune_op call (each would start and stop its own)
        import ray

        ray.init(include_dashboard=False, log_to_driver=False)
    for op in ops:
        rows, spent, wall = [], 0.0, 0.0
        for m in ms:
            dims = problems(op, models, m)
            # one problem a tuning run on one GPU, so that what a run past its time limit
            # measured is written (the JSON, the table rows) before it stops; all at once
            # through Ray, which spreads them over the GPUs
            for batch in [dims] if args.ray else [[d] for d in dims]:
                t0 = time.perf_counter()
                tuning = kernelkit.tune_op(
                    op, batch, args.dtype, args.backend, limit=limit, store=False, quiet=True,
                    ray=args.ray,
                )  # fmt: skip
                wall += time.perf_counter() - t0
                if args.table:
                    tuning.write_table(args.table + "/", args.device_name)
                spent += _report(op, tuning, rows)
                report["ops"][op] = {"rows": rows, "wall_s": round(wall, 1),
                                     "summed_s": round(spent)}  # fmt: skip
                if args.out:
                    Path(args.out).mkdir(parents=True, exist_ok=True)
                    path = Path(args.out) / "tables_vs_sweep.json"
                    path.write_text(json.dumps(report, indent=1))
        summarize(op, rows, wall, spent)
    return 0


def _report(op: str, tuning: Any, rows: list[dict]) -> float:
    """Append (and print) a row per problem of a tuning run; its summed tuning seconds."""
    spent = 0.0
    for r in tuning.results:
        spent += r.tuning_s
        best = r.winner
        rows.append(
            {
                "problem": r.label,
                "device": r.target.name if r.target else None,
                "shipped": r.shipped,
                "from": r.shipped_from,
                "best": best.label if best else None,
                "best_us": round(best.time_s * 1e6, 3) if best and best.time_s else None,
                "ratio": r.shipped_over_best,
                "candidates": sum(c.status == "ok" for c in r.candidates),
                "note": r.note,
                "times_us": {  # every timed candidate (row ops: a few dozen)
                    c.label: round(c.time_s * 1e6, 3) for c in r.candidates if c.time_s is not None
                }
                if len(r.candidates) <= 100
                else {},
            }
        )
        print_row(op, rows[-1])
    return spent


def print_row(op: str, row: dict) -> None:
    ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.3f}x"
    print(
        f"{op} {row['problem']}: shipped ({row['from']}) {row['shipped']}: {ratio} the best "
        f"({row['best']}, {row['best_us']} us, {row['candidates']} timed)",
        flush=True,
    )


def summarize(op: str, rows: list[dict], wall: float, spent: float) -> None:
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    if not ratios:
        print(f"== {op}: nothing timed")
        return
    worst = max(rows, key=lambda r: r["ratio"] or 0.0)
    over = sum(v > 1.05 for v in ratios)
    print(
        f"== {op}: {len(ratios)} problems, shipped over best: worst {worst['ratio']:.3f}x "
        f"({worst['problem']}), geomean {geomean(ratios):.3f}x, {over} over 1.05x; "
        f"sweep {wall:.0f} s wall, {spent:.0f} s summed over problems",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
