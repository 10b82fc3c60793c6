"""Records are frozen, hashable, validated at construction, printable."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernelkit._records import (
    MAX_NDIM,
    Artifact,
    CompileRequest,
    KernelSource,
    KernelSpec,
    Param,
    Target,
)


def _target(**kw):
    base = dict(
        backend="b",
        device=0,
        arch="sm_90",
        name="dev",
        max_threads_per_block=1024,
        max_block_dims=(1024, 1024, 64),
        max_grid_dims=(2**31 - 1, 65535, 65535),
        max_shared_memory_bytes=48 * 1024,
        max_shared_memory_optin_bytes=227 * 1024,
        features=frozenset({"bf16", "fp16"}),
    )
    base.update(kw)
    return Target(**base)


def _examples():
    p = Param("x", "array", "float32")
    return [
        KernelSpec("k", ("x",), ("y",), "y[0] = x[0];", metadata_refs=frozenset({"x_shape"})),
        p,
        KernelSource("k", "k", (p,), "", "", "y[0] = x[0];", frozenset({"fp16"})),
        _target(),
        CompileRequest("b", "k", "k", "sm_90", "src", ("-O3",), (("h.h", "abc"),), ("array",)),
        Artifact("cubin", b"\x00\x01", "k", "sm_90", {"m": 1}, "log"),
    ]


@pytest.mark.parametrize("record", _examples(), ids=lambda r: type(r).__name__)
def test_frozen(record):
    field = dataclasses.fields(record)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, field, "other")


@pytest.mark.parametrize(
    "record",
    [r for r in _examples() if not isinstance(r, Artifact)],
    ids=lambda r: type(r).__name__,
)
def test_hashable_and_equal_by_value(record):
    twin = dataclasses.replace(record)
    assert twin == record and hash(twin) == hash(record)
    assert {record: 1}[twin] == 1
    assert type(record).__name__ in repr(record)


def test_artifact_equality_ignores_metadata_and_log():
    a = Artifact("so", b"bin", "k", "x86_64", {"t": 1}, "log one")
    b = Artifact("so", b"bin", "k", "x86_64", {"t": 2}, "log two")
    assert a == b
    assert a != dataclasses.replace(a, binary=b"other")
    assert "bin" not in repr(a)  # binaries are not printed


def test_param_needs_a_dtype_for_data_kinds():
    for kind in ("array", "scalar", "scalar_array"):
        with pytest.raises(ValueError, match="'x'"):
            Param("x", kind)
    for kind in ("dims", "ndim", "extent"):
        assert Param("x", kind).dtype is None


def test_target_json_round_trips():
    t = _target()
    d = json.loads(t.to_json())
    assert d["features"] == ["bf16", "fp16"]
    d["features"] = frozenset(d["features"])
    for k in ("max_block_dims", "max_grid_dims"):
        d[k] = tuple(d[k])
    assert Target(**d) == t


def test_different_requests_differ():
    r = _examples()[4]
    assert r != dataclasses.replace(r, source="src2")
    assert r != dataclasses.replace(r, arch="sm_80")
    assert r != dataclasses.replace(r, options=("-O2",))


def test_max_ndim():
    assert MAX_NDIM == 8
