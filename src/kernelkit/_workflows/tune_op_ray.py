"""``kernelkit tune OP --dims ... --ray [ADDRESS]``: each problem of a built-in op's tuning a Ray
task on a worker holding one GPU (``num_gpus=1``; on the CPU ``num_cpus=1``), so a model's
shapes are tuned on every GPU of a cluster at once.

One Ray actor per GPU of the cluster (``_Worker``) takes problems one at a time and runs each
as ``tune_op`` does locally (``tune_op.tune_problem``: its arrays made on the actor's GPU,
every candidate compiled, checked and timed there), sending the ``OpTuneResult`` back; the
caller stores the records and writes tables as for a local run. The built-in ops' configs are
trusted not to hang (as locally), so a problem has no timeout; one whose worker dies (a GPU
fault ends the process) is reported as that problem's failure, a new worker takes the dead
one's place and the other problems go on; an error raised by the tuning itself (a bad
argument) is raised here, as a local run raises it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .op_results import OpTuneResult
from .tune_ray import capacity, import_ray

__all__ = ["run_problems"]

Call = tuple[Any, ...]  # the arguments of one problem's ``tune_problem``


class _Worker:
    """A Ray actor holding one GPU (or CPU) for its life: its problems run one after another in
    one process, on one device, with the kernels compiled and loaded for one serving the next
    (a task may be given another GPU than its worker's first, an actor keeps its own)."""

    def tune(self, tune_problem: Callable[..., OpTuneResult], call: Call) -> OpTuneResult:
        return tune_problem(*call)


def run_problems(
    tune_problem: Callable[..., OpTuneResult],
    problems: Sequence[Call],
    failed: Callable[[Call, str], OpTuneResult],
    device: str,
    address: str | None,
    arrived: Callable[[OpTuneResult], None],
) -> list[OpTuneResult]:
    """``tune_problem(*call)`` (a module-level function) for each call of ``problems`` on the
    Ray cluster at ``address`` (None: ``RAY_ADDRESS``, else a new local one; a cluster this
    process already joined is used as it is): one worker per GPU (on the CPU backend, per
    node: its launches use every core of the node), each taking the next problem when it is
    done with one. ``failed`` makes the result of a problem whose worker died (a new worker
    takes its place); ``arrived`` sees each result as it comes. Results in the order of
    ``problems``."""
    ray = import_ray()
    joined = not ray.is_initialized()
    if joined:
        local = address is None and not os.environ.get("RAY_ADDRESS")
        ray.init(address=address, **({"include_dashboard": False} if local else {}))
    try:
        gpu = device != "cpu"
        if gpu:  # one worker per GPU, wherever Ray places it
            where: list[dict[str, Any]] = [{}] * capacity(ray, None, "GPU")
            worker = ray.remote(num_gpus=1)(_Worker)
        else:  # one per node: the CPU backend's launches use every core of theirs
            where = [{"scheduling_strategy": _on(node)} for node in _cpu_nodes(ray)]
            worker = ray.remote(num_cpus=1)(_Worker)
        if not where and problems:
            what = "GPU" if gpu else "CPU"
            raise ValueError(f"the Ray cluster has no node with a {what} to tune on")
        drain = _Drain(ray, worker, tune_problem, where[: len(problems)])
        return drain.run(list(problems), failed, arrived)
    finally:
        if joined:
            ray.shutdown()


def _cpu_nodes(ray: Any) -> list[str]:
    return [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    ]


def _on(node: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node, soft=True)  # a lost node: elsewhere


class _Drain:
    """Problems handed to one worker per slot (``where``: each slot's actor options), the next
    one to whichever worker is done first; a dead worker's slot gets a fresh one."""

    def __init__(
        self, ray: Any, worker: Any, fn: Callable[..., OpTuneResult], where: list[dict[str, Any]]
    ):
        self.ray, self.worker, self.fn, self.where = ray, worker, ray.put(fn), where
        self.idle = [(slot, self._start(slot)) for slot in range(len(where))]

    def _start(self, slot: int) -> Any:
        return self.worker.options(**self.where[slot]).remote()

    def run(
        self,
        problems: list[Call],
        failed: Callable[[Call, str], OpTuneResult],
        arrived: Callable[[OpTuneResult], None],
    ) -> list[OpTuneResult]:
        ray = self.ray
        results: dict[int, OpTuneResult] = {}
        flying: dict[Any, tuple[int, int, Any]] = {}  # ref -> problem, slot, actor
        pending = list(range(len(problems)))
        try:
            while pending or flying:
                while pending and self.idle:
                    i, (slot, actor) = pending.pop(0), self.idle.pop()
                    flying[actor.tune.remote(self.fn, problems[i])] = (i, slot, actor)
                ready, _ = ray.wait(list(flying), num_returns=1, timeout=0.5)
                for ref in ready:
                    i, slot, actor = flying.pop(ref)
                    try:
                        results[i] = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:
                        raise e.as_instanceof_cause() from None  # as a local run raises it
                    except ray.exceptions.RayError as e:
                        results[i] = failed(problems[i], _why(e))
                        ray.kill(actor)
                        actor = self._start(slot)  # a fresh worker in the dead one's place
                    self.idle.append((slot, actor))
                    arrived(results[i])
        finally:
            for ref, (_, _, actor) in flying.items():
                ray.cancel(ref, force=True)
                ray.kill(actor)
            for _, actor in self.idle:
                ray.kill(actor)
        return [results[i] for i in range(len(problems))]


def _why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[-1][:300] if text else ''}"
