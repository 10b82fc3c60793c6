"""Inductor's code for the ops' torch ops: a direct Python call of the eager op, not a call
through torch's dispatcher.

A compiled graph calls a custom op it has no lowering for as a ``FallbackKernel``: its wrapper
runs ``torch.ops.kernelkit.rms_norm_inference.default(...)``, which crosses torch's C++
dispatcher into the op's Python implementation and back (about 3 µs a call on the 2-core VM,
half the op's host time, four times in a decode block's MLP). Here the inference twins
(``torch_ops.INFERENCE``: what a graph that needs no gradient holds, ``matmul_runtime``
included) are lowered to an ``ExternKernelAlloc`` whose generated line calls the eager op itself,
as Inductor calls ``torch.mm``::

    buf0 = torch.ops.kernelkit._direct_v1_rms_norm(arg0_1, arg1_1, 1e-06, None)

The name is an attribute of the ops' namespace, set where the ops are defined (``expose``), so
generated code loaded from Inductor's caches finds it in any process that has the ops at all.

The output's layout is the one the op's fake implementation gave the graph (the node's
``meta["val"]``), and the inputs keep the layout constraint Inductor gives a custom op it falls
back to (the op's tags, else ``custom_op_default_layout_constraint``), so the direct call
returns what the fallback would have. Where Inductor writes C++ (``cpp_wrapper``, AOTInductor)
or an FX graph (``fx_wrapper``), where the user names the op in
``custom_should_partition_ops`` (Inductor reads that for ``FallbackKernel`` nodes only), or
where this torch's Inductor lacks what is used here (``WHY_NOT`` says what), the op is the
``FallbackKernel`` it was. A graph compiled before the lowerings existed (Inductor's FX graph
cache) keeps its fallback calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["WHY_NOT", "expose", "install", "installed"]

# the eager ops' names in ``torch.ops.kernelkit``; v1: the schema's arguments in order, then out.
# Code in Inductor's FX graph cache calls these names (its key is the graph, not kernelkit's
# version), so a name is never removed nor given another order: a new order takes a new version
PREFIX = "_direct_v1_"
_lock = threading.Lock()
WHY_NOT: str | None = "not installed yet: the ops' fake implementations install it when traced"


def expose(runs: dict[str, Callable[..., Any]]) -> None:
    """Name each eager op (op name -> the eager op, taking the schema's arguments in order, then
    out) in the ops' namespace (``torch.ops.kernelkit._direct_v1_<op>``), where a compiled
    graph's code finds it; no Inductor import (an eager process never pays it)."""
    namespace = torch.ops.kernelkit
    for name, run in runs.items():
        setattr(namespace, PREFIX + name, run)


def installed() -> bool:
    """Whether compiled graphs call the eager ops directly (the lowerings are registered)."""
    return WHY_NOT is None


def install(ops: dict[str, Any]) -> str | None:
    """Register the lowerings of ``ops`` (name -> ``TorchOp``, each exposed) once per process;
    None, or why not (also kept as ``WHY_NOT``). Called by the ops' fake implementations, which
    run while a graph is traced: importing Inductor's lowerings costs about 0.6 s."""
    global WHY_NOT
    with _lock:
        if WHY_NOT is not None and WHY_NOT.startswith("not installed"):
            try:
                from torch._subclasses.fake_tensor import unset_fake_temporarily

                with unset_fake_temporarily():  # (a tracer's fake mode: the import is real)
                    WHY_NOT = _install(ops)
            except Exception as e:  # noqa: BLE001 - a broken Inductor: the fallback serves
                WHY_NOT = f"Inductor failed while the direct calls were installed: {e!r}"
        return WHY_NOT


def _install(ops: dict[str, Any]) -> str | None:
    try:
        from torch._inductor import config
        from torch._inductor import lowering as L
    except Exception as e:  # noqa: BLE001 - ImportError, or a dependency that fails to load
        return f"Inductor lacks what the direct calls use: {e!r}"
    for name, op in ops.items():
        if not hasattr(torch.ops.kernelkit, PREFIX + name):
            return f"Inductor's direct call of {op.name}: not exposed"
        try:
            tag = L.get_layout_constraint_tag(op.default, with_default=True)
            constraint = L.tag_to_layout_constraint(tag)
            fallback = L.fallback_handler(op.default, add_to_fallback_set=False)
            if constraint is not None:
                L.add_layout_constraint(op.default, constraint)
            L.register_lowering(op.default, type_promotion_kind=None)(
                _lowering(name, op.name, op.schema.params, fallback, config)
            )
        except Exception as e:  # noqa: BLE001 - another Inductor: the FallbackKernel serves
            return f"Inductor refused the lowering of {op.name}: {type(e).__name__}: {e}"
    return None


def _lowering(
    name: str, qualname: str, params: tuple, fallback: Callable[..., Any], config: Any
) -> Callable[..., Any]:
    """The lowering of the op ``qualname`` (exposed as ``name``; its schema's ``params``:
    (name, type) pairs)."""
    from torch._inductor import ir
    from torch._inductor.utils import convert_shape_to_inductor
    from torch._inductor.virtualized import V

    target = f"torch.ops.kernelkit.{PREFIX}{name}"

    def lower(*args: Any, **kwargs: Any) -> Any:
        graph = V.graph
        if (
            kwargs
            or len(args) != len(params)
            or graph.cpp_wrapper  # C++ calls no Python (AOTInductor included)
            or getattr(config, "fx_wrapper", False)  # an FX graph of op overloads
            or any(
                n in (qualname, f"{qualname}.default")
                for n in getattr(config, "custom_should_partition_ops", ())
            )
        ):
            return fallback(*args, **kwargs)
        node = graph.current_node
        val = node.meta.get("val") if node is not None else None
        tensors = 0  # the present tensors lead: the kernel's inputs; the rest are constants
        while tensors < len(args) and isinstance(args[tensors], ir.IRNode):
            tensors += 1
        rest = args[tensors:]
        if not isinstance(val, torch.Tensor) or any(isinstance(a, ir.IRNode) for a in rest):
            return fallback(*args, **kwargs)
        layout = ir.FixedLayout(
            val.device,
            val.dtype,
            convert_shape_to_inductor(val.size()),
            convert_shape_to_inductor(val.stride()),
        )
        kernel = ir.ExternKernelAlloc(
            layout=layout,
            inputs=[ir.ExternKernel.realize_input(a) for a in args[:tensors]],
            constant_args=(*rest, None),  # None: out=
            python_kernel_name=target,
        )
        return ir.TensorBox.create(kernel)

    return lower
