"""The built-in ops on CuPy arrays, warm (issue 26): CuPy's arrays are checked in C
(``kk_launch.Guards``), so a warm call is launched by the op's call repeated in C; every call,
warm or not, against a float64 reference, and calls of another shape, stride or dtype get their
own results. The launch goes on CuPy's current stream."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit import _arrays, ops
from kernelkit._arrays.lookup import adapter_for
from kernelkit.ops import _matmul, _norms, _softmax

cp = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cp.cuda.runtime.getDeviceCount() == 0, reason="needs a CUDA GPU"),
]

RNG = np.random.default_rng(7)
SWIGLU = ops.elementwise("y = a * b / (1 + exp(-b))")


def _put(a: np.ndarray, dtype: str) -> object:
    return cp.asarray(a.astype(dtype))


def _f64(x: object) -> np.ndarray:
    return cp.asnumpy(x).astype(np.float64)


def _softmax_ref(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rms_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


def _layer_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


TOL = {"float32": 2e-5, "float16": 4e-3}


def _cases(dtype: str, rows: int, n: int):
    x = _put(RNG.standard_normal((rows, n)), dtype)
    b = _put(RNG.standard_normal((rows, n)), dtype)
    w = _put(RNG.random(n) + 0.5, dtype)
    bias = _put(RNG.standard_normal(n), dtype)
    wt = _put(RNG.standard_normal((96, n)) / np.sqrt(n), dtype)
    xd, bd, wd, biasd, wtd = map(_f64, (x, b, w, bias, wt))
    return {
        "softmax": (lambda: ops.softmax(x), lambda: _softmax_ref(xd), _softmax._RECENT),
        "rms_norm": (lambda: ops.rms_norm(x, w, 1e-6), lambda: _rms_ref(xd, wd),
                     _norms._RMS_RECENT),
        "layer_norm": (lambda: ops.layer_norm(x, w, bias, 1e-5),
                       lambda: _layer_ref(xd, wd, biasd), _norms._LAYER_RECENT),
        "elementwise": (lambda: SWIGLU(x, b), lambda: xd * bd / (1 + np.exp(-bd)),
                        SWIGLU._recent),
        "matmul": (lambda: ops.matmul(x[:1], wt, transpose_b=True), lambda: xd[:1] @ wtd.T,
                   _matmul._RECENT[True]),
    }  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_warm_calls_on_cupy_arrays_are_launched_from_c_and_right(dtype):
    if not _arrays.GUARDS:
        ops.softmax(cp.ones((1, 8), cp.float32))  # loads the native module, if it can be had
    if not _arrays.GUARDS:
        pytest.skip("no native module here (kernelkit info says why)")
    for name, (fn, ref, recent) in _cases(dtype, 3, 4099).items():
        for _ in range(4):
            y = fn()
            assert isinstance(y, cp.ndarray) and y.dtype == dtype, name
            err = np.abs(_f64(y) - ref()).max() / max(1.0, np.abs(ref()).max())
            assert err <= TOL[dtype], (name, err)
        served = [c[0].served for c in recent.calls]
        assert served and max(served) >= 2, (name, served)  # the warm calls came from C
        assert fn() is not fn()  # a new output each call


def test_other_shapes_strides_and_dtypes_get_their_own_results():
    for _ in range(3):
        ops.softmax(_put(RNG.standard_normal((4, 333)), "float32"))
    for a in (
        _put(RNG.standard_normal((5, 333)), "float32"),  # another shape
        _put(RNG.standard_normal((333, 4)), "float32").T,  # another stride
        _put(RNG.standard_normal((4, 666)), "float32")[:, ::2],  # strided, the same shape
        _put(RNG.standard_normal((4, 333)), "float16"),  # another dtype
    ):
        for _ in range(2):
            y = ops.softmax(a)
            assert y.dtype == a.dtype and y.shape == a.shape
            tol = TOL[str(a.dtype)]
            np.testing.assert_allclose(_f64(y), _softmax_ref(_f64(a)), rtol=tol, atol=tol)


def test_a_warm_call_launches_on_cupys_current_stream():
    x = _put(RNG.standard_normal((2, 1000)), "float32")
    for _ in range(3):
        ops.softmax(x)
    stream = cp.cuda.Stream(non_blocking=True)
    getter = adapter_for(x, "x").stream_getter(2, x.device.id)
    with stream:
        assert getter() == stream.ptr
        y = ops.softmax(x)
    stream.synchronize()
    np.testing.assert_allclose(_f64(y), _softmax_ref(_f64(x)), rtol=2e-5, atol=2e-5)
    assert getter() == cp.cuda.get_current_stream().ptr
