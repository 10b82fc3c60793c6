"""Eager ``kernel(...)`` calls on JAX arrays through XLA's FFI (``_integrations/jax_eager``).

The route is on for JAX CUDA arrays; these tests turn it on for JAX CPU arrays too, so that CI
(no GPU) runs all of it on the CPU backend: results against NumPy in float64, the plan's run
and ``run_source`` naming the route, what stays on the direct path (``init_value=``,
``stream=``, variants past the limit), and the warning when the shim cannot be built."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import CPU_AVAILABLE

import kernelkit
from kernelkit._integrations import jax_eager, jax_shim

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) {
    y[i] = alpha * x[i] + b[0];
    n[i] = (int)i * x_ndim;
}
"""


@pytest.fixture
def route_on_cpu(monkeypatch):
    monkeypatch.setattr(jax_eager, "EAGER_PLATFORMS", frozenset({"cpu", "cuda"}))
    monkeypatch.setattr(jax_eager, "_warned", set())


def _cpu(a) -> jax.Array:
    return jax.device_put(jnp.asarray(a), jax.devices("cpu")[0])  # XLA's CPU even with a GPU


def _kernel(name: str) -> kernelkit.Kernel:
    return kernelkit.kernel(name, ["x", "alpha", "b"], ["y", "n"], BODY)


def _call(k: kernelkit.Kernel, x, alpha, b, **kw):
    n = x.shape[0]
    return k([x, alpha, b], output_shapes=[(n,), (n,)], output_dtypes=[x.dtype, jnp.int32],
             grid=(n, 1, 1), threadgroup=(32, 1, 1), **kw)  # fmt: skip


def _route(k: kernelkit.Kernel) -> jax_eager.EagerRoute:
    (plan,) = k._plans.values()
    assert isinstance(plan.run, jax_eager.EagerRoute)
    assert plan.run_source.startswith("# run: EagerRoute(")
    return plan.run


def _check(y, n, x: np.ndarray, alpha: float, b: np.ndarray) -> None:
    assert isinstance(y, jax.Array) and isinstance(n, jax.Array)
    want = alpha * x.astype(np.float64) + b.astype(np.float64)[0]
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(n), np.arange(x.shape[0]))


def test_eager_calls_run_through_the_ffi_and_match_numpy(route_on_cpu):
    k = _kernel("eager_axpb")
    rng = np.random.default_rng(0)
    b = rng.standard_normal(1).astype(np.float32)
    for size, alpha in [(1, 0.5), (300, -2.0), (300, -2.0), (1000, 3.0)]:
        x = rng.standard_normal(size).astype(np.float32)
        y, n = _call(k, _cpu(x), alpha, _cpu(b))
        _check(y, n, x, alpha, b)
    route = _route(k)
    assert k._last is route
    assert len(route._calls) == 3  # one XLA call per (shapes, scalars, geometry) seen


def _count_direct(route: jax_eager.EagerRoute, monkeypatch) -> list[int]:
    """Counts the calls the route hands to the direct path."""
    calls: list[int] = []
    direct = route._direct

    def counting(*args):
        calls.append(1)
        return direct(*args)

    monkeypatch.setattr(route, "_direct", counting)
    return calls


def test_init_value_and_stream_take_the_direct_path(route_on_cpu, monkeypatch):
    k = _kernel("eager_direct")
    x, b = np.arange(40, dtype=np.float32), np.ones(1, np.float32)
    _check(*_call(k, _cpu(x), 2.0, _cpu(b)), x, 2.0, b)
    route = _route(k)
    direct = _count_direct(route, monkeypatch)
    _check(*_call(k, _cpu(x), 2.0, _cpu(b)), x, 2.0, b)
    assert not direct
    _check(*_call(k, _cpu(x), 2.0, _cpu(b), init_value=0), x, 2.0, b)
    _check(*_call(k, _cpu(x), 2.0, _cpu(b), stream=0), x, 2.0, b)
    assert len(direct) == 2 and len(route._calls) == 1


