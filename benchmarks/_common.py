"""Shared helpers for the benchmarks: timing loops and table printing (no kernelkit logic)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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
