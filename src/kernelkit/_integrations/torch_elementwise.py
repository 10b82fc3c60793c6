"""``ops.elementwise`` under ``torch.compile``: one torch op, ``kernelkit::elementwise``, that
carries the expression as a string argument, so every expression compiles to one graph node
that runs the same fused kernel as the eager call.

Why one op rather than tracing the expression into torch operations for Inductor to fuse: the
expression's meaning (float32 arithmetic, the output dtype's rounding, kernelkit's own math
functions) is defined once, by the kernel; a second translation into torch operations would be
a second implementation to keep equal, and on the GPU the kernel is already one pass over
memory. What is given up: Inductor cannot fuse the op with its neighbours (see README).
"""

from __future__ import annotations

from typing import Any

import torch

from ..ops._elementwise import Elementwise, promote_dtypes
from .torch_grad import no_gradient, requires_grad

__all__ = ["traced_call"]

_LIB = torch.library.Library("kernelkit", "FRAGMENT")
_LIB.define(
    "elementwise(str expression, str? output_dtype, Tensor?[] arrays, float[] scalars) "
    "-> Tensor[]"
)
_OPS: dict[tuple[str, str | None], Elementwise] = {}  # (expression, output dtype) -> op


def _op(expression: str, output_dtype: str | None) -> Elementwise:
    op = _OPS.get((expression, output_dtype))
    if op is None:
        op = _OPS[expression, output_dtype] = Elementwise(expression, output_dtype)
    return op


def _values(arrays: list, scalars: list) -> list[Any]:
    """The op's inputs in order: a None array stands for the next scalar."""
    it = iter(scalars)
    return [next(it) if a is None else a for a in arrays]


def _impl(expression: str, output_dtype: str | None, arrays: list, scalars: list) -> list:
    result = _op(expression, output_dtype)(*_values(arrays, scalars))
    return list(result) if isinstance(result, list) else [result]


def _fake(expression: str, output_dtype: str | None, arrays: list, scalars: list) -> list:  # noqa: ARG001  the op's signature
    """The outputs' shape (torch's broadcasting: symbolic sizes welcome) and dtype (the op's)."""
    op = _op(expression, output_dtype)
    tensors = [a for a in arrays if a is not None]
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    names = [str(t.dtype).split(".")[-1] for t in tensors]
    dtype = op.output_dtype or promote_dtypes(names, str(op))
    tdtype = getattr(torch, dtype)
    return [torch.empty(shape, dtype=tdtype, device=tensors[0].device) for _ in op.outputs]


for _key in ("CPU", "CUDA"):
    _LIB.impl("elementwise", _impl, _key)
torch.library.register_fake("kernelkit::elementwise", _fake, lib=_LIB)


def traced_call(self: Elementwise, *args: Any, out: Any = None, **kwargs: Any) -> Any:
    """What torch.compile traces for ``Elementwise.__call__``: the eager call's checks, then
    the torch op (out= is written by a copy)."""
    values, _, _ = self._prepare(args, kwargs)
    if requires_grad(torch, values):  # (traced: no torch.func test, Dynamo has its own)
        raise no_gradient(str(self))
    arrays = [v if hasattr(v, "shape") else None for v in values]
    scalars = [float(v) for v in values if not hasattr(v, "shape")]
    results = torch.ops.kernelkit.elementwise(self.expression, self.output_dtype, arrays, scalars)
    if out is not None:
        outs = list(out) if isinstance(out, list | tuple) else [out]
        for o, r in zip(outs, results):
            o.copy_(r)
        results = outs
    return results[0] if len(self.outputs) == 1 else list(results)
