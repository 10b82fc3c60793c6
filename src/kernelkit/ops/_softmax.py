"""``softmax`` over the last dimension (or any, moved last), fp32 statistics, one read and one
write per element when the row fits in registers."""

from __future__ import annotations

from typing import Any

from .._errors import ArgumentError
from .._integrations import torch_route
from .._select.select import Selection
from . import _rows
from ._common import move_last
from ._rowops import make_row_op

__all__ = ["softmax"]

OP, _RUNNER = make_row_op(
    "softmax",
    ["x"],
    "kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, nr, t, kk_red)",
    _rows.SOFTMAX,
    lambda problem: (("T", problem.arg("x").dtype),),
)


def softmax(x: Any, dim: int = -1, *, out: Any = None) -> Any:
    """``exp(x - max) / sum(exp(x - max))`` along ``dim``, in ``x``'s dtype (float16, bfloat16 or
    float32; statistics in float32), as an array of ``x``'s framework.

    Example::

        >>> import numpy as np
        >>> from kernelkit.ops import softmax
        >>> y = softmax(np.array([[1.0, 2.0, 3.0]], np.float32))
        >>> bool(np.allclose(y, [[0.09003057, 0.24472847, 0.66524096]]))
        True
    """
    if torch_route.wants(x):  # torch.compile, autograd: through torch.ops.kernelkit.softmax
        move_last(x, dim, "softmax")  # the same errors, before tracing
        return torch_route.call("softmax", x, int(dim), out=out)
    return eager_softmax(x, dim, out)


def eager_softmax(x: Any, dim: int, out: Any) -> Any:
    """``softmax`` without the torch op (what the torch op runs)."""
    x, back = move_last(x, dim, "softmax")
    if out is not None and back is not None:
        raise ArgumentError("[softmax] out= is only supported for dim=-1 (the last dimension)")
    y = _RUNNER.run([x], x.dtype, out, {})
    return y if back is None else back(y)


def _explain(x: Any, dim: int = -1) -> Selection:
    """The choice ``softmax(x, dim)`` makes, and why."""
    x, _ = move_last(x, dim, "softmax")
    return _RUNNER.explain([x], x.dtype, None, {})


softmax.explain = _explain  # type: ignore[attr-defined]  # kernelkit.explain(ops.softmax, x)
