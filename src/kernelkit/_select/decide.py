"""``decide``: ``select`` wired to the stores (override, tuning database, shipped tables) with
decisions cached per (op, problem key, target), so a repeated problem costs one dictionary
lookup. ``explain`` reports a decision and how it was reached."""

from __future__ import annotations

from typing import Any

from .._records import Problem, Target
from ..backend import Backend
from .override import forced
from .records import Config, KernelChoice
from .registry import Op
from .select import Selection, select, unservable

__all__ = ["decide", "explain_selection", "shipped_selection"]


def _database(op: Op, backend: Backend) -> Any:
    """A lookup into the tuning database for this backend, or None when the database is off.
    A record ``op`` cannot serve as it is now (``unservable``) is discarded with one warning."""
    from .tuning import db as tuning

    if tuning.tune_mode() == "off":
        return None
    store = tuning.current_db()

    def lookup(problem: Problem, target: Target, key: tuple) -> tuple[str, Config, str] | None:
        env = tuning.Environment.of(backend, target)
        record = store.get(problem.name, env, key)
        if record is None:
            return None
        why = unservable(op, record.impl, record.config, record.identity)
        if why is not None:
            store.discard(record, why)
            return None
        best = f", {record.best_us:g} us, best of {record.candidates}" if record.best_us else ""
        return record.impl, record.config, f"tuned {record.created}{best}"

    return lookup


def _table() -> Any:
    """A lookup into the shipped tables: every matching entry, most specific first (``select``
    takes the first it can run and says why it passed over the others)."""
    from .tables import shipped_tables

    def lookup(problem: Problem, target: Target, key: tuple) -> list[tuple[str, Config, str]]:  # noqa: ARG001  the lookup signature (the database uses key)
        entries = shipped_tables().matches(problem.name, target, problem)
        return [(e.impl, e.config, f"table {e.where}") for e in entries]

    return lookup


def selection(op: Op, problem: Problem, target: Target, backend: Backend) -> Selection:
    """The full selection (not cached): for ``explain`` and the first call of a key."""
    return select(
        op,
        problem,
        target,
        override=forced(op.name),
        database=_database(op, backend),
        table=_table(),
    )


def decide(op: Op, problem: Problem, target: Target, backend: Backend) -> KernelChoice:
    """The choice for ``problem`` on ``target``: decided once per (key bucket, target,
    override); only the grid is derived again for each problem (sizes vary within a bucket)."""
    override = forced(op.name)
    cache_key = (op.key.of(problem), target, override)  # type: ignore[union-attr]
    found = op._decisions.get(cache_key)
    if found is None:
        found = selection(op, problem, target, backend).choice
        with op._lock:
            op._decisions[cache_key] = found
        return found
    impl, config = op.get(found.impl), found.config
    return found.with_grid(impl.grid_for(problem, config))  # type: ignore[union-attr]


def explain_selection(op: Op, problem: Problem, target: Target, backend: Backend) -> Selection:
    """What ``decide`` would choose, with every rule and candidate considered."""
    return selection(op, problem, target, backend)


def shipped_selection(op: Op, problem: Problem, target: Target) -> Selection:
    """What kernelkit chooses as shipped: the tables, then the rules, with no tuning database
    and no override (``kernelkit tune`` reports how that choice times against the best)."""
    return select(op, problem, target, override=None, database=None, table=_table())
