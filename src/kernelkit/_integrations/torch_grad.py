"""Whether autograd needs a built-in op's torch tensors, and the errors of ops without a
gradient: asked by the route (``torch_route``) and by the traced ops (``torch_ops``,
``torch_elementwise``). It imports no framework."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ArgumentError

__all__ = [
    "needs_grad",
    "no_gradient",
    "refuse_functorch",
    "refuse_tangents",
    "requires_grad",
    "torch_signer",
]


def no_gradient(name: str) -> ArgumentError:
    """The error of an op without a gradient called on inputs that need one."""
    return ArgumentError(
        f"[{name}] has no gradient, and an input requires grad: call it under "
        "torch.no_grad() or on detached tensors (a kernel with a gradient: "
        "Kernel.as_torch_op and kernelkit.custom_vjp)"
    )


def needs_grad(arrays: Any) -> bool:
    """True when autograd is on and one of ``arrays`` is a torch tensor that requires grad
    (for ops without a gradient, which must refuse such calls rather than drop it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    if any(isinstance(a, torch.Tensor) for a in arrays):
        refuse_functorch(torch)
    return requires_grad(torch, arrays)


def requires_grad(torch: Any, arrays: Any) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in arrays
    )


def refuse_functorch(torch: Any) -> None:
    """ArgumentError inside a torch.func transform: its tensors are wrappers with no storage."""
    peek = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
    if peek is not None and peek() is not None:
        raise ArgumentError(
            "[kernelkit.ops] torch.func transforms (vmap, grad, jacrev, ...) are not supported: "
            "call the op outside the transform, or use torch.autograd / a loop over the batch"
        )


def refuse_tangents(torch: Any, name: str, names: Sequence[str], arrays: Sequence[Any]) -> None:
    """ArgumentError for a tensor that carries a forward-mode AD tangent: the ops have no JVP,
    and their kernels would return a result without one where torch's own op propagates it.
    Asked only inside ``torch.autograd.forward_ad.dual_level()`` (the callers read the level)."""
    forward = torch.autograd.forward_ad
    for i, a in enumerate(arrays):
        if isinstance(a, torch.Tensor) and forward.unpack_dual(a).tangent is not None:
            what = repr(names[i]) if i < len(names) else f"input {i}"
            raise ArgumentError(
                f"[{name}] {what} carries a forward-mode AD tangent, which kernelkit's ops do "
                "not propagate: call the op on its primal (forward_ad.unpack_dual(x).primal) "
                "or outside dual_level()"
            )


def torch_signer(torch: Any) -> Callable[[tuple], tuple]:
    """``signature(arrays)`` of torch tensors (or None): class, dtype, shape, strides, layout
    (a sparse COO tensor has strides too), device, and whether autograd needs it now (such a
    signature is never prepared: it goes through the torch op). Inside a torch.func transform
    none (TypeError: its tensors have no storage, and the validating path refuses them). The
    torch functions it asks are bound once here (it runs on every warm op call)."""
    peek = torch._C._functorch.peek_interpreter_stack
    grad_enabled = torch.is_grad_enabled

    def torch_signature(arrays: tuple) -> tuple:
        if peek() is not None:
            raise TypeError("inside a torch.func transform")
        grad = grad_enabled()
        sig = []
        for a in arrays:
            sig.append(
                None
                if a is None
                else (a.__class__, a.dtype, a.shape, a.stride(), a.layout, a.device,
                      grad and a.requires_grad)
            )  # fmt: skip
        return tuple(sig)

    return torch_signature
