"""``kernelkit tune OP --dims ...`` and ``kernelkit.tune_op``: tune a built-in op over listed
problems, store the winners and write them as a table to ship.

Per problem (a shape and a dtype; ``op_cases`` makes its arrays, seeded random values, on the
device asked for):

1. candidates: every config of every generic implementation that matches the problem and that
   the config fits (``select._legal``: the implementation's rule, the target's limits, ``fits``)
   and every microkernel that matches (matmul's ``framework``: cuBLAS through torch); the rest
   are listed as skipped, with why;
2. each runs through the op's public call under ``kernelkit.force`` (the path a real call takes,
   the op's own ``run`` carrying out the choice), launched on the timer's stream: first every
   candidate once, in threads (compiles), then one at a time: its output, from a NaN-filled
   start, is compared with a float64 NumPy reference (``tuner.compare_outputs``, tolerance by
   dtype), and one that agrees is timed (``timing.measure``: CUDA events, graph replays, inputs
   rotated past L2; torch captures the graphs of torch CUDA tensors, ``OpCase.capture``, so
   that cuBLAS's output is allocated from the graph's pool);
3. the fastest is stored as a ``TuningRecord`` under the op's key, so ``decide`` replays it
   (``KERNELKIT_TUNE=serve`` or ``auto``), and can be written as a table row covering the key's
   bucket (``TableEntry.from_key``): ``src/kernelkit/tables/<op>.<device>.yaml``.

It all runs in this process: the built-in ops' configs are trusted not to crash or hang (user
kernels are tuned in worker processes, ``tune.py``); a GPU fault ends the run.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .._errors import ArgumentError, LaunchError
from .._records import Target
from .._select.decide import shipped_selection
from .._select.records import Config
from .._select.tuning.records import Key, TuningRecord
from .op_results import OpCandidate, OpTuneResult, OpTuning

__all__ = [
    "OpCandidate",
    "OpTuneResult",
    "OpTuning",
    "add_arguments",
    "main_tune_op",
    "tune_op",
]


@dataclass(frozen=True)
class _Plan:
    """One candidate to consider: an implementation, a config (None for a microkernel's or an
    implementation that does not match), and why it cannot run (None: it can)."""

    impl: Any
    ident: str
    label: str
    config: Config | None
    why: str | None = None


def candidates(
    op: Any,
    problem: Any,
    target: Target,
    implementations: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[_Plan]:
    """Every implementation and config of ``op`` to consider for ``problem``; ``limit``: at most
    that many runnable configs of each generic implementation, its default first."""
    from .._select.select import legal_choice

    plans = []
    for impl in op.implementations:
        if implementations is not None and impl.name not in implementations:
            continue
        ident = op.impl_id(impl)
        why = impl.check(problem, target)
        if why is not None or impl.kind == "microkernel":
            plans.append(_Plan(impl, ident, ident, None, why))
            continue
        configs = list(impl.configs)
        if impl.default not in configs:
            configs.append(impl.default)
        if limit is not None:
            configs.sort(key=lambda c: c != impl.default)  # stable: the default, then the rest
        taken = 0
        for config in configs:
            if limit is not None and taken >= limit:
                break
            _, _, why = legal_choice(op, impl.name, config, problem, target)
            plans.append(_Plan(impl, ident, f"{ident} {config.describe()}", config, why))
            taken += why is None
    return plans


class _Timer:
    """The backend's timer (``Backend.timer``), its graphs captured by the arrays' framework
    where that framework must know of a capture (``OpCase.capture``: torch on a GPU)."""

    def __init__(self, timer: Any, case: Any) -> None:
        self.timer, self.case = timer, case
        self.stream, self.cache_bytes = timer.stream, timer.cache_bytes

    def start(self) -> None:
        self.timer.start()

    def stop(self) -> float:
        return float(self.timer.stop())

    def capture(self, launches: Callable[[int], None]) -> Callable[[], None] | None:
        if self.case.captures:
            return self.case.capture(self.stream, launches)
        return self.timer.capture(launches)

    def close(self) -> None:
        self.timer.close()


class _Bench:
    """One problem's argument sets (rotated copies) and timer; runs a candidate through the op's
    public call, forced, on the timer's stream."""

    def __init__(self, case: Any, backend: Any, target: Target, policy: Any) -> None:
        from .._tune.timing import ArgumentSets, TimingPolicy, copies_for

        self.case, self.backend = case, backend
        # Every candidate as graph replays where the backend or framework can capture them: a
        # single run's estimate includes the host's cost of an op call (tens of µs for a torch
        # op), so a threshold on it would time short kernels run by run, host gaps included.
        self.policy = policy or TimingPolicy(graph_below_s=float("inf"))
        self.timer = _Timer(backend.timer(target), case)
        copies = copies_for(case.inputs, [case.out], self.timer.cache_bytes, self.policy)
        self.sets = ArgumentSets(case.inputs, [case.out], copies)
        self.timer.start()  # the copies are in place before any run
        self.timer.stop()

    def runner(self, op: str, plan: _Plan) -> Callable[[list[Any], list[Any], int], Any]:
        from .._choices import force

        case, impl, config = self.case, plan.impl.name, plan.config

        def run(ins: list[Any], outs: list[Any], stream: int) -> Any:
            with case.stream(stream), force(op, impl, config):
                return case.call(ins, outs[0])

        return run

    def compile(self, run: Callable[..., Any]) -> None:
        """First launch (compiles, loads): on set 0, whose output is then junk."""
        run(*self.sets.sets[0], self.timer.stream)
        self.backend.synchronize(self.timer.stream)

    def output(self, run: Callable[..., Any]) -> Any:
        """One run from the NaN-filled output; the output array where it lies (compared before
        the next run: ``tuner.compare_output``)."""
        self.sets.restore(0)
        self.timer.start()
        run(*self.sets.sets[0], self.timer.stream)
        self.timer.stop()
        return self.sets.sets[0][1][0]

    def time(self, run: Callable[..., Any]) -> tuple[float, str]:
        from .._tune.timing import measure

        return measure(run, self.sets, self.timer, self.policy)  # type: ignore[arg-type]

    def close(self) -> None:
        self.timer.close()
        self.sets.release()


