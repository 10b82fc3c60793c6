"""``kernelkit tune OP --dims ... --ray [ADDRESS]``: each problem of a built-in op's tuning a Ray
task holding one GPU (``num_gpus=1``; on the CPU ``num_cpus=1``), so a model's shapes are tuned
on every GPU of a cluster at once.

A task runs the whole of one problem as ``tune_op`` does locally (``tune_op.tune_problem``: its
arrays made on the task's GPU, every candidate compiled, checked and timed there) and sends the
``OpTuneResult`` back; the caller stores the records and writes tables as for a local run. The
built-in ops' configs are trusted not to hang (as locally), so a task has no timeout; a task
whose worker dies is reported as that problem's failure and the other problems go on; an
error raised by the tuning itself (a bad argument) is raised here, as a local run raises it.
Workers are reused (``max_calls=0``): kernels compiled and loaded for one problem serve the
next.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from .op_results import OpTuneResult
from .tune_ray import capacity, import_ray

__all__ = ["run_problems"]

Call = tuple[Any, ...]  # the arguments of one problem's ``tune_problem``


def run_problems(
    tune_problem: Callable[..., OpTuneResult],
    problems: Sequence[Call],
    failed: Callable[[Call, str], OpTuneResult],
    device: str,
    address: str | None,
    arrived: Callable[[OpTuneResult], None],
) -> list[OpTuneResult]:
    """``tune_problem(*call)`` (a module-level function) for each call of ``problems`` as a
    Ray task on the cluster at ``address`` (None: ``RAY_ADDRESS``, else a new local one; a
    cluster this process already joined is used as it is), at most one per GPU (or CPU) at a
    time. ``failed`` makes the result of a problem whose task died; ``arrived`` sees each
    result as it comes. Results in the order of ``problems``."""
    ray = import_ray()
    joined = not ray.is_initialized()
    if joined:
        local = address is None and not os.environ.get("RAY_ADDRESS")
        ray.init(address=address, **({"include_dashboard": False} if local else {}))
    try:
        gpu = device != "cpu"
        resource = "GPU" if gpu else "CPU"
        slots = capacity(ray, None, resource)
        if slots < 1:
            raise ValueError(f"the Ray cluster has no node with a {resource} to tune on")
        options: dict[str, Any] = {"num_gpus": 1} if gpu else {"num_cpus": 1}
        task = ray.remote(max_calls=0, max_retries=0, **options)(tune_problem)
        return _drain(ray, task, list(problems), slots, failed, arrived)
    finally:
        if joined:
            ray.shutdown()


def _drain(
    ray: Any,
    task: Any,
    problems: list[Call],
    slots: int,
    failed: Callable[[Call, str], OpTuneResult],
    arrived: Callable[[OpTuneResult], None],
) -> list[OpTuneResult]:
    results: dict[int, OpTuneResult] = {}
    flying: dict[Any, int] = {}
    pending = list(range(len(problems)))
    try:
        while pending or flying:
            while pending and len(flying) < slots:
                i = pending.pop(0)
                flying[task.remote(*problems[i])] = i
            ready, _ = ray.wait(list(flying), num_returns=1, timeout=0.5)
            for ref in ready:
                i = flying.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    raise e.as_instanceof_cause() from None  # as a local run raises it
                except ray.exceptions.RayError as e:
                    text = str(e).strip().splitlines()
                    why = f"{type(e).__name__}: {text[-1][:300] if text else ''}"
                    results[i] = failed(problems[i], why)
                arrived(results[i])
            if not ready:
                time.sleep(0)  # let Ctrl-C in between waits
    finally:
        for ref in flying:
            ray.cancel(ref, force=True)
    return [results[i] for i in range(len(problems))]
