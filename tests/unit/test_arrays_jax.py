"""The JAX arrays' signature for the built-in ops' prepared calls (``_arrays._jax``): read
through the abstract value, it says what the arrays' own properties say, and tells apart what
an op's result depends on."""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from kernelkit._arrays._jax import jax_signature  # noqa: E402


def _by_properties(arrays):
    return tuple(
        None if a is None else (a.__class__, a.dtype, a.shape, a.weak_type, a.sharding)
        for a in arrays
    )


def test_the_signature_says_what_the_arrays_properties_say():
    cpu = jax.devices("cpu")[0]
    arrays = [
        jnp.ones((3, 5), jnp.float32),
        jnp.ones((3, 5), jnp.bfloat16),
        jnp.zeros((2, 1, 7), jnp.float16),
        jnp.asarray(1.0),  # weak-typed
        jnp.asarray(1.0, jnp.float32),  # the same value, strongly typed
        jnp.arange(6).reshape(2, 3).T,  # a transposed result (JAX arrays are dense)
        jax.device_put(jnp.ones(4), cpu),
        jnp.ones(()),
    ]
    for a in arrays:
        assert jax_signature((a, None)) == _by_properties((a, None))
    signatures = [jax_signature((a,)) for a in arrays]
    # all different but one pair: jnp.asarray(1.0, float32) and jnp.ones(()) are both strongly
    # typed 0-d float32 arrays on the default device, so one prepared call serves both
    assert len(set(signatures)) == len(signatures) - 1
    assert signatures[4] == signatures[-1]
    assert signatures[3] != signatures[4]  # the weak type tells these apart


def test_a_tracer_has_no_signature():
    """Inside jax.jit the arrays are tracers: the adapter gives their class no signer (an op
    traced by JAX is never served by a prepared call)."""
    from kernelkit._arrays._jax import JaxAdapter

    seen = []

    @jax.jit
    def f(x):
        seen.append(JaxAdapter().signer(type(x)))
        return x + 1

    f(jnp.ones(3))
    assert seen == [None]
    assert JaxAdapter().signer(type(jnp.ones(3))) is jax_signature
