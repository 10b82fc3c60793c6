"""The one place kernelkit turns its own generated Python into functions: an array adapter's key
(``_arrays``), the plan dictionary's key and guard (``_pipeline.key``), the hot path of a plan
(``_pipeline.launch``), an autotuned kernel's key (``_tune.keyfn``) and a torch op's
implementations (``_integrations.torch_impl``). The text is
always kernelkit's, assembled from checked names and slot numbers, never a user's."""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

__all__ = ["execute"]


@functools.lru_cache(maxsize=512)
def _code(source: str, filename: str) -> CodeType:
    """Generated functions of the same text share one code object (compiling costs ~0.5 ms)."""
    return compile(source, filename, "exec")


def execute(
    source: str, namespace: dict[str, Any], label: str, globals_: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run ``source`` (compiled once per distinct text, named ``<kernelkit label>`` in
    tracebacks) in ``namespace``, and return the namespace with what it defined; ``globals_``:
    the functions it defines read their globals there instead (a table shared by many)."""
    code = _code(source, f"<kernelkit {label}>")
    exec(code, namespace if globals_ is None else globals_, namespace)  # noqa: S102 - kernelkit's own text
    return namespace
