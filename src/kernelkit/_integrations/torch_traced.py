"""What ``torch.compile`` traces in place of each public op (``torch.compiler``'s
``substitute_in_graph``): the argument checks that need no data, then torch operations, so Dynamo
never enters the ops' eager Python (their prepared tables, ``SIGNERS``, the forced-choice context
variable, the integration hooks) and the graph guards on none of kernelkit's mutable state.

- softmax, rms_norm, layer_norm: one node, the torch op; ``kernelkit::<name>_inference`` (no
  autograd layer, ``torch_ops``) where no input needs a gradient, else the op with gradients.
- matmul: the torch op (with or without gradients, as the rows ops); Inductor decomposes it
  (``_matmul_decomposed``) into ``F.linear``/``torch.matmul`` where every size is static and the
  tables choose the framework's kernel for every alignment (torch CUDA tensors: cuBLAS), so
  Inductor calls ``aten::mm`` directly; otherwise into ``kernelkit::matmul_runtime``, which
  decides at run time. The choice is made when a graph is compiled (``kernelkit.force`` and
  tuning apply to graphs compiled after them; Inductor's caches may keep an earlier choice for
  the same graph).
- elementwise: the expression traced into torch operations (``torch_elementwise``).

Installed when ``torch_route`` first imports this module; ``INSTALLED`` is False where this
torch's ``substitute_in_graph`` is missing or refuses Python functions (older releases, where it
served C functions only): Dynamo then traces the ops' bodies, whose integration hook routes them
to the torch ops, and torch tensors get no prepared eager calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import _arrays
from .._errors import ArgumentError
from ..ops import _elementwise, _matmul, _matmul_args, _norms, _softmax
from ..ops._common import move_last, row_contiguous
from . import torch_elementwise, torch_ops  # noqa: F401 - torch_ops defines the torch ops
from .torch_grad import no_gradient, torch_signer

__all__ = ["INSTALLED"]

_K = torch.ops.kernelkit


def _grad(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _refuse_out_grad(name: str, grad: bool) -> None:
    if grad:
        raise ArgumentError(
            f"[{name}] out= does not take part in autograd, and an input requires grad: "
            "call without out= (or under torch.no_grad())"
        )


def _torch_op(name: str, args: tuple, grads: tuple, out: Any) -> Any:
    """The torch op ``name`` on ``args``: with gradients where one of ``grads`` needs one, else
    its inference twin (``out=`` only there)."""
    grad = _grad(*grads)
    if out is not None:
        _refuse_out_grad(name, grad)
        getattr(_K, f"{name}_inference").out(*args, out)
        return out
    return getattr(_K, name if grad else f"{name}_inference").default(*args)


def softmax(x: Any, dim: int = -1, *, out: Any = None) -> Any:
    move_last(x, dim, "softmax")
    return _torch_op("softmax", (x, int(dim)), (x,), out)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None) -> Any:
    eps = _norms._check("rms_norm", x, {"weight": weight}, eps)
    return _torch_op("rms_norm", (x, weight, eps), (x, weight), out)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, out: Any = None) -> Any:
    eps = _norms._check("layer_norm", x, {"weight": weight, "bias": bias}, eps)
    return _torch_op("layer_norm", (x, weight, bias, eps), (x, weight, bias), out)


def matmul(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    transpose_b: bool = False,
    out: Any = None,
) -> Any:
    _matmul_args.prepare(a, b, bias, activation, transpose_b)
    return _torch_op("matmul", (a, b, bias, activation, transpose_b), (a, b, bias), out)


def _matmul_decomposed(a: Any, b: Any, bias: Any, activation: Any, transpose_b: bool) -> Any:
    """Inductor's decomposition of the matmul torch ops (run on the graph's fake tensors, so
    symbolic sizes are seen as such): the framework's own ``F.linear``/``torch.matmul`` where
    every size and stride is static and the tables choose the framework's kernel at every
    alignment (torch CUDA tensors: cuBLAS), so Inductor calls ``aten::mm`` directly;
    otherwise ``kernelkit::matmul_runtime`` (the same op outside the table), which decides at
    run time. (Returning NotImplemented would leave an op Inductor refuses to fall back to.)"""
    if not _framework_chosen(a, b, bias, activation, transpose_b):
        return _K.matmul_runtime.default(a, b, bias, activation, transpose_b)
    y = F.linear(a, b, bias) if transpose_b else torch.matmul(a, b)
    if bias is not None and not transpose_b:
        y = y + bias
    if activation is not None:
        y = _ACTIVATIONS[activation](y)
    return y


_ACTIVATIONS: dict[str, Callable[..., Any]] = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu}


def _framework_chosen(a: Any, b: Any, bias: Any, activation: Any, transpose_b: bool) -> bool:
    """Asked once per compiled graph; arrays that are not a plain static problem: False."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    tensors = [t for t in (a, b, bias) if t is not None]
    if not all(isinstance(d, int) for t in tensors for d in (*t.shape, *t.stride())):
        return False  # a symbolic size: the torch op decides per call
    try:
        with disable_proxy_modes_tracing():  # (nothing the question runs enters the graph)
            return _matmul.routes(a, b, bias, activation, transpose_b) == {"framework"}
    except Exception:  # noqa: BLE001 - not a problem the tables decide: the torch op runs
        return False


