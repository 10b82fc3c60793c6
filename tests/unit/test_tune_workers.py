"""A worker whose candidate hit a device fault is replaced before it measures again: after a
fault (``LaunchError``) every later CUDA call in that process fails, so a worker kept on would
report every later candidate as failed. Checked on the local pool's and the Ray dispatcher's
collection step with stand-ins for the worker process and for Ray (no GPU can fault here), and
on ``Bench.measure``, which flags the result."""

from __future__ import annotations

import multiprocessing as mp
from types import SimpleNamespace

from kernelkit._errors import LaunchError
from kernelkit._workflows import tune_pool, tune_ray
from kernelkit._workflows.tune_tasks import Bench, Measured, Measurement


class _PoolWorker:
    """A pool worker whose process is a pipe the test answers through."""

    def __init__(self, task: Measurement) -> None:
        self.conn, self.peer = mp.Pipe()
        self.task, self.started, self.restarts = task, 0.0, 0

    def restart(self) -> None:
        self.restarts += 1
        self.task = None


def _result(lost: bool) -> Measured:
    return Measured("failed", detail="device fault", context_lost=lost)


def test_the_local_pool_restarts_a_worker_whose_context_is_lost():
    for lost, restarts in ((True, 1), (False, 0)):
        w = _PoolWorker(Measurement(0, 1))
        w.peer.send(_result(lost))
        seen = []
        tune_pool._collect([w], lambda m, r, seen=seen: seen.append((m, r)), timeout_s=60)
        assert seen == [(Measurement(0, 1), _result(lost))] and w.restarts == restarts


class _RayError(Exception):
    pass


class _ActorDied(_RayError):
    pass


class _FakeRay:
    """What ``_Dispatch.collect`` asks of Ray: wait, get, kill and the exception classes."""

    exceptions = SimpleNamespace(RayError=_RayError, RayActorError=_ActorDied)

    def __init__(self, answers: dict) -> None:
        self.answers, self.killed = answers, []

    def wait(self, refs, num_returns, timeout):
        return list(refs)[:num_returns], []

    def get(self, ref):
        answer = self.answers[ref]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def kill(self, actor):
        self.killed.append(actor)


def _dispatch(answer) -> tuple[tune_ray._Dispatch, _FakeRay]:
    d = tune_ray._Dispatch.__new__(tune_ray._Dispatch)
    fake = _FakeRay({"ref": answer})
    m = Measurement(0, 2)
    d.ray, d.spec = fake, SimpleNamespace(retries=0, timeout_s=60.0)
    d.flying, d.idle, d.busy = {"ref": (m, 0.0, "actor")}, {None: []}, {None: 1}
    d.tries, d.again = {}, []
    return d, fake


def test_the_ray_dispatcher_kills_a_worker_whose_context_is_lost_and_keeps_a_healthy_one():
    for answer, killed, idle in [
        (_result(True), ["actor"], []),
        (_result(False), [], ["actor"]),
        (_RayError("the task's worker is in an unknown state"), ["actor"], []),
        (_ActorDied("died"), ["actor"], []),
    ]:
        d, fake = _dispatch(answer)
        seen = []
        d.collect(lambda m, r, seen=seen: seen.append(r))
        assert fake.killed == killed and d.idle[None] == idle, answer
        assert len(seen) == 1 and d.busy[None] == 0


def test_bench_flags_a_device_fault_and_nothing_else(monkeypatch):
    import kernelkit._workflows.tune_tasks as tasks

    class Session:
        key = (("n", 4),)

        def legal(self, config):
            return None

        def compile(self, config):
            raise config

    monkeypatch.setattr(tasks, "_environment", lambda session: None)
    bench = Bench.__new__(Bench)
    bench.where, bench.sessions = "here", {0: Session()}
    bench.obj = SimpleNamespace(impl=SimpleNamespace(configs=[LaunchError("fault"), ValueError()]))
    assert bench.measure(Measurement(0, 0)).context_lost is True
    assert bench.measure(Measurement(0, 1)).context_lost is False
