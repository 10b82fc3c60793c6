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
from ..ops import _elementwise, _matmul, _norms, _softmax
from ..ops._common import row_contiguous
from . import torch_elementwise, torch_ops  # noqa: F401 - the torch ops; the expressions' functions
from .torch_grad import no_gradient, torch_signer

__all__ = ["INSTALLED"]

_K = torch.ops.kernelkit
# Each op's two overloads bound to one global apiece: a traced call of an op without gradients
# reads one object (one guard of the compiled call), not a tuple (its type, length and item).
_SOFTMAX, _SOFTMAX_INFERENCE = _K.softmax.default, _K.softmax_inference.default
_RMS_NORM, _RMS_NORM_INFERENCE = _K.rms_norm.default, _K.rms_norm_inference.default
_LAYER_NORM, _LAYER_NORM_INFERENCE = _K.layer_norm.default, _K.layer_norm_inference.default
_MATMUL, _MATMUL_INFERENCE = _K.matmul.default, _K.matmul_inference.default


def _grad(*tensors: Any) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _with_out(name: str, op: Any, args: tuple, grad: bool, out: Any) -> Any:
    """``out=``: the inference twin's out overload (no autograd: refused where a gradient is
    wanted)."""
    if grad:
        raise ArgumentError(
            f"[{name}] out= does not take part in autograd, and an input requires grad: "
            "call without out= (or under torch.no_grad())"
        )
    op.out(*args, out)
    return out


# The traced ops. A compiled call checks a guard for every object its trace read (about 20 ns
# each on the VM's CPU, several times that on the GPU machine's host), so each reads as few as
# it can: no helper on the common path (calling a module function guards on its code), one op
# object; the arguments are checked by the ops' fake implementations (``torch_ops``), which run
# while the graph is traced and are not traced themselves.


def softmax(x: Any, dim: int = -1, *, out: Any = None) -> Any:
    grad = torch.is_grad_enabled() and x is not None and x.requires_grad
    if out is not None:
        return _with_out("softmax", _K.softmax_inference, (x, dim), grad, out)
    return _SOFTMAX(x, dim) if grad else _SOFTMAX_INFERENCE(x, dim)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, *, out: Any = None) -> Any:
    # torch would take a bool as 0.0 or 1.0 (other checks: the fake impl); isinstance, which
    # every Dynamo folds on a constant (2.11 did not fold ``eps.__class__ is bool``)
    if isinstance(eps, bool):
        raise ArgumentError("[rms_norm] eps must be a non-negative float, got " + repr(eps))
    grad = torch.is_grad_enabled() and (
        (x is not None and x.requires_grad) or (weight is not None and weight.requires_grad)
    )
    if out is not None:
        return _with_out("rms_norm", _K.rms_norm_inference, (x, weight, eps), grad, out)
    return _RMS_NORM(x, weight, eps) if grad else _RMS_NORM_INFERENCE(x, weight, eps)


