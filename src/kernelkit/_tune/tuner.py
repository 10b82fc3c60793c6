"""The tuner: run every candidate config of one generic implementation on one problem, check
their outputs agree, time the ones that do, and say which won (a ``TuningRecord``).

Steps, per call of ``tune``:

1. configs the implementation refuses or that exceed the target's limits are skipped with why;
2. the rest are compiled in parallel threads (the first launch of a config compiles it; NVRTC and
   the C++ compiler release the GIL), on scratch copies of the arguments, never the caller's;
3. one at a time: outputs restored, one run, outputs compared with the first valid candidate's
   (tolerance by dtype); a candidate that fails or disagrees is recorded with why;
4. the survivors are timed (``timing.measure``) until the time budget is spent.

A config that crashes the process (an unchecked wild pointer on the CPU, a GPU fault that poisons
the context) or hangs cannot be contained here: ``kernelkit tune`` runs each candidate in a worker
process with a timeout for that (``_workflows/tune.py``), with the same ``Session`` steps.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .._errors import ArgumentError
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from .._select.select import exceeded_limit
from .._select.tuning.records import Environment, TuningRecord
from ..backend import Backend
from .timing import ArgumentSets, TimingPolicy, copies_for, measure, to_host

__all__ = [
    "Candidate",
    "Session",
    "TuneResult",
    "candidate_line",
    "compare_on_device",
    "compare_output",
    "compare_outputs",
    "compile_candidates",
    "fastest",
    "on_device",
    "tune",
    "tune_session",
]

# Relative to the reference's largest magnitude: reduction order differs between configs.
RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}

# make_call(inputs, outputs, stream) -> what ``Implementation.run`` takes as its call
MakeCall = Callable[[list[Any], list[Any], int], Any]


@dataclass(frozen=True)
class Candidate:
    """What became of one config: ``status`` is ``ok`` (timed), ``skipped`` (illegal),
    ``failed`` (did not compile or run), ``rejected`` (wrong output) or ``not timed``."""

    config: Config
    status: str
    time_s: float | None = None
    detail: str = ""

    def describe(self) -> str:
        return candidate_line(self.time_s, self.status, self.config.describe(), self.detail)


@dataclass(frozen=True)
class TuneResult:
    """The tuning of one problem: the record to store (None when no candidate ran), every
    candidate, the wall time and a note (budget spent, ...)."""

    record: TuningRecord | None
    candidates: tuple[Candidate, ...]
    tuning_s: float
    note: str = ""
    timings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def winner(self) -> Candidate | None:
        return fastest(self.candidates)

    def table(self) -> str:
        """One line per candidate, the winner marked."""
        best = self.winner
        lines = [("* " if c is best else "  ") + c.describe() for c in self.candidates]
        if self.note:
            lines.append(f"  ({self.note})")
        return "\n".join(lines)


class _Timed(Protocol):
    """What ``fastest`` reads of a candidate (``Candidate``, ``op_results.OpCandidate``)."""

    @property
    def status(self) -> str: ...
    @property
    def time_s(self) -> float | None: ...


_C = TypeVar("_C", bound=_Timed)


def fastest(candidates: Iterable[_C]) -> _C | None:
    """The quickest candidate that ran correctly and was timed; None when none was."""
    timed = [c for c in candidates if c.status == "ok" and c.time_s is not None]
    return min(timed, key=lambda c: c.time_s or 0.0) if timed else None


def candidate_line(time_s: float | None, status: str, label: str, detail: str) -> str:
    """A candidate's line in a tuning report: time, status, what ran and, unless ok, why."""
    t = f"{time_s * 1e6:10.2f} us" if time_s is not None else " " * 13
    why = f"  {detail}" if detail and status != "ok" else ""
    return f"{t}  {status:9}  {label}{why}"


def compile_candidates(
    compile_one: Callable[[int], object], indices: Sequence[int], threads: int | None = None
) -> list[tuple[int, str | None]]:
    """``compile_one(i)`` for each index in parallel threads (NVRTC and the C++ compiler release
    the GIL): ``(i, None)`` in index order, or ``(i, why)`` for one that raised."""

    def outcome(i: int) -> tuple[int, str | None]:
        try:
            compile_one(i)
        except Exception as e:  # noqa: BLE001 - a bad candidate is a result, never a crash
            return i, failure_reason(e)
        return i, None

    workers = threads or min(len(indices), os.cpu_count() or 1, 8) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(outcome, indices))


