"""Compiled-kernel caches: memory, then disk, then read-only bundles, keyed by ``keys.cache_key``."""

from __future__ import annotations

from .memory import cache_stats, clear_memory, compile_cached

__all__ = ["cache_stats", "clear_memory", "compile_cached"]
