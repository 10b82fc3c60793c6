"""One table: kernelkit dtype name <-> C type and size, and every framework's spelling of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._errors import ArgumentTypeError

__all__ = ["DTYPES", "PY_SCALAR_DTYPES", "DType", "normalize_dtype"]


@dataclass(frozen=True)
class DType:
    """A dtype kernelkit can pass to a kernel."""

    name: str  # kernelkit's canonical name, also numpy's (and torch's, without "torch.")
    ctype: str  # C spelling in generated source (defined by every backend's prelude)
    itemsize: int


_ROWS = (
    DType("bool", "bool", 1),
    DType("int8", "int8_t", 1),
    DType("int16", "int16_t", 2),
    DType("int32", "int32_t", 4),
    DType("int64", "int64_t", 8),
    DType("uint8", "uint8_t", 1),
    DType("uint16", "uint16_t", 2),
    DType("uint32", "uint32_t", 4),
    DType("uint64", "uint64_t", 8),
    DType("float16", "__half", 2),
    DType("bfloat16", "__nv_bfloat16", 2),
    DType("float32", "float", 4),
    DType("float64", "double", 8),
)

DTYPES: dict[str, DType] = {d.name: d for d in _ROWS}

# Python scalars passed by value, as in MLX: float -> float32, int -> int32
PY_SCALAR_DTYPES: dict[type, str] = {bool: "bool", int: "int32", float: "float32"}

_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "bool_": "bool",
    "int": "int32",
    "uint": "uint32",
    "long": "int64",
}


def normalize_dtype(value: Any, what: str = "[kernel] dtype") -> DType:
    """Map any framework's dtype spelling (str, numpy, torch, cupy, jax) to a ``DType``.

    Raises ``TypeError`` naming ``what`` when the value is not a dtype kernelkit supports.
    """
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        text = value
    elif isinstance(value, type) and hasattr(value, "dtype"):  # numpy scalar types: np.float32
        import numpy as np

        text = np.dtype(value).name
    else:
        name = getattr(value, "name", None) if not _is_torch_dtype(value) else None
        text = name if isinstance(name, str) else str(value)
    text = text.removeprefix("torch.").removeprefix("dtype(").strip("')\"")
    text = _ALIASES.get(text, text)
    found = DTYPES.get(text)
    if found is None:
        raise ArgumentTypeError(
            f"{what} {value!r} is not a supported dtype; expected one of {', '.join(DTYPES)}"
        )
    return found


def _is_torch_dtype(value: Any) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"
