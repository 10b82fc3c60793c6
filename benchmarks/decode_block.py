"""Does a decode step written with kernelkit's ops beat the same step in torch? (issue 26)

A Llama-shaped MLP block: ``rms_norm -> gate, up = matmul [H, D] -> up * silu(gate)
(ops.elementwise) -> matmul [D, H] -> residual add``, D = 4096, H = 11008 and 14336, bf16,
M = 1, 16, 128, 512 rows, written with kernelkit's ops and with torch's, in one process:
both eager, both ``torch.compile(fullgraph=True)`` in default and reduce-overhead modes.
Per call: CUDA events around 20 back-to-back calls; "graph": the device time of 20 calls
captured in one CUDA graph (eager variants). Then the per-op table (softmax, rms_norm,
layer_norm, elementwise, matmul through each route) at 1x4096, 16x4096, 128x8192 against torch
eager.

    timeout 340 python benchmarks/decode_block.py --out $OUT   # CUDA (at most ~5 minutes)
    python benchmarks/decode_block.py --tiny --out /tmp/res    # CPU, small shapes (a test)

Results: ``decode_block.md`` and ``decode_block.json`` under ``--out`` (written after every
row, so a run stopped by ``--budget-s`` or a timeout keeps what it measured).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import torch.nn.functional as F
from _common import graph_us, time_us

import kernelkit
from kernelkit import ops

SILU_MUL = ops.elementwise("y = a * b / (1 + exp(-b))")  # a * silu(b)
ADD = ops.elementwise("y = a + b")
MATMUL_ROUTES = ("framework", "gemv", "gemv_tc", "gemv_slab", "gemv_slab_tc", "mma",
                 "wgmma", "tiled")  # fmt: skip


class Results:
    """Rows by table, written to ``out`` as JSON and markdown after every row."""

    def __init__(self, out: Path, device: str) -> None:
        self.out, self.device, self.tables = out, device, {}  # type: ignore[var-annotated]
        out.mkdir(parents=True, exist_ok=True)

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.tables.setdefault(table, []).append(row)
        print(table, json.dumps(row), flush=True)
        self.write()

    def write(self) -> None:
        (self.out / "decode_block.json").write_text(
            json.dumps({"device": self.device, "tables": self.tables}, indent=1)
        )
        lines = [f"# decode_block on {self.device}", ""]
        for name, rows in self.tables.items():
            cols = list(dict.fromkeys(k for r in rows for k in r))
            lines += [f"## {name}", "", "| " + " | ".join(cols) + " |",
                      "|" + "---|" * len(cols)]  # fmt: skip
            lines += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
            lines.append("")
        (self.out / "decode_block.md").write_text("\n".join(lines))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 0.01 else f"{v:.2f}"
    return "n/a" if v is None else str(v).replace("\n", " ").replace("|", "/")


def host_us(fn: Callable[[], Any], batch: int = 20, reps: int = 9) -> float:
    """Median µs per call over ``reps`` batches (host clock: the CPU backend)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(samples)


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

    def call(self, fn: Callable[[], Any]) -> float:
        return time_us(fn) if self.cuda else host_us(fn, batch=3, reps=3)  # CPU: does it run

    def graph(self, fn: Callable[[], Any]) -> float | None:
        return graph_us(fn) if self.cuda else None


def block_rows(res: Results, args: Any, timer: Timer, deadline: float) -> None:
    modes = ["eager", "default"] + (["reduce-overhead"] if timer.cuda else [])
    for h in args.hidden:
        p = _params(args.d, h, args.dtype, args.device)
        for weight in p.values():  # a model's parameters: reduce-overhead's graphs read them
            torch._dynamo.mark_static_address(weight)  # in place, not copied in every replay
        fns = {"kernelkit": kk_block, "torch": torch_block}
        compiled = {
            (name, mode): torch.compile(fn, fullgraph=True, mode=mode)
            for name, fn in fns.items()
            for mode in modes[1:]
        }
        for m in args.rows:
            if time.perf_counter() > deadline:
                res.add("notes", {"skipped": f"block H={h} M={m}: past --budget-s"})
                continue
            x = torch.randn(m, args.d, device=args.device).to(args.dtype)
            torch._dynamo.maybe_mark_dynamic(x, 0)  # one compile per function for every M
            want = torch_block(x, p).float()
            row: dict[str, Any] = {"H": h, "M": m}
            for mode in modes:
                for name, fn in fns.items():
                    run = fn if mode == "eager" else compiled[name, mode]
                    label = f"{name} {mode}"
                    try:
                        y = run(x, p)
                        err = (y.float() - want).abs().max().item() / want.abs().max().item()
                        call = _bound(run, x, p)
                        row[f"{label} µs"] = timer.call(call)
                        if mode == "eager":
                            row[f"{label} graph µs"] = timer.graph(call)
                        row[f"{label} err"] = float(f"{err:.2e}")
                    except Exception as e:  # noqa: BLE001 - report the row, go on
                        row[f"{label} µs"] = None
                        res.add("errors", {"what": f"{label} H={h} M={m}", "error": _err(e)})
            res.add("block", row)


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
                with kernelkit.force("matmul", route) if route else _Nothing():
                    y = kk()
                    want = ref().float()
                    err = (y.float() - want).abs().max().item() / max(want.abs().max().item(), 1)
                    kk_us, torch_us = timer.call(kk), timer.call(ref)
                row.update({"kernelkit µs": kk_us, "torch eager µs": torch_us,
                            "ratio": torch_us / kk_us, "err": float(f"{err:.2e}")})  # fmt: skip
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


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "decode_block_out"))
    ap.add_argument("--tiny", action="store_true", help="CPU, small shapes (for tests)")
    ap.add_argument("--budget-s", type=float, default=270.0, help="stop starting new rows")
    ap.add_argument("--skip-block", action="store_true")
    ap.add_argument("--skip-ops", action="store_true")
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
    res = Results(Path(args.out), f"{device}, torch {torch.__version__}")
    deadline = time.perf_counter() + args.budget_s
    timer = Timer(cuda)
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