def _tune_case(
    op: Any,
    case: Any,
    implementations: Sequence[str] | None,
    limit: int | None,
    budget_s: float | None,
    policy: Any,
    bar: Any,
) -> OpTuneResult:
    from .._backends import registry as _registry
    from .._tune.tuner import compile_candidates

    t0 = time.perf_counter()
    selection = case.explain()
    problem, target = selection.problem, selection.target
    backend = _registry.get_backend(target.backend)
    key = op.key.of(problem)
    plans = candidates(op, problem, target, implementations, limit)
    shipped = shipped_selection(op, problem, target).choice
    at = _shipped_plan(op, plans, shipped, problem, target)
    plans.insert(0, plans.pop(at))  # first: timed whatever the budget leaves of the rest
    asked = implementations is None or plans[0].impl.name in implementations
    results: dict[int, OpCandidate] = {}
    runnable = []
    for i, p in enumerate(plans):
        if p.why is None:
            runnable.append(i)
        else:
            results[i] = OpCandidate(p.ident, p.label, p.config, "skipped", detail=p.why)
    bar.total = (bar.total or 0) + len(runnable)
    bar.refresh()
    bench = _Bench(case, backend, target, policy)
    try:
        runs = {i: bench.runner(op.name, plans[i]) for i in runnable}
        compiled = compile_candidates(lambda i: bench.compile(runs[i]), runnable)
        note = _check_and_time(bench, case, plans, runs, compiled, results, budget_s, t0, bar)
        _final_round(bench, runs, results, 0)
    finally:
        bench.close()
    found = tuple(results[i] for i in range(len(plans)))
    if not asked:  # timed for the report, never recorded
        found = (replace(found[0], compared_only=True), *found[1:])
    spent = time.perf_counter() - t0
    record = _record(op, key, backend, target, found, spent)
    note = note or ("" if record is not None else "no candidate ran correctly")
    shipped_label = found[0].label
    return OpTuneResult(
        op.name, case.label, key, target, found, record, spent, note, shipped_label, shipped.source
    )


