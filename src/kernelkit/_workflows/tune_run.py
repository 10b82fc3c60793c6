"""A tune spec's run: every (device kind, shape, config) measured once, by the local worker pool
(``tune_pool.py``) or on a Ray cluster (``tune_ray.py``), each result stored as it arrives
(``tune_journal.py``) so that a rerun resumes; then, per kind and shape, outputs compared in
config order against the first candidate that ran, so a wrong config is rejected whatever worker
ran it, and the fastest correct one wins. ``tune_spec`` is the public entry point."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .tune_tasks import Measured, Measurement

__all__ = ["ShapeResult", "SpecTuning", "record_of", "report", "run_tune", "tune_spec"]


@dataclass
class ShapeResult:
    """One shape's candidates on one device kind: (config, status, seconds, detail) each, and
    the winner's index."""

    index: int
    rows: list[tuple[Any, str, float | None, str]] = field(default_factory=list)
    winner: int | None = None
    tuning_s: float = 0.0
    key: Any = None
    env: Any = None
    kind: str | None = None


class _Run:
    """The bookkeeping of one run: answers, budgets, progress, journal."""

    def __init__(self, spec: Any, n_configs: int, journal: Any, bar: Any) -> None:
        self.spec, self.n, self.journal, self.bar = spec, n_configs, journal, bar
        self.answers: dict[Measurement, Measured] = {}
        self.started: dict[tuple[str | None, int], float] = {}
        self.spent: dict[tuple[str | None, int], float] = {}
        self.measured = 0  # candidates measured by this run (not read back)

    def admit(self, m: Measurement) -> bool:
        """Whether ``m`` may start (no new candidate once its shape's budget is spent)."""
        t0 = self.started.setdefault((m.kind, m.shape), time.monotonic())
        budget = self.spec.budget_s
        if budget is not None and time.monotonic() - t0 > budget:
            self.answers[m] = Measured("not timed", detail="time budget spent")
            self.bar.update(1)
            self._maybe_judge(m)
            return False
        return True

    def arrived(self, m: Measurement, result: Measured) -> None:
        self.answers[m] = result
        self.measured += 1
        self.journal.store(m, result)
        self.bar.update(1)
        self._maybe_judge(m)

    def _maybe_judge(self, m: Measurement) -> None:
        group = [Measurement(m.shape, c, m.kind) for c in range(self.n)]
        if all(g in self.answers for g in group):
            t0 = self.started.get((m.kind, m.shape))
            if t0 is not None:
                self.spent[(m.kind, m.shape)] = time.monotonic() - t0
            self.judge(group)

    def judge(self, group: list[Measurement]) -> None:
        """Outputs compared in config order; the verdicts stored (highest config first, so an
        interruption leaves the reference's outputs until last)."""
        from .._tune.tuner import compare_outputs

        ref = None
        verdicts = {}
        for m in group:
            r = self.answers[m]
            if r.status != "ok" or r.judged:
                verdicts[m] = (
                    r if r.judged or r.status == "not timed" else r.verdict(r.status, r.detail)
                )
                continue
            got = r.outputs or ()
            dtypes = [str(o.dtype) for o in got]
            wrong: str | None = None if ref is None else compare_outputs(ref, got, dtypes)
            if wrong is not None:
                verdicts[m] = r.verdict("rejected", wrong)
            else:
                ref = r.outputs if ref is None else ref
                verdicts[m] = r.verdict("ok", r.detail)
        for m in reversed(group):
            if verdicts[m] is not self.answers[m]:
                self.answers[m] = verdicts[m]
                if verdicts[m].status != "not timed":
                    self.journal.store(m, verdicts[m])


def run_tune(
    spec: Any,
    devices: list[str] | None = None,
    quiet: bool = False,
    *,
    ray: str | bool | None = None,
    fresh: bool = False,
) -> tuple[list[ShapeResult], int]:
    """Tune every shape of ``spec`` on every device kind it names; returns the results, kind
    by kind (the caller stores and reports), and how many candidates this call measured.
    ``ray``: None for the local pool, True for Ray (``RAY_ADDRESS`` or a new local cluster), a
    string for the cluster at that address."""
    from .._tune.tuner import progress_bar as _progress
    from .tune_journal import Journal, run_digest
    from .tune_spec import load_object
    from .tune_tasks import module_source

    obj = load_object(spec)
    configs = obj.impl.configs
    if not configs:
        raise ValueError(f"{spec.object}: its config list is empty: nothing to tune")
    kinds: list[str | None] = list(spec.device_kinds) or [None]
    if spec.device_kinds and ray is None:
        raise ValueError(
            f"the spec lists device kinds {spec.device_kinds}: they are tuned on a Ray cluster "
            "with nodes of each kind (--ray ADDRESS); leave device_kinds out to tune here"
        )
    if ray is not None and devices:
        raise ValueError("--devices is for the local pool; Ray gives each task its own GPU")
    source = module_source(spec)
    journal = Journal.of(spec, source, fresh)
    every = [
        Measurement(s, c, k)
        for k in kinds
        for s in range(len(spec.shapes))
        for c in range(len(configs))
    ]
    off = quiet or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    bar = _progress(len(every), f"tuning {obj.name}", off)
    run = _Run(spec, len(configs), journal, bar)
    todo = []
    for m in every:
        stored = journal.load(m)
        if stored is None:
            todo.append(m)
        else:
            run.answers[m] = stored
            bar.update(1)
    try:
        if ray is None:
            from .tune_pool import run_pool

            run_pool(spec, todo, devices, run.admit, run.arrived)
        else:
            from .tune_ray import run_ray

            address = ray if isinstance(ray, str) and ray else None
            run_ray(spec, source, run_digest(spec, source), todo, address, run.admit, run.arrived)
    finally:
        bar.close()
    results = []
    for k in kinds:
        for s in range(len(spec.shapes)):
            group = [Measurement(s, c, k) for c in range(len(configs))]
            if any(not run.answers[m].judged and run.answers[m].status == "ok" for m in group):
                run.judge(group)  # read back unjudged (a run cut off while judging)
            results.append(_result(run, group, configs, run.spent.get((k, s), 0.0)))
    return results, run.measured


