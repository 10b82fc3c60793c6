"""``kernelkit tune SPEC`` and ``kernelkit explain SPEC``: offline tuning of an autotuned kernel
over listed shapes, each candidate in a worker process with a timeout. ``kernelkit tune OP
--dims ...`` tunes a built-in op instead (``tune_op.py``), ``kernelkit explain OP --dims ...``
explains one (``explain_op.py``).

A spec (YAML, or JSON)::

    module: mykernels.py        # a .py file (relative to the spec) or an importable module
    object: scale               # the kernelkit.autotune(...) object in it
    backend: cpu                # optional: cuda or cpu (default: the kernel's own choice)
    framework: numpy            # optional: numpy or torch (default: numpy on cpu, else torch)
    timeout_s: 60               # per candidate: a worker that takes longer is killed
    budget_s: 600               # optional, per shape: no new candidate starts once spent
    check: false                # run candidates bounds-checked (cpu)
    seed: 0
    shapes:
      - inputs: {x: {shape: [4096], dtype: float32}, a: 2.0}
        outputs: {y: {shape: [4096], dtype: float32}}
    output: {database: true, table: scale_table.yaml}

A worker that crashes (a segfault), faults or hangs costs only its candidate, recorded as
failed; a new worker takes the next one. ``--devices 0,1`` runs one worker per GPU (each sees
only its GPU). Outputs are compared in the parent, in config order, against the first candidate
that ran, so a wrong config is rejected whatever worker ran it.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

__all__ = ["ShapeResult", "TuneSpec", "load_spec", "run_tune"]


@dataclass
class TuneSpec:
    """A parsed spec (paths resolved)."""

    module: str
    object: str
    shapes: list[dict[str, Any]]
    backend: str | None = None
    framework: str | None = None
    timeout_s: float = 60.0
    budget_s: float | None = None
    check: bool | None = None
    seed: int = 0
    database: bool = True
    table: str | None = None


def load_spec(path: str | Path) -> TuneSpec:
    """Read and check a spec; ``ValueError`` naming what is wrong."""
    path = Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError("reading a YAML spec needs PyYAML: pip install pyyaml") from None
        doc = yaml.safe_load(text)
    else:
        doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a tune spec is a mapping")
    known = set(TuneSpec.__dataclass_fields__) | {"output"}
    unknown = set(doc) - known
    if unknown:
        raise ValueError(f"{path}: unknown fields {sorted(unknown)} (known: {sorted(known)})")
    for name in ("module", "object", "shapes"):
        if name not in doc:
            raise ValueError(f"{path}: the spec needs {name!r}")
    if not isinstance(doc["shapes"], list) or not doc["shapes"]:
        raise ValueError(f"{path}: 'shapes' must be a non-empty list")
    module = str(doc["module"])
    if module.endswith(".py") and not os.path.isabs(module):
        module = str((path.parent / module).resolve())
    output = doc.get("output") or {}
    table = output.get("table")
    if table is not None and not os.path.isabs(table):
        table = str((path.parent / table).resolve())
    return TuneSpec(
        module=module,
        object=str(doc["object"]),
        shapes=doc["shapes"],
        backend=doc.get("backend"),
        framework=doc.get("framework"),
        timeout_s=float(doc.get("timeout_s", 60.0)),
        budget_s=None if doc.get("budget_s") is None else float(doc["budget_s"]),
        check=doc.get("check"),
        seed=int(doc.get("seed", 0)),
        database=bool(output.get("database", True)),
        table=table,
    )


def load_object(spec: TuneSpec) -> Any:
    """The autotuned kernel the spec names (runs its file or imports its module)."""
    import importlib
    import runpy

    from .._tune.autotune import AutotunedKernel

    if spec.module.endswith(".py"):
        namespace = runpy.run_path(spec.module, run_name="__kernelkit_tune__")
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        namespace = vars(importlib.import_module(spec.module))
    obj = namespace.get(spec.object)
    if not isinstance(obj, AutotunedKernel):
        raise ValueError(
            f"{spec.module} has no autotuned kernel {spec.object!r} "
            f"(got {type(obj).__name__}); make it with kernelkit.autotune(...)"
        )
    return obj


def _array(desc: dict[str, Any], rng: Any, framework: str, device: str | None) -> Any:
    import numpy as np

    shape = tuple(int(v) for v in desc["shape"])
    dtype = str(desc.get("dtype", "float32"))
    host_dtype = "float32" if dtype in ("bfloat16", "float16") else dtype
    if dtype.startswith(("int", "uint")):
        a = rng.integers(int(desc.get("low", 0)), int(desc.get("high", 16)), shape)
    elif dtype == "bool":
        a = rng.integers(0, 2, shape).astype(bool)
    else:
        a = rng.standard_normal(shape)
    a = np.ascontiguousarray(a.astype(host_dtype))
    if framework == "numpy":
        if host_dtype != dtype:
            a = a.astype(dtype)  # needs ml_dtypes for bfloat16
        return a
    import torch

    t = torch.from_numpy(a).to(getattr(torch, dtype))
    return t.to(device) if device else t


def make_call(obj: Any, spec: TuneSpec, index: int) -> dict[str, Any]:
    """Arguments for shape ``index``: random inputs (seeded), output shapes and dtypes."""
    import numpy as np

    entry = spec.shapes[index]
    framework = spec.framework or ("numpy" if spec.backend in (None, "cpu") else "torch")
    device = "cuda" if framework == "torch" and spec.backend != "cpu" else None
    rng = np.random.default_rng(spec.seed + index)
    given = entry.get("inputs", {})
    inputs = []
    for name in obj.kernel.spec.input_names:
        if name not in given:
            raise ValueError(f"shape {index}: no value for input {name!r}")
        v = given[name]
        inputs.append(_array(v, rng, framework, device) if isinstance(v, dict) else v)
    outs = entry.get("outputs", {})
    names = obj.kernel.spec.output_names
    missing = [n for n in names if n not in outs]
    if missing:
        raise ValueError(f"shape {index}: no shape/dtype for outputs {missing}")
    return {
        "inputs": inputs,
        "output_shapes": [tuple(outs[n]["shape"]) for n in names],
        "output_dtypes": [outs[n].get("dtype", "float32") for n in names],
        "backend": spec.backend,
    }


# worker process -----------------------------------------------------------------------------


def _worker(conn: Any, spec: TuneSpec, device: str | None) -> None:
    """Runs candidates sent as (shape index, config index) until told to stop."""
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    from .._tune.autotune import KernelCall

    obj = load_object(spec)
    sessions: dict[int, Any] = {}
    while True:
        task = conn.recv()
        if task is None:
            return
        shape, index = task
        try:
            session = sessions.get(shape)
            if session is None:
                args = make_call(obj, spec, shape)
                problem, bound = obj.problem(**args)
                call = KernelCall(
                    args["inputs"],
                    args["output_shapes"],
                    args["output_dtypes"],
                    backend=spec.backend,
                    check=spec.check,
                )
                session = sessions[shape] = obj.session(problem, bound, call)
            conn.send(_candidate(session, obj.impl.configs[index]))
        except Exception as e:  # noqa: BLE001 - reported, the worker goes on
            conn.send(("failed", None, f"{type(e).__name__}: {e}", None, None))


def _candidate(session: Any, config: Any) -> tuple:
    from .._tune.tuner import failure_reason

    facts = (session.key, _environment(session))
    why = session.legal(config)
    if why is not None:
        return ("skipped", None, why, None, facts)
    try:
        session.compile(config)
        outputs = session.outputs(config)
        seconds, how = session.time(config)
    except Exception as e:  # noqa: BLE001
        return ("failed", None, failure_reason(e), None, facts)
    return ("ok", seconds, how, outputs, facts)


def _environment(session: Any) -> dict[str, Any]:
    from .._select.tuning.records import Environment

    return Environment.of(session.backend, session.target).to_dict()


# parent -------------------------------------------------------------------------------------


@dataclass
class ShapeResult:
    """One shape's candidates: (config, status, seconds, detail) each, and the winner's index."""

    index: int
    rows: list[tuple[Any, str, float | None, str]] = field(default_factory=list)
    winner: int | None = None
    tuning_s: float = 0.0
    key: Any = None
    env: Any = None


class _Worker:
    def __init__(self, ctx: Any, spec: TuneSpec, device: str | None) -> None:
        self.spec, self.device, self.ctx = spec, device, ctx
        self.task: tuple[int, int] | None = None
        self.started = 0.0
        self._start()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.conn = parent
        self.proc = self.ctx.Process(target=_worker, args=(child, self.spec, self.device))
        self.proc.daemon = True
        self.proc.start()
        child.close()

    def send(self, task: tuple[int, int]) -> None:
        self.task, self.started = task, time.monotonic()
        self.conn.send(task)

    def restart(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self._start()
        self.task = None

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


def run_tune(
    spec: TuneSpec, devices: list[str] | None = None, quiet: bool = False
) -> list[ShapeResult]:
    """Tune every shape of ``spec``; returns the results (the caller stores and reports)."""
    from tqdm import tqdm

    obj = load_object(spec)
    configs = obj.impl.configs
    if not configs:
        raise ValueError(f"{spec.object}: its config list is empty: nothing to tune")
    ctx = mp.get_context("spawn")
    workers = [_Worker(ctx, spec, d) for d in (devices or [None])]  # type: ignore[list-item]
    tasks = [(s, c) for s in range(len(spec.shapes)) for c in range(len(configs))]
    answers: dict[tuple[int, int], tuple] = {}
    started: dict[int, float | None] = {s: None for s in range(len(spec.shapes))}
    spent: dict[int, float] = {}
    off = quiet or not sys.stderr.isatty()
    bar = tqdm(total=len(tasks), desc=f"tuning {obj.name}", disable=off, unit="config")
    try:
        pending = list(tasks)
        while pending or any(w.task for w in workers):
            for w in workers:
                if w.task is None and pending:
                    task = pending.pop(0)
                    s = task[0]
                    t0 = started[s]
                    if t0 is None:
                        t0 = started[s] = time.monotonic()
                    if spec.budget_s is not None and time.monotonic() - t0 > spec.budget_s:
                        answers[task] = ("not timed", None, "time budget spent", None, None)
                        bar.update(1)
                        continue
                    w.send(task)
            _collect(workers, answers, spec.timeout_s, bar)
            for s in started:
                if started[s] is not None and all((s, c) in answers for c in range(len(configs))):
                    spent.setdefault(s, time.monotonic() - started[s])  # type: ignore[operator]
    finally:
        bar.close()
        for w in workers:
            w.stop()
    return [_judge(obj, s, configs, answers, spent.get(s, 0.0)) for s in range(len(spec.shapes))]


def _collect(workers: list[_Worker], answers: dict, timeout_s: float, bar: Any) -> None:
    busy = {w.conn: w for w in workers if w.task is not None}
    if not busy:
        return
    for conn in wait(list(busy), timeout=0.2):
        w = busy[conn]
        try:
            answers[w.task] = w.conn.recv()
            w.task = None
        except (EOFError, OSError):
            w.proc.join(1)
            code = w.proc.exitcode
            why = f"worker died (exit code {code})" if code is not None else "worker died"
            answers[w.task] = ("failed", None, why, None, None)
            w.restart()
        bar.update(1)
    now = time.monotonic()
    for w in workers:
        if w.task is not None and now - w.started > timeout_s:
            answers[w.task] = ("failed", None, f"timed out after {timeout_s:g} s", None, None)
            w.restart()
            bar.update(1)


def _judge(obj: Any, s: int, configs: Any, answers: dict, spent: float) -> ShapeResult:  # noqa: ARG001  same first argument as its siblings
    from .._tune.tuner import compare_outputs

    result = ShapeResult(s, tuning_s=spent)
    ref = None
    for c, config in enumerate(configs):
        status, seconds, detail, outputs, facts = answers[(s, c)]
        if facts is not None:
            result.key, result.env = facts
        if status == "ok":
            dtypes = [str(o.dtype) for o in outputs]
            wrong = None if ref is None else compare_outputs(ref, outputs, dtypes)
            if wrong is not None:
                status, seconds, detail = "rejected", None, wrong
            elif ref is None:
                ref = outputs
        result.rows.append((config, status, seconds, detail))
    timed = [(r[2], c) for c, r in enumerate(result.rows) if r[1] == "ok" and r[2] is not None]
    result.winner = min(timed)[1] if timed else None
    return result


def record_of(obj: Any, result: ShapeResult) -> Any:
    """The ``TuningRecord`` of one shape's result (None without a winner)."""
    from .._select.tuning.records import Environment, TuningRecord

    if result.winner is None or result.env is None:
        return None
    best = result.rows[result.winner]
    return TuningRecord(
        op=obj.name,
        key=tuple(tuple(k) for k in result.key),
        impl=obj.op.impl_id(obj.impl),
        config=best[0],
        env=Environment.from_dict(result.env),
        measurements=tuple(
            (r[0].describe(), None if r[2] is None else round(r[2] * 1e6, 4)) for r in result.rows
        ),
        best_us=round(float(best[2] or 0.0) * 1e6, 4),
        candidates=len(result.rows),
        tuning_s=round(result.tuning_s, 4),
        identity=obj.op.identity,
    )


