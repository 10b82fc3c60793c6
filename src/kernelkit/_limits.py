"""Per-thread limits of the launch in progress, set by a call and read by the backends that
honour them (the ground floor: backends import it, it imports nothing of kernelkit)."""

from __future__ import annotations

import threading

__all__ = ["LAUNCH", "TIME_LIMIT_FEATURE"]

TIME_LIMIT_FEATURE = "time_limit"  # in Target.features of a backend that honours LAUNCH.seconds


class _LaunchLimits(threading.local):
    seconds: float = 0.0  # the call's timeout= (0: none)


LAUNCH = _LaunchLimits()
