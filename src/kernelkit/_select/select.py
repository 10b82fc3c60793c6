"""``select``: the pure decision. Given an op, a problem, a target and what the stores say, return
the ``KernelChoice`` and everything that was considered on the way (for ``explain``).

Precedence, highest first: a user override > the tuning database > a shipped table > the
highest-priority matching microkernel > a heuristic > a default that always works. A candidate
any rule returns is checked against the implementation's own rule and the target's limits before
it is taken; one that fails is recorded with why, and the next rule decides. A lookup may
return several candidates, best first (a table: every matching row): the first legal one is
taken. A table row or a tuning record must also name one of its implementation's configs
(both are made by tuning over them; one naming a config since removed or renamed, or a value
the kernel never offered, is passed over, never compiled): ``unservable`` says why. An
implementation marked ``listed_only`` (a library route) is taken only from the first three.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import ArgumentError
from .._records import Problem, Target
from .records import Config, KernelChoice
from .registry import Implementation, Op

__all__ = ["Considered", "Override", "Selection", "select", "unservable"]

LISTED_ONLY = "taken only where a table, the tuning database or kernelkit.force names it"

# (implementation id, config, where); "where" describes the record for explain
Found = tuple[str, Config, str]
# key -> one candidate, a list of them (best first) or None
Lookup = Callable[[Problem, Target, tuple], "Found | list[Found] | None"]


@dataclass(frozen=True)
class Override:
    """A forced choice: an implementation, and optionally its config (else its default)."""

    impl: str
    config: Config | None = None
    where: str = "kernelkit.force"


@dataclass(frozen=True)
class Considered:
    """One rule or candidate looked at, and what became of it."""

    source: str
    impl: str | None
    verdict: str  # "chosen", or why it was passed over


@dataclass(frozen=True)
class Selection:
    """A decision, how it was reached, and the problem and target it was reached for."""

    choice: KernelChoice
    considered: tuple[Considered, ...]
    problem: Problem | None = field(default=None, compare=False, repr=False)
    target: Target | None = field(default=None, compare=False, repr=False)

    def explain(self) -> str:
        """The choice, then every rule and candidate considered, in order."""
        lines = [f"{self.choice.op}: {self.choice.describe()}"]
        if self.choice.key:
            lines.append("  key: " + ", ".join(f"{f}={v}" for f, v in self.choice.key))
        for c in self.considered:
            who = f" {c.impl}" if c.impl else ""
            lines.append(f"  {c.source}{who}: {c.verdict}")
        return "\n".join(lines)


def exceeded_limit(config: Config, target: Target) -> str | None:
    threads = config.threadgroup[0] * config.threadgroup[1] * config.threadgroup[2]
    if threads > target.max_threads_per_block:
        limit = target.max_threads_per_block
        return f"threadgroup has {threads} threads; {target.name} allows {limit}"
    for axis, (b, lim) in enumerate(zip(config.threadgroup, target.max_block_dims)):
        if b > lim:
            return f"threadgroup[{axis}] = {b} exceeds {target.name}'s limit {lim}"
    if config.shared_memory > target.max_shared_memory_optin_bytes:
        return (
            f"shared_memory {config.shared_memory} exceeds {target.name}'s "
            f"{target.max_shared_memory_optin_bytes} bytes"
        )
    return None


def unservable(op: Op, impl_id: str, config: Config, identity: str = "") -> str | None:
    """Why a stored decision (a tuning record's implementation, config and identity) cannot be
    served to ``op`` as it is now, or None: a record is checked against what the op offers now
    (its identity, implementations and config lists), never trusted for what it says."""
    if identity != op.identity:
        return (
            "it was measured on another version of this kernel (its source, spec or config "
            "list has changed since)"
        )
    impl = op.get(impl_id)
    if impl is None:
        names = [i.name for i in op.implementations]
        return f"no implementation {impl_id!r} in {op.name} (it has {names})"
    if impl.kind == "generic":
        if not _offers(impl, config):
            return f"config [{config.describe()[:200]}] is not one of {impl.name}'s"
    elif config != Config():
        return f"microkernel {impl.name} takes no config, got [{config.describe()[:200]}]"
    return None


def _offers(impl: Implementation, config: Config) -> bool:
    """Whether ``config`` is the default or one of ``impl``'s configs, value and type (a stored
    ``true`` is not the config ``1``, though Python compares them equal)."""

    def typed(c: Config) -> tuple:
        return tuple((n, type(v).__name__) for n, v in c.template)

    return any(c == config and typed(c) == typed(config) for c in (impl.default, *impl.configs))


def legal_choice(
    op: Op,
    impl_id: str,
    config: Config | None,
    problem: Problem,
    target: Target,
    listed: bool = False,
) -> tuple[Implementation | None, Config | None, str | None]:
    """(implementation, config to use, None) when legal, else (None, None, why not).
    ``listed``: a generic implementation's config must be one of its own (tables, records)."""
    impl = op.get(impl_id)
    if impl is None:
        names = [i.name for i in op.implementations]
        return None, None, f"no implementation {impl_id!r} in {op.name} (it has {names})"
    why = impl.check(problem, target)
    if why is not None:
        return None, None, why
    if impl.kind == "generic":
        if config is None and impl.heuristic is not None:  # forced without a config: the
            config = impl.heuristic(problem, target)  # one its heuristic gives this problem
        config = config or impl.default
        assert config is not None  # noqa: S101 - for mypy: generic implementations have a default
        if listed and not _offers(impl, config):
            return None, None, f"config [{config.describe()}] is not one of {impl.name}'s"
        why = exceeded_limit(config, target) or impl.check_config(problem, config)
        if why is not None:
            return None, None, why
    else:
        config = config or Config()
    return impl, config, None


