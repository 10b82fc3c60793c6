"""Kernels inside ``jax.jit`` through XLA's FFI (``Kernel.as_jax_callable``) on the CPU
backend with JAX CPU arrays: results against NumPy in float64, scalars and shape metadata,
retracing for new shapes, ``jax.vmap``, eager calls, and that kernelkit never imports jax."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import CPU_AVAILABLE
from jax_examples import axpy_callable, axpy_reference

import kernelkit

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")


def _axpy() -> kernelkit.JaxCallable:
    return axpy_callable("jax_axpy_2d", (16, 8, 1))


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (33, 65)])
def test_jit_matches_numpy_float64(shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    axpy = _axpy()

    @jax.jit
    def f(x, b):
        y, s = axpy(x, b, 1.5)
        return y + 1.0, s

    y, s = f(jnp.asarray(x), jnp.asarray(b))
    ry, rs = axpy_reference(x, b, 1.5)
    np.testing.assert_allclose(np.asarray(y), ry + 1.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), rs, rtol=1e-5, atol=1e-5)
    assert y.dtype == jnp.float32


def test_new_shapes_retrace_and_specialize_again():
    axpy = _axpy()
    f = jax.jit(lambda x, b: axpy(x, b, -2.0)[0])
    for shape in [(3, 5), (9, 2), (3, 5)]:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        b = np.ones(shape[1], np.float32)
        np.testing.assert_allclose(np.asarray(f(x, b)), axpy_reference(x, b, -2.0)[0], rtol=1e-6)


def test_vmap_over_a_batch_dimension_runs_once_per_element():
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((4, 5, 11)).astype(np.float32)
    b = rng.standard_normal(11).astype(np.float32)
    axpy = _axpy()
    y = jax.jit(jax.vmap(lambda x: axpy(x, b, 0.5)[0]))(xs)
    want = np.stack([axpy_reference(x, b, 0.5)[0] for x in xs])
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)


def test_template_and_eager_calls_keep_working():
    body = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] * K;"
    k = kernelkit.kernel("jax_times_k", ["x"], ["y"], body)
    times = k.as_jax_callable(
        output_shapes=lambda x: [x.shape],
        output_dtypes=lambda x: [x.dtype],
        grid=lambda x: (x.shape[0], 1, 1),
        template=[("K", 3)],
    )
    x = jnp.arange(37, dtype=jnp.float32)
    want = np.arange(37, dtype=np.float64) * 3
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: times(x)[0])(x)), want)
    np.testing.assert_allclose(np.asarray(times(x)[0]), want)  # outside jit
    eager = k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(37, 1, 1),
              threadgroup=(32, 1, 1), template=[("K", 3)])  # fmt: skip
    np.testing.assert_allclose(np.asarray(eager[0]), want)


def test_wrong_number_of_inputs_is_a_clear_error():
    axpy = _axpy()
    with pytest.raises(kernelkit.KernelkitError, match="expected 3 inputs"):
        axpy(jnp.ones((2, 2)))


def test_importing_kernelkit_does_not_import_jax():
    code = "import sys, kernelkit; sys.exit('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_the_shim_registers_a_cpu_and_a_cuda_handler(monkeypatch):
    from kernelkit._integrations import jax_shim

    jax_shim.ensure_registered()  # the real registration, CUDA's included: the CPU path works
    axpy = _axpy()
    x, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: axpy(x, b, 2.0)[0])(x)), 2 * x + b)
    shim = jax_shim._shim
    assert shim is not None and shim.kk_jax_cpu_launch and shim.kk_jax_cuda_launch
    # what registering asks of XLA, recorded from a fresh start
    seen = []
    monkeypatch.setattr(jax_shim, "_registered", False)
    monkeypatch.setattr(jax.ffi, "register_ffi_target", lambda *a, **kw: seen.append((a, kw)))
    jax_shim.ensure_registered()
    assert [(a[0], kw["platform"]) for a, kw in seen] == [
        (jax_shim.CPU_TARGET, "cpu"),
        (jax_shim.CUDA_TARGET, "CUDA"),
    ]


def test_the_platform_is_chosen_when_lowering_not_when_tracing(monkeypatch):
    """One trace, lowered for XLA's CPU and (without a GPU, from a CPU specialization standing
    in for the CUDA one) for CUDA: each lowering calls its own platform's handler."""
    from types import SimpleNamespace

    from kernelkit._integrations import jax_ffi, jax_pack

    axpy = _axpy()
    traced = jax.jit(lambda x, b: axpy(x, b, 0.5)).trace(jnp.ones((4, 8)), jnp.ones(8))
    on_cpu = traced.lower(lowering_platforms=("cpu",)).as_text()
    assert "@kernelkit_cpu_launch" in on_cpu and "kernelkit_cuda_launch" not in on_cpu

    specialize = jax_ffi.TracedCall._plan
    loaded = SimpleNamespace(
        program=SimpleNamespace(device=0, function=0xF00),
        geometries=lambda grid, threadgroup, shared: (1, 1, 1, 8, 4, 1, 0),
    )

    def fake_cuda_plan(call, platform, device):  # the CPU plan's parameters, a fake program
        assert platform == "cuda"
        plan = specialize(call, "cpu", 0)
        return SimpleNamespace(kernel=plan.kernel, params=plan.params, loaded=loaded)

    monkeypatch.setattr(jax_ffi, "_devices", lambda platform: (0,))
    monkeypatch.setattr(jax_ffi.TracedCall, "_plan", fake_cuda_plan)
    monkeypatch.setattr(jax_pack, "_cuda_handles", lambda lo: (0xC0, lo.program.function))
    on_cuda = traced.lower(lowering_platforms=("cuda",)).as_text()
    assert "@kernelkit_cuda_launch" in on_cuda and "kernelkit_cpu_launch" not in on_cuda
    assert "functions = dense<3840>" in on_cuda and "contexts = dense<192>" in on_cuda


def test_a_kernel_pinned_to_another_backend_is_refused():
    k = kernelkit.kernel("jax_pinned", ["x"], ["y"], "y[0] = x[0];", backend="cuda")
    f = k.as_jax_callable(output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1))
    on_cpu = jax.device_put(jnp.ones(1), jax.devices("cpu")[0])  # XLA's CPU, even with a GPU
    with pytest.raises(kernelkit.ArgumentError, match="pinned to backend 'cuda'"):
        jax.jit(lambda x: f(x)[0])(on_cpu)
    other = kernelkit.kernel("jax_pinned_other", ["x"], ["y"], "y[0] = x[0];", backend="metal")
    with pytest.raises(kernelkit.ArgumentError, match="CPU and CUDA backends"):
        other.as_jax_callable(output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1))
