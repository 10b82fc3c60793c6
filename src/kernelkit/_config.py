"""Every KERNELKIT_* environment variable, declared once with type, default and help.

Read once at import (no device access, no I/O beyond the environment) and never on the hot path.
Tests may call ``reload()`` after changing the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any


def _bool(text: str) -> bool:
    return text.strip().lower() not in ("", "0", "false", "no", "off")


def _names(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


TUNE_MODES = ("auto", "serve", "off")


def _tune_mode(text: str) -> str:
    mode = text.strip().lower() or "auto"
    if mode not in TUNE_MODES:
        raise ValueError(f"expected one of {', '.join(TUNE_MODES)}")
    return mode


@dataclass(frozen=True)
class Var:
    """One environment variable: its name, parser, default and help line."""

    name: str
    parse: object
    default: object
    help: str


VARS: tuple[Var, ...] = (
    Var(
        "KERNELKIT_BACKENDS",
        _names,
        (),
        "comma list of backends to load; '-name' excludes one; empty loads every installed one",
    ),
    Var(
        "KERNELKIT_BACKENDS_STRICT",
        _bool,
        False,
        "a backend plugin that fails to load raises instead of warning",
    ),
    Var(
        "KERNELKIT_CPU_CHECK",
        _bool,
        False,
        "CPU backend: bounds-check every array access and report divergent barriers",
    ),
    Var("KERNELKIT_CPU_THREADS", int, 0, "CPU backend: worker threads (0: one per core)"),
    Var(
        "KERNELKIT_CXX",
        str,
        "",
        "CPU backend: C++ compiler to use (default: $CXX, then g++, clang++)",
    ),
    Var(
        "KERNELKIT_PRELOAD",
        _bool,
        True,
        "import the installed CUDA backend's Python modules (cuda-bindings) at `import kernelkit`, "
        "without touching a device, so that the first kernel call does not pay for them; 0 defers "
        "the import to the first call on a CUDA array (and torch's array adapter, set up at "
        "`import kernelkit` when torch is already imported, to the first call on a tensor)",
    ),
    Var("KERNELKIT_CACHE", _bool, True, "0 keeps compiled kernels in memory only"),
    Var("KERNELKIT_CACHE_DIR", str, "", "disk cache directory (default: the user cache directory)"),
    Var(
        "KERNELKIT_CACHE_MAX_BYTES",
        int,
        2 << 30,
        "disk cache size cap; least recently used go first",
    ),
    Var(
        "KERNELKIT_CACHE_TRUST_SHARED",
        _bool,
        False,
        "use a cache directory or entry owned by another user or writable by others (with a "
        "warning): whoever can write it can run code in this process",
    ),
    Var(
        "KERNELKIT_BUNDLE_PATH", _names, (), "precompiled bundles (.kkb) consulted before compiling"
    ),
    Var("KERNELKIT_VERBOSE", _bool, False, "print every generated source before it is compiled"),
    Var(
        "KERNELKIT_TUNE",
        _tune_mode,
        "auto",
        "tuning database: auto (tune a missing key on first use), serve (replay it, never time "
        "anything), off (ignore it)",
    ),
    Var(
        "KERNELKIT_SELECT_FORCE",
        str,
        "",
        "force choices: 'op=impl[:NAME=VALUE,threadgroup=128x1x1,shared_memory=N];op2=...'",
    ),
    Var(
        "KERNELKIT_NATIVE_LAUNCH",
        _bool,
        True,
        "CUDA: launch through a small C extension built once into the disk cache with the system "
        "C compiler (about 1 µs less a call than through cuda-bindings); 0 uses cuda-bindings",
    ),
)


@dataclass(frozen=True)
class Config:
    """The parsed configuration; one instance, ``kernelkit._config.config``."""

    backends: tuple[str, ...]
    backends_strict: bool
    cpu_check: bool
    cpu_threads: int
    cxx: str
    preload: bool
    cache: bool
    cache_dir: str
    cache_max_bytes: int
    cache_trust_shared: bool
    bundle_path: tuple[str, ...]
    verbose: bool
    tune: str  # one of TUNE_MODES
    select_force: str
    native_launch: bool


def _read() -> Config:
    values: dict[str, Any] = {}
    for var, field in zip(VARS, fields(Config)):
        raw = os.environ.get(var.name)
        if raw is None:
            values[field.name] = var.default
            continue
        try:
            values[field.name] = var.parse(raw)  # type: ignore[operator]
        except ValueError as e:
            raise ValueError(f"[config] {var.name}={raw!r} is not valid: {e}") from None
    return Config(**values)


config: Config = _read()


def reload() -> Config:
    """Re-read the environment (for tests and long-lived processes that change it)."""
    global config
    config = _read()
    return config