def elementwise(self: Any, *args: Any, out: Any = None, **kwargs: Any) -> Any:
    """``Elementwise.__call__`` traced: its checks, then the expression as torch operations."""
    values, arrays, dtype = self.check_values(args, kwargs)
    if _grad(*arrays):
        raise no_gradient(str(self))
    shape = torch.broadcast_shapes(*(a.shape for a in arrays))
    ys = torch_elementwise.traced(self.trees, values, shape, dtype)
    single = len(self.outputs) == 1
    if out is None:
        return ys[0] if single else ys
    outs = list(out) if isinstance(out, list | tuple) else [out]
    if len(outs) != len(ys):
        raise ArgumentError(f"[{self}] out= needs {len(ys)} arrays, got {len(outs)}")
    for j, (o, y) in enumerate(zip(outs, ys)):
        what = f"out[{j}] ({self.outputs[j]!r})" if len(outs) > 1 else "out"
        if o.shape != y.shape or o.dtype != y.dtype or not row_contiguous(o):
            raise ArgumentError(
                f"[{self}] {what} must be a row-contiguous array of the output's shape "
                f"{tuple(y.shape)} and dtype {dtype}, got {tuple(o.shape)} {o.dtype}"
            )
        o.copy_(y)
    return outs[0] if single else outs


def _install() -> bool:
    """Register the traced versions with Dynamo and the matmul decomposition with Inductor;
    False where this torch cannot."""
    try:
        from torch._dynamo.decorators import substitute_in_graph
        from torch._inductor.decomposition import register_decomposition
    except ImportError:
        return False
    pairs = (
        (_softmax.softmax, softmax),
        (_norms.rms_norm, rms_norm),
        (_norms.layer_norm, layer_norm),
        (_matmul.matmul, matmul),
        (_elementwise.Elementwise.__call__, elementwise),
    )
    try:
        for original, traced in pairs:
            substitute_in_graph(original, skip_signature_check=True)(traced)
    except Exception:  # noqa: BLE001 - an older Dynamo: the ops' bodies route while tracing
        return False
    register_decomposition([_K.matmul.default, _K.matmul_inference.default])(_matmul_decomposed)
    return True


# at import, which runs for real even when a trace imports this module (torch_route)
INSTALLED = _install()
if INSTALLED:
    _arrays.SIGNERS[torch.Tensor] = _arrays.SIGNERS[torch.nn.Parameter] = torch_signer(torch)
