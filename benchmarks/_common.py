"""Shared helpers for the benchmarks: timing loops and table printing (no kernelkit logic)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def per_call_us(fn: Callable[[], object], sync: Callable[[], object], calls: int = 20000,
                repeats: int = 5) -> float:
    """Median over ``repeats`` of host wall time per call (µs), synchronizing after each batch."""
    for _ in range(200):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


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