def layer_norm(x: Any, weight: Any, bias: Any, eps: float = 1e-5, *, out: Any = None) -> Any:
    if isinstance(eps, bool):
        raise ArgumentError("[layer_norm] eps must be a non-negative float, got " + repr(eps))
    grad = torch.is_grad_enabled() and (
        (x is not None and x.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    args = (x, weight, bias, eps)
    if out is not None:
        return _with_out("layer_norm", _K.layer_norm_inference, args, grad, out)
    return _LAYER_NORM(*args) if grad else _LAYER_NORM_INFERENCE(*args)


def matmul(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    transpose_b: bool = False,
    out: Any = None,
) -> Any:
    grad = torch.is_grad_enabled() and (
        (a is not None and a.requires_grad)
        or (b is not None and b.requires_grad)
        or (bias is not None and bias.requires_grad)
    )
    args = (a, b, bias, activation, transpose_b)
    if out is not None:
        return _with_out("matmul", _K.matmul_inference, args, grad, out)
    return _MATMUL(*args) if grad else _MATMUL_INFERENCE(*args)


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
    """Asked once per compiled graph: whether the tables choose the framework's kernel for
    every call the graph can see. Static sizes: that problem. A 2-d ``a`` whose rows M alone
    are symbolic (one graph for every M, as ``mark_dynamic`` makes): every M that begins or ends
    one of the matmul key's M buckets within M's range (decisions are made and kept per bucket,
    so these stand for the rest). Anything else: False."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    fixed = [t for t in (b, bias) if t is not None]
    if not all(isinstance(d, int) for t in fixed for d in (*t.shape, *t.stride())):
        return False  # a symbolic size: the torch op decides per call
    try:
        with disable_proxy_modes_tracing():  # (nothing the question runs enters the graph)
            rows = _row_samples(a)
            return rows is not None and all(
                _matmul.routes(x, b, bias, activation, transpose_b) == {"framework"} for x in rows
            )
    except Exception:  # noqa: BLE001 - not a problem the tables decide: the torch op runs
        return False


def _row_samples(a: Any) -> list[Any] | None:
    """``[a]`` where its sizes and strides are static; for a row-contiguous 2-d ``a`` with a
    symbolic M, arrays like it at each M that starts or ends an M bucket of the matmul key
    inside M's value range (a range without a finite end: up to the last bucket's start);
    None otherwise."""
    if all(isinstance(d, int) for d in (*a.shape, *a.stride())):
        return [a]
    if a.dim() != 2:
        return None
    m, k = a.shape
    if not isinstance(k, int) or tuple(a.stride()) != (k, 1):
        return None
    bound = m.node.shape_env.bound_sympy(m.node.expr)
    lower = int(bound.lower)
    upper = int(bound.upper) if bound.upper.is_Integer else float("inf")  # (int_oo is "finite")
    (feature,) = (f for f in getattr(_matmul.OP.key, "features", ()) if f.name == "M")
    edges = {e for b in feature.bounds for e in (b - 1, b)} | {lower}
    samples = sorted(e for e in edges if lower <= e <= upper and e >= 1)
    if not samples:
        return None
    return [a.new_empty((n, k)) for n in samples]


def elementwise(self: Any, args: tuple, out: Any, kwargs: dict[str, Any]) -> Any:
    """``Elementwise.__call__`` (``_elementwise.call``) traced: its checks, then the
    expression as torch operations; tensors in order without ``out=`` through the expression's
    own generated function (``Elementwise.python_traced``), which reads nothing else."""
    if out is None and not kwargs:
        y = self.python_traced(args, torch)
        if y is not None:
            return y
    values, arrays, dtype = self.check_values(args, kwargs)
    if _grad(*arrays):
        raise no_gradient(str(self))
    shape = torch.broadcast_shapes(*(a.shape for a in arrays))
    native = _native(self.python_native, values, shape, dtype)
    ys = (
        [native]
        if native is not None
        else _expression(self.python_expression, values, shape, dtype)
    )
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


def _native(native: Callable[..., Any], values: list[Any], shape: Any, dtype: str) -> Any:
    """``native(*values)`` (``Elementwise.python_native``: one ``+``, ``-`` or ``*`` of two
    inputs, else None) where every input is a row-contiguous tensor of the output's dtype and
    shape, that dtype float16, bfloat16 or float32, else None. torch computes a float16/bfloat16
    operation in float32 and rounds once, as the kernel does: the same values, and Inductor sees
    the graph plain torch code would give it (it folds a residual ``x + mm(h, w)`` into one
    ``addmm``, which the float32 form hides). Integer and float64 outputs torch would compute in
    their own precision, and a bool subtraction it refuses: those take the float32 form."""
    if dtype not in ("float16", "bfloat16", "float32"):  # (a literal: a constant, no guard)
        return None
    want = getattr(torch, dtype)
    for v in values:  # (is_contiguous: row_contiguous's test for tensors, one guard less)
        if not isinstance(v, torch.Tensor) or v.dtype != want or v.shape != shape:
            return None
        if not v.is_contiguous():
            return None
    return native(*values)


def _expression(
    expression: Callable[..., tuple], values: list[Any], shape: Any, dtype: str
) -> list[Any]:
    """The outputs of an elementwise expression (``Elementwise.python_expression``: its
    trees as one generated function, whose constants are in its code, not in objects Dynamo
    reads and guards on) on ``values`` (tensors and Python numbers), computed in float32, as
    new row-contiguous tensors of ``shape`` and ``dtype`` (what the kernel returns; never an
    input itself, as ``y = a`` would give): Inductor writes them in the same loop."""
    device = next(x.device for x in values if isinstance(x, torch.Tensor))

    def c(value: float) -> Any:
        return torch.full((), value, dtype=torch.float32, device=device)

    def number(value: Any) -> Any:  # a Python number past float32's range is inf, as in the
        # kernel, which converts it to float (torch.full would refuse it)
        return torch.full((), float(value), dtype=torch.float64, device=device).float()

    v = [x.to(torch.float32) if isinstance(x, torch.Tensor) else number(x) for x in values]
    tdtype = getattr(torch, dtype)
    return [
        y.to(tdtype).expand(shape).clone(memory_format=torch.contiguous_format)
        for y in expression(*v, c)
    ]


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
        (_elementwise.call, elementwise),
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
