"""When a built-in op (``kernelkit.ops``) takes the torch op path instead of its eager one: a
hook (``_arrays.OP_HOOKS``, installed by ``kernelkit/__init__``) that the ops ask on the
first call of each signature; the ops never import this module.

The eager path is the fastest, but torch cannot see inside it: under ``torch.compile`` it would
be a graph break, under autograd it has no gradient, and a fake tensor has no data. Those calls
go through the op's ``torch.library`` registration (``torch_ops``). It imports no framework:
a NumPy call pays one ``sys.modules`` lookup.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import _arrays
from .torch_grad import needs_grad, no_gradient, refuse_functorch

__all__ = ["hook", "install", "wants"]


def install() -> None:
    """Ask ``hook`` on the ops' first call of each signature (idempotent)."""
    if hook not in _arrays.OP_HOOKS:
        _arrays.OP_HOOKS.append(hook)


def hook(name: str, arrays: Any, args: tuple, out: Any) -> Any:
    """The op through its torch op when torch must see it (``wants``), else NotImplemented;
    the first plain eager call also lets torch tensors take the ops' prepared path."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(arrays[0], torch.Tensor):
        return NotImplemented
    if name == "elementwise":  # args: (the op, its positional args, its keyword args)
        if torch.compiler.is_compiling():
            from .torch_elementwise import traced_call

            return traced_call(args[0], *args[1], out=out, **args[2])
        if needs_grad(arrays):
            raise no_gradient(str(args[0]))
        _eager_signatures(torch)
        return NotImplemented
    if wants(*arrays):
        from .torch_ops import call

        return call(name, *args, out=out)
    _eager_signatures(torch)
    return NotImplemented


def _eager_signatures(torch: Any) -> None:
    """Torch tensors (plain and parameters) get prepared calls once torch's tracers see the
    ops as torch ops (``torch_ops``: Dynamo traces each op as its torch op, never its body)."""
    if torch.Tensor in _arrays.SIGNERS:
        return
    from . import torch_ops

    if torch_ops.TRACED:
        _arrays.SIGNERS[torch.Tensor] = _arrays.SIGNERS[torch.nn.Parameter] = _signature


def _signature(arrays: tuple) -> tuple:
    """Torch tensors (or None): class, dtype, shape, strides, layout (a sparse COO tensor has
    strides too), device, and whether autograd
    needs it now (such a signature is never prepared: it goes through the torch op). Inside a
    torch.func transform none (its tensors have no storage: the validating path refuses)."""
    torch = sys.modules["torch"]
    if torch._C._functorch.peek_interpreter_stack() is not None:
        raise TypeError("inside a torch.func transform")
    grad = torch.is_grad_enabled()
    sig = []
    for a in arrays:
        sig.append(
            None
            if a is None
            else (a.__class__, a.dtype, a.shape, a.stride(), a.layout, a.device,
                  grad and a.requires_grad)
        )  # fmt: skip
    return tuple(sig)


def wants(*arrays: Any) -> bool:
    """True when ``arrays[0]`` is a torch tensor and torch must see the op: while
    ``torch.compile`` traces, when autograd needs a gradient, or for tensor subclasses
    (fake and functional tensors)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(arrays[0], torch.Tensor):
        return False
    if torch.compiler.is_compiling():
        return True
    refuse_functorch(torch)
    grad = torch.is_grad_enabled()
    for a in arrays:
        if isinstance(a, torch.Tensor):
            cls = a.__class__
            if cls is not torch.Tensor and cls is not torch.nn.Parameter:
                return True
            if grad and a.requires_grad:
                return True
    return False
