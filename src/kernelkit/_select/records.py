"""The selection stage's records: what a decision is made from and what it is.

``Config`` is one point of an implementation's tuning space (what the tuning database stores);
``KernelChoice`` is the whole decision for one problem on one target (what ``explain`` prints,
what render and launch carry out, what a test asserts on). Both are frozen, hashable and
round-trip through JSON exactly (``to_json``/``from_json``), so a decision can be stored,
shipped in a table and compared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ArgumentError, ArgumentTypeError

__all__ = ["PROVENANCE", "Config", "KernelChoice", "Provenance", "TemplateValue"]

TemplateValue = bool | int | str  # str: a dtype name ("float32"), as kernelkit templates take
Provenance = Literal["override", "database", "table", "microkernel", "heuristic", "default"]
# Highest precedence first: a user override beats the tuning database, which beats a shipped
# table, then the best matching microkernel, then a heuristic, then a default that always works.
PROVENANCE: tuple[str, ...] = (
    "override",
    "database",
    "table",
    "microkernel",
    "heuristic",
    "default",
)


def _template(value: Any, what: str) -> tuple[tuple[str, TemplateValue], ...]:
    items = value.items() if isinstance(value, dict) else value
    out = []
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], str)):
            raise ArgumentTypeError(
                f"{what}: template entries are (name, value) pairs, got {item!r}"
            )
        name, v = item
        if not isinstance(v, bool | int | str):
            raise ArgumentTypeError(
                f"{what}: template {name!r} must be a bool, an int or a dtype name, got {v!r}"
            )
        out.append((name, v))
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ArgumentError(f"{what}: a template name is given twice in {names}")
    return tuple(sorted(out))


def _dims3(value: Any, what: str) -> tuple[int, int, int]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 3:
        raise ArgumentError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ArgumentError(f"{what} must hold positive ints, got {value!r}")
    return tuple(list(value) + [1] * (3 - len(value)))


@dataclass(frozen=True, init=False)
class Config:
    """One point of a tuning space: template values, block shape, dynamic shared memory.

    The grid is not part of it: an implementation's grid rule derives it from the problem and
    the config, so one config serves every size in a bucket. Template values are sorted by name
    (one canonical spelling: equal configs compare and hash equal).

    Example::

        >>> from kernelkit import Config
        >>> Config(template={"BLOCK": 128, "T": "float32"}, threadgroup=(128,)).describe()
        'BLOCK=128 T=float32 threadgroup=128x1x1'
    """

    template: tuple[tuple[str, TemplateValue], ...] = ()
    threadgroup: tuple[int, int, int] = (256, 1, 1)
    shared_memory: int = 0

    def __init__(
        self,
        template: Mapping[str, TemplateValue] | Iterable[tuple[str, TemplateValue]] = (),
        threadgroup: Sequence[int] = (256, 1, 1),
        shared_memory: int = 0,
    ) -> None:
        # Written out (not the dataclass one) so the types say what it accepts: a dict or pairs,
        # 1 to 3 block dims; the fields hold the canonical, sorted and padded, form.
        object.__setattr__(self, "template", _template(template, "Config"))
        object.__setattr__(self, "threadgroup", _dims3(threadgroup, "Config.threadgroup"))
        object.__setattr__(self, "shared_memory", shared_memory)
        if not isinstance(self.shared_memory, int) or isinstance(self.shared_memory, bool):
            raise ArgumentTypeError(
                f"Config.shared_memory must be an int, got {self.shared_memory!r}"
            )
        if self.shared_memory < 0:
            raise ArgumentError(f"Config.shared_memory must be >= 0, got {self.shared_memory}")

    @property
    def values(self) -> dict[str, TemplateValue]:
        """The template values as a dict."""
        return dict(self.template)

    def to_dict(self) -> dict[str, Any]:
        return {
            "template": [list(t) for t in self.template],
            "threadgroup": list(self.threadgroup),
            "shared_memory": self.shared_memory,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Config:
        if not isinstance(d, dict) or set(d) - {"template", "threadgroup", "shared_memory"}:
            raise ArgumentError(f"not a config record: {d!r}")
        return cls(
            template=[tuple(t) for t in d.get("template", ())],
            threadgroup=d.get("threadgroup", (256, 1, 1)),
            shared_memory=d.get("shared_memory", 0),
        )

    def describe(self) -> str:
        """``BLOCK=128 T=float32 threadgroup=128x1x1 shared=0``: one line for tables and plots."""
        parts = [f"{n}={v}" for n, v in self.template]
        parts.append("threadgroup=" + "x".join(map(str, self.threadgroup)))
        if self.shared_memory:
            parts.append(f"shared={self.shared_memory}")
        return " ".join(parts)


@dataclass(frozen=True)
class KernelChoice:
    """The decision for one problem on one target, and where it came from.

    ``impl`` names the implementation (``"<op>/<name>"``), ``config`` its tuning point, ``grid``
    the launch grid in threads (MLX's convention) its rule gives for this problem, ``source``
    which rule decided (one of ``PROVENANCE``) and ``reason`` why, in words. ``key`` is the
    problem's bucketed key the decision is stored under.
    """

    op: str
    impl: str
    config: Config
    grid: tuple[int, int, int]
    source: Provenance
    key: tuple[tuple[str, str], ...] = ()
    reason: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.source not in PROVENANCE:
            raise ArgumentError(
                f"KernelChoice.source must be one of {PROVENANCE}, got {self.source!r}"
            )
        object.__setattr__(self, "grid", _dims3(self.grid, "KernelChoice.grid"))
        object.__setattr__(self, "key", tuple((str(k), str(v)) for k, v in self.key))

    def with_grid(self, grid: tuple[int, int, int]) -> KernelChoice:
        """The same decision for another problem of its key bucket: only the grid differs.
        Skips validation (everything else was checked when this choice was made)."""
        if grid == self.grid:
            return self
        other = object.__new__(KernelChoice)
        for name in ("op", "impl", "config", "source", "key", "reason"):
            object.__setattr__(other, name, getattr(self, name))
        object.__setattr__(other, "grid", grid)
        return other

    def to_json(self) -> str:
        return json.dumps(
            {
                "op": self.op,
                "impl": self.impl,
                "config": self.config.to_dict(),
                "grid": list(self.grid),
                "source": self.source,
                "key": [list(k) for k in self.key],
                "reason": self.reason,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> KernelChoice:
        d = json.loads(text)
        return cls(
            op=d["op"],
            impl=d["impl"],
            config=Config.from_dict(d["config"]),
            grid=tuple(d["grid"]),
            source=d["source"],
            key=tuple(tuple(k) for k in d.get("key", ())),
            reason=d.get("reason", ""),
        )

    def describe(self) -> str:
        """One line: implementation, config, grid, source and reason."""
        grid = "x".join(map(str, self.grid))
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.impl} [{self.config.describe()}] grid={grid} from {self.source}{why}"
