"""Forcing a choice, for debugging and benchmarks: ``kernelkit.force(...)`` in code (defined in
``kernelkit._choices``; it sets ``FORCED``), or ``KERNELKIT_SELECT_FORCE`` for a whole process.
A forced choice beats every other rule, and one that cannot run the problem is an error (never
silently replaced)."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from .. import _config
from .._errors import ArgumentError
from .records import Config
from .select import Override

__all__ = ["FORCED", "config_of", "forced", "parse_force"]

FORCED: contextvars.ContextVar[tuple[tuple[str, Override], ...]] = contextvars.ContextVar(
    "kernelkit_forced", default=()
)
_env_cache: dict[str, dict[str, Override]] = {}


def config_of(config: Any, where: str) -> Config | None:
    """A ``Config`` from a ``Config`` or a dict of template values, ``threadgroup`` and
    ``shared_memory`` (None stays None); ArgumentError naming ``where`` otherwise."""
    if config is None or isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        values = dict(config)
        threadgroup = values.pop("threadgroup", (256, 1, 1))
        shared = values.pop("shared_memory", 0)
        return Config(template=tuple(values.items()), threadgroup=threadgroup, shared_memory=shared)
    raise ArgumentError(f"[{where}] config must be a Config or a dict, got {config!r}")


def parse_force(text: str) -> dict[str, Override]:
    """``KERNELKIT_SELECT_FORCE`` text -> {op: Override}; ArgumentError naming a bad entry."""
    out: dict[str, Override] = {}
    for entry in filter(None, (e.strip() for e in text.split(";"))):
        op, sep, rest = entry.partition("=")
        impl, _, params = rest.partition(":")
        if not sep or not op.strip() or not impl.strip():
            raise ArgumentError(
                f"[KERNELKIT_SELECT_FORCE] {entry!r} is not 'op=impl[:NAME=VALUE,...]'"
            )
        values: dict[str, Any] = {}
        for item in filter(None, (p.strip() for p in params.split(","))):
            name, eq, value = item.partition("=")
            if not eq:
                raise ArgumentError(
                    f"[KERNELKIT_SELECT_FORCE] {item!r} in {entry!r} is not NAME=VALUE"
                )
            values[name.strip()] = _value(name.strip(), value.strip())
        config = config_of(values, "KERNELKIT_SELECT_FORCE") if values else None
        out[op.strip()] = Override(impl.strip(), config, "KERNELKIT_SELECT_FORCE")
    return out


def _value(name: str, text: str) -> Any:
    if name == "threadgroup":
        return tuple(int(v) for v in text.lower().split("x"))
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text  # a dtype name


def forced(op_name: str) -> Override | None:
    """The override in force for ``op_name``: the innermost ``force`` block, else the
    environment variable, else None."""
    for name, override in reversed(FORCED.get()):
        if name == op_name:
            return override
    text = _config.config.select_force
    if not text:
        return None
    table = _env_cache.get(text)
    if table is None:
        table = _env_cache[text] = parse_force(text)
    return table.get(op_name)
