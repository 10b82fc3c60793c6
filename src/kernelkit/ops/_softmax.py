"""``softmax`` over the last dimension (or any, moved last), fp32 statistics, one read and one
write per element when the row fits in registers."""

from __future__ import annotations

from typing import Any

from .. import _config
from .._errors import ArgumentError
from .._pipeline.key import MISS
from .._select.select import Selection
from . import _rows
from ._common import move_last, movers
from ._prepared import AD, EAGER_SIGNERS, FORCED, SIGNERS, Recent, routed, signature, store
from ._rows import make_row_op

__all__ = ["softmax"]

OP, _RUNNER = make_row_op(
    "softmax",
    ["x"],
    "kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, nr, t, kk_red)",
    _rows.SOFTMAX,
    lambda problem: (("T", problem.arg("x").dtype),),
)
_TABLE: dict[Any, Any] = {}  # (signature, dim's class, dim, generation, forced) -> run
# the same for the torch op's own calls: a signature kept there was never asked of the
# integrations (it may need autograd), so the public op never looks it up
_EAGER: dict[Any, Any] = {}
# the most recent prepared calls without out=: (check(x), (dim's class, dim, generation,
# forced), run); the class first, so that no other object's == is asked
_RECENT, _RECENT_EAGER = Recent(), Recent()


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
    extras = (dim.__class__, dim, OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _RECENT.calls:
            if kept == extras:
                ys = call([x], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _RECENT.entries:
            if kept == extras and check(x):
                return run([x], None)
    else:
        for check, kept, run in _RECENT.outs:
            if kept == extras and check(x, out):
                return run([x], out)
    sign = SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, out)), *extras)
            run = _TABLE[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if run not in _RECENT.tried:
                _RECENT.again((x,), extras, run, None, out)
            return run([x], out)
    return _first(x, dim, out, True)


def eager_softmax(x: Any, dim: int, out: Any) -> Any:
    """``softmax`` without the integrations (what the torch op runs): the same prepared call."""
    extras = (dim.__class__, dim, OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _RECENT_EAGER.calls:
            if kept == extras:
                ys = call([x], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _RECENT_EAGER.entries:
            if kept == extras and check(x):
                return run([x], None)
    else:
        for check, kept, run in _RECENT_EAGER.outs:
            if kept == extras and check(x, out):
                return run([x], out)
    sign = EAGER_SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, out)), *extras)
            run = _EAGER[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if run not in _RECENT_EAGER.tried:
                _RECENT_EAGER.again((x,), extras, run, None, out)
            return run([x], out)
    return _first(x, dim, out, False)


def _first(x: Any, dim: Any, out: Any, route: bool) -> Any:
    """A call of a new signature: validate, ask the integrations (``route``), run, prepare."""
    moved, back = move_last(x, dim, "softmax")
    if route:
        result = routed("softmax", (x,), (x, int(dim)), out)
        if result is not NotImplemented:
            return result
    if back is not None and out is not None:
        raise ArgumentError("[softmax] out= is only supported for dim=-1 (the last dimension)")
    key = signature((x, out), not route)
    extras = (dim.__class__, dim, OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    y, run = _RUNNER.first([moved], x.dtype, out, {})
    if back is not None:  # another dimension: its rows moved last (a copy), and moved back
        y, run = back(y), _moved(run, *movers(x, int(dim) % len(x.shape)))
    if key is not None:
        store(_TABLE if route else _EAGER, (key, *extras), run)
        if out is None:
            (_RECENT if route else _RECENT_EAGER).remember((x,), extras, run)
    return y


def _moved(run: Any, there: Any, back: Any) -> Any:
    """``run(arrays, out)`` over x's dimension moved last, as a run over x itself (out None)."""

    def run_moved(arrays: Any, out: Any) -> Any:
        return back(run([there(arrays[0])], None))

    return run_moved


def _explain(x: Any, dim: int = -1) -> Selection:
    """The choice ``softmax(x, dim)`` makes, and why."""
    x, _ = move_last(x, dim, "softmax")
    return _RUNNER.explain([x], x.dtype, None, {})


softmax.explain = _explain  # type: ignore[attr-defined]  # kernelkit.explain(ops.softmax, x)