def _result(run: _Run, group: list[Measurement], configs: Any, spent: float) -> ShapeResult:
    m0 = group[0]
    result = ShapeResult(m0.shape, tuning_s=spent, kind=m0.kind)
    for m in group:
        r = run.answers[m]
        if r.env is not None:
            result.key, result.env = r.key, r.env
        result.rows.append((configs[m.config], r.status, r.seconds, r.detail))
    timed = [(r[2], c) for c, r in enumerate(result.rows) if r[1] == "ok" and r[2] is not None]
    result.winner = min(timed)[1] if timed else None
    return result


def record_of(obj: Any, result: ShapeResult) -> Any:
    """The ``TuningRecord`` of one shape's result (None without a winner)."""
    from .._select.tuning.records import TuningRecord

    if result.winner is None or result.env is None:
        return None
    best = result.rows[result.winner]
    return TuningRecord(
        op=obj.name,
        key=tuple(tuple(k) for k in result.key),
        impl=obj.op.impl_id(obj.impl),
        config=best[0],
        env=result.env,
        measurements=tuple(
            (r[0].describe(), None if r[2] is None else round(r[2] * 1e6, 4)) for r in result.rows
        ),
        best_us=round(float(best[2] or 0.0) * 1e6, 4),
        candidates=len(result.rows),
        tuning_s=round(result.tuning_s, 4),
        identity=obj.op.identity,
    )


def report(spec: Any, results: list[ShapeResult]) -> str:
    """Per kind and shape: every candidate's line, the winner starred."""
    from .._tune.tuner import candidate_line

    lines = []
    for r in results:
        entry = spec.shapes[r.index]
        shapes = {k: v["shape"] for k, v in entry.get("inputs", {}).items() if isinstance(v, dict)}
        on = f" on {r.kind}" if r.kind else ""
        lines.append(f"shape {r.index} {shapes}{on} (tuned in {r.tuning_s:.2f} s):")
        for c, (config, status, seconds, detail) in enumerate(r.rows):
            mark = "*" if c == r.winner else " "
            lines.append(f" {mark} {candidate_line(seconds, status, config.describe(), detail)}")
    return "\n".join(lines)


def table_entries(obj: Any, results: list[ShapeResult], kind: str | None = None) -> list[Any]:
    """The table rows of ``results`` measured on ``kind``. A row matches devices whose name
    contains the kind when the measured device's name does (H100 in 'NVIDIA H100 80GB HBM3'),
    else the measured device's whole name (Ray's A100-80G is not in 'NVIDIA A100-SXM4-80GB');
    without kinds, any device of the measured arch."""
    from .._select.tables import TableEntry

    entries = []
    for r in results:
        record = record_of(obj, r) if r.kind == kind else None
        if record is not None:
            entries.append(
                TableEntry(
                    op=record.op,
                    impl=record.impl,
                    config=record.config,
                    arch=record.env.arch,
                    device_name=_device_name(kind, record.env.device),
                    exact=tuple(record.key),
                    note=f"kernelkit tune: {record.best_us} us on {record.env.device}",
                )
            )
    return entries


def _device_name(kind: str | None, device: str) -> str | None:
    if kind is None or kind in device:
        return kind
    return device


def table_path(path: str | os.PathLike, op: str, kind: str | None) -> Path:
    """Where the table of ``kind`` goes: ``path`` itself without kinds; in a folder (or a path
    ending in ``/``) ``<op>.<kind>.yaml``; else ``<stem>.<kind><suffix>`` beside ``path``."""
    text = os.fspath(path)
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        return Path(text) / (f"{op}.{kind.lower()}.yaml" if kind else f"{op}.yaml")
    p = Path(text)
    return p if kind is None else p.with_name(f"{p.stem}.{kind.lower()}{p.suffix or '.yaml'}")


