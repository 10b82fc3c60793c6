"""JAX on a CUDA GPU through XLA's FFI: ``Kernel.as_jax_callable`` inside ``jax.jit`` and
``jax.vmap`` (the shim's CUDA handler launches the loaded CUfunction on XLA's stream), and eager
``kernel(...)`` calls on JAX CUDA arrays, which now run on XLA's stream without a host sync.
Results against NumPy in float64 on random inputs."""

from __future__ import annotations

import math
import os
import time

# JAX takes 75% of the GPU at start-up unless told not to; beside torch's caching allocator in
# the same process its client aborts the interpreter (seen on an H100). Before JAX starts.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import numpy as np
import pytest
from conftest import CUDA_AVAILABLE
from jax_examples import axpy_callable, axpy_reference

import kernelkit
from kernelkit._integrations import jax_eager

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


def _jax_gpus() -> list:
    try:
        return [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        return []


GPUS = _jax_gpus() if CUDA_AVAILABLE else []
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not GPUS, reason="needs a CUDA GPU that both JAX and kernelkit see"),
]

EACH = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0] * x_shape[1]) "


def _axpy(name: str = "jaxgpu_axpy") -> kernelkit.JaxCallable:
    return axpy_callable(name, (32, 8, 1))


def _gpu(a, device=None) -> jax.Array:
    return jax.device_put(jnp.asarray(a), device or GPUS[0])


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 1), (37, 129), (512, 1024)])
def test_jit_two_outputs_and_a_scalar_match_numpy_with_the_outputs_poisoned(shape):
    rng = np.random.default_rng(sum(shape))
    x, b = _rand(rng, *shape), _rand(rng, shape[1])
    alpha = float(rng.uniform(-2, 2))
    axpy = _axpy()
    # The outputs land in donated NaN-filled buffers (XLA aliases a donated input with an output
    # of its shape): an element the kernel does not write stays NaN.
    f = jax.jit(lambda x, b, p, q: axpy(x, b, alpha), donate_argnums=(2, 3), keep_unused=True)
    poison = [_gpu(jnp.full(shape, jnp.nan, jnp.float32)) for _ in range(2)]
    y, s = f(_gpu(x), _gpu(b), *poison)
    assert y.devices() == {GPUS[0]} and y.dtype == jnp.float32
    ry, rs = axpy_reference(x, b, alpha)
    np.testing.assert_allclose(np.asarray(y), ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(s), rs, rtol=1e-5, atol=1e-4)
    lowered = jax.jit(lambda x, b: axpy(x, b, alpha)).lower(_gpu(x), _gpu(b)).as_text()
    assert "@kernelkit_cuda_launch" in lowered


def test_vmap_over_a_batch_dimension():
    rng = np.random.default_rng(3)
    xs, b = _rand(rng, 4, 33, 65), _rand(rng, 65)
    axpy = _axpy()
    ys, ss = jax.jit(jax.vmap(lambda x: axpy(x, _gpu(b), 0.5)))(_gpu(xs))
    want = [axpy_reference(x, b, 0.5) for x in xs]
    np.testing.assert_allclose(np.asarray(ys), np.stack([w[0] for w in want]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ss), np.stack([w[1] for w in want]), rtol=1e-5, atol=1e-4)
    # batched along another axis, outside jit
    ys = jax.vmap(lambda x: axpy(x, _gpu(b), -1.0)[0], in_axes=1)(_gpu(xs.transpose(1, 0, 2)))
    np.testing.assert_allclose(
        np.asarray(ys), np.stack([axpy_reference(x, b, -1.0)[0] for x in xs]), rtol=1e-5, atol=1e-5
    )


def test_jit_mixing_jnp_ops_and_two_kernel_calls():
    rng = np.random.default_rng(7)
    x, b = _rand(rng, 64, 300), _rand(rng, 300)
    axpy = _axpy()

    @jax.jit
    def f(x, b):
        y, s = axpy(x, b, 0.5)
        z = jnp.tanh(y) * 2.0
        y2, _ = axpy(z, b * 3.0, -1.0)
        return jnp.sum(y2, axis=1) + jnp.mean(s)

    got = f(_gpu(x), _gpu(b))
    y, s = axpy_reference(x, b, 0.5)
    y2, _ = axpy_reference(np.tanh(y) * 2.0, b.astype(np.float64) * 3.0, -1.0)
    np.testing.assert_allclose(np.asarray(got), y2.sum(axis=1) + s.mean(), rtol=1e-4, atol=1e-3)


def test_jit_with_dynamic_shared_memory_over_48kb():
    floats = 16384  # 64 KB of float: the function's limit is raised on every device it is on
    body = """
extern __shared__ float buf[];
size_t base = (size_t)blockIdx.x * S;
for (uint j = threadIdx.x; j < S; j += blockDim.x) buf[j] = x[base + j];
__syncthreads();
for (uint j = threadIdx.x; j < S; j += blockDim.x) y[base + j] = buf[S - 1 - j];
"""
    k = kernelkit.kernel("jaxgpu_reverse", ["x"], ["y"], body, shared_memory=floats * 4)
    reverse = k.as_jax_callable(
        output_shapes=lambda x: [x.shape],
        output_dtypes=lambda x: [x.dtype],
        grid=lambda x: (x.shape[0] // floats * 256, 1, 1),
        template=[("S", floats)],
    )
    x = _rand(np.random.default_rng(1), 3 * floats)
    (y,) = jax.jit(lambda x: reverse(x))(_gpu(x))
    np.testing.assert_array_equal(np.asarray(y), x.reshape(3, floats)[:, ::-1].ravel())


# --- eager calls ------------------------------------------------------------------------------


def _twice(name: str) -> kernelkit.Kernel:
    return kernelkit.kernel(name, ["x"], ["y"], EACH + "y[i] = 2.0f * x[i] + 1.0f;")


def _call_twice(k: kernelkit.Kernel, x: jax.Array, **kw) -> jax.Array:
    n = x.shape[0] * x.shape[1]
    (y,) = k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(n, 1, 1),
             threadgroup=(256, 1, 1), **kw)  # fmt: skip
    return y


