"""When a built-in op (``kernelkit.ops``) takes the torch op path instead of its eager one: a
hook (``_arrays.OP_HOOKS``, installed by ``kernelkit/__init__``) that the ops ask on the
first call of each signature; the ops never import this module.

The eager path is the fastest, but torch cannot see inside it: under autograd it has no
gradient, and a fake tensor has no data. Those calls go through the op's ``torch.library``
registration (``torch_ops``). Under ``torch.compile`` Dynamo traces ``torch_traced``'s
substitutes instead of the ops' bodies, set up (``install_torch``) as soon as Dynamo is imported.
It imports no framework: a NumPy call pays one ``sys.modules`` lookup.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

from .. import _arrays
from .._errors import ArgumentError
from .torch_grad import needs_grad, no_gradient, refuse_functorch, refuse_tangents, requires_grad

__all__ = ["call", "hook", "install", "install_torch", "needs_grad", "no_gradient", "wants"]


def install() -> None:
    """Ask ``hook`` on the ops' first call of each signature (idempotent), and set up the torch
    integration (``install_torch``) as soon as Dynamo is imported: now if it is, else right after
    its import (``torch.compile`` imports it before tracing), so that no trace ever enters an
    op's eager body."""
    if hook not in _arrays.OP_HOOKS:
        _arrays.OP_HOOKS.append(hook)
    if "torch._dynamo" in sys.modules:
        install_torch(sys.modules["torch"])
    elif not any(isinstance(f, _AfterDynamo) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamo())


class _AfterDynamo(importlib.abc.MetaPathFinder):
    """Runs ``install_torch`` once ``torch._dynamo`` has been imported (then leaves
    ``sys.meta_path``); the import itself is found and run by the other finders."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:  # noqa: ARG002  the finder protocol
        if name != "torch._dynamo":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = None if spec is None else spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            try:
                install_torch(sys.modules["torch"])
            except Exception as e:  # noqa: BLE001 - Dynamo's import must not fail for kernelkit
                warnings.warn(
                    f"[kernelkit] the torch.compile integration could not be set up ({e!r}); "
                    "the ops' first call on torch tensors tries again",
                    stacklevel=2,
                )

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def hook(name: str, arrays: Any, args: tuple, out: Any) -> Any:
    """The op through its torch op when torch must see it (``wants``), else NotImplemented;
    the first call on torch tensors sets up the torch integration (``install_torch``)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(arrays[0], torch.Tensor):
        return NotImplemented
    install_torch(torch)
    if torch.autograd.forward_ad._current_level >= 0:  # in dual_level()
        refuse_tangents(torch, name, _array_names(name, args), arrays)
    if name == "elementwise":  # args: (the op, its positional args, its keyword args)
        if torch.compiler.is_compiling():  # (a trace that began before install_torch)
            from .torch_traced import elementwise

            return elementwise(args[0], args[1], out, args[2])
        if needs_grad(arrays):
            raise no_gradient(str(args[0]))
        return NotImplemented
    if wants(*arrays):
        return call(name, *args, out=out)
    return NotImplemented


# the ops' array inputs, in the order the hook is given them (elementwise: the op's ``inputs``)
_NAMES = {"softmax": ("x",), "rms_norm": ("x", "weight"), "layer_norm": ("x", "weight", "bias"),
          "matmul": ("a", "b", "bias")}  # fmt: skip


def _array_names(name: str, args: tuple) -> tuple[str, ...]:
    """The names of the arrays the hook is given, in order."""
    if name != "elementwise":
        return _NAMES.get(name, ())
    op, pos, kw = args
    values = pos if pos else tuple(kw.get(n) for n in op.inputs)
    return tuple(n for n, v in zip(op.inputs, values) if hasattr(v, "shape"))


def install_torch(torch: Any) -> None:
    """Define the ops' torch ops (``torch_ops``), register what Dynamo traces in place of the
    public ops, and only then give torch tensors (plain and parameters) prepared eager calls:
    nothing traced ever reaches a prepared call. All of it at ``torch_traced``'s import (run for
    real even when a trace imports it). Once per process."""
    if torch.Tensor not in _arrays.SIGNERS:
        from ..ops import _prepared

        _prepared.AD.module = torch.autograd.forward_ad  # (the ops prepare nothing in a level)
        from . import torch_traced  # noqa: F401


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


def call(name: str, *args: Any, out: Any = None) -> Any:
    """Run built-in op ``name`` through its torch op (defined on first use). Like torch's
    own ops, an ``out=`` call refuses inputs that need a gradient (its result has none)."""
    from . import torch_ops

    if out is not None and requires_grad(sys.modules["torch"], args):
        raise ArgumentError(
            f"[{name}] out= does not take part in autograd, and an input requires grad: "
            "call without out= (or under torch.no_grad())"
        )
    return torch_ops.OPS[name](*args, out=out)