def select(
    op: Op,
    problem: Problem,
    target: Target,
    *,
    override: Override | None = None,
    database: Lookup | None = None,
    table: Lookup | None = None,
) -> Selection:
    """Decide which implementation and config run ``problem`` on ``target``. Pure: the same
    arguments (and store contents) give the same choice. Raises ``ArgumentError`` only for an
    override that cannot run the problem, or an op with no implementation that can."""
    key = op.key.of(problem)  # type: ignore[union-attr]
    seen: list[Considered] = []

    def choose(impl: Implementation, config: Config, source: Any, reason: str) -> Selection:
        seen.append(Considered(source, op.impl_id(impl), "chosen"))
        if impl.pads:
            reason = f"{reason}; {impl.pads}" if reason else impl.pads
        choice = KernelChoice(
            op=op.name,
            impl=op.impl_id(impl),
            config=config,
            grid=impl.grid_for(problem, config),
            source=source,
            key=key,
            reason=reason,
        )
        return Selection(choice, tuple(seen), problem, target)

    if override is not None:
        impl, config, why = legal_choice(op, override.impl, override.config, problem, target)
        if impl is None or config is None:
            raise ArgumentError(f"[{op.name}] forced {override.impl!r} ({override.where}): {why}")
        return choose(impl, config, "override", f"forced by {override.where}")

    for source, lookup in (("database", database), ("table", table)):
        found = lookup(problem, target, key) if lookup is not None else None
        if not found:
            seen.append(Considered(source, None, "no entry" if lookup else "not consulted"))
            continue
        for impl_id, wanted, where in [found] if isinstance(found, tuple) else found:
            impl, config, why = legal_choice(op, impl_id, wanted, problem, target, listed=True)
            if impl is None or config is None:
                seen.append(Considered(source, impl_id, f"refused: {why} ({where})"))
                continue
            return choose(impl, config, source, where)

    for impl in op.by_kind("microkernel"):
        if impl.listed_only:
            seen.append(Considered("microkernel", op.impl_id(impl), LISTED_ONLY))
            continue
        why = impl.check(problem, target)
        if why is None:
            deferred = impl.deferral(problem, target)
            if deferred is None:
                return choose(impl, Config(), "microkernel", f"priority {impl.priority}")
            seen.append(Considered("microkernel", op.impl_id(impl), f"passed over: {deferred}"))
            continue
        seen.append(Considered("microkernel", op.impl_id(impl), f"does not match: {why}"))

    generic = [i for i in op.by_kind("generic") if not i.listed_only]
    for impl in generic:
        if impl.heuristic is None:
            continue
        why = impl.check(problem, target)
        deferred = impl.deferral(problem, target) if why is None else None
        if deferred is not None:
            seen.append(Considered("heuristic", op.impl_id(impl), f"passed over: {deferred}"))
            continue
        config = impl.heuristic(problem, target) if why is None else None
        if config is not None:
            why = exceeded_limit(config, target) or impl.check_config(problem, config)
            if why is None:
                return choose(impl, config, "heuristic", "")
        seen.append(Considered("heuristic", op.impl_id(impl), why or "no config for this problem"))

    for impl in generic:
        got, config, why = legal_choice(op, impl.name, None, problem, target)
        if got is not None and config is not None:
            return choose(got, config, "default", "")
        seen.append(Considered("default", op.impl_id(impl), f"does not match: {why}"))
    raise ArgumentError(
        f"[{op.name}] no implementation can run this problem on {target.name}:\n"
        + "\n".join(f"  {c.source} {c.impl or ''}: {c.verdict}" for c in seen)
    )
