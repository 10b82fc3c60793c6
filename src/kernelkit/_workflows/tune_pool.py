"""The local worker pool of ``kernelkit tune SPEC``: one process per device (``--devices 0,1``:
each sees only its GPU; none: one worker on the default device), each running ``Measurement``s
sent through a pipe. A worker that dies (a segfault, a SIGILL) or takes longer than the spec's
``timeout_s`` costs only its candidate, recorded as failed; a new worker takes the next one."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from .tune_tasks import Measured, Measurement

if TYPE_CHECKING:
    from .tune_spec import TuneSpec

__all__ = ["run_pool"]


def _worker(conn: Any, spec: TuneSpec, device: str | None) -> None:
    """Runs measurements until told to stop (None)."""
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    from .tune_tasks import Bench

    where = "local" if device is None else f"local device {device}"
    try:
        bench = Bench(spec, where)
    except Exception as e:  # noqa: BLE001 - every candidate sent is then reported failed
        bench, broken = None, f"{type(e).__name__}: {e}"
    while True:
        task = conn.recv()
        if task is None:
            return
        conn.send(bench.measure(task) if bench is not None else Measured.failure(broken, where))


class _Worker:
    def __init__(self, ctx: Any, spec: TuneSpec, device: str | None) -> None:
        self.spec, self.device, self.ctx = spec, device, ctx
        self.task: Measurement | None = None
        self.started = 0.0
        self._start()

    def _start(self) -> None:
        parent, child = self.ctx.Pipe()
        self.conn = parent
        self.proc = self.ctx.Process(target=_worker, args=(child, self.spec, self.device))
        self.proc.daemon = True
        self.proc.start()
        child.close()

    def send(self, task: Measurement) -> None:
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


def run_pool(
    spec: TuneSpec,
    todo: list[Measurement],
    devices: list[str] | None,
    admit: Callable[[Measurement], bool],
    arrived: Callable[[Measurement, Measured], None],
) -> None:
    """Measure ``todo`` on the workers; ``admit(m)`` is asked just before ``m`` is sent (False:
    it is not run), ``arrived(m, result)`` gets each result as it comes."""
    ctx = mp.get_context("spawn")
    workers = [_Worker(ctx, spec, d) for d in (devices or [None])]  # type: ignore[list-item]
    pending = list(todo)
    try:
        while pending or any(w.task for w in workers):
            for w in workers:
                while w.task is None and pending:
                    task = pending.pop(0)
                    if admit(task):
                        w.send(task)
            _collect(workers, arrived, spec.timeout_s)
    finally:
        for w in workers:
            w.stop()


def _collect(workers: list[_Worker], arrived: Callable, timeout_s: float) -> None:
    busy = {w.conn: w for w in workers if w.task is not None}
    if not busy:
        return
    for conn in wait(list(busy), timeout=0.2):
        w = busy[conn]
        task = w.task
        if task is None:  # answered while it was being killed for its timeout
            continue
        try:
            result = w.conn.recv()
            w.task = None
            if result.context_lost:  # a device fault: every later CUDA call there would fail
                w.restart()
        except (EOFError, OSError):
            w.proc.join(1)
            code = w.proc.exitcode
            why = f"worker died (exit code {code})" if code is not None else "worker died"
            result = Measured.failure(why, "local")
            w.restart()
        arrived(task, result)
    now = time.monotonic()
    for w in workers:
        if w.task is not None and now - w.started > timeout_s:
            task = w.task
            w.restart()
            arrived(task, Measured.failure(f"timed out after {timeout_s:g} s", "local"))