def test_variants_past_the_limit_take_the_direct_path_with_one_warning(route_on_cpu, monkeypatch):
    monkeypatch.setattr(jax_eager, "MAX_VARIANTS", 2)
    k = _kernel("eager_variants")
    x, b = np.linspace(-1, 1, 64, dtype=np.float32), np.zeros(1, np.float32)
    _check(*_call(k, _cpu(x), 1.0, _cpu(b)), x, 1.0, b)
    route = _route(k)
    direct = _count_direct(route, monkeypatch)
    _check(*_call(k, _cpu(x), 2.0, _cpu(b)), x, 2.0, b)
    with pytest.warns(RuntimeWarning, match="more than 2 eager JAX call variants"):
        _check(*_call(k, _cpu(x), 3.0, _cpu(b)), x, 3.0, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _check(*_call(k, _cpu(x), 4.0, _cpu(b)), x, 4.0, b)
        _check(*_call(k, _cpu(x), 1.0, _cpu(b)), x, 1.0, b)  # a compiled variant: the route
    assert len(direct) == 2 and len(route._calls) == 2


def test_without_the_shim_calls_synchronize_and_say_why(route_on_cpu, monkeypatch):
    monkeypatch.setattr(jax_shim, "problem", lambda: "[jax] no C++ compiler (test)")
    k = _kernel("eager_no_shim")
    x, b = np.arange(8, dtype=np.float32), np.ones(1, np.float32)
    with pytest.warns(RuntimeWarning, match=r"synchronize the host .*no C\+\+ compiler \(test\)"):
        _check(*_call(k, _cpu(x), 2.0, _cpu(b)), x, 2.0, b)
    (plan,) = k._plans.values()
    assert not isinstance(plan.run, jax_eager.EagerRoute)
    assert not plan.run_source.startswith("# run:")


def test_jax_cpu_arrays_keep_the_direct_path_by_default():
    k = _kernel("eager_default")
    x, b = np.arange(8, dtype=np.float32), np.ones(1, np.float32)
    _check(*_call(k, _cpu(x), 2.0, _cpu(b)), x, 2.0, b)
    (plan,) = k._plans.values()
    assert not isinstance(plan.run, jax_eager.EagerRoute)


def test_bad_calls_get_the_direct_paths_errors(route_on_cpu):
    k = _kernel("eager_errors")
    x, b = _cpu(np.arange(8, dtype=np.float32)), _cpu(np.ones(1, np.float32))
    _call(k, x, 2.0, b)
    _route(k)
    with pytest.raises(kernelkit.ArgumentError, match="output_shapes must be a list of 2"):
        k([x, 2.0, b], output_shapes=[(8,)], output_dtypes=[x.dtype, jnp.int32], grid=(8, 1, 1),
          threadgroup=(8, 1, 1))  # fmt: skip
    with pytest.raises(kernelkit.ArgumentError, match="threadgroup"):
        k([x, 2.0, b], output_shapes=[(8,), (8,)], output_dtypes=[x.dtype, jnp.int32],
          grid=(4096, 1, 1), threadgroup=(2048, 1, 1))  # fmt: skip


def test_optional_inputs_and_0d_arrays(route_on_cpu):
    body = "uint i = threadIdx.x; if (i < y_shape[0]) y[i] = (b != NULL ? b[i] : 10.0f) * s[0];"
    k = kernelkit.kernel("eager_optional", ["b", "s", "x"], ["y"], body + " (void)x;",
                         optional_inputs={"b": "float32"})  # fmt: skip
    s, x = _cpu(np.float32(3.0)), _cpu(np.zeros(4, np.float32))
    (y,) = k([None, s, x], output_shapes=[(4,)], output_dtypes=["float32"], grid=(4, 1, 1),
             threadgroup=(4, 1, 1))  # fmt: skip
    np.testing.assert_array_equal(np.asarray(y), np.full(4, 30.0))
    b = _cpu(np.arange(4, dtype=np.float32))
    (y,) = k([b, s, x], output_shapes=[(4,)], output_dtypes=["float32"], grid=(4, 1, 1),
             threadgroup=(4, 1, 1))  # fmt: skip
    np.testing.assert_array_equal(np.asarray(y), np.arange(4) * 3.0)
    assert any(isinstance(p.run, jax_eager.EagerRoute) for p in k._plans.values())


def test_elementwise_flat_outputs_through_the_ffi(route_on_cpu):
    """The flat elementwise kernel sees its outputs as flat views (``KernelSpec.flat_outputs``:
    the body reads y0_shape[0] as the element count) without a reshape of the JAX arrays: the
    FFI route packs the flat view's metadata too (issue 26)."""
    from kernelkit import ops

    rng = np.random.default_rng(3)
    f = ops.elementwise("y = a * b + 1; z = a - b")
    for shape in [(8, 16), (3, 5, 7), (40,)]:
        a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
        for _ in range(2):  # the first call prepares, the second takes the prepared run
            y, z = f(_cpu(a), _cpu(b))
        assert y.shape == z.shape == shape
        np.testing.assert_allclose(np.asarray(y), a * b + 1, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(z), a - b, rtol=1e-6, atol=1e-6)
    runs = [p.run for k in f._kernels.values() for p in k._plans.values()]
    assert runs and all(isinstance(r, jax_eager.EagerRoute) for r in runs)


def test_a_zero_s_sign_is_a_scalar_of_its_own(route_on_cpu):
    """0.0 and -0.0 are equal as Python values but not as the scalar an XLA call holds: each
    gets its own call (with b = -0.0, alpha * x + b keeps alpha's sign for x > 0)."""
    k = _kernel("eager_signed_zero")
    x, b = np.full(64, 2.0, np.float32), np.array([-0.0], np.float32)
    for alpha in (0.0, -0.0, 0.0, -0.0):
        y, _ = _call(k, _cpu(x), alpha, _cpu(b))
        assert np.signbit(np.asarray(y)).all() == np.signbit(alpha)
    assert len(_route(k)._calls) == 2


def test_an_op_s_prepared_run_calls_the_xla_call_without_the_route_s_checks(route_on_cpu):
    """The built-in ops' prepared calls (one signature each) run the compiled XLA call of
    their signature directly (``EagerRoute.fixed``): no guard, no key; a scalar input of
    another value (or sign) takes the route and gets its own result."""
    from kernelkit import ops

    rng = np.random.default_rng(4)
    f = ops.elementwise("y = a * s + b")
    a, b = (rng.standard_normal((4, 33)).astype(np.float32) for _ in range(2))
    guarded: list = []
    for s in (2.0, 2.0):  # the first call prepares
        f(_cpu(a), s, _cpu(b))
    (route,) = [p.run for kk in f._kernels.values() for p in kk._plans.values()]
    matches = route._matches
    route._matches = lambda *args: guarded.append(1) or matches(*args)
    for s in (2.0, 2.0, 0.5, -0.0, 0.0, 2.0):
        y = f(_cpu(a), s, _cpu(b))
        np.testing.assert_allclose(np.asarray(y), a.astype(np.float64) * s + b, rtol=1e-6)
        if s == 0.0:
            bits = np.signbit(np.asarray(y)) == np.signbit(a * np.float32(s) + b)
            assert bits.all()
    assert len(guarded) == 3  # 0.5, -0.0 and 0.0 through the route; 2.0 never


def test_an_op_on_arrays_only_runs_the_xla_call_itself(route_on_cpu):
    """With arrays only (no scalar to compare), an op's prepared run is the compiled XLA call
    of its signature with nothing around it: its results as they come (the list of outputs),
    the route's guard never asked."""
    from kernelkit import ops

    rng = np.random.default_rng(5)
    f = ops.elementwise("y = a * b + 1; z = a - b")
    a, b = (rng.standard_normal((3, 17)).astype(np.float32) for _ in range(2))
    f(_cpu(a), _cpu(b))  # prepares
    (route,) = [p.run for kk in f._kernels.values() for p in kk._plans.values()]
    guarded: list = []
    matches = route._matches
    route._matches = lambda *args: guarded.append(1) or matches(*args)
    for _ in range(3):
        y, z = f(_cpu(a), _cpu(b))
        np.testing.assert_allclose(np.asarray(y), a * b + 1, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(z), a - b, rtol=1e-6, atol=1e-6)
    x = _cpu(a)
    want = np.exp(a - a.max(-1, keepdims=True))
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(ops.softmax(x)), want / want.sum(-1, keepdims=True),
                                   rtol=1e-5)  # fmt: skip
    assert guarded == []
