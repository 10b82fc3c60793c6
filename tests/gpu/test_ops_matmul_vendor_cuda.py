"""``matmul/vendor`` on a CUDA GPU: CuPy arrays through cuBLASLt (nvmath-python's bindings), JAX
arrays through ``jnp.matmul``, an array that only speaks ``__cuda_array_interface__``; against a
float64 reference, with out= poisoned with NaN (every element written, padding left alone), odd
sizes, both layouts of the weight, a bias, strided inputs, batched inputs, the framework's
current stream (a CuPy stream capture holds the call: nothing runs before the graph does), and
the fallback to kernelkit's kernels when nvmath-python cannot be imported. ``kernelkit.force``
makes the route run (no table row names it for these shapes)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_cublaslt as LT

cupy = pytest.importorskip("cupy")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(cupy.cuda.runtime.getDeviceCount() == 0, reason="needs a CUDA GPU"),
]
TOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 1e-5}
# (M, N, K): odd everywhere, one row, one column, an LLM layer
SIZES = [(1, 4096, 4096), (17, 129, 77), (333, 1001, 259), (3500, 4096, 4096), (64, 1, 40)]


def nvmath_or_skip() -> None:
    found = LT.binding()
    if isinstance(found, str):
        pytest.skip(found)


def host(m, n, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (m, n)).astype(np.float32)


def on_cupy(a: np.ndarray, dtype: str):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        try:
            return cupy.asarray(a.astype(ml_dtypes.bfloat16))
        except Exception as e:  # noqa: BLE001 - this CuPy has no bfloat16
            pytest.skip(f"CuPy cannot hold bfloat16 here ({type(e).__name__}: {e})")
    return cupy.asarray(a.astype(dtype))


def as64(y) -> np.ndarray:
    return np.asarray(cupy.asnumpy(y) if isinstance(y, cupy.ndarray) else y).astype(np.float64)


def check(y, x, w, transpose_b, dtype, bias=None):
    """``y`` against float64 ``x @ op(w) (+ bias)``, every element written (no NaN)."""
    ref = as64(x) @ (as64(w).T if transpose_b else as64(w))
    if bias is not None:
        ref = ref + as64(bias)
    got = as64(y)
    assert not np.isnan(got).any(), "an output element was not written"
    k = as64(x).shape[-1]
    np.testing.assert_allclose(got, ref, rtol=TOL[dtype], atol=TOL[dtype] * max(k, 1) ** 0.5)


def vendor(x, w, **kw):
    with force("matmul", "vendor"):
        chosen = ops.matmul.explain(x, w, **{k: v for k, v in kw.items() if k != "out"})
        assert chosen.choice.impl == "matmul/vendor", chosen.explain()
        return ops.matmul(x, w, **kw)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "w_KN"])
@pytest.mark.parametrize(("m", "n", "k"), SIZES)
def test_cupy_into_a_poisoned_out(m, n, k, transpose_b, dtype):
    nvmath_or_skip()
    x = on_cupy(host(m, k), dtype)
    w = on_cupy(host(n, k, 1) if transpose_b else host(k, n, 1), dtype)
    out = on_cupy(np.full((m, n), np.nan, np.float32), dtype)
    y = vendor(x, w, transpose_b=transpose_b, out=out)
    assert y is out
    check(out, x, w, transpose_b, dtype)
    fresh = vendor(x, w, transpose_b=transpose_b)  # allocated by the route: a CuPy array
    assert isinstance(fresh, cupy.ndarray) and fresh.dtype == x.dtype
    check(fresh, x, w, transpose_b, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cupy_bias_strided_inputs_padded_out_and_batches(dtype):
    nvmath_or_skip()
    base = on_cupy(host(300, 2 * 96), dtype)
    w = on_cupy(host(200, 96, 1), dtype)
    bias = on_cupy(host(1, 200, 2)[0], dtype)
    x = base[:, :96]  # rows 192 apart: read in place (leading dimension 192)
    check(vendor(x, w, bias=bias, transpose_b=True), x, w, True, dtype, bias)
    xt = on_cupy(host(96, 300), dtype).T  # columns not adjacent: copied, then run
    check(vendor(xt, w, transpose_b=True), xt, w, True, dtype)
    wide = on_cupy(np.full((300, 256), np.nan, np.float32), dtype)
    out = wide[:, :200]  # rows 256 apart: written in place, the padding left as it was
    assert vendor(x, w, transpose_b=True, out=out) is out
    check(out, x, w, True, dtype)
    assert np.isnan(as64(wide[:, 200:])).all(), "the route wrote outside out="
    a3 = on_cupy(host(3 * 50, 96), dtype).reshape(3, 50, 96)
    y3 = vendor(a3, w, transpose_b=True)
    assert y3.shape == (3, 50, 200)
    check(y3.reshape(150, 200), a3.reshape(150, 96), w, True, dtype)


def test_cupy_runs_on_the_current_stream():
    """Captured on a CuPy stream, the call is recorded, not run: out keeps its NaN until the
    graph is launched (a launch on any other stream would have written it already, or broken
    the capture)."""
    nvmath_or_skip()
    x, w = on_cupy(host(512, 1024), "float16"), on_cupy(host(2048, 1024, 1), "float16")
    out = cupy.full((512, 2048), cupy.nan, dtype=cupy.float16)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        vendor(x, w, transpose_b=True, out=out)  # plans, and a workspace for this stream
        out.fill(cupy.nan)
        stream.synchronize()
        stream.begin_capture()
        vendor(x, w, transpose_b=True, out=out)
        graph = stream.end_capture()
    cupy.cuda.Device().synchronize()
    assert cupy.isnan(out).all(), "the matmul ran outside the current stream"
    graph.launch(stream)
    stream.synchronize()
    check(out, x, w, True, "float16")


def test_an_array_that_only_speaks_cuda_array_interface():
    nvmath_or_skip()

    class Interface:  # what numba's device arrays offer: shape, dtype, strides and the interface
        def __init__(self, a):
            self._a, self.shape, self.dtype, self.strides = a, a.shape, a.dtype, a.strides
            self.__cuda_array_interface__ = a.__cuda_array_interface__

    x, w = on_cupy(host(129, 64), "float32"), on_cupy(host(33, 64, 1), "float32")
    y = vendor(Interface(x), Interface(w), transpose_b=True)
    assert isinstance(y, cupy.ndarray)
    check(y, x, w, True, "float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "w_KN"])
@pytest.mark.parametrize(("m", "n", "k"), SIZES)
def test_jax_arrays_through_jnp_matmul(m, n, k, transpose_b, dtype):
    jax = pytest.importorskip("jax")
    if jax.devices()[0].platform != "gpu":
        pytest.skip("JAX has no GPU here")
    jnp = jax.numpy
    x = jnp.asarray(host(m, k), dtype=dtype)
    w = jnp.asarray(host(n, k, 1) if transpose_b else host(k, n, 1), dtype=dtype)
    bias = jnp.asarray(host(1, n, 2)[0], dtype=dtype)
    y = vendor(x, w, transpose_b=transpose_b)
    assert isinstance(y, jax.Array) and y.dtype == x.dtype
    check(y, x, w, transpose_b, dtype)
    check(vendor(x, w, bias=bias, transpose_b=transpose_b), x, w, transpose_b, dtype, bias)


def test_without_nvmath_cupy_falls_back_to_kernelkits_kernels(monkeypatch):
    monkeypatch.setattr(LT, "_loaded", [])
    for name in [n for n in sys.modules if n == "nvmath" or n.startswith("nvmath.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nvmath", None)
    MM.OP.forget()
    x, w = on_cupy(host(3500, 512), "float16"), on_cupy(host(1024, 512, 1), "float16")
    with pytest.raises(kernelkit.ArgumentError, match="nvmath-python is not installed"):
        vendor(x, w, transpose_b=True)
    chosen = ops.matmul.explain(x, w, transpose_b=True)
    assert chosen.choice.impl != "matmul/vendor"
    check(ops.matmul(x, w, transpose_b=True), x, w, True, "float16")
    MM.OP.forget()
