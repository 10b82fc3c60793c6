"""Shared helpers for the benchmarks: timing loops (host clocks; CUDA events and graphs through
torch, imported when used) and table printing (no kernelkit logic)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


def cuda_or_skip(script: str) -> bool:
    """True where torch sees a CUDA GPU; else prints why the GPU benchmark ``script`` is skipped
    (its caller then exits 0: on a machine without a GPU, skipping is the expected result)."""
    try:
        import torch
    except ImportError:
        print(f"skip: {script} needs torch and a CUDA GPU (torch is not installed)")
        return False
    if not torch.cuda.is_available():
        print(f"skip: {script} needs a CUDA GPU (torch sees none)")
        return False
    return True


def interleaved_us(
    variants: dict[str, Callable[[], object]],
    sync: Callable[[], object],
    calls: int = 10000,
    rounds: int = 9,
) -> dict[str, float]:
    """Median µs per call of each variant, measured in interleaved rounds so that drift in the
    machine's speed (shared hosts, clocks) hits every variant alike."""
    for fn in variants.values():
        for _ in range(200):
            fn()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def table(rows: list[tuple[str, float | None, str]], unit: str, base: float | None) -> None:
    """Print name, value, ratio to ``base`` and a note per row."""
    width = max(len(r[0]) for r in rows) + 2
    print(f"{'':{width}}{unit:>12}{'ratio':>9}  note")
    for name, value, note in rows:
        if value is None:
            print(f"{name:{width}}{'n/a':>12}{'':>9}  {note}")
            continue
        ratio = f"{value / base:.2f}x" if base else ""
        print(f"{name:{width}}{value:12.2f}{ratio:>9}  {note}")


def time_us(fn, batch: int = 20, reps: int = 15) -> float:
    """Median µs per call over ``reps`` batches of ``batch`` calls, timed with CUDA events."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / batch)
    return statistics.median(samples)


@dataclass(frozen=True)
class Stats:
    """µs per call of one function, one sample per rep (in rep order) of a paired timing."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p25(self) -> float:
        return _quartiles(self.samples)[0]

    @property
    def p75(self) -> float:
        return _quartiles(self.samples)[2]


def _quartiles(samples: tuple[float, ...]) -> list[float]:
    if len(samples) < 2:
        return [samples[0]] * 3
    return statistics.quantiles(samples, n=4, method="inclusive")


def paired_ratio(num: Stats, den: Stats) -> Stats:
    """``num / den`` rep by rep: each rep timed both within a few milliseconds, so a slow period
    of the host scales both sides of a sample and leaves their ratio."""
    if len(num.samples) != len(den.samples):
        raise ValueError(f"[paired_ratio] samples of one paired run, got {len(num.samples)} "
                         f"and {len(den.samples)} reps")  # fmt: skip
    return Stats(tuple(a / b for a, b in zip(num.samples, den.samples)))


def paired_us(
    fns: dict[str, Callable[[], object]],
    batch: int = 20,
    reps: int = 15,
    *,
    cuda: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Stats]:
    """µs per call of every function in ``fns``, timed side by side: each rep times one batch of
    ``batch`` calls of each function in turn (CUDA events, or ``clock`` on the host where
    ``cuda`` is False), the order rotated by one every rep so that none always goes first. A
    slow period of a shared host then lands on every function alike, where timing them one
    after another puts it on whichever runs then. As many batches per function as ``time_us``."""
    if not fns:
        raise ValueError("[paired_us] at least one function to time, got none")
    timed = _cuda_batch_us if cuda else _host_batch_us(clock)
    for fn in fns.values():
        for _ in range(3):
            fn()
    if cuda:
        import torch

        torch.cuda.synchronize()
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        k = rep % len(names)
        for name in names[k:] + names[:k]:
            samples[name].append(timed(fns[name], batch))
    return {name: Stats(tuple(v)) for name, v in samples.items()}


def _cuda_batch_us(fn: Callable[[], object], batch: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(batch):
        fn()
    end.record()
    end.synchronize()  # the next batch starts on an idle device
    return start.elapsed_time(end) * 1e3 / batch


def _host_batch_us(clock: Callable[[], float]) -> Callable[[Callable[[], object], int], float]:
    def timed(fn: Callable[[], object], batch: int) -> float:
        t0 = clock()
        for _ in range(batch):
            fn()
        return (clock() - t0) / batch * 1e6

    return timed


def graph_us(fn, batch: int = 20, reps: int = 15) -> float | None:
    """Median µs per call of ``batch`` calls captured in one CUDA graph and replayed: the
    device time alone, without the host's per-call cost (None if the call cannot be captured)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            for _ in range(batch):
                fn()
    except Exception as e:  # noqa: BLE001 - report, do not stop the benchmark
        print(f"  (graph capture failed: {type(e).__name__}: {e})")
        return None
    return time_us(g.replay, batch=1, reps=reps) / batch


def rotating(fn, x, weights):
    """A no-argument call of ``fn(x, w)`` taking the next weight each time."""
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(weights)
        return fn(x, weights[state["i"]])

    return call


def copy_rate_gbs() -> float:
    """Device-to-device copy of 1 GiB, read + write counted."""
    import torch

    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    us = time_us(lambda: b.copy_(a), batch=5, reps=9)
    return 2 * a.numel() / (us * 1e-6) / 1e9
