"""``rms_norm`` and ``layer_norm`` over the last dimension, fp32 statistics, one read and one
write of ``x`` when the row fits in registers."""

from __future__ import annotations

import math
import numbers
from typing import Any

from .. import _config
from .._errors import ArgumentError
from .._pipeline.key import MISS
from .._select.select import Selection
from . import _rows
from ._common import float_array
from ._prepared import AD, EAGER_SIGNERS, FORCED, SIGNERS, Recent, routed, signature, store
from ._rows import make_row_op

__all__ = ["layer_norm", "rms_norm"]

RMS_OP, _RMS = make_row_op(
    "rms_norm",
    ["x", "w", "eps"],
    "kk_norm_row<T, WT, BLOCK, ITEMS, VECTOR, false>(xr, yr, nr, t, kk_red, w, w, eps)",
    _rows.NORM,
    lambda p: (("T", p.arg("x").dtype), ("WT", p.arg("w").dtype)),
    aligned=("w",),
    names=("x", "weight", "eps"),
)
LAYER_OP, _LAYER = make_row_op(
    "layer_norm",
    ["x", "w", "b", "eps"],
    "kk_norm_row<T, WT, BLOCK, ITEMS, VECTOR, true>(xr, yr, nr, t, kk_red, w, b, eps)",
    _rows.NORM,
    lambda p: (("T", p.arg("x").dtype), ("WT", p.arg("w").dtype)),
    aligned=("w", "b"),
    names=("x", "weight", "bias", "eps"),
)