def compare_outputs(ref: Sequence[Any], got: Sequence[Any], dtypes: Sequence[str]) -> str | None:
    """None when ``got`` matches ``ref`` (host arrays) within the dtype's tolerance, else the
    largest error found."""
    import numpy as np

    for i, (a, b, dtype) in enumerate(zip(ref, got, dtypes)):
        if a.shape != b.shape:
            return f"output {i} has shape {b.shape}, expected {a.shape}"
        if dtype not in RTOL:  # integers and bools: exact
            if not np.array_equal(a, b):
                bad = int(np.count_nonzero(a != b))
                return f"output {i} differs in {bad} of {a.size} elements"
            continue
        why = _compare_floats(i, np.ravel(a), np.ravel(b), dtype)
        if why is not None:
            return why
    return None


COMPARE_CHUNK = 1 << 20  # elements compared at a time: float64 copies that stay in cache


def _compare_floats(i: int, a: Any, b: Any, dtype: str) -> str | None:
    """``compare_outputs`` for one floating output, flat, a chunk at a time: the verdict is
    that of the whole array, and so are the figures of a size error (the largest error and the
    reference's largest magnitude over every element where both are finite). On 32M float32
    elements (a 2048 x 128256 softmax has 263M) one pass over float64 copies took 2.5 s on a
    2-core VM, the chunks 0.22 s."""
    import numpy as np

    err = scale = 0.0
    finite_seen = False
    for start in range(0, a.size, COMPARE_CHUNK):
        a64 = a[start : start + COMPARE_CHUNK].astype(np.float64)
        b64 = b[start : start + COMPARE_CHUNK].astype(np.float64)
        nan = np.isnan(a64)
        if not np.array_equal(nan, np.isnan(b64)):
            return f"output {i} has NaN where the reference has a number (or the reverse)"
        finite = np.isfinite(a64) & np.isfinite(b64)
        infinite = ~finite & ~nan  # an infinity in either (NaNs are where they should be)
        if infinite.any() and not np.array_equal(a64[infinite], b64[infinite]):
            return f"output {i} has infinities where the reference does not"
        if finite.all():
            err = max(err, float(np.max(np.abs(a64 - b64), initial=0.0)))
            scale = max(scale, float(np.max(np.abs(a64), initial=0.0)))
            finite_seen = finite_seen or a64.size > 0
        elif finite.any():
            err = max(err, float(np.max(np.abs(a64[finite] - b64[finite]))))
            scale = max(scale, float(np.max(np.abs(a64[finite]))))
            finite_seen = True
    if finite_seen and err > RTOL[dtype] * scale:
        return (
            f"output {i} differs from the reference by up to {err:.3g} "
            f"(tolerance {RTOL[dtype]:g} x {scale:.3g} for {dtype})"
        )
    return None


def on_device(x: Any) -> bool:
    """Whether ``x`` is a torch tensor on a device other than the host's, which
    ``compare_on_device`` checks where it lies."""
    device = getattr(x, "device", None)
    return hasattr(x, "detach") and getattr(device, "type", "cpu") != "cpu"


def compare_output(ref: Any, got: Any, dtype: str) -> str | None:
    """``compare_outputs`` for one output ``got`` as it lies: on its device where ``on_device``
    says so (``compare_on_device``), else copied to the host."""
    if on_device(got):
        return compare_on_device(ref, got, dtype)
    return compare_outputs([ref], [to_host(got)], [dtype])


