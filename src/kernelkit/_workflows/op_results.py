"""What ``kernelkit.tune_op`` found (``tune_op.py`` does the tuning): per problem every candidate
and the record stored, and how the results are reported, drawn and written as a table to ship
(rows for the tuned key buckets, on the device they were measured on)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._errors import ArgumentError
from .._records import Target
from .._select.records import Config
from .._select.tables import TableEntry
from .._select.tuning.records import Key, TuningRecord
from .._tune.tuner import candidate_line, fastest

__all__ = ["OpCandidate", "OpTuneResult", "OpTuning"]


@dataclass(frozen=True)
class OpCandidate:
    """One implementation and config for one problem, and what became of it: ``status`` is
    ``ok`` (timed), ``skipped`` (cannot run the problem; ``config`` None when the whole
    implementation cannot), ``failed`` (did not compile or run), ``rejected`` (wrong output)
    or ``not timed`` (the time budget was spent)."""

    impl: str
    label: str
    config: Config | None
    status: str
    time_s: float | None = None
    detail: str = ""
    compared_only: bool = False  # the shipped choice, of an implementation not asked for

    def describe(self) -> str:
        line = candidate_line(self.time_s, self.status, self.label, self.detail)
        return line + ("  (shipped; not asked for, so never chosen)" if self.compared_only else "")


@dataclass(frozen=True)
class OpTuneResult:
    """The tuning of one problem: its key, every candidate, and the record stored (None when no
    candidate ran correctly). ``target`` is None (and ``candidates`` empty) for a problem whose
    Ray task died before it said where it ran (``note`` says why)."""

    op: str
    label: str
    key: Key
    target: Target | None
    candidates: tuple[OpCandidate, ...]
    record: TuningRecord | None
    tuning_s: float
    note: str = ""
    shipped: str = ""  # the label of the candidate kernelkit chooses untuned (tables, rules)
    shipped_from: str = ""  # which rule chose it: "table", "heuristic", ...

    @property
    def winner(self) -> OpCandidate | None:
        """The fastest candidate that ran correctly, of the implementations asked for."""
        return fastest(c for c in self.candidates if not c.compared_only)

    @property
    def shipped_over_best(self) -> float | None:
        """The shipped choice's time over the winner's (1.0: the shipped choice is the best);
        None when either was not timed."""
        best = self.winner
        mine = next((c for c in self.candidates if c.label == self.shipped), None)
        if best is None or mine is None or not mine.time_s or not best.time_s:
            return None
        return mine.time_s / best.time_s

    def report(self) -> str:
        """The problem and its key, how the candidates were timed, then one line per
        candidate, the winner starred."""
        key = ", ".join(f"{f}={v}" for f, v in self.key)
        where = self.target.name if self.target is not None else "(no device: the task died)"
        lines = [f"{self.op} {self.label} on {where} (tuned in {self.tuning_s:.2f} s)"]
        lines.append(f"  key: {key}")
        if self.shipped:
            ratio = self.shipped_over_best
            how = "not timed" if ratio is None else f"{ratio:.3f}x the best"
            lines.append(f"  shipped choice ({self.shipped_from}): {self.shipped}: {how}")
        timed = [c for c in self.candidates if c.status == "ok"]
        graphs = sum("graph" in c.detail for c in timed)
        if timed:  # graph replays leave the host's launch gaps out; runs one by one do not
            lines.append(f"  timed: {graphs} by graph replays, {len(timed) - graphs} run by run")
        best = self.winner
        lines += [(" * " if c is best else "   ") + c.describe() for c in self.candidates]
        if self.note:
            lines.append(f"  ({self.note})")
        return "\n".join(lines)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


@dataclass(frozen=True)
class OpTuning:
    """What ``tune_op`` did: one result per problem (dtypes outer, dims inner)."""

    op: str
    results: tuple[OpTuneResult, ...]

    @property
    def records(self) -> list[TuningRecord]:
        return [r.record for r in self.results if r.record is not None]

    def report(self) -> str:
        return "\n".join(r.report() for r in self.results)

    def device_name(self) -> str:
        """The name of the device the first problem ran on ("" if none ran)."""
        return next((r.target.name for r in self.results if r.target is not None), "")

    def entries(self, device_name: str | None = None) -> list[TableEntry]:
        """One table row per tuned key bucket (the last problem tuned in a bucket wins), for
        the device the tuning ran on: its arch and ``device_name``, a substring of the
        device's name (default: the whole name; e.g. ``H100`` for every H100)."""
        rows: dict[Any, TableEntry] = {}
        for r in self.results:
            rec = r.record
            if rec is None or r.target is None:
                continue
            name = device_name or r.target.name
            if name not in r.target.name:
                raise ArgumentError(
                    f"[tune] device name {name!r} is not part of {r.target.name!r}: a table "
                    "row made here would never match this device"
                )
            note = (
                f"kernelkit tune {r.label} on {r.target.name}: {rec.best_us:g} us, best of "
                f"{sum(c.time_s is not None for c in r.candidates)} timed"
            )
            e = TableEntry.from_key(
                rec.op, rec.impl, rec.config, rec.key, r.target.arch, name, note
            )
            rows[(e.exact, e.ranges)] = e
        return list(rows.values())

    def table_path(self, path: str | os.PathLike, device_name: str | None = None) -> Path:
        """``path``, or ``<path>/<op>.<device>.yaml`` when it is a folder (or ends in ``/``),
        the device named by ``device_name`` (default: the device's name) in lower case."""
        text = os.fspath(path)
        if text.endswith(("/", os.sep)) or Path(text).is_dir():
            name = device_name or self.device_name()
            return Path(text) / f"{self.op}.{_slug(name)}.yaml"
        return Path(text)

    def write_table(self, path: str | os.PathLike, device_name: str | None = None) -> Path:
        """Write (or update) a table file with ``entries``: rows of the file covering the same
        op, device and problem bucket are replaced, the others kept. Returns the path."""
        from .._select.tables import Table

        target = self.table_path(path, device_name)
        new = self.entries(device_name)
        old: tuple[TableEntry, ...] = ()
        if target.exists():
            old = Table.load([target]).entries  # a malformed old row is warned of, and dropped
        scope = lambda e: (e.op, e.arch, e.device_name, e.exact, e.ranges)
        replaced = {scope(e) for e in new}
        merged = [e for e in old if scope(e) not in replaced] + new
        ops = {e.op for e in merged}
        devices = {(e.arch, e.device_name) for e in merged}
        device = None
        if len(devices) == 1:
            arch, name = next(iter(devices))
            device = {k: v for k, v in (("arch", arch), ("name", name)) if v} or None
        Table.write(target, merged, op=ops.pop() if len(ops) == 1 else None, device=device)
        return target

    def plot(self, path: str | os.PathLike) -> None:
        """Time per candidate (x) for each problem (one series each), the winner starred."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ArgumentError(
                "[tune] --plot needs matplotlib: pip install matplotlib (or kernelkit[dev])"
            ) from None
        labels: dict[str, int] = {}
        for r in self.results:
            for c in r.candidates:
                if c.time_s is not None:
                    labels.setdefault(c.label, len(labels))
        width = min(40.0, max(6.0, 0.22 * len(labels) + 3))
        fig, ax = plt.subplots(figsize=(width, 5.5))
        for r in self.results:
            # left to right: a problem's candidates need not come in the order of the axis
            timed = sorted(
                (c for c in r.candidates if c.time_s is not None), key=lambda c: labels[c.label]
            )
            xs = [labels[c.label] for c in timed]
            ys = [float(c.time_s or 0.0) * 1e6 for c in timed]
            (line,) = ax.plot(xs, ys, marker="o", markersize=3, linewidth=0.8, label=r.label)
            best = r.winner
            if best is not None:
                star = float(best.time_s or 0.0) * 1e6
                ax.plot(
                    [labels[best.label]], [star], marker="*", markersize=14, color=line.get_color()
                )
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(list(labels), rotation=90, fontsize=6)
        ax.set_ylabel("time per launch (us, log scale)")
        ax.set_yscale("log")
        name = self.device_name()
        ax.set_title(f"{self.op} on {name}: time per candidate and problem (star: chosen)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.fspath(path), dpi=120)
        plt.close(fig)