def _check(name: str, x: Any, params: dict[str, Any], eps: Any) -> float:
    for what, a in (("x", x), *params.items()):
        float_array(a, name, what)
    if len(x.shape) == 0:
        raise ArgumentError(f"[{name}] x must have at least one dimension, got a 0-d array")
    n = x.shape[-1]
    for pname, p in params.items():
        if tuple(p.shape) != (n,):
            raise ArgumentError(
                f"[{name}] {pname} must have shape ({n},) (x's last dimension), "
                f"got {tuple(p.shape)}"
            )
    dtypes = {str(p.dtype) for p in params.values()}
    if len(dtypes) > 1:
        raise ArgumentError(f"[{name}] weight and bias must have one dtype, got {sorted(dtypes)}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise ArgumentError(f"[{name}] eps must be a non-negative float, got {eps!r}")
    try:
        value = float(eps)
    except (OverflowError, ValueError):
        value = math.nan
    if not value >= 0 or (math.isinf(value) and not math.isinf(eps)):
        raise ArgumentError(f"[{name}] eps must be a non-negative float, got {eps!r}")
    return value


_RMS_TABLE: dict[Any, Any] = {}  # (signature, eps's class, generation, forced) -> run
_LAYER_TABLE: dict[Any, Any] = {}
# the same for the torch ops' own calls: a signature kept there was never asked of the
# integrations (it may need autograd), so the public ops never look it up
_RMS_EAGER: dict[Any, Any] = {}
_LAYER_EAGER: dict[Any, Any] = {}
# the most recent prepared calls without out= beside each table: (check(x, weight[, bias]),
# (eps's class, generation, forced), run)
_RMS_RECENT, _LAYER_RECENT = Recent(), Recent()
_RMS_RECENT_EAGER, _LAYER_RECENT_EAGER = Recent(), Recent()


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None) -> Any:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` over the last dimension, in ``x``'s dtype
    (float16, bfloat16 or float32; statistics in float32).

    Example::

        >>> import numpy as np
        >>> from kernelkit.ops import rms_norm
        >>> x = np.array([[3.0, 4.0]], np.float32)
        >>> bool(np.allclose(rms_norm(x, np.ones(2, np.float32), eps=0.0), x / np.sqrt(12.5)))
        True
    """
    extras = (eps.__class__, RMS_OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _RMS_RECENT.calls:
            if kept == extras:
                ys = call([x, weight, eps], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _RMS_RECENT.entries:
            # eps >= 0 last: a float there (its class is kept)
            if kept == extras and check(x, weight) and eps >= 0:
                return run([x, weight, eps], None)
    else:
        for check, kept, run in _RMS_RECENT.outs:
            if kept == extras and check(x, weight, out) and eps >= 0:
                return run([x, weight, eps], out)
    sign = SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, weight, out)), *extras)
            run = _RMS_TABLE[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if eps >= 0:  # a float (only those are kept), neither negative nor NaN
                if run not in _RMS_RECENT.tried:
                    _RMS_RECENT.again((x, weight), extras, run, None, out)
                return run([x, weight, eps], out)
    return _first(_RMS, _RMS_TABLE, _RMS_RECENT, x, {"weight": weight}, eps, out, True)


def eager_rms_norm(x: Any, weight: Any, eps: float, out: Any) -> Any:
    """``rms_norm`` without the integrations (what the torch op runs): the same prepared call."""
    extras = (eps.__class__, RMS_OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _RMS_RECENT_EAGER.calls:
            if kept == extras:
                ys = call([x, weight, eps], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _RMS_RECENT_EAGER.entries:
            # eps >= 0 last: a float there (its class is kept)
            if kept == extras and check(x, weight) and eps >= 0:
                return run([x, weight, eps], None)
    else:
        for check, kept, run in _RMS_RECENT_EAGER.outs:
            if kept == extras and check(x, weight, out) and eps >= 0:
                return run([x, weight, eps], out)
    sign = EAGER_SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, weight, out)), *extras)
            run = _RMS_EAGER[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if eps >= 0:  # a float (only those are kept), neither negative nor NaN
                if run not in _RMS_RECENT_EAGER.tried:
                    _RMS_RECENT_EAGER.again((x, weight), extras, run, None, out)
                return run([x, weight, eps], out)
    return _first(_RMS, _RMS_EAGER, _RMS_RECENT_EAGER, x, {"weight": weight}, eps, out, False)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, out: Any = None) -> Any:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (biased
    variance, as torch), in ``x``'s dtype; statistics in float32."""
    extras = (eps.__class__, LAYER_OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _LAYER_RECENT.calls:
            if kept == extras:
                ys = call([x, weight, bias, eps], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _LAYER_RECENT.entries:
            # eps >= 0 last: a float there (its class is kept)
            if kept == extras and check(x, weight, bias) and eps >= 0:
                return run([x, weight, bias, eps], None)
    else:
        for check, kept, run in _LAYER_RECENT.outs:
            if kept == extras and check(x, weight, bias, out) and eps >= 0:
                return run([x, weight, bias, eps], out)
    sign = SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, weight, bias, out)), *extras)
            run = _LAYER_TABLE[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if eps >= 0:  # a float (only those are kept), neither negative nor NaN
                if run not in _LAYER_RECENT.tried:
                    _LAYER_RECENT.again((x, weight, bias), extras, run, None, out)
                return run([x, weight, bias, eps], out)
    return _first(
        _LAYER, _LAYER_TABLE, _LAYER_RECENT, x, {"weight": weight, "bias": bias}, eps, out, True
    )


def eager_layer_norm(x: Any, weight: Any, bias: Any, eps: float, out: Any) -> Any:
    """``layer_norm`` without the integrations (what the torch op runs): the same prepared
    call."""
    extras = (eps.__class__, LAYER_OP.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    if out is None:
        for call, kept, rest in _LAYER_RECENT_EAGER.calls:
            if kept == extras:
                ys = call([x, weight, bias, eps], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, run in _LAYER_RECENT_EAGER.entries:
            # eps >= 0 last: a float there (its class is kept)
            if kept == extras and check(x, weight, bias) and eps >= 0:
                return run([x, weight, bias, eps], None)
    else:
        for check, kept, run in _LAYER_RECENT_EAGER.outs:
            if kept == extras and check(x, weight, bias, out) and eps >= 0:
                return run([x, weight, bias, eps], out)
    sign = EAGER_SIGNERS.get(x.__class__)
    if sign is not None:
        try:
            key = (sign((x, weight, bias, out)), *extras)
            run = _LAYER_EAGER[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if eps >= 0:  # a float (only those are kept), neither negative nor NaN
                if run not in _LAYER_RECENT_EAGER.tried:
                    _LAYER_RECENT_EAGER.again((x, weight, bias), extras, run, None, out)
                return run([x, weight, bias, eps], out)
    return _first(
        _LAYER,
        _LAYER_EAGER,
        _LAYER_RECENT_EAGER,
        x,
        {"weight": weight, "bias": bias},
        eps,
        out,
        False,
    )


def _first(
    runner: Any,
    table: dict,
    recent: Recent,
    x: Any,
    params: dict[str, Any],
    eps: Any,
    out: Any,
    route: bool,
) -> Any:
    """A call of a new signature: validate, ask the integrations (``route``), run, prepare."""
    name = runner.op.name
    value = _check(name, x, params, eps)
    if route:
        result = routed(name, (x, *params.values()), (x, *params.values(), value), out)
        if result is not NotImplemented:
            return result
    key = signature((x, *params.values(), out), not route)
    extras = (eps.__class__, runner.op.generation, FORCED.get(),
              _config.config.select_force, AD.module._current_level)  # fmt: skip
    y, run = runner.first([x, *params.values(), value], x.dtype, out, {})
    if key is not None and eps.__class__ is float:  # the fast path checks eps >= 0
        store(table, (key, *extras), run)
        if out is None:
            recent.remember((x, *params.values()), extras, run)
    return y


def _explain_rms_norm(x: Any, weight: Any, eps: float = 1e-6) -> Selection:
    """The choice ``rms_norm(x, weight, eps)`` makes, and why."""
    eps = _check("rms_norm", x, {"weight": weight}, eps)
    return _RMS.explain([x, weight, eps], x.dtype, None, {})


def _explain_layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Selection:
    """The choice ``layer_norm(x, weight, bias, eps)`` makes, and why."""
    eps = _check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
    return _LAYER.explain([x, weight, bias, eps], x.dtype, None, {})


rms_norm.explain = _explain_rms_norm  # type: ignore[attr-defined]  # kernelkit.explain(op, ...)
layer_norm.explain = _explain_layer_norm  # type: ignore[attr-defined]
