"""What a call runs in Python: ``entered(fn)`` gives ``fn()``'s result and the names of the
Python functions it entered (``sys.setprofile``), for tests that a path stays in C."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["entered"]


def entered(fn: Callable[[], Any]) -> tuple[Any, list[str]]:
    """(fn(), the names of the Python functions it entered, in order)."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, names