@dataclass(frozen=True)
class SpecTuning:
    """What ``tune_spec`` did: each (kind, shape)'s result, the records of the winners, the
    table files and the export it wrote, and how many candidates it measured (a resumed run
    measures only those the stored run had not)."""

    name: str
    results: tuple[ShapeResult, ...]
    records: tuple[Any, ...]
    tables: tuple[Path, ...] = ()
    export: Path | None = None
    measured: int = 0
    text: str = field(default="", repr=False)

    def report(self) -> str:
        """Every candidate of every shape and kind, the winner starred."""
        return self.text


def write_outputs(
    obj: Any, results: list[ShapeResult], table: Any, export: Any
) -> tuple[tuple[Path, ...], Path | None]:
    """One table file per device kind (``table``) and one export of the run's records."""
    from .._select.tables import Table
    from .._select.tuning.db import TuningDB

    written = []
    if table is not None:
        for kind in dict.fromkeys(r.kind for r in results):
            entries = table_entries(obj, results, kind)
            path = table_path(table, obj.name, kind)
            devices = {(e.arch, e.device_name) for e in entries}
            device = None  # the file's default when every row has the same: else each its own
            if kind is not None and len(devices) == 1:
                arch, name = devices.pop()
                device = {k: v for k, v in (("arch", arch), ("name", name)) if v}
            Table.write(path, entries, op=obj.name, device=device)
            written.append(path)
    out = None
    if export is not None:
        mem = TuningDB(None)
        for r in results:
            record = record_of(obj, r)
            if record is not None:
                mem.put(record)
        out = Path(export)
        mem.export(out)
    return tuple(written), out


def tune_spec(
    spec: str | os.PathLike,
    *,
    ray: str | bool | None = None,
    devices: list[str] | None = None,
    store: bool = True,
    table: str | os.PathLike | None = None,
    export: str | os.PathLike | None = None,
    fresh: bool = False,
    timeout_s: float | None = None,
    quiet: bool = False,
) -> SpecTuning:
    r"""Tune the autotuned kernel a spec file names over its shapes, as ``kernelkit tune SPEC``
    does: each candidate in a worker process with a timeout, locally (``devices``: GPU indices,
    one worker each) or as Ray tasks (``ray=True`` or a cluster address; needs ``pip install
    kernelkit[ray]``), on nodes of each of the spec's ``device_kinds``. Results are stored as
    they arrive: rerunning a spec that was cut off measures only what is left (``fresh``
    forgets them). ``store`` puts the winners in the tuning database; ``table`` writes one
    table file per device kind (a folder: ``<op>.<kind>.yaml``); ``export`` one database
    export of the run's records, to ship. ``ValueError`` names what is wrong with the spec.

    Example (the CPU backend, a spec written on the spot)::

        >>> import json, pathlib, tempfile, kernelkit
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "k.py").write_text(
        ...     "import kernelkit\n"
        ...     "body = 'uint i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i];'\n"
        ...     "k = kernelkit.kernel('doc_tune_spec', ['x'], ['y'], body)\n"
        ...     "copy = kernelkit.autotune(k, configs=[{'threadgroup': (t,)} for t in (32, 64)],\n"
        ...     "                          key=['x.shape[0]:pow2'], grid='x')\n")
        >>> spec = {"module": "k.py", "object": "copy", "backend": "cpu", "shapes": [
        ...     {"inputs": {"x": {"shape": [256]}}, "outputs": {"y": {"shape": [256]}}}]}
        >>> _ = (d / "spec.json").write_text(json.dumps(spec))
        >>> t = kernelkit.tune_spec(d / "spec.json", store=False, fresh=True, quiet=True)
        >>> t.records[0].op, t.measured
        ('doc_tune_spec', 2)
    """
    from .tune_spec import load_object, load_spec

    parsed = load_spec(os.fspath(spec))
    if timeout_s is not None:
        parsed.timeout_s = float(timeout_s)
    obj = load_object(parsed)
    return tune_parsed(
        parsed,
        obj,
        ray=ray,
        devices=devices,
        store=store,
        table=table,
        export=export,
        fresh=fresh,
        quiet=quiet,
    )


def tune_parsed(
    spec: Any,
    obj: Any,
    *,
    ray: str | bool | None,
    devices: list[str] | None,
    store: bool,
    table: Any,
    export: Any,
    fresh: bool,
    quiet: bool,
) -> SpecTuning:
    """``tune_spec`` on a parsed spec and its loaded kernel."""
    from .._select.tuning import db

    results, measured = run_tune(spec, devices, quiet, ray=ray, fresh=fresh)
    records = tuple(r for r in (record_of(obj, x) for x in results) if r is not None)
    if store and spec.database:
        current = db.current_db()
        for record in records:
            current.put(record)
    tables, out = write_outputs(obj, results, table or spec.table, export or spec.export)
    text = report(spec, results)
    return SpecTuning(obj.name, tuple(results), records, tables, out, measured, text)