def _shipped_plan(op: Any, plans: list[_Plan], shipped: Any, problem: Any, target: Target) -> int:
    """The index in ``plans`` of the shipped choice (``shipped``, a ``KernelChoice``), appended
    when ``implementations`` or ``limit`` left it out: every tuning reports how it times
    against the best (one ``implementations`` left out is timed, never recorded)."""
    from .._select.select import legal_choice

    impl = op.get(shipped.impl)
    for i, p in enumerate(plans):
        if p.impl is impl and (p.config is None or p.config == shipped.config):
            return i
    ident = op.impl_id(impl)
    if impl.kind == "microkernel":
        plans.append(_Plan(impl, ident, ident, None, impl.check(problem, target)))
    else:
        config = shipped.config
        _, _, why = legal_choice(op, impl.name, config, problem, target)
        plans.append(_Plan(impl, ident, f"{ident} {config.describe()}", config, why))
    return len(plans) - 1


FINALISTS = 4  # the fastest candidates timed again before one is recorded
FINAL_ROUNDS = 3  # ... this many more times each, interleaved


def _final_round(
    bench: _Bench, runs: dict[int, Any], results: dict[int, OpCandidate], shipped: int
) -> None:
    """Time the FINALISTS fastest candidates (and every timed microkernel, e.g. the framework's
    matmul, and the ``shipped`` choice) FINAL_ROUNDS more times, interleaved so that drift hits
    them alike, and keep the median of each one's timings: candidates within a few percent of
    each other are ranked by more than one sample (one sample each picked a kernel 0.2%
    "faster" than cuBLAS that then ran 6% slower)."""
    timed = sorted(
        (i for i, c in results.items() if c.status == "ok" and c.time_s is not None),
        key=lambda i: results[i].time_s or 0.0,
    )
    chosen = timed[:FINALISTS] + [
        i for i in timed[FINALISTS:] if results[i].config is None or i == shipped
    ]
    if len(chosen) < 2:
        return
    samples = {i: [results[i].time_s or 0.0] for i in chosen}
    for _ in range(FINAL_ROUNDS):
        for i in chosen:
            samples[i].append(bench.time(runs[i])[0])
    for i in chosen:
        median = statistics.median(samples[i])
        detail = f"median of {len(samples[i])} timings, final round"
        results[i] = replace(results[i], time_s=median, detail=detail)


def _check_and_time(
    bench: _Bench,
    case: Any,
    plans: list[_Plan],
    runs: dict[int, Any],
    compiled: list[tuple[int, str | None]],
    results: dict[int, OpCandidate],
    budget_s: float | None,
    t0: float,
    bar: Any,
) -> str:
    """Step 3 for each compiled candidate: compare with the reference, then time. Returns a
    note (the budget spent) or ""."""
    from .._tune import tuner

    expected = case.expected() if any(f is None for _, f in compiled) else None
    note, timed = "", 0
    for i, failure in compiled:
        p = plans[i]
        status, seconds, detail = "failed", None, failure or ""
        if failure is not None:
            pass
        elif budget_s is not None and timed and time.perf_counter() - t0 > budget_s:
            status, detail = "not timed", f"time budget {budget_s:g} s spent"
            note = f"time budget of {budget_s:g} s spent after {timed} timed candidates"
        else:
            try:
                wrong = tuner.compare_output(expected, bench.output(runs[i]), case.dtype)
                if wrong is not None:
                    status, detail = "rejected", f"{wrong} (float64 reference)"
                else:
                    seconds, detail = bench.time(runs[i])
                    status, timed = "ok", timed + 1
            except LaunchError:
                raise  # a device fault: this process's CUDA context is lost, the run ends
            except Exception as e:  # noqa: BLE001
                detail = tuner.failure_reason(e)
        results[i] = OpCandidate(p.ident, p.label, p.config, status, seconds, detail)
        bar.update(1)
    return note


