"""A sequential host "device" for kernelkit, built only on the public ``kernelkit.backend``."""

from __future__ import annotations

from ._backend import SimBackend

__all__ = ["SimBackend"]
