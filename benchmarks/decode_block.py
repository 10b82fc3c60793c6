"""Does a decode step written with kernelkit's ops beat the same step in torch? (issue 26)

A Llama-shaped MLP block: ``rms_norm -> gate, up = matmul [H, D] -> up * silu(gate)
(ops.elementwise) -> matmul [D, H] -> residual add``, D = 4096, H = 11008 and 14336, bf16,
M = 1, 16, 128, 512 rows, written with kernelkit's ops and with torch's, in one process:
both eager, both ``torch.compile(fullgraph=True)`` in default and reduce-overhead modes
(compiled for each (H, M), as a decode loop of one batch size runs; ``--dynamic``: once per H,
M symbolic).
Per call: CUDA events around 20 back-to-back calls, 15 such batches per variant, the variants
of a row (the block's six; an op's kernelkit and torch calls) timed in turn, one batch each per
rep, so that a slow period of the shared host lands on all of them (``_common.paired_us``); the
tables give the median and, in the markdown, the quartiles of the 15 batches. "graph": the
device time of 20 calls captured in one CUDA graph (eager variants). Then the per-op table
(softmax, rms_norm, layer_norm, elementwise, matmul through each route) at 1x4096, 16x4096,
128x8192 against torch eager.

    timeout 340 python benchmarks/decode_block.py --out $OUT   # CUDA (at most ~5 minutes)
    python benchmarks/decode_block.py --tiny --out /tmp/res    # CPU, small shapes (a test)

Results: ``decode_block.md`` and ``decode_block.json`` under ``--out`` (written after every
row, so a run stopped by ``--budget-s`` or a timeout keeps what it measured).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.nn.functional as F
from _common import Stats, graph_us, paired_ratio, paired_us

import kernelkit
from kernelkit import ops

SILU_MUL = ops.elementwise("y = a * b / (1 + exp(-b))")  # a * silu(b)
ADD = ops.elementwise("y = a + b")
MATMUL_ROUTES = ("framework", "gemv", "gemv_tc", "gemv_slab", "gemv_slab_tc", "mma",
                 "wgmma", "tiled")  # fmt: skip


class Results:
    """Rows by table, written to ``out`` as JSON and markdown after every row."""

    def __init__(self, out: Path, device: str, legend: str) -> None:
        self.out, self.device, self.tables = out, device, {}  # type: ignore[var-annotated]
        self.legend = legend
        out.mkdir(parents=True, exist_ok=True)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.tables.setdefault(table, []).append(row)
        print(table, json.dumps(row), flush=True)
        self.write()

    def write(self) -> None:
        (self.out / "decode_block.json").write_text(
            json.dumps({"device": self.device, "tables": self.tables}, indent=1)
        )
        lines = [f"# decode_block on {self.device}", "", self.legend, ""]
        for name, rows in self.tables.items():
            cols = list(dict.fromkeys(k for r in rows for k in r))
            cols = [c for c in cols if not _spread_of(c, cols)]
            lines += [f"## {name}", "", "| " + " | ".join(cols) + " |",
                      "|" + "---|" * len(cols)]  # fmt: skip
            lines += ["| " + " | ".join(_cell(r, c) for c in cols) + " |" for r in rows]
            lines.append("")
        (self.out / "decode_block.md").write_text("\n".join(lines))


SPREAD = (" p25", " p75")  # a timed column's quartiles (JSON), folded into its cell (markdown)


def _spread_of(col: str, cols: list[str]) -> bool:
    return any(col.endswith(s) and col[: -len(s)] in cols for s in SPREAD)


def _cell(row: dict[str, Any], col: str) -> str:
    value, lo, hi = (row.get(col + s) for s in ("", *SPREAD))
    if value is None or lo is None or hi is None:
        return _fmt(value)
    return f"{_fmt(value)} ({_fmt(lo)}-{_fmt(hi)})"


def _put(row: dict[str, Any], col: str, stats: Stats) -> None:
    row.update({col: stats.median, col + " p25": stats.p25, col + " p75": stats.p75})


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 0.01 else f"{v:.2f}"
    return "n/a" if v is None else str(v).replace("\n", " ").replace("|", "/")


def kk_block(x: Any, p: dict[str, Any]) -> Any:
    h = ops.rms_norm(x, p["norm"], 1e-6)
    gate = ops.matmul(h, p["gate"], transpose_b=True)
    up = ops.matmul(h, p["up"], transpose_b=True)
    y = ops.matmul(SILU_MUL(up, gate), p["down"], transpose_b=True)
    return ADD(x, y)


def torch_block(x: Any, p: dict[str, Any]) -> Any:
    h = F.rms_norm(x, (x.shape[-1],), p["norm"], 1e-6)
    y = F.linear(F.linear(h, p["up"]) * F.silu(F.linear(h, p["gate"])), p["down"])
    return x + y


def _params(d: int, h: int, dtype: Any, device: str) -> dict[str, Any]:
    g = torch.Generator(device=device).manual_seed(0)

    def rand(*shape: int, scale: float) -> Any:
        return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)

    return {"norm": rand(d, scale=1.0) + 1, "gate": rand(h, d, scale=d**-0.5),
            "up": rand(h, d, scale=d**-0.5), "down": rand(d, h, scale=h**-0.5)}  # fmt: skip


class Timer:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.batch, self.reps = (20, 15) if cuda else (3, 3)  # CPU: does it run

    def paired(self, fns: dict[str, Callable[[], Any]]) -> dict[str, Stats]:
        return paired_us(fns, self.batch, self.reps, cuda=self.cuda)

    def legend(self) -> str:
        return (
            f"Timed cells: median (25th-75th percentile) over {self.reps} batches of "
            f"{self.batch} calls, the variants of a row timed in turn; ratio: torch / "
            "kernelkit, batch by batch; alone: a compiled variant's batches with no other "
            "variant between; graph: device time of a captured CUDA graph."
        )

    def graph(self, fn: Callable[[], Any]) -> float | None:
        return graph_us(fn) if self.cuda else None


def block_rows(res: Results, args: Any, timer: Timer, deadline: float) -> None:
    modes = ["eager", "default"] + (["reduce-overhead"] if timer.cuda else [])
    fns = {"kernelkit": kk_block, "torch": torch_block}
    for h in args.hidden:
        p = _params(args.d, h, args.dtype, args.device)
        for weight in p.values():  # a model's parameters: reduce-overhead's graphs read them
            torch._dynamo.mark_static_address(weight)  # in place, not copied in every replay
        compiled: dict[tuple[str, str], Any] = {}
        for m in args.rows:
            if time.perf_counter() > deadline:
                res.add("notes", {"skipped": f"block H={h} M={m}: past --budget-s"})
                continue
            # Dynamo keeps its compiled code on kk_block's and torch_block's code objects,
            # shared by every torch.compile of them: without a reset, a later H's (or M's)
            # guards fail and the blocks are compiled again with the changed size symbolic, and
            # generic code is timed. Static (the default): compiled for this (H, M), as a
            # decode loop of one batch size runs; --dynamic: once per H for every M.
            if not compiled or not args.dynamic:
                torch._dynamo.reset()
                compiled = {
                    (name, mode): torch.compile(fn, fullgraph=True, mode=mode)
                    for name, fn in fns.items()
                    for mode in modes[1:]
                }
            x = torch.randn(m, args.d, device=args.device).to(args.dtype)
            if args.dynamic:
                torch._dynamo.maybe_mark_dynamic(x, 0)  # one compile per function for every M
            runs = {f"{name} {mode}": fn if mode == "eager" else compiled[name, mode]
                    for mode in modes for name, fn in fns.items()}  # fmt: skip
            res.add("block", block_row(res, timer, runs, x, p, h))


def block_row(
    res: Results, timer: Timer, runs: dict[str, Callable[..., Any]], x: Any, p: Any, h: int
) -> dict[str, Any]:
    """One (H, M) row: every variant checked against torch's eager block, the ones that run
    timed paired, then the eager ones' captured graphs and the compiled ones alone (their
    batches back to back, no other variant between: a paired reduce-overhead call follows
    other graphs' replays of the same CUDA-graph tree), one by one."""
    where, want = f"H={h} M={x.shape[0]}", torch_block(x, p).float()
    errs: dict[str, float] = {}
    for label, run in runs.items():
        try:
            y = run(x, p)
            errs[label] = (y.float() - want).abs().max().item() / want.abs().max().item()
        except Exception as e:  # noqa: BLE001 - report the variant, time the others
            res.add("errors", {"what": f"{label} {where}", "error": _err(e)})
    calls = {label: _bound(runs[label], x, p) for label in errs}
    try:
        stats = timer.paired(calls) if calls else {}
    except Exception as e:  # noqa: BLE001 - report the row, go on
        res.add("errors", {"what": f"timing {where}", "error": _err(e)})
        stats = {}
    row: dict[str, Any] = {"H": h, "M": x.shape[0]}
    for label in runs:
        row[f"{label} µs"] = None
        if label in stats:
            _put(row, f"{label} µs", stats[label])
        if label.endswith(" eager") and label in stats:
            row[f"{label} graph µs"] = timer.graph(calls[label])
        elif label in stats:  # compiled: also timed alone, as a decode loop calls it
            _put(row, f"{label} alone µs", timer.paired({label: calls[label]})[label])
        if label in errs:
            row[f"{label} err"] = float(f"{errs[label]:.2e}")
    return row


