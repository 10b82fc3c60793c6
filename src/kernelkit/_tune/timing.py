"""Timing a launch the honest way, on any backend, through its ``Backend.timer``.

What is measured is the median over several runs after a warm-up, of launches on copies of the
arguments rotated so that together they exceed the device's cache (``Timer.cache_bytes``): a
kernel re-reading the same inputs from L2 would look faster than it is. Outputs a run modifies
in place (an input that is also an output, or outputs filled with ``init_value``) are restored
from a saved copy before every run, outside the timed region. A kernel shorter than
``graph_below_s`` is timed as replays of a captured graph of many launches (where the backend
can capture), so the launch gaps of the host do not count; otherwise each run is timed alone.

Arrays are handled by duck typing (``.shape``, ``.nbytes``, ``clone``/``copy``, ``x[...] = y``),
so this module names no framework and no backend.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..backend import Timer

__all__ = ["ArgumentSets", "TimingPolicy", "count", "is_array", "measure", "to_host"]

_count = 0  # measurements taken in this process (a serving process must keep it at 0)
_count_lock = threading.Lock()


def count() -> int:
    """How many candidates this process has timed (``measure`` calls)."""
    return _count


@dataclass(frozen=True)
class TimingPolicy:
    """How hard to measure: warm-up runs, timed runs (the median is taken), graph threshold."""

    warmup: int = 2
    repeats: int = 9
    graph_below_s: float = 50e-6  # single runs shorter than this are timed as graph replays
    graph_span_s: float = 1e-3  # a captured graph holds about this much work
    max_graph_launches: int = 500
    max_copies: int = 64
    max_copy_bytes: int = 2 << 30  # rotation never holds more than this in copies


def is_array(x: Any) -> bool:
    """An array argument (not a scalar, not None)."""
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, int | float | bool)


def _nbytes(x: Any) -> int:
    n = getattr(x, "nbytes", None)
    if isinstance(n, int):
        return n
    size = math.prod(x.shape)
    return size * getattr(x, "itemsize", getattr(x, "element_size", lambda: 4)())


def clone(x: Any) -> Any:
    """A copy of array ``x`` in its own framework and device."""
    return x.clone() if hasattr(x, "clone") else x.copy()


def copy_into(dst: Any, src: Any) -> None:
    dst[...] = src


def to_host(x: Any) -> Any:
    """A NumPy copy of ``x`` (float types that NumPy lacks become float32)."""
    import numpy as np

    if hasattr(x, "detach"):  # torch
        t = x.detach().cpu()
        if not t.dtype.is_complex and t.is_floating_point() and t.element_size() == 2:
            t = t.float()  # bfloat16 has no NumPy dtype
        return t.numpy().copy()
    if hasattr(x, "get") and not isinstance(x, np.ndarray):  # CuPy
        return x.get()
    return np.array(x, copy=True)


class ArgumentSets:
    """Copies of a call's arguments for timing: ``sets[i] = (inputs, outputs)``.

    Arrays are copied once per set, keeping aliasing (an input that is also an output is one copy
    in both places). Scalars are shared. ``restore(i)`` puts every output of set ``i`` back to
    its saved first state (what the call's ``out=`` arrays held, or ``fill`` when given).
    """

    def __init__(
        self,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        copies: int,
        fill: Any = None,
    ) -> None:
        self.fill = fill
        self.in_place = any(o is x for o in outputs for x in inputs if is_array(x))
        self.saved = [clone(o) for o in outputs]
        if fill is not None:
            for s in self.saved:
                s[...] = fill
        self.sets: list[tuple[list[Any], list[Any]]] = []
        for _ in range(max(1, copies)):
            made: dict[int, Any] = {}

            def copy(x: Any, made: dict[int, Any] = made) -> Any:
                if not is_array(x):
                    return x
                if id(x) not in made:
                    made[id(x)] = clone(x)
                return made[id(x)]

            self.sets.append(([copy(x) for x in inputs], [copy(o) for o in outputs]))
        for i in range(len(self.sets)):
            self.restore(i)

    @property
    def needs_restore(self) -> bool:
        """Whether a run changes what the next one reads (in place, or outputs to refill)."""
        return self.in_place or self.fill is not None

    def restore(self, i: int) -> None:
        for dst, src in zip(self.sets[i][1], self.saved):
            copy_into(dst, src)

    def release(self) -> None:
        self.sets.clear()
        self.saved.clear()


def copies_for(inputs: Sequence[Any], outputs: Sequence[Any], cache_bytes: int, policy: Any) -> int:
    """How many argument sets rotate: together at least twice the cache, at least two."""
    distinct = {id(x): x for x in (*inputs, *outputs) if is_array(x)}
    set_bytes = max(1, sum(_nbytes(x) for x in distinct.values()))
    want = max(2, math.ceil(2 * cache_bytes / set_bytes) + 1) if cache_bytes else 2
    affordable = max(2, policy.max_copy_bytes // set_bytes)
    return int(min(want, policy.max_copies, affordable))


# run(inputs, outputs, stream) launches one candidate on one argument set
Run = Callable[[list[Any], list[Any], int], Any]


def measure(
    run: Run, sets: ArgumentSets, timer: Timer, policy: TimingPolicy | None = None
) -> tuple[float, str]:
    """Median seconds per launch of ``run``, and how it was measured (for the record)."""
    global _count
    policy = policy or TimingPolicy()
    with _count_lock:
        _count += 1
    n = len(sets.sets)
    i = 0

    def once() -> float:
        nonlocal i
        ins, outs = sets.sets[i % n]
        if sets.needs_restore:
            sets.restore(i % n)
        timer.start()
        run(ins, outs, timer.stream)
        i += 1
        return timer.stop()

    for _ in range(max(1, policy.warmup)):
        estimate = once()
    if estimate < policy.graph_below_s and not sets.needs_restore:
        launches = int(min(policy.max_graph_launches, max(10, policy.graph_span_s / estimate)))
        graphed = _graph_median(run, sets, timer, launches, policy.repeats)
        if graphed is not None:
            return graphed, f"median of {policy.repeats} replays of a graph of {launches} launches"
    times = [once() for _ in range(policy.repeats)]
    return statistics.median(times), f"median of {policy.repeats} runs over {n} argument sets"


def _graph_median(
    run: Run, sets: ArgumentSets, timer: Timer, launches: int, repeats: int
) -> float | None:
    n = len(sets.sets)

    def record(stream: int) -> None:
        for j in range(launches):
            ins, outs = sets.sets[j % n]
            run(ins, outs, stream)

    replay = timer.capture(record)
    if replay is None:
        return None
    timer.start()
    replay()  # warm-up replay
    timer.stop()
    times = []
    for _ in range(repeats):
        timer.start()
        replay()
        times.append(timer.stop() / launches)
    return statistics.median(times)