def _record(
    op: Any, key: Key, backend: Any, target: Target, found: tuple[OpCandidate, ...], spent: float
) -> TuningRecord | None:
    from .._select.tuning.records import Environment
    from .._tune.tuner import fastest

    best = fastest(c for c in found if not c.compared_only)
    if best is None:
        return None
    return TuningRecord(
        op=op.name,
        key=key,
        impl=best.impl,
        config=best.config or Config(),
        env=Environment.of(backend, target),
        measurements=tuple(
            (c.label, None if c.time_s is None else round(c.time_s * 1e6, 4)) for c in found
        ),
        best_us=round(float(best.time_s or 0.0) * 1e6, 4),
        candidates=len(found),
        tuning_s=round(spent, 4),
        identity=op.identity,
    )


@dataclass(frozen=True)
class _Settings:
    """What every problem of one tuning shares (sent with each problem to a Ray task)."""

    framework: str | None
    transpose_b: bool
    implementations: tuple[str, ...] | None
    limit: int | None
    budget_s: float | None
    seed: int
    policy: Any


def tune_problem(
    op: str, dims: tuple[int, ...], dtype: str, device: str, settings: _Settings, bar: Any = None
) -> OpTuneResult:
    """Tune one problem of ``op`` in this process (a local run's step, or one Ray task)."""
    from .._tune.tuner import progress_bar
    from .op_cases import make_case, op_object

    s = settings
    case = make_case(
        op, dims, dtype, device, framework=s.framework, transpose_b=s.transpose_b, seed=s.seed
    )
    quiet = progress_bar(0, "", True) if bar is None else bar
    try:
        return _tune_case(
            op_object(op), case, s.implementations, s.limit, s.budget_s, s.policy, quiet
        )
    finally:
        if bar is None:
            quiet.close()


def _died(call: tuple[Any, ...], why: str) -> OpTuneResult:
    """The result of a problem whose Ray task died (``call``: tune_problem's arguments)."""
    op, dims, dtype = call[:3]
    label = f"{'x'.join(map(str, dims))} {dtype}"
    return OpTuneResult(op, label, (), None, (), None, 0.0, f"its Ray task died: {why}")


def _checked_implementations(op: str, the_op: Any, implementations: Any) -> tuple[str, ...] | None:
    if implementations is None:
        return None
    names = [i.name for i in the_op.implementations]
    unknown = [n for n in implementations if n.removeprefix(f"{op}/") not in names]
    if unknown:
        raise ArgumentError(f"[tune] {op} has no implementation {unknown} (it has {names})")
    return tuple(n.removeprefix(f"{op}/") for n in implementations)


def tune_op(
    op: str,
    dims: str | Sequence[Any],
    dtype: str | Sequence[str] = "float32",
    device: str = "cpu",
    *,
    transpose_b: bool = True,
    framework: str | None = None,
    implementations: Sequence[str] | None = None,
    limit: int | None = None,
    store: bool = True,
    table: str | os.PathLike | None = None,
    device_name: str | None = None,
    plot: str | os.PathLike | None = None,
    budget_s: float | None = None,
    seed: int = 0,
    quiet: bool = False,
    policy: Any = None,
    ray: bool | str = False,
) -> OpTuning:
    """Tune built-in ``op`` (``matmul``, ``softmax``, ``rms_norm``, ``layer_norm``) for every
    problem of ``dims`` in every dtype of ``dtype``, as ``kernelkit tune OP --dims ...`` does.

    ``dims`` spells problems as ``kernelkit explain`` does (``"1x4096x4096,16x8192x8192"`` for
    matmul's MxNxK, ``"4096x4096"`` for the row ops' ROWSxN), or lists them (``[(1, 4096,
    4096)]``); ``device`` is ``cpu`` (NumPy arrays, torch CPU tensors for bfloat16 or with
    ``framework="torch"``) or ``cuda`` (torch). Every runnable config of every implementation
    that matches (``implementations`` to name some, ``limit`` configs of each, the default
    first) and every matching microkernel is checked against a float64 reference and timed;
    so is the shipped choice (tables, then rules), and each result says how it times against
    the best (``shipped_over_best``). With ``store`` the winners go to the tuning database
    (replayed from then on); ``table`` writes or updates a table file (a folder:
    ``<folder>/<op>.<device>.yaml``) whose rows match devices whose name contains
    ``device_name`` (default: this device's whole name); ``plot`` draws the times (needs
    matplotlib). ``budget_s`` caps the timing per problem. ``ray``: True or a cluster address
    runs each problem as a Ray task holding one GPU (``pip install kernelkit[ray]``).

    Example::

        >>> import kernelkit
        >>> t = kernelkit.tune_op("softmax", "8x64", "float32", limit=2, store=False, quiet=True)
        >>> t.results[0].record.impl
        'softmax/rows'
    """
    from .._select.tuning import db
    from .._tune.tuner import progress_bar
    from .op_cases import op_object, parse_dims, parse_dtypes

    shapes = parse_dims(op, dims, "tune")
    dtypes = parse_dtypes(dtype, "tune")
    the_op = op_object(op)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ArgumentError(f"[tune] limit must be a positive int, got {limit!r}")
    impls = _checked_implementations(op, the_op, implementations)
    settings = _Settings(framework, transpose_b, impls, limit, budget_s, seed, policy)
    calls = [(op, shape, dt, device, settings) for dt in dtypes for shape in shapes]
    if ray is False:
        bar = progress_bar(0, f"tuning {op}", quiet)
        try:
            results = [tune_problem(*call, bar=bar) for call in calls]
        finally:
            bar.close()
    else:
        from .tune_op_ray import run_problems

        address = None if ray is True else str(ray)
        bar = progress_bar(len(calls), f"tuning {op} on Ray", quiet)
        bar.unit = "problem"
        try:
            results = run_problems(
                tune_problem, calls, _died, device, address, lambda _r: bar.update(1)
            )
        finally:
            bar.close()
    tuning = OpTuning(op, tuple(results))
    if store and tuning.records:
        store_ = db.current_db()
        for record in tuning.records:
            store_.put(record)
        the_op.forget()  # decisions made before now are made again, from the database
    if table is not None:
        tuning.write_table(table, device_name)
    if plot is not None:
        tuning.plot(plot)
    return tuning


