"""An autotuned kernel's stored decisions, repeated in C.

A call served from a decision the autotuner remembered is kept (``keep``) as a *decided* call
repeated in C (``Kernel._decided_call``: a ``kk_launch.Call`` that does not compare the launch
settings, its misses returned as ``MISS``). It checks everything the tuning key reads (array
types, shapes, dtypes and devices; int and bool scalars; output shapes and dtypes; the backend)
and more (strides, every scalar's value), so a later call like it has the same key and the same
decision: it launches with no key computed. A forget (a new decision stored, a full table)
drops them all, and one made from a decision forgotten while it was being made is not kept
(``generation``); the autotuner's own table of decisions is kept the same way (``record``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._pipeline.key import MISS

__all__ = ["DECIDED", "RETRY", "DecidedCalls"]

DECIDED = 4  # decided calls kept per kernel
RETRY = 256  # calls none of them took before another is made (once DECIDED were made)


def _not_decided(*args: Any) -> Any:
    """The end of the decided calls: a call none of them took (the key path takes it)."""
    return MISS


class DecidedCalls:
    """Up to ``DECIDED`` decided calls, the newest first (``head``: tried first; None while
    there are none)."""

    __slots__ = ("calls", "generation", "head", "lock", "made", "missed")

    def __init__(self) -> None:
        self.head: Any = None
        self.calls: list[Any] = []
        self.made = self.missed = 0  # Calls made since the last forget; calls none took
        self.generation = 0  # forgets so far
        self.lock = threading.Lock()

    def wants(self) -> bool:
        """Whether a call served from a stored decision should be kept: the first ``DECIDED``
        such calls, then one after ``RETRY`` calls that none of the kept ones took."""
        return self.made < DECIDED or self.missed >= RETRY

    def keep(self, kernel: Any, args: tuple, generation: int) -> None:
        """Keep the call ``args`` (``CallArgs``' order, its launch settings from a stored
        decision read at ``generation``) of ``kernel`` as the newest decided call, where it
        can be made and no forget came since."""
        call = kernel._decided_call(args, _not_decided)
        with self.lock:
            if generation != self.generation:  # made from a decision forgotten meanwhile
                return
            self.made += 1
            self.missed = 0
            if call is None:
                return
            self.calls = [call, *self.calls[: DECIDED - 1]]
            for node, after in zip(self.calls, [*self.calls[1:], _not_decided]):
                node.next = after
            self.head = call

    def forget(self, also: Callable[[], None] | None = None) -> None:
        """Drop every decided call (their decisions are forgotten); ``also`` (the caller's own
        remembered decisions cleared) runs under the same lock, so no ``record`` meets half a
        forget."""
        with self.lock:
            if also is not None:
                also()
            self.head = None
            self.calls = []
            self.made = self.missed = 0
            self.generation += 1

    def record(self, generation: int, store: Callable[[], None]) -> None:
        """Run ``store`` (a decision made from what was known at ``generation`` remembered)
        unless a forget came since: a decision replaced meanwhile is not remembered."""
        with self.lock:
            if generation == self.generation:
                store()