def report(obj: Any, spec: TuneSpec, results: list[ShapeResult]) -> str:  # noqa: ARG001  public: kept for callers
    from .._tune.tuner import candidate_line

    lines = []
    for r in results:
        entry = spec.shapes[r.index]
        shapes = {k: v["shape"] for k, v in entry.get("inputs", {}).items() if isinstance(v, dict)}
        lines.append(f"shape {r.index} {shapes} (tuned in {r.tuning_s:.2f} s):")
        for c, (config, status, seconds, detail) in enumerate(r.rows):
            mark = "*" if c == r.winner else " "
            lines.append(f" {mark} {candidate_line(seconds, status, config.describe(), detail)}")
    return "\n".join(lines)


def plot(obj: Any, spec: TuneSpec, results: list[ShapeResult], path: str) -> None:  # noqa: ARG001  public: kept for callers
    """Time per config (x) for each shape (one line each), the winner marked with a star."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError(
            "--plot needs matplotlib: pip install matplotlib (or kernelkit[dev])"
        ) from None
    configs = obj.impl.configs
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(configs) + 3), 4.5))
    for r in results:
        xs = [c for c, row in enumerate(r.rows) if row[2] is not None]
        ys = [r.rows[c][2] * 1e6 for c in xs]  # type: ignore[operator]
        (line,) = ax.plot(xs, ys, marker="o", label=f"shape {r.index}")
        if r.winner is not None:
            ax.plot(
                [r.winner],
                [float(r.rows[r.winner][2] or 0.0) * 1e6],
                marker="*",
                markersize=16,
                color=line.get_color(),
            )
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([c.describe() for c in configs], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("time per launch (us, log scale)")
    ax.set_yscale("log")  # shapes of very different sizes share one axis
    ax.set_title(f"{obj.name}: time per config and shape (star: chosen)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table_entries(obj: Any, results: list[ShapeResult]) -> list[Any]:
    from .._select.tables import TableEntry

    entries = []
    for r in results:
        record = record_of(obj, r)
        if record is not None:
            entries.append(
                TableEntry(
                    op=record.op,
                    impl=record.impl,
                    config=record.config,
                    arch=record.env.arch,
                    exact=tuple(record.key),
                    note=f"kernelkit tune: {record.best_us} us on {record.env.device}",
                )
            )
    return entries


def main_tune(args: Any) -> int:
    """``kernelkit tune SPEC``, or ``kernelkit tune OP[,OP...] --dims ...`` for built-in ops."""
    from .._select.tuning import db
    from .op_cases import OPS, not_a_spec

    names = [n.strip() for n in args.spec.split(",")]
    if all(n in OPS for n in names):
        from .tune_op import main_tune_op

        return main_tune_op(args)
    if (why := not_a_spec("tune", args.spec)) is not None:
        print(why, file=sys.stderr)
        return 2
    try:
        spec = load_spec(args.spec)
        devices = [d.strip() for d in args.devices.split(",")] if args.devices else None
        if args.timeout is not None:
            spec.timeout_s = args.timeout
        obj = load_object(spec)
        results = run_tune(spec, devices, quiet=args.quiet)
    except (ValueError, OSError) as e:
        print(f"kernelkit tune: {e}", file=sys.stderr)
        return 2
    print(report(obj, spec, results))
    records = [r for r in (record_of(obj, x) for x in results) if r is not None]
    if spec.database and not args.no_database:
        store = db.current_db()
        for record in records:
            store.put(record)
        print(f"{len(records)} record(s) stored in the tuning database ({store})")
    if spec.table or args.table:
        from .._select.tables import Table

        path = str(args.table or spec.table)
        Table.write(path, table_entries(obj, results))
        print(f"table written to {path}")
    if args.plot:
        try:
            plot(obj, spec, results, args.plot)
        except ValueError as e:
            print(f"kernelkit tune: {e}", file=sys.stderr)
            return 2
        print(f"plot written to {args.plot}")
    return 0 if len(records) == len(results) else 1


def main_explain(args: Any) -> int:
    """``kernelkit explain SPEC [--shape I]``: the choice for each shape and why; or
    ``kernelkit explain OP --dims ... [--dtype] [--device]`` for a built-in op."""
    from .explain_op import OPS, explain_ops
    from .op_cases import not_a_spec

    if args.spec in OPS:
        try:
            found = explain_ops(
                args.spec,
                args.dims or "",
                args.dtype,
                args.device,
                args.transpose_b,
                args.framework,
            )
        except (ValueError, ImportError) as e:
            print(f"kernelkit explain: {e}", file=sys.stderr)
            return 2
        for label, selection in found:
            print(
                f"{args.spec} {label}:\n{selection.explain()}"
                if len(found) > 1
                else selection.explain()
            )
        return 0
    if (why := not_a_spec("explain", args.spec)) is not None:
        print(why, file=sys.stderr)
        return 2
    try:
        spec = load_spec(args.spec)
        obj = load_object(spec)
        indices = [args.shape] if args.shape is not None else range(len(spec.shapes))
        for i in indices:
            call = make_call(obj, spec, i)
            print(f"shape {i}:")
            print(obj.explain(**call).explain())
    except (ValueError, OSError, IndexError) as e:
        print(f"kernelkit explain: {e}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: Any) -> None:
    """Add ``tune`` and ``explain`` to the ``kernelkit`` parser."""
    from .op_cases import add_arguments as add_problem_arguments
    from .tune_op import add_arguments as add_tune_op_arguments

    p = subparsers.add_parser(
        "tune", help="tune an autotuned kernel over a spec's shapes, or built-in ops over --dims"
    )
    p.add_argument("spec", help="a YAML or JSON tune spec, or built-in ops: matmul,softmax,...")
    p.add_argument("--devices", help="GPUs to use, one worker each (e.g. 0,1)")
    p.add_argument("--timeout", type=float, help="seconds per candidate (overrides the spec)")
    p.add_argument(
        "--table",
        help="also write a shippable table (.yaml or .json) here; for "
        "built-in ops a folder takes <op>.<device>.yaml (existing rows are updated)",
    )
    p.add_argument("--plot", help="write a PNG of time per config and shape (needs matplotlib)")
    p.add_argument("--no-database", action="store_true", help="do not store records")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_problem_arguments(p)
    add_tune_op_arguments(p)
    p.set_defaults(func=main_tune)
    p = subparsers.add_parser(
        "explain", help="print the choice for a tune spec's shapes, or a built-in op's, and why"
    )
    p.add_argument("spec", help="a tune spec, or a built-in op: softmax, rms_norm, ...")
    p.add_argument("--shape", type=int, help="only this shape (index in the spec)")
    add_problem_arguments(p)
    p.set_defaults(func=main_explain)
