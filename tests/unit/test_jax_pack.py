"""The attributes of a kernelkit call through XLA's FFI, without a device or JAX: the flattened
argument pack (slots, offsets, buffer indices, constant slots), the CUDA handler's attributes
for a fake target, and that every device's program gets the geometry checked."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._integrations import jax_pack
from kernelkit._pipeline.render import make_params
from kernelkit._records import MAX_NDIM

F32, I32 = DTYPES["float32"], DTYPES["int32"]
BODY = "y[0] = alpha * x[0] + x_shape[0] + x_ndim + b[0] + y_strides[0];"


def _params(checked: bool = False):
    spec = kernelkit.kernel("pk", ["x", "alpha", "b"], ["y"], BODY).spec
    return make_params(spec, [("array", F32), ("scalar", F32), ("array", F32)], [F32], checked)


def _slot(packed: jax_pack.Packed, params, name: str) -> bytes:
    i = [p.name for p in params].index(name)
    start = int(packed.offsets[i])
    return packed.words.tobytes()[start:]


def test_pack_fills_constant_slots_and_names_array_buffers():
    params = _params()
    arrays = {"x": (3, 5), "b": (5,), "y": (3, 5)}
    packed = jax_pack.pack("pk", params, arrays, {"alpha": 1.5})
    names = [p.name for p in params]
    buffers = dict(zip(names, packed.buffers.tolist()))
    assert buffers == {
        "x": 0,
        "x_shape": -1,
        "x_ndim": -1,
        "alpha": -1,
        "b": 1,
        "y": 2,
        "y_strides": -1,
    }
    assert all(o % 8 == 0 for o in packed.offsets) and list(packed.offsets) == sorted(
        packed.offsets
    )
    assert packed.words.dtype == np.int64
    assert struct.unpack("<f", _slot(packed, params, "alpha")[:4])[0] == 1.5
    shape = struct.unpack(f"<{MAX_NDIM}q", _slot(packed, params, "x_shape")[: 8 * MAX_NDIM])
    assert shape[:2] == (3, 5) and not any(shape[2:])
    assert struct.unpack("<i", _slot(packed, params, "x_ndim")[:4])[0] == 2
    strides = struct.unpack(f"<{MAX_NDIM}q", _slot(packed, params, "y_strides")[: 8 * MAX_NDIM])
    assert strides[:2] == (5, 1)


def test_an_absent_optional_input_is_a_null_slot_with_shape_zero():
    params = _params()
    packed = jax_pack.pack("pk", params, {"x": None, "b": (2,), "y": (2,)}, {"alpha": 0.0})
    names = [p.name for p in params]
    assert packed.buffers[names.index("x")] == -1
    assert packed.buffers[names.index("b")] == 0 and packed.buffers[names.index("y")] == 1
    assert struct.unpack("<q", _slot(packed, params, "x")[:8])[0] == 0
    assert struct.unpack("<q", _slot(packed, params, "x_shape")[:8])[0] == 0
    assert struct.unpack("<i", _slot(packed, params, "x_ndim")[:4])[0] == 1


def test_checked_mode_extents_are_filled():
    params = _params(checked=True)
    packed = jax_pack.pack("pk", params, {"x": (4, 0), "b": (7,), "y": (2, 3)}, {"alpha": 1.0})
    extent = {p.name: _slot(packed, params, p.name)[:8] for p in params if p.kind == "extent"}
    assert {k: struct.unpack("<q", v)[0] for k, v in extent.items()} == {
        "kk_extent_x": 0,
        "kk_extent_b": 7,
        "kk_extent_y": 6,
    }


def test_too_many_dimensions_for_the_shape_metadata_is_an_argument_error():
    with pytest.raises(kernelkit.ArgumentError, match="at most"):
        jax_pack.pack(
            "pk", _params(), {"x": (1,) * (MAX_NDIM + 1), "b": (1,), "y": (1,)}, {"alpha": 1.0}
        )


def test_cuda_attributes_keep_pointers_bit_for_bit():
    packed = jax_pack.pack("pk", _params(), {"x": (2,), "b": (2,), "y": (2,)}, {"alpha": 1.0})
    high = 0xFFFF_8000_0000_1000  # above int64's range: stored as the same 64 bits
    attrs = jax_pack.cuda_attributes([(0x10, high), (0x20, 0x7F00)], (1, 2, 3, 4, 5, 6, 7), packed)
    assert attrs["functions"].dtype == np.int64 and attrs["contexts"].dtype == np.int64
    assert attrs["functions"].view(np.uint64).tolist() == [high, 0x7F00]
    assert attrs["contexts"].tolist() == [0x10, 0x20]
    assert attrs["geometry"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert attrs["pack"] is packed.words and attrs["buffers"] is packed.buffers


class _FakeLoaded:
    """A loaded CUDA program on one device, as ``jax_pack`` reads it."""

    def __init__(self, device: int, function: int) -> None:
        self.program = SimpleNamespace(device=device, function=function)
        self.checked: list[tuple] = []

    def geometries(self, grid, threadgroup, shared):
        self.checked.append((grid, threadgroup, shared))
        return (4, 1, 1, 32, 1, 1, 0 if shared is None else shared)


def test_cuda_attributes_from_one_plan_per_device(monkeypatch):
    from kernelkit._backends.cuda import driver

    monkeypatch.setattr(driver, "primary_context", lambda device: 0xC0 + device)
    params = _params()
    plans = [
        SimpleNamespace(kernel="pk", params=params, loaded=_FakeLoaded(d, 0xF00 + d))
        for d in (0, 1)
    ]
    launch = ((128, 1, 1), (32, 1, 1), 65536)
    attrs = jax_pack.attributes(
        "cuda", plans, {"x": (128,), "b": (128,), "y": (128,)}, {"alpha": 2.0}, launch
    )
    assert attrs["functions"].tolist() == [0xF00, 0xF01]
    assert attrs["contexts"].tolist() == [0xC0, 0xC1]
    assert attrs["geometry"].tolist() == [4, 1, 1, 32, 1, 1, 65536]
    # every device's program checks the geometry (and reserves its shared memory)
    assert all(p.loaded.checked == [launch] for p in plans)
    assert all(jax_pack._keep[0xF00 + d] is plans[d].loaded for d in (0, 1))