def _bound(run: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: run(*args)


def _err(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e)[:300]}"


def op_rows(res: Results, args: Any, timer: Timer, deadline: float) -> None:
    dev, dtype = args.device, args.dtype
    for m, n in args.op_shapes:
        if time.perf_counter() > deadline:
            res.add("notes", {"skipped": f"ops {m}x{n}: past --budget-s"})
            continue
        x, b = torch.randn(m, n, device=dev).to(dtype), torch.randn(m, n, device=dev).to(dtype)
        w, bias = torch.rand(n, device=dev).to(dtype) + 0.5, torch.randn(n, device=dev).to(dtype)
        weight = (torch.randn(args.d, n, device=dev) * n**-0.5).to(dtype)
        cases = _op_cases(x, b, w, bias, weight, args.routes)
        for name, kk, ref, route in cases:
            row: dict[str, Any] = {"op": name, "shape": f"{m}x{n}"}
            try:
                with kernelkit.force("matmul", route) if route else contextlib.nullcontext():
                    y = kk()
                    want = ref().float()
                    err = (y.float() - want).abs().max().item() / max(want.abs().max().item(), 1)
                    t = timer.paired({"kernelkit": kk, "torch": ref})
                _put(row, "kernelkit µs", t["kernelkit"])
                _put(row, "torch eager µs", t["torch"])
                _put(row, "ratio", paired_ratio(t["torch"], t["kernelkit"]))
                row["err"] = float(f"{err:.2e}")
            except Exception as e:  # noqa: BLE001 - a route that does not run here
                row["kernelkit µs"] = None
                row["error"] = _err(e)[:120]
            res.add("ops", row)