def _check_twice(y: jax.Array, x) -> None:
    np.testing.assert_allclose(np.asarray(y), 2 * np.asarray(x, np.float64) + 1, rtol=1e-6)


def _slow(n: int = 4096, seconds: float = 1.0):
    """``run(a) -> a`` (bit for bit: products with the identity at full float32 precision)
    that keeps the GPU busy for about ``seconds``, as a chain of asynchronous XLA calls."""
    chain = jax.jit(
        lambda v, e: _matmuls(v, e, 32)  # one XLA call: 32 GEMMs, no host round trip
    )
    eye = _gpu(jnp.eye(n, dtype=jnp.float32))
    a = _gpu(_rand(np.random.default_rng(5), n, n))
    chain(a, eye).block_until_ready()  # compiled
    start = time.perf_counter()
    chain(a, eye).block_until_ready()
    repeats = min(200, max(1, math.ceil(seconds / (time.perf_counter() - start))))

    def run(v: jax.Array) -> jax.Array:
        for _ in range(repeats):
            v = chain(v, eye)
        return v

    return a, run


def _matmuls(v, e, count: int):
    for _ in range(count):
        v = jnp.dot(v, e, precision=jax.lax.Precision.HIGHEST)
    return v


def test_eager_calls_do_not_wait_for_jax_and_give_right_answers(monkeypatch):
    from kernelkit._arrays._jax import JaxAdapter
    from kernelkit._backends.cuda import CUDABackend

    # Count the direct path's two host syncs: waiting for a JAX input (``prepare``) and
    # synchronizing after the launch. A plan binds both when it is built: patch first.
    waits, syncs = [], []
    prepare, synchronize = JaxAdapter.prepare, CUDABackend.synchronize
    monkeypatch.setattr(JaxAdapter, "prepare", lambda s, x: waits.append(1) or prepare(s, x))
    monkeypatch.setattr(
        CUDABackend, "synchronize", lambda s, st: syncs.append(1) or synchronize(s, st)
    )
    k = _twice("jaxgpu_eager_twice")
    a, slow = _slow()
    _check_twice(_call_twice(k, a), a)
    (plan,) = k._plans.values()
    assert isinstance(plan.run, jax_eager.EagerRoute), plan.run_source.splitlines()[0]
    waits.clear()
    syncs.clear()

    busy = slow(a)  # about a second of GPU work, dispatched, not finished
    y = _call_twice(k, busy)
    busy_done, y_done = busy.is_ready(), y.is_ready()
    assert not busy_done, "the call waited for its input: the GPU finished the work before it"
    assert not y_done
    assert waits == [] and syncs == []
    _check_twice(y, busy)

    # the counters do see the direct path: init_value= takes it
    y = _call_twice(k, a, init_value=0)
    assert syncs and waits
    _check_twice(y, a)


def test_eager_calls_match_numpy_and_stay_on_the_arrays_device():
    body = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) { y[i] = alpha * x[i] + c[0]; n[i] = (int)i - k; }
"""
    kern = kernelkit.kernel("jaxgpu_eager_mix", ["x", "alpha", "c", "k"], ["y", "n"], body)
    rng = np.random.default_rng(11)
    c = _rand(rng, 1).reshape(())
    for size, alpha, shift in [(1, 0.5, 0), (1000, -1.5, 3), (1000, 2.0, 3), (70001, 0.25, -7)]:
        x = _rand(rng, size)
        y, n = kern([_gpu(x), alpha, _gpu(c), shift], output_shapes=[(size,), (size,)],
                    output_dtypes=[np.float32, np.int32], grid=(size, 1, 1),
                    threadgroup=(128, 1, 1))  # fmt: skip
        assert isinstance(y, jax.Array) and y.devices() == {GPUS[0]} and n.dtype == jnp.int32
        want = alpha * x.astype(np.float64) + np.float64(c)
        np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(n), np.arange(size) - shift)
    (plan,) = kern._plans.values()
    assert plan.run_source.startswith("# run: EagerRoute(")


@pytest.mark.skipif(len(GPUS) < 2, reason="needs 2 GPUs that JAX sees")
def test_a_second_device_jit_and_eager():
    rng = np.random.default_rng(2)
    x, b = _rand(rng, 16, 40), _rand(rng, 40)
    axpy = _axpy("jaxgpu_axpy_dev1")
    y, _ = jax.jit(lambda x, b: axpy(x, b, 2.0))(_gpu(x, GPUS[1]), _gpu(b, GPUS[1]))
    assert y.devices() == {GPUS[1]}
    np.testing.assert_allclose(np.asarray(y), axpy_reference(x, b, 2.0)[0], rtol=1e-5, atol=1e-5)
    k = _twice("jaxgpu_eager_dev1")
    for device in (GPUS[1], GPUS[0]):
        got = _call_twice(k, _gpu(x, device))
        assert got.devices() == {device}
        _check_twice(got, x)
