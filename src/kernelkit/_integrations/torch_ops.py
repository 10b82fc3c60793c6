"""kernelkit's built-in ops as torch ops (``torch.ops.kernelkit.softmax`` and friends), defined
when this module is first imported: by ``kernelkit.ops`` when a torch tensor needs them
(``torch_route``), never at kernelkit's import.

Each op's implementation is the op's own eager path; its fake implementation gives the output's
shape, dtype and strides; its gradient is written with torch ops (float32 arithmetic, cast back),
so ``torch.compile`` traces forward and backward without a graph break.

Each op has an inference twin, ``kernelkit::<name>_inference``: the same implementation with no
autograd registration, which refuses inputs that need a gradient. A compiled graph that needs no
gradient calls it (``torch_traced``): torch's Python autograd layer around a ``register_autograd``
op runs on every call even where no gradient is needed: 12-16 µs a call of the op, 11-25 µs a
call of a compiled one-op graph, on CPU tensors (a loaded 2-core VM;
``benchmarks/compiled_op_cost.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .. import _arrays
from ..ops import _matmul, _matmul_args, _norms, _softmax
from ..ops._common import float_array, move_last
from . import torch_inductor
from .torch_grad import torch_signer
from .torch_op import OpSchema, TorchOp, checked, define
from .torch_vjp import custom_vjp

__all__ = ["EAGER", "INFERENCE", "OPS"]

F32 = torch.float32


def _op(
    name: str,
    params: tuple[tuple[str, str], ...],
    run: Callable[..., Any],
    fake: Callable[..., Any],
) -> TorchOp:
    """Define ``kernelkit::name``; ``run(*args, out)`` is the eager op (out None: allocate)."""
    schema = OpSchema(f"kernelkit::{name}", params, ("y",))
    return define(schema, lambda op: checked(op, run), fake)


# The fake implementations also check the arguments as the eager ops do (ArgumentError naming
# what is wrong): they run while a graph is traced, and Dynamo guards on nothing they read, so a
# compiled call re-checks nothing (``torch_traced``).


def _softmax_fake(x: Any, dim: int) -> Any:
    float_array(x, "softmax", "x")
    moved, back = move_last(x, dim, "softmax")
    y = torch.empty(moved.shape, dtype=x.dtype, device=x.device)
    return y if back is None else back(y)


def _softmax_grad(y: Any, grad_y: Any, dim: int) -> dict[str, Any]:
    y32, g32 = y.to(F32), grad_y.to(F32)
    gx = y32 * (g32 - (g32 * y32).sum(dim, keepdim=True))
    return {"grad_x": gx.to(y.dtype)}


def _rms_fake(x: Any, weight: Any, eps: float) -> Any:
    _norms._check("rms_norm", x, {"weight": weight}, eps)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _layer_fake(x: Any, weight: Any, bias: Any, eps: float) -> Any:
    _norms._check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
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


def _matmul_fake(a: Any, b: Any, bias: Any, activation: Any, transpose_b: bool) -> Any:
    _matmul_args.prepare(a, b, bias, activation, transpose_b)
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


_SCHEMAS: dict[str, tuple[tuple[tuple[str, str], ...], Callable[..., Any], Callable[..., Any]]] = {
    "softmax": ((("x", "Tensor"), ("dim", "int")), _softmax.eager_softmax, _softmax_fake),
    "rms_norm": (
        (("x", "Tensor"), ("weight", "Tensor"), ("eps", "float")),
        _norms.eager_rms_norm,
        _rms_fake,
    ),
    "layer_norm": (
        (("x", "Tensor"), ("weight", "Tensor"), ("bias", "Tensor"), ("eps", "float")),
        _norms.eager_layer_norm,
        _layer_fake,
    ),
    "matmul": (
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
}
_GRADS: dict[str, Callable[..., dict]] = {
    "softmax": _softmax_grad,
    "rms_norm": _rms_grad,
    "layer_norm": _layer_grad,
    "matmul": _matmul_grad,
}


def _define_all() -> tuple[dict[str, TorchOp], dict[str, TorchOp], dict[str, Callable]]:
    """(the ops with gradients, their inference twins ``kernelkit::<name>_inference``, the
    eager op each twin runs)."""
    ops, inference, eager = {}, {}, {}
    for name, (params, run, fake) in _SCHEMAS.items():
        ops[name] = custom_vjp(_op(name, params, run, fake), _GRADS[name])
        inference[name], eager[name] = _op(f"{name}_inference", params, run, _lowered(fake)), run
    # what Inductor's decomposition of the matmul ops (torch_traced) leaves where the kernel is
    # chosen at run time: a twin outside its decomposition table
    params, run, fake = _SCHEMAS["matmul"]
    inference["matmul_runtime"] = _op("matmul_runtime", params, run, _lowered(fake))
    eager["matmul_runtime"] = run
    return ops, inference, eager


def _lowered(fake: Callable[..., Any]) -> Callable[..., Any]:
    """An inference twin's fake implementation, which first has Inductor call the eager ops
    directly in the graphs it compiles (``torch_inductor.install``, once a process): a graph
    that holds the twin was traced through it."""

    def traced(*args: Any) -> Any:
        torch_inductor.install(INFERENCE)
        return fake(*args)

    return traced


# EAGER: the eager op each inference twin runs, (*its schema's arguments, out): what a compiled
# graph calls in the twin's place (``torch_inductor``)
OPS, INFERENCE, EAGER = _define_all()
# the implementations' prepared calls (``_arrays.EAGER_SIGNERS``), whatever Dynamo can substitute
_arrays.EAGER_SIGNERS[torch.Tensor] = _arrays.EAGER_SIGNERS[torch.nn.Parameter] = torch_signer(
    torch
)
torch_inductor.expose(EAGER)