def _op_cases(x: Any, b: Any, w: Any, bias: Any, weight: Any, routes: list[str]) -> list:
    """(name, kernelkit call, torch eager call, matmul route to force or None) per op."""
    n = x.shape[-1]
    mm_torch = lambda: F.linear(x, weight)
    mm_kk = lambda: ops.matmul(x, weight, transpose_b=True)
    return [
        ("softmax", lambda: ops.softmax(x), lambda: torch.softmax(x, -1), None),
        ("rms_norm", lambda: ops.rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6), None),
        ("layer_norm", lambda: ops.layer_norm(x, w, bias, 1e-5),
         lambda: F.layer_norm(x, (n,), w, bias, 1e-5), None),
        ("a*silu(b)", lambda: SILU_MUL(x, b), lambda: x * F.silu(b), None),
        ("matmul auto", mm_kk, mm_torch, None),
        *[(f"matmul {route}", mm_kk, mm_torch, route) for route in routes],
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "decode_block_out"))
    ap.add_argument("--tiny", action="store_true", help="CPU, small shapes (for tests)")
    ap.add_argument("--budget-s", type=float, default=270.0, help="stop starting new rows")
    ap.add_argument("--skip-block", action="store_true")
    ap.add_argument("--skip-ops", action="store_true")
    ap.add_argument(
        "--dynamic",
        action="store_true",
        help="compile the blocks once per H for every M (M symbolic), not per (H, M)",
    )
    args = ap.parse_args()
    cuda = not args.tiny and torch.cuda.is_available()
    if not args.tiny and not cuda:
        print("no CUDA device: use --tiny for the CPU run", file=sys.stderr)
        return 2
    if args.tiny:
        args.device, args.dtype, args.d = "cpu", torch.float32, 64
        args.hidden, args.rows = [96], [1, 4]
        args.op_shapes, args.routes = [(1, 64), (4, 128)], ["gemv", "tiled"]
    else:
        args.device, args.dtype, args.d = "cuda", torch.bfloat16, 4096
        args.hidden, args.rows = [11008, 14336], [1, 16, 128, 512]
        args.op_shapes, args.routes = [(1, 4096), (16, 4096), (128, 8192)], list(MATMUL_ROUTES)
    device = torch.cuda.get_device_name() if cuda else "CPU (kernelkit's CPU backend)"
    timer = Timer(cuda)
    res = Results(Path(args.out), f"{device}, torch {torch.__version__}", timer.legend())
    deadline = time.perf_counter() + args.budget_s
    with torch.no_grad():
        for part, run in (("block", block_rows), ("ops", op_rows)):  # the block first
            if getattr(args, f"skip_{part}"):
                continue
            try:
                run(res, args, timer, deadline)
            except Exception as e:  # noqa: BLE001 - keep the other part's results
                traceback.print_exc()
                res.add("errors", {"what": part, "error": _err(e)})
    res.write()
    print(f"wrote {res.out / 'decode_block.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
