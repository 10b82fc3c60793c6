"""kernelkit's built-in ops as torch ops (``torch.ops.kernelkit.softmax`` and friends), defined
when this module is first imported: by ``kernelkit.ops`` when a torch tensor needs them
(``torch_route``), never at kernelkit's import.

Each op's implementation is the op's own eager path; its fake implementation gives the output's
shape, dtype and strides; its gradient is written with torch ops (float32 arithmetic, cast back),
so ``torch.compile`` traces forward and backward without a graph break.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .._errors import ArgumentError
from ..ops import _matmul, _matmul_args, _norms, _softmax
from ..ops._common import move_last
from .torch_grad import requires_grad
from .torch_op import OpSchema, TorchOp, checked, define
from .torch_vjp import custom_vjp

__all__ = ["OPS", "TRACED", "call"]

F32 = torch.float32


def _op(
    name: str,
    params: tuple[tuple[str, str], ...],
    run: Callable[..., Any],
    fake: Callable[..., Any],
) -> TorchOp:
    """Define ``kernelkit::name``; ``run(*args, out)`` is the eager op (out None: allocate)."""

    def impl(*args: Any) -> Any:
        return run(*args, None)

    def impl_out(*args: Any) -> None:
        run(*args[:-1], args[-1])

    schema = OpSchema(f"kernelkit::{name}", params, ("y",))
    return define(schema, lambda op: checked(op, impl, impl_out), fake)


def _softmax_fake(x: Any, dim: int) -> Any:
    moved = x.movedim(dim, -1)
    return torch.empty(moved.shape, dtype=x.dtype, device=x.device).movedim(-1, dim)


def _softmax_grad(y: Any, grad_y: Any, dim: int) -> dict[str, Any]:
    y32, g32 = y.to(F32), grad_y.to(F32)
    gx = y32 * (g32 - (g32 * y32).sum(dim, keepdim=True))
    return {"grad_x": gx.to(y.dtype)}


def _rows_fake(x: Any, *_: Any) -> Any:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _norm_grad(x: Any, weight: Any, grad_y: Any, eps: float, bias: Any = None) -> dict:
    """Gradients of (x - mean) * rstd * w (+ b) over the last dimension; rms_norm: mean 0."""
    x32, w32, g32 = x.to(F32), weight.to(F32), grad_y.to(F32)
    center = bias is not None
    mean = x32.mean(-1, keepdim=True) if center else torch.zeros_like(x32[..., :1])
    xc = x32 - mean
    rstd = torch.rsqrt((xc * xc).mean(-1, keepdim=True) + eps)
    xhat = xc * rstd
    gw = g32 * w32
    gx = gw - xhat * (gw * xhat).mean(-1, keepdim=True)
    if center:
        gx = gx - gw.mean(-1, keepdim=True)
    rows = tuple(range(x.dim() - 1))
    grads = {
        "grad_x": (rstd * gx).to(x.dtype),
        "grad_weight": (g32 * xhat).sum(rows).to(weight.dtype),
    }
    if center:
        grads["grad_bias"] = g32.sum(rows).to(bias.dtype)
    return grads


def _rms_grad(x: Any, weight: Any, eps: float, grad_y: Any) -> dict:
    return _norm_grad(x, weight, grad_y, eps)


def _layer_grad(x: Any, weight: Any, bias: Any, eps: float, grad_y: Any) -> dict:
    return _norm_grad(x, weight, grad_y, eps, bias)


def _matmul_fake(a: Any, b: Any, bias: Any, activation: Any, transpose_b: bool) -> Any:  # noqa: ARG001  the op's signature
    n = b.shape[0] if transpose_b else b.shape[1]
    return torch.empty((*a.shape[:-1], n), dtype=a.dtype, device=a.device)


def _matmul_grad(
    a: Any, b: Any, bias: Any, activation: Any, transpose_b: bool, grad_y: Any
) -> dict:
    """Recomputes the pre-activation (not saved by the forward op) when there is an activation."""
    a32, b32, g32 = a.to(F32), b.to(F32), grad_y.to(F32)
    w = b32.t() if transpose_b else b32  # [K, N]
    if activation is not None:
        z = a32 @ w + (bias.to(F32) if bias is not None else 0.0)
        if activation == "relu":
            g32 = g32 * (z > 0)
        elif activation == "silu":
            s = torch.sigmoid(z)
            g32 = g32 * (s * (1 + z * (1 - s)))
        else:  # gelu (erf)
            phi = torch.exp(-0.5 * z * z) * 0.3989422804014327
            g32 = g32 * (0.5 * (1 + torch.erf(z * 0.7071067811865476)) + z * phi)
    # explicit row counts: reshape(-1, 0) cannot infer rows when K or N is 0
    rows = a32.numel() // a.shape[-1] if a.shape[-1] else math.prod(a.shape[:-1])
    flat_a, flat_g = a32.reshape(rows, a.shape[-1]), g32.reshape(rows, g32.shape[-1])
    gw = flat_a.t() @ flat_g  # [K, N]
    grads = {
        "grad_a": (g32 @ w.t()).to(a.dtype),
        "grad_b": (gw.t() if transpose_b else gw).to(b.dtype),
    }
    if bias is not None:
        grads["grad_bias"] = flat_g.sum(0).to(bias.dtype)
    return grads


def _define_all() -> dict[str, TorchOp]:
    ops = {
        "softmax": custom_vjp(
            _op(
                "softmax",
                (("x", "Tensor"), ("dim", "int")),
                _softmax.eager_softmax,
                _softmax_fake,
            ),
            _softmax_grad,
        ),
        "rms_norm": custom_vjp(
            _op(
                "rms_norm",
                (("x", "Tensor"), ("weight", "Tensor"), ("eps", "float")),
                _norms.eager_rms_norm,
                _rows_fake,
            ),
            _rms_grad,
        ),
        "layer_norm": custom_vjp(
            _op(
                "layer_norm",
                (("x", "Tensor"), ("weight", "Tensor"), ("bias", "Tensor"), ("eps", "float")),
                _norms.eager_layer_norm,
                _rows_fake,
            ),
            _layer_grad,
        ),
        "matmul": custom_vjp(
            _op(
                "matmul",
                (
                    ("a", "Tensor"),
                    ("b", "Tensor"),
                    ("bias", "Tensor?"),
                    ("activation", "str?"),
                    ("transpose_b", "bool"),
                ),
                _matmul.eager_matmul,
                _matmul_fake,
            ),
            _matmul_grad,
        ),
    }
    return ops


OPS = _define_all()


# What torch.compile traces in place of each public op's body (validation, then the torch op),
# so that Dynamo never reaches the ops' prepared eager calls.
def _softmax_traced(x: Any, dim: int = -1, *, out: Any = None) -> Any:
    move_last(x, dim, "softmax")
    return call("softmax", x, int(dim), out=out)


def _rms_norm_traced(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None) -> Any:
    eps = _norms._check("rms_norm", x, {"weight": weight}, eps)
    return call("rms_norm", x, weight, eps, out=out)


def _layer_norm_traced(
    x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, out: Any = None
) -> Any:
    eps = _norms._check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
    return call("layer_norm", x, weight, bias, eps, out=out)


def _matmul_traced(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    transpose_b: bool = False,
    out: Any = None,
) -> Any:
    _matmul_args.prepare(a, b, bias, activation, transpose_b)
    return call("matmul", a, b, bias, activation, transpose_b, out=out)


def call(name: str, *args: Any, out: Any = None) -> Any:
    """Run built-in op ``name`` through its torch op (defined on first use). Like torch's
    own ops, an ``out=`` call refuses inputs that need a gradient (its result has none)."""
    if out is not None and requires_grad(torch, args):
        raise ArgumentError(
            f"[{name}] out= does not take part in autograd, and an input requires grad: "
            "call without out= (or under torch.no_grad())"
        )
    return OPS[name](*args, out=out)


def _substitute() -> bool:
    """Register the traced versions with Dynamo; False where this torch cannot."""
    try:
        from torch._dynamo.decorators import substitute_in_graph
    except ImportError:
        return False

    pairs = (
        (_softmax.softmax, _softmax_traced),
        (_norms.rms_norm, _rms_norm_traced),
        (_norms.layer_norm, _layer_norm_traced),
        (_matmul.matmul, _matmul_traced),
    )
    try:
        for original, traced in pairs:
            substitute_in_graph(original, skip_signature_check=True)(traced)
    except Exception:  # noqa: BLE001 - an older Dynamo: the ops' bodies route while tracing
        return False
    return True


TRACED = _substitute()
