"""Does the vendor route give CuPy and JAX users cuBLAS's speed? (issue 28, item 3)

Per weight (4096x4096, 14336x4096: a linear layer's [N, K]), dtype (bfloat16, float16) and
M (1, 16, 128, 512, 3500, 8192), in one process:

- cuBLAS: ``torch.mm`` on torch tensors of the same values (the reference of every ratio);
- CuPy arrays: kernelkit's own kernel (what the rules pick without a table row), the vendor route
  (cuBLASLt through nvmath-python's bindings, a plan a signature), ``cupy.matmul``, and
  nvmath-python's own APIs: the planned ``Matmul.execute`` and the function ``matmul`` (what the
  binding costs a call through them);
- JAX arrays: kernelkit's own kernel (XLA's FFI), the vendor route (``jnp.matmul``, jitted once a
  signature), and ``jax.jit(lambda x, w: x @ w.T)`` as a JAX user writes it.

"device" is the device time of one call: 20 calls captured in a CUDA graph (torch's, on a stream
of our own that CuPy launches on), replayed and timed with CUDA events; for nvmath's own APIs
(they allocate their result every call) or where a capture fails, CUDA events around 50 calls
(the note says which); JAX launches on XLA's stream, which neither graphs nor events of ours
see: there it is the wall clock of 50 back-to-back calls ended by ``block_until_ready`` (an
upper bound). "per call" is the wall clock
of 50 back-to-back eager calls ended by a sync (the host's cost where it exceeds the device's).
"x cuBLAS" is cuBLAS's device time over the row's (>= 0.95 is the target).

    python benchmarks/matmul_vendor.py                       # everything (~3-5 minutes on an H100)
    python benchmarks/matmul_vendor.py --ms 3500,8192 --frameworks cupy
    python benchmarks/matmul_vendor.py --table src/kernelkit/tables/matmul.h100.yaml

``--table PATH`` adds to a table file one ``matmul/vendor`` row per (framework, weight, dtype,
M bucket of the op's key) where the vendor's device time was at most 0.98x kernelkit's own at
every M measured in the bucket, and drops earlier vendor rows of the buckets measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX beside torch and CuPy

import numpy as np
import torch
from _common import time_us

from kernelkit import ops
from kernelkit._choices import force
from kernelkit._select.records import Config
from kernelkit._select.select import select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_cublaslt as LT
from kernelkit.ops import _matmul_mma as MMA
from kernelkit.ops._matmul_args import prepare

AHEAD = 0.98  # a row is written where the vendor's device time is at most this x kernelkit's


def device_us(fn: Callable[[], Any], graph: bool = True, batch: int = 20) -> tuple[Any, str]:
    """(device µs per call, how it was timed): ``batch`` calls captured in a CUDA graph on a
    stream of our own (warmed up on it first: plans and workspaces exist before the capture)
    and replayed; without ``graph``, or where the capture fails, CUDA events around 50 calls."""
    if graph:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        stream.synchronize()
        cuda_graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(cuda_graph, stream=stream):
                for _ in range(batch):
                    fn()
        except Exception as e:  # noqa: BLE001 - reported, timed with events instead
            torch.cuda.synchronize()
            why = f"graph capture failed ({type(e).__name__}: {str(e)[:80]}); "
        else:
            return time_us(cuda_graph.replay, batch=1, reps=15) / batch, "graph"
    else:
        why = ""
    return time_us(fn, batch=50, reps=5), why + "events over 50 calls"


def wall_us(fn: Callable[[], Any], sync: Callable[[Any], Any], calls: int = 50) -> float:
    """Median wall-clock µs per call of ``calls`` back-to-back calls ended by ``sync``."""
    sync(fn())
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            last = fn()
        sync(last)
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def on_torch_stream(cupy: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` with CuPy launching on torch's current stream (the one being captured)."""

    def call() -> Any:
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            return fn()

    return call


def bound(x: Any, w: Any, out: Any = None, target: bool = False) -> Any:
    """The problem ``ops.matmul`` binds for ``x @ w.T`` (and the target, with ``target``)."""
    flat, _, _, options = prepare(x, w, None, None, True)
    if options["aligned16"] is not None:
        options["aligned16"] = MMA.aligned16(flat, w)
    problem, on, _ = MM._RUNNER.problem([flat, w, None], flat.dtype, out, options)
    return (problem, on) if target else problem


def own_choice(x: Any, w: Any) -> Any:
    """What the rules pick for ``x @ w.T`` without tables, records or overrides (the kernel a
    vendor row would replace) and the problem it was picked for."""
    problem, target = bound(x, w, target=True)
    return select(MM.OP, problem, target).choice, problem, target


