"""``kernelkit.explain``: the selection a call gets, for anything that can tell it (an autotuned
kernel, a built-in op), returned as a record and printed only when asked."""

from __future__ import annotations

import builtins
from typing import Any

from ._select.select import Selection

__all__ = ["explain"]


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
