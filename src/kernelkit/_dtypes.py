"""One table: kernelkit dtype name <-> C type, size, struct format, and framework spellings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DType", "DTYPES", "dtype_of", "normalize_dtype"]


@dataclass(frozen=True)
class DType:
    """A dtype kernelkit can pass to a kernel."""

    name: str  # kernelkit's canonical name, also numpy's (and torch's, without "torch.")
    ctype: str  # C spelling in generated source (defined by every backend's prelude)
    itemsize: int
    struct_format: str  # struct/ctypes code used to pack a by-value scalar
    dlpack: tuple[int, int]  # (DLPack type code, bits)


_ROWS = (
    DType("bool", "bool", 1, "?", (6, 8)),
    DType("int8", "int8_t", 1, "b", (0, 8)),
    DType("int16", "int16_t", 2, "h", (0, 16)),
    DType("int32", "int32_t", 4, "i", (0, 32)),
    DType("int64", "int64_t", 8, "q", (0, 64)),
    DType("uint8", "uint8_t", 1, "B", (1, 8)),
    DType("uint16", "uint16_t", 2, "H", (1, 16)),
    DType("uint32", "uint32_t", 4, "I", (1, 32)),
    DType("uint64", "uint64_t", 8, "Q", (1, 64)),
    DType("float16", "__half", 2, "e", (2, 16)),
    DType("bfloat16", "__nv_bfloat16", 2, "H", (4, 16)),
    DType("float32", "float", 4, "f", (2, 32)),
    DType("float64", "double", 8, "d", (2, 64)),
)

DTYPES: dict[str, DType] = {d.name: d for d in _ROWS}

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

_BY_DLPACK = {d.dlpack: d for d in _ROWS}


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
        text = getattr(value, "name", None) if not _is_torch_dtype(value) else None
        if not isinstance(text, str):
            text = str(value)
    text = text.removeprefix("torch.").removeprefix("dtype(").strip("')\"")
    text = _ALIASES.get(text, text)
    found = DTYPES.get(text)
    if found is None:
        raise TypeError(
            f"{what} {value!r} is not a supported dtype; expected one of {', '.join(DTYPES)}"
        )
    return found


def _is_torch_dtype(value: Any) -> bool:
    return type(value).__module__ == "torch" and type(value).__name__ == "dtype"


def dtype_of(array: Any, what: str) -> DType:
    """The kernelkit dtype of an array (anything with ``.dtype``)."""
    return normalize_dtype(array.dtype, what)


def from_dlpack_code(code: int, bits: int, what: str) -> DType:
    """The dtype of a DLPack tensor."""
    found = _BY_DLPACK.get((code, bits))
    if found is None:
        raise TypeError(f"{what} has DLPack dtype code {code} with {bits} bits: unsupported")
    return found
