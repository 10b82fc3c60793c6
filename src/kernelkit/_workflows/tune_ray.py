"""``kernelkit tune SPEC --ray [ADDRESS]``: each candidate measurement a Ray task on a worker
(an actor) holding one GPU (``num_gpus=1``; on the CPU backend ``num_cpus=1``), on a node of the
measurement's device kind when it names one (``accelerator_type``: Ray's
``accelerator_type:<kind>`` resource, which a GPU node advertises for its GPUs and which any node
can be given with ``ray start --resources``).

The policy is the local pool's, through Ray's own means: one worker process per slot (a GPU of
the kind) measuring one candidate after another, at most as many in flight per kind as the
cluster has slots for them, so a measurement starts when it is submitted and its clock
(``timeout_s``) runs from then; one that takes longer has its worker killed (``ray.kill``) and
is recorded as timed out; one whose worker dies is recorded as failed, after ``retries``
retries on a fresh worker (0 by default: a candidate that crashes crashes again). Workers live
as long as the run, as the local pool's do: a new process per candidate would pay for a Python
start, the framework's import and a CUDA context each time.

Ray is optional (``pip install kernelkit[ray]``) and imported only here, only when asked for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .tune_tasks import Bench, Measured, Measurement, local_spec

if TYPE_CHECKING:
    from .tune_spec import TuneSpec

__all__ = ["import_ray", "run_ray"]

_benches: dict[str, Bench] = {}  # per worker process: the spec's kernel and sessions, by run


def import_ray() -> Any:
    """The ``ray`` module, or ``ValueError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--ray needs Ray, which is not installed: pip install kernelkit[ray] "
            "(or pip install ray)"
        ) from None
    return ray


def _measure(spec: TuneSpec, source: bytes | None, run: str, m: Measurement) -> Measured:
    """The Ray task: one measurement in this worker (its ``Bench`` kept for the next)."""
    bench = _benches.get(run)
    if bench is None:
        import ray

        node = ray.get_runtime_context().get_node_id()[:12]
        where = f"ray node {node} ({ray.util.get_node_ip_address()})"
        try:
            bench = Bench(local_spec(spec, source), where)
        except Exception as e:  # noqa: BLE001 - reported as the candidate's failure
            return Measured.failure(f"{type(e).__name__}: {e}", where)
        _benches.clear()  # one run at a time per worker
        _benches[run] = bench
    return bench.measure(m)


def capacity(ray: Any, kind: str | None, resource: str) -> int:
    """Slots for measurements of ``kind`` in the cluster: ``resource`` (GPU or CPU) of the alive
    nodes that have the kind (every node for None); a GPU task holds a CPU too (Ray's default),
    so a node runs at most as many as it has of both."""
    label = f"accelerator_type:{kind}"
    total = 0
    for node in ray.nodes():
        held = node.get("Resources", {})
        if node.get("Alive") and (kind is None or held.get(label, 0) > 0):
            total += int(min(held.get(resource, 0.0), held.get("CPU", 0.0)))
    return total


def _kinds_here(ray: Any) -> list[str]:
    found = set()
    for node in ray.nodes():
        if node.get("Alive"):
            found |= {
                r.split(":", 1)[1]
                for r in node.get("Resources", {})
                if r.startswith("accelerator_type:")
            }
    return sorted(found)


class _Measurer:
    """A Ray actor: one worker process holding one GPU (or CPU) for its life, measuring the
    candidates given to it one after another, as a local pool's worker does (a Ray task may be
    given another GPU than its worker process first had; an actor keeps its own)."""

    def measure(self, spec: TuneSpec, source: bytes | None, run: str, m: Measurement) -> Measured:
        return _measure(spec, source, run, m)


