"""Compiled-kernel caches: memory, then disk, then read-only bundles (keys in ``keys.py``)."""

from __future__ import annotations

from .bundles import add_bundle
from .lookup import compile_cached, recompile_refused
from .memory import clear_memory
from .stats import cache_stats

__all__ = ["add_bundle", "cache_stats", "clear_memory", "compile_cached", "recompile_refused"]
