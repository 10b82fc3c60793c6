"""Whether autograd needs a built-in op's torch tensors, and the errors of ops without a
gradient: asked by the route (``torch_route``) and by the traced ops (``torch_ops``,
``torch_elementwise``). It imports no framework."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .._errors import ArgumentError

__all__ = [
    "needs_grad",
    "no_gradient",
    "refuse_functorch",
    "requires_grad",
    "torch_checker",
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


def torch_checker(torch: Any) -> Callable[[tuple], Any] | None:
    """``checker(tensors)`` for the ops' recent calls (``ops._prepared.Recent``): a check made
    in C that later tensors have these tensors' Python class, dispatch keys (device, and the
    thread's dispatch state: a torch.func transform or inference mode changes them), dtype,
    device index, requires_grad, shape and strides: torch's ``TensorGuards``, with which Dynamo
    guards compiled graphs, every size and stride static. None for tensors of which one requires
    grad (the signature and the route serve those), inside a torch.func transform, or under a
    torch dispatch mode (its keys would be part of the check: it would serve nothing). The
    checker itself is None where this torch has no ``TensorGuards`` that passes a probe (it is
    not public API: a release that changes it turns the recent calls off, not wrong)."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        peek = torch._C._functorch.peek_interpreter_stack
        modes = torch._C._len_torch_dispatch_stack

        def checker(tensors: tuple) -> Any:
            if peek() is not None or modes() or any(t.requires_grad for t in tensors):
                return None
            sizes: Any = [list(t.shape) for t in tensors]  # every one static
            strides: Any = [list(t.stride()) for t in tensors]
            return TensorGuards(
                *tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides
            ).check

        probe = torch.zeros(2, 3)
        check = checker((probe, probe))
        wrong = (probe.t(), torch.zeros(3, 2), probe.double(), probe[:, :2], torch.zeros(2, 3, 1))
        if not check(torch.ones(2, 3), probe) or any(check(probe, w) for w in wrong):
            return None
    except Exception:  # noqa: BLE001 - no usable TensorGuards: no recent calls
        return None
    return checker
