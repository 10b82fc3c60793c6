"""``kernelkit explain OP --dims ...``: the choice a built-in op makes for a shape and why,
without running it (arrays of that shape are made, zero-filled, on the device asked for)."""

from __future__ import annotations

from typing import Any

from .._errors import ArgumentError

__all__ = ["OPS", "explain_op"]

# op -> what --dims spells
OPS = {
    "softmax": "ROWSxN (any leading dims: AxBxN)",
    "rms_norm": "ROWSxN",
    "layer_norm": "ROWSxN",
    "matmul": "MxNxK (x[M,K] @ w[N,K].T, a linear layer)",
}


def _dims(text: str, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise ArgumentError(f"[explain] --dims {text!r} is not {what}") from None
    if not dims or any(d <= 0 for d in dims):
        raise ArgumentError(f"[explain] --dims {text!r} is not {what}")
    return dims


def _zeros(shape: tuple[int, ...], dtype: str, device: str) -> Any:
    if device == "cpu" and dtype != "bfloat16":
        import numpy as np

        return np.zeros(shape, dtype)
    import torch

    return torch.zeros(shape, dtype=getattr(torch, dtype), device=device)


def explain_op(op: str, dims: str, dtype: str = "float32", device: str = "cpu") -> Any:
    """The ``Selection`` of built-in ``op`` for ``dims`` (see ``OPS``) on ``device``."""
    from .. import ops

    if op not in OPS:
        raise ArgumentError(f"[explain] unknown op {op!r}; built-in ops: {', '.join(OPS)}")
    shape = _dims(dims, OPS[op])
    if op == "matmul":
        if len(shape) != 3:
            raise ArgumentError(f"[explain] matmul --dims must be {OPS['matmul']}, got {dims!r}")
        m, n, k = shape
        x, w = _zeros((m, k), dtype, device), _zeros((n, k), dtype, device)
        return ops.matmul.explain(x, w, transpose_b=True)  # type: ignore[attr-defined]
    x = _zeros(shape, dtype, device)
    weight = _zeros(shape[-1:], dtype, device)
    if op == "softmax":
        return ops.softmax.explain(x)  # type: ignore[attr-defined]
    if op == "rms_norm":
        return ops.rms_norm.explain(x, weight)  # type: ignore[attr-defined]
    return ops.layer_norm.explain(x, weight, weight)  # type: ignore[attr-defined]
