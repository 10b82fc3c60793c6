"""Inspecting and forcing choices: ``kernelkit.explain`` returns the selection a call gets (an
autotuned kernel's, a built-in op's), printing it only when asked; ``kernelkit.force`` overrides
it within a ``with`` block, for debugging and benchmarks (``_select.override`` is the mechanism)."""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ._errors import ArgumentError
from ._select.override import FORCED, config_of
from ._select.records import Config
from ._select.select import Override, Selection

__all__ = ["explain", "force"]


def explain(obj: Any, *args: Any, print: bool = False, **kwargs: Any) -> Any:
    """Return what ``obj.explain(*args, **kwargs)`` gives: for an autotuned kernel or a built-in
    op, the ``Selection`` a call with these arguments gets (the choice, its source, every rule
    and candidate considered), without running anything. ``print=True`` also prints its report
    (as ``kernelkit explain`` does). A ``Selection`` itself is returned as it is.

    Example::

        >>> import numpy as np, kernelkit
        >>> k = kernelkit.kernel("inc", ["x"], ["y"], "uint i = blockIdx.x * blockDim.x"
        ...     " + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] + 1;")
        >>> inc = kernelkit.autotune(k, configs=[{"threadgroup": (64,)}], grid="x")
        >>> x = np.zeros(10, np.float32)
        >>> sel = kernelkit.explain(inc, [x], output_shapes=[x.shape], output_dtypes=[x.dtype])
        >>> sel.choice.impl
        'inc/generic'
        >>> _ = kernelkit.explain(sel, print=True)  # doctest: +ELLIPSIS
        inc: inc/generic [threadgroup=64x1x1] grid=10x1x1 from ...
    """
    found = obj if isinstance(obj, Selection) else obj.explain(*args, **kwargs)
    if print:
        builtins.print(found.explain() if hasattr(found, "explain") else found)  # noqa: T201 - print=True asks for it
    return found


@contextmanager
def force(op: Any, impl: str, config: Config | Mapping[str, Any] | None = None) -> Iterator[None]:
    """Within the ``with`` block (this thread or task), ``op`` runs ``impl`` with ``config``
    (default: the config the implementation's heuristic gives the problem, else its default
    config).

    Example::

        >>> import kernelkit
        >>> with kernelkit.force("matmul", "tiled", {"BLOCK_M": 64, "threadgroup": (128,)}):
        ...     pass  # every matmul in here runs matmul/tiled with BLOCK_M=64
    """
    name = op if isinstance(op, str) else getattr(op, "name", None)
    if not isinstance(name, str) or not isinstance(impl, str):
        raise ArgumentError("[force] needs an op (or its name) and an implementation name")
    entry = (name, Override(impl, config_of(config, "force"), "kernelkit.force"))
    token = FORCED.set((*FORCED.get(), entry))
    try:
        yield
    finally:
        FORCED.reset(token)