class _Dispatch:
    """Measurements in flight: at most ``slots[kind]`` at a time, one per worker (an actor of
    the measurement's kind), each timed from its submission. A worker whose candidate hangs is
    killed; one that dies is replaced, and its candidate submitted again while ``retries``
    allow."""

    def __init__(self, ray: Any, spec: TuneSpec, source: bytes | None, run: str) -> None:
        gpu = spec.backend != "cpu"
        self.ray, self.spec = ray, spec
        self.resource = "GPU" if gpu else "CPU"
        options: dict[str, Any] = {"num_gpus": 1} if gpu else {"num_cpus": 1}
        self.worker = ray.remote(**options)(_Measurer)
        self.args = (ray.put(spec), ray.put(source), run)
        self.flying: dict[Any, tuple[Measurement, float, Any]] = {}
        self.idle: dict[str | None, list[Any]] = {}
        self.busy: dict[str | None, int] = {}
        self.tries: dict[Measurement, int] = {}
        self.again: list[Measurement] = []  # to submit again: their worker died, retries left

    def submit(self, m: Measurement) -> None:
        idle = self.idle.setdefault(m.kind, [])
        if idle:
            actor = idle.pop()
        else:
            where = {"accelerator_type": m.kind} if m.kind is not None else {}
            actor = self.worker.options(**where).remote()
        ref = actor.measure.remote(*self.args, m)
        self.flying[ref] = (m, time.monotonic(), actor)
        self.busy[m.kind] = self.busy.get(m.kind, 0) + 1

    def collect(self, arrived: Callable[[Measurement, Measured], None]) -> None:
        ray = self.ray
        ready, _ = ray.wait(list(self.flying), num_returns=1, timeout=0.2)
        for ref in ready:
            m, actor = self._done(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as e:  # the worker died (a fault, a signal)
                ray.kill(actor)
                if self.tries.get(m, 0) < self.spec.retries:
                    self.tries[m] = self.tries.get(m, 0) + 1
                    self.again.append(m)
                    continue
                result = Measured.failure(_why(e))
            except ray.exceptions.RayError as e:  # the worker's state is unknown: replaced
                ray.kill(actor)
                result = Measured.failure(_why(e))
            else:
                if result.context_lost:  # a device fault: every later CUDA call there fails
                    ray.kill(actor)
                else:
                    self.idle[m.kind].append(actor)
            arrived(m, result)
        now, limit = time.monotonic(), self.spec.timeout_s
        for ref, (m, t0, _) in list(self.flying.items()):
            if now - t0 > limit:
                _, actor = self._done(ref)
                ray.kill(actor)  # a hung kernel stops with its process
                arrived(m, Measured.failure(f"timed out after {limit:g} s"))

    def _done(self, ref: Any) -> tuple[Measurement, Any]:
        m, _, actor = self.flying.pop(ref)
        self.busy[m.kind] -= 1
        return m, actor

    def cancel_all(self) -> None:
        for _, _, actor in self.flying.values():
            self.ray.kill(actor)
        for actors in self.idle.values():
            for actor in actors:
                self.ray.kill(actor)
        self.flying.clear()
        self.idle.clear()


def _why(e: BaseException) -> str:
    name = type(e).__name__
    if isinstance(e, _actor_error()):
        return f"worker died ({name})"
    text = str(e).strip().splitlines()
    return f"{name}: {text[-1][:300] if text else ''}"


def _actor_error() -> type:
    import ray

    return ray.exceptions.RayActorError


def run_ray(
    spec: TuneSpec,
    source: bytes | None,
    run: str,
    todo: list[Measurement],
    address: str | None,
    admit: Callable[[Measurement], bool],
    arrived: Callable[[Measurement, Measured], None],
) -> None:
    """Measure ``todo`` on the Ray cluster at ``address`` (None: ``RAY_ADDRESS``, else a new
    local one; one this process already joined is used as it is)."""
    ray = import_ray()
    joined = not ray.is_initialized()
    if joined:
        local = address is None and not os.environ.get("RAY_ADDRESS")  # a new cluster
        ray.init(address=address, **({"include_dashboard": False} if local else {}))
    try:
        dispatch = _Dispatch(ray, spec, source, run)
        slots = {}
        for kind in sorted({m.kind for m in todo}, key=str):
            slots[kind] = capacity(ray, kind, dispatch.resource)
            if slots[kind] < 1:
                where = f"of kind {kind!r} " if kind else ""
                raise ValueError(
                    f"the Ray cluster has no node {where}with a {dispatch.resource} "
                    f"(kinds there: {', '.join(_kinds_here(ray)) or 'none'})"
                )
        pending = list(todo)
        try:
            while pending or dispatch.flying or dispatch.again:
                for m in list(dispatch.again):
                    if dispatch.busy.get(m.kind, 0) < slots[m.kind]:
                        dispatch.again.remove(m)
                        dispatch.submit(m)  # admitted before: it runs again, budget or not
                for m in list(pending):
                    if dispatch.busy.get(m.kind, 0) < slots[m.kind]:
                        pending.remove(m)
                        if admit(m):
                            dispatch.submit(m)
                if dispatch.flying:
                    dispatch.collect(arrived)
        finally:
            dispatch.cancel_all()
    finally:
        if joined:
            ray.shutdown()
