"""``kernelkit.tensor_map`` without a device: the parameter it becomes (signature, argument
slot, no shape parameters), backends without TMA refusing it by name, and bad boxes refused
before any backend is asked."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kernelkit
from kernelkit._abi import signature
from kernelkit._pipeline.pack import ArgPack
from kernelkit._pipeline.render import make_params
from kernelkit._records import Param


def test_the_signature_takes_it_by_value_as_a_grid_constant():
    p = Param("w_map", "tensor_map", "bfloat16")
    assert signature((p,)) == "const __grid_constant__ kk_tensor_map w_map"
    pack = ArgPack((Param("x", "array", "float32"), p))
    assert ctypes.sizeof(pack.slots[1]) == 128  # the driver copies 128 bytes from the slot


def test_a_map_gets_no_shape_parameters_and_a_body_naming_them_is_refused():
    from kernelkit._dtypes import DTYPES

    f32 = DTYPES["float32"]
    k = kernelkit.kernel("tm_meta", ["x", "m"], ["y"], "y[0] = x_shape[0];")
    params = make_params(k.spec, [("array", f32), ("tensor_map", f32)], [f32], False)
    assert [p.name for p in params] == ["x", "x_shape", "m", "y"]
    bad = kernelkit.kernel("tm_meta2", ["x", "m"], ["y"], "y[0] = x_shape[0] + m_shape[0];")
    with pytest.raises(kernelkit.ArgumentTypeError, match=r"'m' is a tensor map: .*m_shape"):
        make_params(bad.spec, [("array", f32), ("tensor_map", f32)], [f32], False)


def test_host_memory_has_no_tma_and_the_cpu_backend_cannot_pass_one():
    with pytest.raises(kernelkit.BackendError, match="no tensor maps"):
        kernelkit.tensor_map(np.zeros((64, 64), np.float32), (8, 32))
    from kernelkit._backends.cpu import CPUBackend

    with pytest.raises(TypeError, match="tensor map 'm'"):
        CPUBackend().check_params((Param("m", "tensor_map", "float32"),))


@pytest.mark.parametrize(
    ("shape", "box", "kw", "message"),
    [
        ((64, 64), (8,), {}, "each of the array's 2 dimensions"),
        ((64, 64), (8, 0), {}, "1 to 256"),
        ((64, 64), (8, 257), {}, "1 to 256"),
        ((64, 64), (8, True), {}, "1 to 256"),
        ((64, 64), "ab", {}, "sequence of ints"),
        ((64, 64), (8, 64), {}, "exceeds the 128-byte swizzle"),
        ((64, 64), (8, 2), {"swizzle": 0}, "multiple of 16 bytes"),
        ((64, 64), (8, 32), {"swizzle": 96}, "swizzle must be one of"),
        ((0, 64), (8, 32), {}, "no elements"),
        ((2, 2, 2, 2, 2, 2), (1,) * 6, {}, "1 to 5 dimensions"),
    ],
)
def test_bad_boxes_are_refused_naming_the_argument(shape, box, kw, message):
    with pytest.raises((kernelkit.ArgumentError, kernelkit.ArgumentTypeError), match=message):
        kernelkit.tensor_map(np.zeros(shape, np.float32), box, **kw)


def test_strides_that_tma_cannot_take_are_refused():
    a = np.zeros((64, 64), np.float32)
    with pytest.raises(kernelkit.ArgumentError, match="contiguous"):
        kernelkit.tensor_map(a.T, (8, 32))
    with pytest.raises(kernelkit.ArgumentError, match="multiples of 16 bytes"):
        kernelkit.tensor_map(np.zeros((64, 66), np.float32)[:, :64], (8, 32))  # 264-byte rows


def test_a_kernel_call_binds_a_map_and_the_cpu_backend_refuses_it_by_name():
    """A TensorMap (built here by hand: no GPU encodes one) is keyed and bound as an input; the
    CPU backend, which has no TMA, names it; the next plain call works."""
    from kernelkit._tensor_map import TensorMap

    x = np.arange(8, dtype=np.float32)
    words = (ctypes.c_uint64 * 16)()
    m = TensorMap("float32", (8,), (1,), (8,), 0, 1, 0, words)
    k = kernelkit.kernel("tm_bind", ["x", "m"], ["y"], "y[threadIdx.x] = x[threadIdx.x];")
    with pytest.raises(kernelkit.ArgumentTypeError, match="tensor map 'm'"):
        k([x, m], output_shapes=[(8,)], output_dtypes=["float32"], threadgroup=(8, 1, 1),
          grid=(8, 1, 1))  # fmt: skip
    plain = kernelkit.kernel("tm_plain", ["x"], ["y"], "y[threadIdx.x] = x[threadIdx.x];")
    out = plain([x], output_shapes=[(8,)], output_dtypes=["float32"], threadgroup=(8, 1, 1),
                grid=(8, 1, 1))  # fmt: skip
    np.testing.assert_array_equal(out[0], x)


def _fake_map(dtype="float32", device_index=0):
    from kernelkit._tensor_map import TensorMap

    return TensorMap(dtype, (8,), (1,), (8,), 0, 2, device_index, (ctypes.c_uint64 * 16)())


def test_the_key_holds_the_maps_dtype_and_device():
    """A plan made for a map of one device's (or dtype's) memory is not reused for another."""
    from kernelkit._pipeline.key import call_key

    x = np.zeros(8, np.float32)

    def key(m):
        return call_key([x, m], None, ["float32"], (8, 1, 1), (8, 1, 1), None, None, None, None,
                        None, None, None)  # fmt: skip

    assert key(_fake_map()) == key(_fake_map())
    assert key(_fake_map()) != key(_fake_map(device_index=1))
    assert key(_fake_map()) != key(_fake_map("float16"))


def test_a_map_is_not_an_array():
    m = _fake_map()
    k = kernelkit.kernel("tm_out", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(kernelkit.ArgumentTypeError, match="tensor map"):
        k([np.zeros(8, np.float32)], out=[m], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(kernelkit.ArgumentTypeError, match="already a tensor map"):
        kernelkit.tensor_map(m, (8,))
    from kernelkit import ops

    with pytest.raises(kernelkit.ArgumentTypeError, match="must be an array"):
        ops.matmul(np.zeros((2, 8), np.float32), m)


@pytest.fixture
def fake_encoder(monkeypatch):
    """The CPU backend encodes maps as 128 bytes numbering its calls (no TMA here)."""
    from kernelkit._backends.cpu import CPUBackend

    calls = []

    def encode(self, request):
        calls.append(request)
        return bytes([len(calls)] * 128)

    monkeypatch.setattr(CPUBackend, "encode_tensor_map", encode, raising=False)
    return calls


def test_maps_are_kept_per_array_facts_and_box(fake_encoder):
    a = np.zeros((64, 64), np.float32)
    m = kernelkit.tensor_map(a, (8, 32))
    assert kernelkit.tensor_map(a, [8, 32]) is m and len(fake_encoder) == 1  # kept
    req = fake_encoder[0]
    assert (req.shape, req.strides_bytes, req.box, req.swizzle) == (
        (64, 64),
        (256, 4),
        (8, 32),
        128,
    )
    assert req.address == a.ctypes.data and req.dtype == "float32"
    view = a[:, :32]  # the same address, another shape and the same strides
    assert kernelkit.tensor_map(view, (8, 32)) is not m and fake_encoder[-1].shape == (64, 32)
    assert kernelkit.tensor_map(a, (16, 32)) is not m  # another box
    assert kernelkit.tensor_map(a, (np.int64(8), 32)).box == (8, 32)  # NumPy ints are ints
    assert kernelkit.tensor_map(a, np.array([8, 32])).box == (8, 32)
    with pytest.raises(kernelkit.ArgumentError, match="1 to 256"):
        kernelkit.tensor_map(a, (8.0, 32))  # a float box is refused, though (8, 32) is kept
    with pytest.raises(kernelkit.ArgumentError, match="swizzle must be one of"):
        kernelkit.tensor_map(a, (8, 32), swizzle=128.0)
    assert bytes(m.words)[:1] == b"\x01"  # the backend's bytes, copied into kernelkit's buffer