def compare_on_device(ref: Any, got: Any, dtype: str) -> str | None:
    """``compare_outputs`` for one output, a torch tensor ``got``, against the host reference
    ``ref`` (float64), the comparison run on ``got``'s device: the reference goes there a chunk
    at a time and only the verdict's figures come back, where copying ``got`` to the host and
    comparing there took seconds a candidate on long rows (a 4096 x 128256 float32 output is
    2 GB). The verdict is ``compare_outputs``'s; when an output has both a NaN and an infinity
    out of place, this one names the NaN."""
    import numpy as np
    import torch

    if tuple(ref.shape) != tuple(got.shape):
        return f"output 0 has shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    if dtype not in RTOL:  # integers and bools: exact, on the host
        return compare_outputs([ref], [to_host(got)], [dtype])
    flat_ref, flat = np.ravel(ref), got.detach().reshape(-1)
    f64, device = torch.float64, got.device
    err = torch.zeros((), dtype=f64, device=device)
    scale = torch.zeros((), dtype=f64, device=device)
    flags = torch.zeros(3, dtype=torch.bool, device=device)  # NaN, infinity, a finite pair
    for start in range(0, flat.numel(), COMPARE_CHUNK):
        chunk = np.ascontiguousarray(flat_ref[start : start + COMPARE_CHUNK], dtype=np.float64)
        if not chunk.flags.writeable:  # torch.from_numpy warns of a read-only array
            chunk = chunk.copy()
        a = torch.from_numpy(chunk).to(device)
        b = flat[start : start + COMPARE_CHUNK].to(f64)
        nan = a.isnan()
        finite = a.isfinite() & b.isfinite()
        flags |= torch.stack(
            [(nan != b.isnan()).any(), (~finite & ~nan & (a != b)).any(), finite.any()]
        )
        err = torch.maximum(err, torch.where(finite, (a - b).abs(), 0.0).max())
        scale = torch.maximum(scale, torch.where(finite, a.abs(), 0.0).max())
    (nan_bad, inf_bad, seen), (e, s) = flags.tolist(), torch.stack([err, scale]).tolist()
    if nan_bad:
        return "output 0 has NaN where the reference has a number (or the reverse)"
    if inf_bad:
        return "output 0 has infinities where the reference does not"
    if seen and e > RTOL[dtype] * s:
        return (
            f"output 0 differs from the reference by up to {e:.3g} "
            f"(tolerance {RTOL[dtype]:g} x {s:.3g} for {dtype})"
        )
    return None


class Session:
    """One problem's tuning state: scratch argument sets, the timer, and the steps of ``tune``
    for one config at a time (the CLI's workers run them one candidate per process)."""

    def __init__(
        self,
        op: Op,
        impl: Implementation,
        problem: Problem,
        target: Target,
        backend: Backend,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        make_call: MakeCall,
        fill: Any = None,
        policy: TimingPolicy | None = None,
    ) -> None:
        self.op, self.impl, self.problem = op, impl, problem
        self.target, self.backend, self.make_call = target, backend, make_call
        self.policy = policy or TimingPolicy()
        self.key = op.key.of(problem)  # type: ignore[union-attr]
        self.timer = backend.timer(target)
        copies = copies_for(inputs, outputs, self.timer.cache_bytes, self.policy)
        self.sets = ArgumentSets(inputs, outputs, copies, fill=fill)
        self.out_dtypes = [a.dtype for a in problem.args if a.is_output]
        self.timer.start()  # copies made on the framework's stream are in place before any run
        self.timer.stop()

    def close(self) -> None:
        self.timer.close()
        self.sets.release()

    def legal(self, config: Config) -> str | None:
        """None when ``config`` may run this problem on this target, else why not."""
        return self.impl.check(self.problem, self.target) or exceeded_limit(config, self.target)

    def choice(self, config: Config) -> KernelChoice:
        return KernelChoice(
            op=self.op.name,
            impl=self.op.impl_id(self.impl),
            config=config,
            grid=self.impl.grid_for(self.problem, config),
            source="override",
            key=self.key,
            reason="tuning candidate",
        )

    def runner(self, config: Config) -> Callable[[list[Any], list[Any], int], Any]:
        """``run(inputs, outputs, stream)`` launching ``config`` on one argument set."""
        choice, run, make_call = self.choice(config), self.impl.run, self.make_call
        return lambda ins, outs, stream: run(choice, make_call(ins, outs, stream))

    def compile(self, config: Config) -> None:
        """First launch (compiles and loads): on scratch set 0, whose outputs are then junk."""
        self.runner(config)(*self.sets.sets[0], self.timer.stream)
        self.backend.synchronize(self.timer.stream)

    def outputs(self, config: Config) -> list[Any]:
        """One run from the saved outputs; the outputs as host arrays."""
        self.sets.restore(0)
        self.timer.start()
        self.runner(config)(*self.sets.sets[0], self.timer.stream)
        self.timer.stop()
        return [to_host(o) for o in self.sets.sets[0][1]]

    def time(self, config: Config) -> tuple[float, str]:
        return measure(self.runner(config), self.sets, self.timer, self.policy)


def failure_reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first[:300]}"


