"""``kernelkit explain OP --dims ...``: the choice a built-in op makes for a shape and why,
without running it (arrays of that shape are made, zero-filled, on the device asked for)."""

from __future__ import annotations

from typing import Any

from .op_cases import OPS, make_case, parse_dims, parse_dtypes

__all__ = ["OPS", "explain_op", "explain_ops"]


def explain_op(
    op: str,
    dims: str,
    dtype: str = "float32",
    device: str = "cpu",
    transpose_b: bool = True,
    framework: str | None = None,
) -> Any:
    """The ``Selection`` of built-in ``op`` for one problem ``dims`` (see ``OPS``) on
    ``device``."""
    (shape,) = parse_dims(op, dims)
    (name,) = parse_dtypes(dtype)
    case = make_case(op, shape, name, device, framework=framework, transpose_b=transpose_b)
    return case.explain()


def explain_ops(
    op: str,
    dims: str,
    dtypes: str = "float32",
    device: str = "cpu",
    transpose_b: bool = True,
    framework: str | None = None,
) -> list[tuple[str, Any]]:
    """``(problem label, Selection)`` for every problem of ``dims`` (comma-separated) in every
    dtype of ``dtypes``."""
    out = []
    for dtype in parse_dtypes(dtypes):
        for shape in parse_dims(op, dims):
            case = make_case(op, shape, dtype, device, framework=framework, transpose_b=transpose_b)
            out.append((case.label, case.explain()))
    return out
