"""The dtype table and every spelling that maps onto it."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit._dtypes import DTYPES, DType, normalize_dtype


def test_table_is_consistent():
    for name, d in DTYPES.items():
        assert d.name == name
    assert len({d.ctype for d in DTYPES.values()}) == len(DTYPES)


@pytest.mark.parametrize("name", [n for n in DTYPES if n != "bfloat16"])
def test_numpy_itemsizes_agree(name):
    assert np.dtype(name).itemsize == DTYPES[name].itemsize
    assert normalize_dtype(np.dtype(name)).name == name
    assert normalize_dtype(np.dtype(name).type).name == name
    assert normalize_dtype(name) is DTYPES[name]


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("half", "float16"),
        ("fp16", "float16"),
        ("float", "float32"),
        ("fp32", "float32"),
        ("double", "float64"),
        ("fp64", "float64"),
        ("bf16", "bfloat16"),
        ("bool_", "bool"),
        ("int", "int32"),
        ("uint", "uint32"),
        ("long", "int64"),
    ],
)
def test_aliases(spelling, name):
    assert normalize_dtype(spelling).name == name


def test_a_dtype_record_passes_through():
    d = DTYPES["int8"]
    assert normalize_dtype(d) is d


@pytest.mark.parametrize(
    "name",
    [
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
    ],
)
def test_torch_dtypes(name):
    torch = pytest.importorskip("torch")
    assert normalize_dtype(getattr(torch, name)).name == name
    assert normalize_dtype(torch.zeros(1, dtype=getattr(torch, name)).dtype).name == name


@pytest.mark.parametrize(
    "value",
    ["complex64", np.complex64, np.dtype("complex128"), "float8", "", "torch.float99", object(), 3],
)
def test_unsupported_dtype_names_what(value):
    with pytest.raises(TypeError, match="output_dtypes\\[2\\]"):
        normalize_dtype(value, "output_dtypes[2]")


def test_torch_complex_is_unsupported():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"input 'x'.*not a supported dtype"):
        normalize_dtype(torch.complex64, "input 'x'")


def test_array_dtypes():
    assert normalize_dtype(np.zeros(3, np.uint16).dtype, "x") is DTYPES["uint16"]
    with pytest.raises(TypeError, match="input 'z'"):
        normalize_dtype(np.zeros(3, np.complex64).dtype, "input 'z'")


def test_dtype_is_frozen_and_hashable():
    d = DTYPES["float32"]
    with pytest.raises(AttributeError):
        d.name = "x"  # type: ignore[misc]
    assert {d: 1}[DType("float32", "float", 4)] == 1
