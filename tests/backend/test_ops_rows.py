"""Built-in row ops (softmax, rms_norm, layer_norm) against a float64 reference: dtypes, odd
and long rows, 3-D and non-contiguous inputs, other dims, out=, every kind of config (forced),
on the CPU backend with NumPy and torch CPU tensors, and on CUDA when present."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._select.override import force

RNG = np.random.default_rng(11)
TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rms(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def _layer(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


@pytest.fixture(params=["float32", "float16", "bfloat16"])
def dtype(request, arrays):
    if request.param == "bfloat16" and not arrays.use_torch:
        pytest.skip("NumPy has no bfloat16 without ml_dtypes; covered with torch tensors")
    return request.param


def put(arrays, a, dtype):
    """A device array of ``dtype`` holding ``a`` (bfloat16 through torch)."""
    if dtype == "bfloat16":
        t = arrays.torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(arrays.torch.bfloat16)
        return t.cuda() if arrays.on_gpu else t
    return arrays.put(np.asarray(a, dtype))


def get(arrays, y):
    if hasattr(y, "float"):
        y = y.float()
    return arrays.get(y).astype(np.float64)


def exact(arrays, a, dtype):
    """The values the device array holds, in float64 (inputs rounded to dtype first)."""
    return get(arrays, put(arrays, a, dtype))


SHAPES = [(1, 1), (3, 7), (4, 33), (2, 1000), (5, 1024), (2, 3, 130), (1, 5000)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax(arrays, dtype, shape):
    a = RNG.standard_normal(shape) * 4
    y = ops.softmax(put(arrays, a, dtype))
    np.testing.assert_allclose(get(arrays, y), _softmax(exact(arrays, a, dtype)), atol=TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm(arrays, dtype, shape):
    a, w = RNG.standard_normal(shape), RNG.standard_normal(shape[-1])
    x, wx = put(arrays, a, dtype), put(arrays, w, dtype)
    ref = _rms(exact(arrays, a, dtype), exact(arrays, w, dtype), 1e-5)
    y = ops.rms_norm(x, wx, eps=1e-5)
    tol = TOL[dtype] * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(get(arrays, y), ref, atol=tol, rtol=TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm(arrays, dtype, shape):
    a = RNG.standard_normal(shape) * 3 + 5  # a mean far from zero: the two-pass variance matters
    w, b = RNG.standard_normal(shape[-1]), RNG.standard_normal(shape[-1])
    ref = _layer(exact(arrays, a, dtype), exact(arrays, w, dtype), exact(arrays, b, dtype), 1e-5)
    y = ops.layer_norm(put(arrays, a, dtype), put(arrays, w, dtype), put(arrays, b, dtype))
    tol = TOL[dtype] * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(get(arrays, y), ref, atol=tol, rtol=TOL[dtype])


@pytest.mark.parametrize(
    "config",
    [
        {"BLOCK": 32, "ITEMS": 0},
        {"BLOCK": 256, "ITEMS": 0},
        {"BLOCK": 1024, "ITEMS": 1},
        {"BLOCK": 64, "ITEMS": 8},
    ],
    ids=str,
)
def test_every_kind_of_config_gives_the_same_answer(arrays, config):
    a, w = RNG.standard_normal((3, 1021)), RNG.standard_normal(1021)  # odd: the scalar path
    a2 = RNG.standard_normal((3, 1024))  # aligned: the vector path
    forced = {**config, "threadgroup": (config["BLOCK"],)}
    for data in (a, a2):
        x = arrays.put(data.astype(np.float32))
        with force("softmax", "rows", forced):
            y = ops.softmax(x)
        np.testing.assert_allclose(arrays.get(y), _softmax(data.astype(np.float32)), atol=2e-6)
        wx = (
            arrays.put(w[: data.shape[1]].astype(np.float32))
            if data is a
            else arrays.put(RNG.standard_normal(1024).astype(np.float32))
        )
        with force("rms_norm", "rows", forced):
            y = ops.rms_norm(x, wx)
        ref = _rms(
            data.astype(np.float32).astype(np.float64), arrays.get(wx).astype(np.float64), 1e-6
        )
        np.testing.assert_allclose(arrays.get(y), ref, atol=2e-5, rtol=2e-5)


def test_a_config_too_small_for_the_row_cannot_be_forced(arrays):
    x = arrays.put(np.ones((2, 5000), np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="does not fit"):
        with force("softmax", "rows", {"BLOCK": 32, "ITEMS": 1, "threadgroup": (32,)}):
            ops.softmax(x)


def test_other_dims_non_contiguous_inputs_and_out(arrays):
    a = RNG.standard_normal((6, 5, 9)).astype(np.float32)
    x = arrays.put(a)
    np.testing.assert_allclose(
        arrays.get(ops.softmax(x, dim=1)),
        np.moveaxis(_softmax(np.moveaxis(a, 1, -1)), -1, 1),
        atol=2e-6,
    )
    strided = arrays.put(a[:, ::2, :])  # a non-contiguous view
    np.testing.assert_allclose(arrays.get(ops.softmax(strided)), _softmax(a[:, ::2, :]), atol=2e-6)
    out = arrays.put(np.full(a.shape, np.nan, np.float32))
    y = ops.softmax(x, out=out)
    assert y is out
    np.testing.assert_allclose(arrays.get(out), _softmax(a), atol=2e-6)


def test_bad_arguments_name_themselves(arrays):
    x = arrays.put(np.ones((2, 8), np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="dim"):
        ops.softmax(x, dim=2)
    with pytest.raises(kernelkit.ArgumentError, match=r"weight must have shape \(8,\)"):
        ops.rms_norm(x, arrays.put(np.ones(7, np.float32)))
    with pytest.raises(kernelkit.ArgumentError, match="eps"):
        ops.rms_norm(x, arrays.put(np.ones(8, np.float32)), eps=-1.0)
    with pytest.raises(kernelkit.ArgumentError, match="int32 is not one of"):
        ops.softmax(arrays.put(np.ones((2, 8), np.int32)))
    np.testing.assert_allclose(arrays.get(ops.softmax(x)), np.full((2, 8), 0.125), atol=1e-7)


def test_explain_reports_the_choice(arrays):
    x = arrays.put(np.ones((4, 2048), np.float32))
    text = ops.softmax.explain(x).explain()
    assert "softmax/rows" in text and "N=2048" in text and "heuristic" in text


def test_norm_weights_of_another_dtype_or_misaligned(arrays):
    a = RNG.standard_normal((3, 1024)).astype(np.float32)
    w_full = RNG.standard_normal(1025).astype(np.float32)
    x = arrays.put(a.astype(np.float16))
    xd = arrays.get(x).astype(np.float64)
    for w in (w_full[1:], w_full[:1024]):  # a weight view 4 bytes off alignment, and aligned
        wx = arrays.put(w)  # float32 weight for a float16 x: the scalar weight path
        y = ops.rms_norm(x, wx, eps=1e-5)
        ref = _rms(xd, w.astype(np.float64), 1e-5)
        np.testing.assert_allclose(arrays.get(y).astype(np.float64), ref, atol=4e-3, rtol=4e-3)
    xf = arrays.put(a)
    offset = arrays.put(w_full)[1:]  # same dtype, misaligned: vector x, scalar weight
    bias = arrays.put(w_full)[:1024]
    y = ops.layer_norm(xf, offset, bias)
    ref = _layer(a.astype(np.float64), w_full[1:].astype(np.float64), w_full[:1024], 1e-5)
    np.testing.assert_allclose(arrays.get(y), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (2, 0, 5)], ids=str)
def test_empty_inputs_launch_nothing(arrays, shape):
    """A launch for zero rows read and wrote memory the arrays do not have (heap corruption)."""
    x = arrays.put(np.zeros(shape, np.float32))
    w = arrays.put(np.ones(shape[-1], np.float32))
    for y in (ops.softmax(x), ops.rms_norm(x, w), ops.layer_norm(x, w, w)):
        assert tuple(y.shape) == shape
