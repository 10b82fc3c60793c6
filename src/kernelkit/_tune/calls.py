"""How an autotuned kernel's call is carried out: the arguments beside the choice
(``KernelCall``), the choice as ``Kernel.__call__``'s launch settings, grid rules from their
simple forms, and the identity its tuning records are bound to."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._api import Kernel
from .._cache.keys import digest_of
from .._errors import ArgumentTypeError
from .._records import KernelSpec, Problem
from .._select.records import Config, KernelChoice
from .._select.registry import GridRule

__all__ = ["KernelCall", "grid_rule", "identity", "launch_settings", "run_choice"]


@dataclass(frozen=True)
class KernelCall:
    """A call's arguments except what the config decides: what the implementation's ``run``
    takes beside the ``KernelChoice``."""

    inputs: Sequence[Any]
    output_shapes: Sequence[Sequence[int]] | None = None
    output_dtypes: Sequence[Any] | None = None
    out: Sequence[Any] | None = None
    stream: Any = None
    init_value: Any = None
    backend: str | None = None
    check: bool | None = None
    verbose: bool = False


def launch_settings(choice: KernelChoice) -> tuple[Any, tuple[int, ...], tuple[int, ...], Any]:
    """(template, threadgroup, grid, shared_memory) as ``Kernel.__call__`` takes them; shared
    memory 0 leaves the kernel's own."""
    c = choice.config
    template = list(c.template) or None
    return template, c.threadgroup, choice.grid, c.shared_memory or None


def grid_rule(grid: Any, inputs: Sequence[str]) -> GridRule:
    """A grid rule from its simple forms: a callable ``(problem, config) -> grid``; a tuple of
    ints (fixed grid in threads); an argument name (one thread per element of that array)."""
    if callable(grid):
        return grid
    if isinstance(grid, str):
        name = grid

        def per_element(problem: Problem, config: Config) -> tuple[int, int, int]:
            return (max(1, math.prod(problem.arg(name).shape)), 1, 1)

        return per_element
    if (
        isinstance(grid, list | tuple)
        and 1 <= len(grid) <= 3
        and all(isinstance(g, int) and not isinstance(g, bool) and g > 0 for g in grid)
    ):
        fixed = tuple(grid) + (1,) * (3 - len(grid))
        return lambda problem, config: fixed
    raise ArgumentTypeError(
        f"[autotune] grid must be a callable (problem, config) -> grid, a tuple of 1 to 3 "
        f"positive ints, or the name of an argument (one thread per element); got {grid!r}. "
        f"Arguments: {list(inputs)}"
    )


def identity(spec: KernelSpec, configs: Sequence[Config], default: Config | None) -> str:
    """What an autotuned kernel's tuning records are bound to: a digest of its spec and of the
    configs it offers (stable across processes: sets are sorted, everything is JSON)."""
    parts = []
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, frozenset):
            value = sorted(value)
        parts.append((f"spec.{f.name}", json.dumps(value, sort_keys=True, default=repr)))
    parts.append(("configs", json.dumps([c.to_dict() for c in configs], sort_keys=True)))
    parts.append(("default", json.dumps(default.to_dict() if default else None)))
    return digest_of(parts)


def run_choice(kernel: Kernel, choice: KernelChoice, call: KernelCall) -> Any:
    """``Implementation.run`` of an autotuned kernel: carry out the choice, deciding nothing."""
    template, threadgroup, grid, shared = launch_settings(choice)
    return kernel(
        call.inputs,
        call.output_shapes,
        call.output_dtypes,
        grid,
        threadgroup,
        template,
        call.init_value,
        call.verbose,
        call.stream,
        call.out,
        call.backend,
        call.check,
        shared,
    )