def _plot_path(path: str, op: str, several: bool) -> str:
    if not several:
        return path
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{op}{p.suffix or '.png'}"))


def add_arguments(p: Any) -> None:
    """The options of ``kernelkit tune`` for built-in ops only (beside ``op_cases``'s)."""
    p.add_argument(
        "--device-name",
        help="built-in ops: table rows match devices whose name contains this, e.g. H100 "
        "(default: this device's whole name)",
    )
    p.add_argument("--impl", help="built-in ops: only these implementations, comma-separated")
    p.add_argument("--limit", type=int, help="built-in ops: at most N configs per implementation")
    p.add_argument("--budget", type=float, help="built-in ops: seconds of timing per problem")


def main_tune_op(args: Any) -> int:
    """``kernelkit tune OP[,OP...] --dims ... [--dtype ...] [--device ...] [--table ...]``."""
    from .._select.tuning import db

    names = [n.strip() for n in args.spec.split(",") if n.strip()]
    if not args.dims:
        print("kernelkit tune: a built-in op needs --dims (e.g. --dims 4096x4096)", file=sys.stderr)
        return 2
    if args.devices:
        print(
            "kernelkit tune: --devices is for tune specs; name the device with --device cuda",
            file=sys.stderr,
        )
        return 2
    impls = args.impl.split(",") if args.impl else None
    complete = True
    for name in names:
        try:
            tuning = tune_op(
                name,
                args.dims,
                args.dtype,
                args.device,
                transpose_b=args.transpose_b,
                framework=args.framework,
                implementations=impls,
                limit=args.limit,
                store=not args.no_database,
                budget_s=args.budget,
                quiet=args.quiet,
                ray=False if args.ray is None else (args.ray or True),
            )
            print(tuning.report())
            records = tuning.records
            complete = complete and len(records) == len(tuning.results)
            if records and not args.no_database:
                print(f"{len(records)} record(s) stored in the tuning database ({db.current_db()})")
            if args.table:
                path = tuning.write_table(args.table, args.device_name)
                print(f"table written to {path}")
            if args.plot:
                plot_path = _plot_path(args.plot, name, len(names) > 1)
                tuning.plot(plot_path)
                print(f"plot written to {plot_path}")
        except (ValueError, OSError, ImportError) as e:
            print(f"kernelkit tune: {e}", file=sys.stderr)
            return 2
    return 0 if complete else 1
