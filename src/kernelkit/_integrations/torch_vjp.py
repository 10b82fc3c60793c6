"""``kernelkit.custom_vjp``: gradients for a torch op made from a kernel, from backward kernels
(themselves torch ops) paired with it by name.

A backward op's inputs are named after the forward op's inputs, its outputs, or ``grad_<output>``
(the incoming gradient of an output); its outputs are named ``grad_<input>``. So a softplus
``(x, beta) -> y`` pairs with a backward kernel ``(x, beta, grad_y) -> grad_x``: no glue code,
and only what a backward op reads is saved for the backward pass. The gradients are registered
with ``torch.library.register_autograd``: autograd and ``torch.compile`` (AOTAutograd traces the
backward ops through their fake implementations) both use them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ArgumentError, ArgumentTypeError
from .torch_op import TorchOp

__all__ = ["custom_vjp"]

GRAD = "grad_"


def custom_vjp(forward: TorchOp, *backward: TorchOp | Callable[..., Mapping[str, Any]]) -> TorchOp:
    """Make ``forward`` differentiable with ``backward`` ops paired by name, and return it.

    Each backward entry is a ``TorchOp`` (from ``Kernel.as_torch_op``) whose inputs are named
    after ``forward``'s inputs, its outputs, or ``grad_<output>``, and whose outputs are named
    ``grad_<input>``; or a Python function taking some of those names as keyword arguments (only
    those are saved) and returning a mapping ``{"grad_<input>": tensor}`` (written with torch
    ops, it is traced by ``torch.compile`` too). An input that no backward entry writes a
    gradient for gets none.

    Example::

        >>> import torch, kernelkit
        >>> i = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) "
        >>> sq = kernelkit.kernel("square", ["x"], ["y"], i + "y[i] = x[i] * x[i];")
        >>> dsq = kernelkit.kernel("square_bwd", ["x", "grad_y"], ["grad_x"],
        ...                        i + "grad_x[i] = 2 * x[i] * grad_y[i];")
        >>> rules = dict(output_shapes="x", output_dtypes="x", grid="x")
        >>> square = kernelkit.custom_vjp(sq.as_torch_op("kk_doc::square", **rules),
        ...                               dsq.as_torch_op("kk_doc::square_bwd", **rules))
        >>> x = torch.tensor([1.0, 3.0], requires_grad=True)
        >>> square(x).sum().backward()
        >>> x.grad
        tensor([2., 6.])
    """
    import torch

    if not isinstance(forward, TorchOp):
        raise ArgumentTypeError(
            f"[custom_vjp] forward must be a TorchOp (from Kernel.as_torch_op), got "
            f"{type(forward).__name__}"
        )
    where = f"[{forward.name}] custom_vjp"
    if forward.differentiable:
        raise ArgumentError(f"{where}: the op already has gradients")
    if not backward:
        raise ArgumentError(f"{where}: give at least one backward op")
    plans = _plans(forward, backward, where)
    needed = {n for _, reads, _ in plans for n in reads}
    ins, outs = forward.input_names, forward.output_names
    save_inputs = [(i, n) for i, n in enumerate(ins) if n in needed]
    save_outputs = [(j, n) for j, n in enumerate(outs) if n in needed]
    grad_names = [GRAD + n for n in outs]
    single = len(outs) == 1

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        results = (output,) if single else tuple(output)
        names, tensors, values = [], [], {}
        for source, chosen in ((inputs, save_inputs), (results, save_outputs)):
            for i, name in chosen:
                v = source[i]
                if isinstance(v, torch.Tensor):
                    names.append(name)
                    tensors.append(v)
                else:  # a scalar or an absent optional input
                    values[name] = v
        ctx.save_for_backward(*tensors)
        ctx.kk_names, ctx.kk_values = names, values

    def backward_fn(ctx: Any, *grads: Any) -> tuple:
        env = dict(ctx.kk_values)
        env.update(zip(ctx.kk_names, ctx.saved_tensors))
        env.update(zip(grad_names, grads))
        needs = dict(zip(ins, ctx.needs_input_grad))
        found: dict[str, Any] = {}
        for run, reads, writes in plans:
            if writes is not None and not any(needs[w[len(GRAD) :]] for w in writes):
                continue  # none of its gradients is wanted
            found.update(run(env, reads))
        return tuple(found.get(GRAD + n) for n in ins)

    torch.library.register_autograd(
        forward.name, backward_fn, setup_context=setup_context, lib=forward._library
    )
    forward.differentiable = True
    return forward


Plan = tuple[Callable[[dict, tuple], Mapping[str, Any]], tuple[str, ...], "tuple[str, ...] | None"]


def _plans(forward: TorchOp, backward: tuple, where: str) -> list[Plan]:
    """Per backward entry: how to run it on the saved values, what it reads, what it writes
    (None: a function, whose result is checked when it runs)."""
    ins, outs = forward.input_names, forward.output_names
    tensors = {n for n, t in forward.schema.params if "Tensor" in t}
    readable = set(ins) | set(outs) | {GRAD + n for n in outs}
    plans: list[Plan] = []
    produced: dict[str, str] = {}
    for b in backward:
        if isinstance(b, TorchOp):
            for n in b.input_names:
                if n not in readable:
                    raise ArgumentError(
                        f"{where}: backward op {b.name} reads {n!r}, which is neither an input "
                        f"{list(ins)}, an output {list(outs)} nor an output's gradient "
                        f"{[GRAD + n for n in outs]}"
                    )
            for n in b.output_names:
                if not n.startswith(GRAD) or n[len(GRAD) :] not in tensors:
                    raise ArgumentError(
                        f"{where}: backward op {b.name} writes {n!r}; its outputs must be named "
                        f"grad_<tensor input>, one of {[GRAD + t for t in ins if t in tensors]}"
                    )
                if n in produced:
                    raise ArgumentError(
                        f"{where}: {n!r} is written by both {produced[n]} and {b.name}"
                    )
                produced[n] = b.name
            plans.append((_run_op(b), b.input_names, b.output_names))
        elif callable(b):
            reads = _reads(b, readable, where)
            allowed = {GRAD + n for n in ins if n in tensors}
            plans.append((_run_function(b, where, allowed), reads, None))
        else:
            raise ArgumentTypeError(
                f"{where}: a backward entry must be a TorchOp or a function, got {type(b).__name__}"
            )
    return plans


def _reads(fn: Callable[..., Any], readable: set[str], where: str) -> tuple[str, ...]:
    """The names a backward function takes (all of them if it takes ``**kwargs``): only those
    are saved for the backward pass."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return tuple(sorted(readable))
    names = tuple(p.name for p in params)
    unknown = [n for n in names if n not in readable]
    if unknown:
        raise ArgumentError(
            f"{where}: backward function {getattr(fn, '__name__', fn)!r} takes {unknown[0]!r}, "
            f"which is none of {sorted(readable)}"
        )
    return names


def _run_op(op: TorchOp) -> Callable[[dict, tuple], Mapping[str, Any]]:
    single = len(op.output_names) == 1

    def run(env: dict, reads: tuple) -> Mapping[str, Any]:
        ys = op.default(*[env[n] for n in reads])
        return dict(zip(op.output_names, (ys,) if single else ys))

    return run


def _run_function(
    fn: Callable[..., Mapping[str, Any]], where: str, allowed: set[str]
) -> Callable[[dict, tuple], Mapping[str, Any]]:
    def run(env: dict, reads: tuple) -> Mapping[str, Any]:
        result = fn(**{n: env.get(n) for n in reads})
        if not isinstance(result, Mapping) or not set(result) <= allowed:
            raise ArgumentError(
                f"{where}: a backward function must return a mapping with keys among "
                f"{sorted(allowed)}, got {result!r}"
            )
        return result

    return run
