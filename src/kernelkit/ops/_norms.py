"""``rms_norm`` and ``layer_norm`` over the last dimension, fp32 statistics, one read and one
write of ``x`` when the row fits in registers."""

from __future__ import annotations

import math
import numbers
from typing import Any

from .._errors import ArgumentError
from .._integrations import torch_route
from .._select.select import Selection
from . import _rows
from ._common import float_array, signature_of
from ._rowops import make_row_op

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
    if not value >= 0 or math.isinf(value) and not math.isinf(eps):
        raise ArgumentError(f"[{name}] eps must be a non-negative float, got {eps!r}")
    return value


_CHECKED: set[Any] = set()  # argument signatures that passed _check


def _checked(name: str, x: Any, params: dict[str, Any], eps: Any, out: Any) -> tuple[Any, Any]:
    """(eps as a float, the arguments' signature for the runner, or None): ``_check`` once per
    signature of x, the parameters and ``out``; a float ``eps`` is checked on every call."""
    try:
        sig = (signature_of(x), *[signature_of(p) for p in params.values()],
               None if out is None else signature_of(out))  # fmt: skip
        known = sig in _CHECKED
    except TypeError:  # unhashable: _check names what is wrong
        sig, known = None, False
    if known and eps.__class__ is float and eps >= 0:
        return eps, sig
    eps = _check(name, x, params, eps)
    if sig is not None:
        if len(_CHECKED) > 4096:
            _CHECKED.clear()
        _CHECKED.add(sig)
    return eps, sig


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
    if torch_route.wants(x, weight):  # torch.compile, autograd: torch.ops.kernelkit.rms_norm
        # checked without the signature cache: hashing shapes would specialize them while
        # torch.compile traces
        eps = _check("rms_norm", x, {"weight": weight}, eps)
        return torch_route.call("rms_norm", x, weight, eps, out=out)
    eps, sig = _checked("rms_norm", x, {"weight": weight}, eps, out)
    return _RMS.run([x, weight, eps], x.dtype, out, {}, sig)


def eager_rms_norm(x: Any, weight: Any, eps: float, out: Any) -> Any:
    """``rms_norm`` without the torch op (what the torch op runs)."""
    return _RMS.run([x, weight, eps], x.dtype, out, {})


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, out: Any = None) -> Any:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension (biased
    variance, as torch), in ``x``'s dtype; statistics in float32."""
    if torch_route.wants(x, weight, bias):  # torch.compile, autograd: the torch op
        eps = _check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
        return torch_route.call("layer_norm", x, weight, bias, eps, out=out)
    eps, sig = _checked("layer_norm", x, {"weight": weight, "bias": bias}, eps, out)
    return _LAYER.run([x, weight, bias, eps], x.dtype, out, {}, sig)


def eager_layer_norm(x: Any, weight: Any, bias: Any, eps: float, out: Any) -> Any:
    """``layer_norm`` without the torch op (what the torch op runs)."""
    return _LAYER.run([x, weight, bias, eps], x.dtype, out, {})


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