def forced(impl: str, config: Config | None, fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        with force("matmul", impl, config):
            return fn()

    return call


class Bench:
    """Rows of one (weight, dtype, M): printed as measured, kept for --table."""

    def __init__(self, cublas_us: float) -> None:
        self.cublas_us = cublas_us

    def row(self, name: str, device: float | None, per_call: float | None, note: str = "") -> None:
        dev = "n/a" if device is None else f"{device:9.2f}"
        ratio = "" if device is None else f"{self.cublas_us / device:6.2f}x"
        call = "n/a" if per_call is None else f"{per_call:9.2f}"
        print(f"    {name:34}{dev:>10}{ratio:>9}{call:>11}  {note}", flush=True)


def bench_cupy(xt: Any, wt: Any, b: Bench, found: list) -> None:
    import cupy

    x, w = cupy.from_dlpack(xt), cupy.from_dlpack(wt)
    y = cupy.empty((x.shape[0], w.shape[0]), dtype=x.dtype)
    sync = lambda _: cupy.cuda.Device().synchronize()
    choice, problem, target = own_choice(x, w)
    own = choice.impl.split("/")[1]

    def mm(impl: str, config: Any, into: bool) -> Callable[[], Any]:
        if into:
            return forced(impl, config, lambda: ops.matmul(x, w, transpose_b=True, out=y))
        return forced(impl, config, lambda: ops.matmul(x, w, transpose_b=True))

    # (name, into out= for the device time, eager for the per-call time, in a graph?, note)
    variants: list[tuple[str, Callable[[], Any], Callable[[], Any], bool, str]] = [
        (f"kernelkit {own}", mm(own, choice.config, True), mm(own, choice.config, False), True,
         "own kernel"),
        ("vendor route", mm("vendor", None, True), mm("vendor", None, False), True,
         "cuBLASLt, nvmath bindings"),
        ("cupy.matmul", lambda: cupy.matmul(x, w.T, out=y), lambda: cupy.matmul(x, w.T), True,
         ""),
    ]  # fmt: skip
    lt = LT.binding()
    if not isinstance(lt, str):  # the route's launcher without ops.matmul's per-call path
        into, eager = (LT.launcher(lt, bound(x, w, o)) for o in (y, None))
        variants.append(("vendor launcher alone", lambda: into([x, w, None], y),
                         lambda: eager([x, w, None], None), True,
                         "what the route costs without ops.matmul's checks"))  # fmt: skip
    try:
        from nvmath.linalg.advanced import Matmul, matmul

        planned = Matmul(x, w.T)
        planned.plan()
        variants.append(("nvmath Matmul.execute", planned.execute, planned.execute, False,
                         "planned once"))  # fmt: skip
        variants.append(("nvmath matmul()", lambda: matmul(x, w.T), lambda: matmul(x, w.T),
                         False, "plans every call"))  # fmt: skip
    except Exception as e:  # noqa: BLE001 - reported
        print(f"    (nvmath's own APIs: {type(e).__name__}: {str(e)[:120]})")
    times = {}
    for name, into_out, eager, graph, note in variants:
        try:
            device, how = device_us(on_torch_stream(cupy, into_out), graph)
            b.row(name, device, wall_us(eager, sync), f"{note}; device: {how}")
            times[name] = device
        except Exception as e:  # noqa: BLE001 - reported, the others go on
            b.row(name, None, None, f"failed: {type(e).__name__}: {str(e)[:100]}")
    found.append((problem, target, times.get("vendor route"), times.get(f"kernelkit {own}"), own))


def bench_jax(xt: Any, wt: Any, b: Bench, found: list) -> None:
    import jax

    x, w = jax.dlpack.from_dlpack(xt.clone()), jax.dlpack.from_dlpack(wt.clone())
    sync = jax.block_until_ready
    choice, problem, target = own_choice(x, w)
    own = choice.impl.split("/")[1]
    jitted = jax.jit(lambda x, w: x @ w.T)

    def mm(impl: str, config: Any) -> Callable[[], Any]:
        return forced(impl, config, lambda: ops.matmul(x, w, transpose_b=True))

    variants = [
        (f"kernelkit {own}", mm(own, choice.config), "own kernel, XLA FFI"),
        ("vendor route", mm("vendor", None), "jnp.matmul, jitted"),
        ("jax.jit(x @ w.T)", lambda: jitted(x, w), "as a JAX user writes it"),
    ]
    times = {}
    for name, fn, note in variants:
        try:
            us = wall_us(fn, sync)
            b.row(name, us, us, note + " (device: 50-call wall clock)")
            times[name] = us
        except Exception as e:  # noqa: BLE001 - reported, the others go on
            b.row(name, None, None, f"failed: {type(e).__name__}: {str(e)[:100]}")
    found.append((problem, target, times.get("vendor route"), times.get(f"kernelkit {own}"), own))


def cublas_row(xt: Any, wt: Any) -> Bench:
    """cuBLAS's row (torch.mm), the reference of the others' ratios."""
    yt = torch.empty(xt.shape[0], wt.shape[0], device="cuda", dtype=wt.dtype)
    cublas, how = device_us(lambda: torch.mm(xt, wt.t(), out=yt))
    b = Bench(cublas)
    per_call = wall_us(lambda: torch.mm(xt, wt.t()), lambda _: torch.cuda.synchronize())
    b.row("cuBLAS (torch.mm)", cublas, per_call, f"device: {how}")
    return b


def table_rows(found: list, device_name: str) -> tuple[list, set]:
    """(rows naming matmul/vendor where it was ahead at every M of a bucket, scopes measured)."""
    from kernelkit._select.tables import TableEntry

    buckets: dict[Any, list] = {}
    for problem, target, vendor, own, impl in found:
        key = MM.OP.key.of(problem)
        buckets.setdefault((key, target.arch), []).append((problem.attr("M"), vendor, own, impl))
    rows, scopes = [], set()
    for (key, arch), ms in buckets.items():
        row = TableEntry.from_key("matmul", "matmul/vendor", Config(), key, arch, device_name)
        scopes.add((row.exact, row.ranges))
        if all(v is not None and o is not None and v <= AHEAD * o for _, v, o, _ in ms):
            note = "; ".join(f"M={m}: {v:.1f} us vs {i} {o:.1f} us" for m, v, o, i in ms)
            note = f"benchmarks/matmul_vendor.py: {note}"
            rows.append(TableEntry.from_key("matmul", "matmul/vendor", Config(), key, arch,
                                            device_name, note))  # fmt: skip
    return rows, scopes


def write_table(path: Path, rows: list, scopes: set, device: dict[str, str]) -> None:
    from kernelkit._select.tables import Table

    old = list(Table.load([path]).entries) if path.exists() else []
    kept = [e for e in old if e.impl != "matmul/vendor" or (e.exact, e.ranges) not in scopes]
    Table.write(path, kept + rows, op="matmul", device=device)
    print(f"{path}: {len(rows)} vendor rows written, {len(old) - len(kept)} replaced", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ms", default="1,16,128,512,3500,8192")
    parser.add_argument("--weights", default="4096x4096,14336x4096", help="NxK, comma-separated")
    parser.add_argument("--dtypes", default="bfloat16,float16")
    parser.add_argument("--frameworks", default="cupy,jax")
    parser.add_argument("--table", type=Path, help="add vendor rows to this table file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skip: matmul_vendor.py needs a CUDA GPU")
        return 0
    frameworks = args.frameworks.split(",")
    name = torch.cuda.get_device_name()
    short = next((s for s in ("H100", "H200") if s in name), name)
    print(f"{name}; columns: device us, x cuBLAS, per-call us", flush=True)
    t0 = time.perf_counter()
    lt = LT.binding()  # the route's first use: nvmath-python imported, cuBLASLt loaded
    took = (time.perf_counter() - t0) * 1e3
    if isinstance(lt, str):
        print(f"vendor route for CuPy unavailable: {lt}", flush=True)
    else:
        from importlib.metadata import version

        print(f"nvmath-python {version('nvmath-python')}, cuBLASLt {lt.get_version()}: "
              f"import and load {took:.0f} ms", flush=True)  # fmt: skip
    found: list = []
    for weight in args.weights.split(","):
        n, k = (int(v) for v in weight.split("x"))
        for dtype in args.dtypes.split(","):
            wt = (torch.randn(n, k, device="cuda") * 0.05).to(getattr(torch, dtype))
            for m in (int(v) for v in args.ms.split(",")):
                xt = torch.randn(m, k, device="cuda").to(wt.dtype)
                print(f"  M={m} N={n} K={k} {dtype}", flush=True)
                b = cublas_row(xt, wt)
                for fw, run in (("cupy", bench_cupy), ("jax", bench_jax)):
                    if fw not in frameworks:
                        continue
                    print(f"   {fw}", flush=True)
                    try:
                        run(xt, wt, b, found)
                    except Exception as e:  # noqa: BLE001 - reported, the others go on
                        print(f"    failed: {type(e).__name__}: {str(e)[:160]}", flush=True)
    if args.table is not None:
        rows, scopes = table_rows(found, short)
        arch = found[0][1].arch if found else "sm_90"
        write_table(args.table, rows, scopes, {"arch": arch, "name": short})
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
