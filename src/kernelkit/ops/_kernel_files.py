"""The built-in ops' C++, read from the package: ``ops/<family>/kernels/<name>.cuh``.

A kernel's text is the files it names, joined in the order named, byte for byte (no newline
translation, no stripping), so the compiled source and its cache key stay what the files say
(``tests/unit/test_ops_kernel_sources.py`` pins them). Read once per process.
"""

from __future__ import annotations

import functools
import re
from importlib.resources import files

__all__ = ["source"]

_NAME = re.compile(r"[a-z][a-z0-9_]*")


@functools.cache
def _read(family: str, name: str) -> str:
    """One file's text; a name that is not a plain identifier is refused (no paths)."""
    for part in (family, name):
        if not _NAME.fullmatch(part):
            raise ValueError(f"[ops] kernel file part must be a lower-case name, got {part!r}")
    path = files("kernelkit.ops") / family / "kernels" / f"{name}.cuh"
    return path.read_bytes().decode("utf-8")


def source(family: str, *names: str) -> str:
    """The text of ``family``'s kernel files ``names``, joined in that order."""
    return "".join(_read(family, n) for n in names)
