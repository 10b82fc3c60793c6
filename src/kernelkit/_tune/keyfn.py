"""The per-call key of an autotuned kernel: generated per argument pattern (each argument's
kind and the counts of outputs), a straight-line function returning the tuple of everything a
decision and its grid can depend on (types, shapes, dtypes, int scalar values), so a repeated
call costs one call and one dictionary lookup. Anything unexpected raises (the slow path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._generated import execute


def is_int_scalar(x: Any) -> bool:
    if type(x) in (int, bool):
        return True
    import numpy as np

    return isinstance(x, np.integer | np.bool_)


def no_key(*args: Any) -> Any:
    raise LookupError


def _kind(x: Any) -> str:
    if x is None:
        return "none"
    if type(x) in (int, bool):
        return "value"
    if type(x) is float:
        return "type"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return "array"
    return "value"  # a NumPy scalar: its dtype is its type


def call_pattern(inputs: Any, out: Any, shapes: Any, dtypes: Any) -> tuple:
    """What the compiled key function is specialized for: each argument's kind and counts."""
    return (
        tuple(_kind(x) for x in inputs),
        None if out is None else len(out),
        None if shapes is None else len(shapes),
        None if dtypes is None else len(dtypes),
    )


def compile_key(pattern: tuple, features: Sequence[str], tag: int) -> Callable[..., Any]:
    """Generated code (kept in ``run_source``): the tuple of everything a decision and its grid
    can depend on, for calls of this pattern; anything else raises (slow path)."""
    from .._arrays import KEY_FN

    kinds, n_out, n_shapes, n_dtypes = pattern
    layout = any(f.split(":")[0].endswith(".contiguous") for f in features)
    names = [f"x{i}" for i in range(len(kinds))]
    parts = [str(tag)]  # keys of two patterns never collide
    for name, kind in zip(names, kinds):
        parts.append(f"type({name})")
        if kind == "array":
            parts += [f"{name}.shape", f"kf[type({name})]({name})"]
            if layout:
                parts.append(f"contig({name})")
        elif kind == "value":
            parts.append(name)
    lines = ["def key(inputs, out, output_shapes, output_dtypes, backend):"]
    lines.append(f"    ({', '.join(names)}{',' if len(names) == 1 else ''}) = inputs")
    if n_out is None:
        parts.append("out")
    else:
        lines.append(f"    if len(out) != {n_out}: raise LookupError")
        for j in range(n_out):
            parts += [f"type(out[{j}])", f"out[{j}].shape", f"kf[type(out[{j}])](out[{j}])"]
            if layout:
                parts.append(f"contig(out[{j}])")
    if n_shapes is None:
        parts.append("output_shapes")
    else:
        lines.append(f"    if len(output_shapes) != {n_shapes}: raise LookupError")
        parts += [f"tuple(output_shapes[{j}])" for j in range(n_shapes)]
    if n_dtypes is None:
        parts.append("output_dtypes")
    else:
        lines.append(f"    if len(output_dtypes) != {n_dtypes}: raise LookupError")
        parts += [f"output_dtypes[{j}]" for j in range(n_dtypes)]
    parts.append("backend")
    lines.append(f"    return ({', '.join(parts)},)")
    source = "\n".join(lines) + "\n"
    namespace: dict[str, Any] = {"kf": KEY_FN, "contig": _contiguous}
    execute(source, namespace, "autotune key")
    fn = namespace["key"]
    fn.run_source = source
    return fn


def _contiguous(x: Any) -> Any:
    from .._arrays.lookup import adapter_for

    return adapter_for(x, "argument").is_contiguous(x)