def progress_bar(total: int, label: str, quiet: bool) -> Any:
    from tqdm import tqdm

    off = quiet or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    return tqdm(total=total, desc=label, disable=off, delay=1.0, leave=False, unit="config")


def tune(
    op: Op,
    problem: Problem,
    target: Target,
    backend: Backend,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    make_call: MakeCall,
    *,
    impl: Implementation | None = None,
    configs: Sequence[Config] | None = None,
    fill: Any = None,
    budget_s: float | None = None,
    quiet: bool = False,
    policy: TimingPolicy | None = None,
    compile_threads: int | None = None,
) -> TuneResult:
    """Tune ``impl`` (default: the op's first generic implementation) over ``configs`` (default:
    its own) for ``problem``, on copies of ``inputs`` and ``outputs`` (``out=`` arrays; ``fill``:
    the value they start from, the call's ``init_value``). Never raises for a bad candidate."""
    t0 = time.perf_counter()
    impl = impl or next(iter(op.by_kind("generic")), None)
    if impl is None:
        raise ArgumentError(f"[{op.name}] has no generic implementation to tune")
    configs = tuple(impl.configs if configs is None else configs)
    if not configs:
        raise ArgumentError(f"[{op.name}] nothing to tune: the config list is empty")
    session = Session(op, impl, problem, target, backend, inputs, outputs, make_call, fill, policy)
    try:
        return tune_session(session, configs, budget_s, quiet, compile_threads, t0)
    finally:
        session.close()


def tune_session(
    s: Session,
    configs: Sequence[Config],
    budget_s: float | None = None,
    quiet: bool = False,
    threads: int | None = None,
    t0: float | None = None,
) -> TuneResult:
    """``tune`` on an existing session (its argument copies and timer)."""
    t0 = time.perf_counter() if t0 is None else t0
    configs = tuple(configs)
    if not configs:
        raise ArgumentError(f"[{s.op.name}] nothing to tune: the config list is empty")
    results: dict[int, Candidate] = {}
    legal = []
    for i, c in enumerate(configs):
        why = s.legal(c)
        if why is None:
            legal.append(i)
        else:
            results[i] = Candidate(c, "skipped", detail=why)

    bar = progress_bar(len(configs), f"tuning {s.op.name}", quiet)
    bar.update(len(configs) - len(legal))
    compiled = compile_candidates(lambda i: s.compile(configs[i]), legal, threads)
    ref, note, timed = None, "", 0
    for i, failure in compiled:
        c = configs[i]
        if failure is not None:
            results[i] = Candidate(c, "failed", detail=failure)
            bar.update(1)
            continue
        spent = time.perf_counter() - t0
        if budget_s is not None and timed and spent > budget_s:
            results[i] = Candidate(c, "not timed", detail=f"time budget {budget_s:g} s spent")
            note = note or f"time budget of {budget_s:g} s spent after {timed} timed candidates"
            bar.update(1)
            continue
        try:
            got = s.outputs(c)
            wrong = None if ref is None else compare_outputs(ref, got, s.out_dtypes)
            if wrong is not None:
                results[i] = Candidate(c, "rejected", detail=wrong)
            else:
                ref = got if ref is None else ref
                seconds, how = s.time(c)
                results[i] = Candidate(c, "ok", seconds, how)
                timed += 1
        except Exception as e:  # noqa: BLE001
            results[i] = Candidate(c, "failed", detail=failure_reason(e))
        bar.update(1)
    bar.close()
    candidates = tuple(results[i] for i in range(len(configs)))
    return _result(s, candidates, time.perf_counter() - t0, note)


def _result(s: Session, candidates: tuple[Candidate, ...], spent: float, note: str) -> TuneResult:
    best = fastest(candidates)
    if best is None:
        return TuneResult(None, candidates, spent, note or "no candidate ran correctly")
    record = TuningRecord(
        op=s.op.name,
        key=s.key,
        impl=s.op.impl_id(s.impl),
        config=best.config,
        env=Environment.of(s.backend, s.target),
        measurements=tuple(
            (c.config.describe(), None if c.time_s is None else round(c.time_s * 1e6, 4))
            for c in candidates
        ),
        best_us=round(best.time_s * 1e6, 4),  # type: ignore[operator]
        candidates=len(candidates),
        tuning_s=round(spent, 4),
        identity=s.op.identity,
    )
    return TuneResult(record, candidates, spent, note)
