"""A built-in op's warm call is a prepared function (issue 26): at most 10 Python-level calls
(cProfile, built-ins not counted) on the CPU backend, for torch tensors and NumPy arrays."""

from __future__ import annotations

import cProfile
import pstats

import numpy as np
import pytest

from kernelkit import ops

MAX_PYTHON_CALLS = 10


def _python_calls(fn, *args, **kwargs) -> tuple[int, list[str]]:
    for _ in range(2):  # the first call prepares the signature
        fn(*args, **kwargs)
    profile = cProfile.Profile()
    profile.enable()
    fn(*args, **kwargs)
    profile.disable()
    calls, names = 0, []
    for (file, _line, name), (_cc, n, *_rest) in pstats.Stats(profile).stats.items():
        if file != "~":  # "~": built-ins (C functions and methods)
            calls += n
            names.append(f"{file.rsplit('/', 1)[-1]}:{name} x{n}")
    return calls, names


def _arrays(framework: str):
    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal((4, 64)).astype(np.float32),
        np.ones(64, np.float32),
        np.zeros(64, np.float32),
        rng.standard_normal((32, 64)).astype(np.float32),
    ]
    if framework == "torch":
        torch = pytest.importorskip("torch")
        return [torch.from_numpy(a) for a in arrays]
    return arrays


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("op", ["softmax", "rms_norm", "layer_norm", "matmul", "elementwise"])
def test_a_warm_op_call_is_a_handful_of_python_calls(framework, op):
    x, w, b, weight = _arrays(framework)
    silu_mul = ops.elementwise("y = a * b / (1 + exp(-b))")
    fn, args, kwargs = {
        "softmax": (ops.softmax, (x,), {}),
        "rms_norm": (ops.rms_norm, (x, w), {}),
        "layer_norm": (ops.layer_norm, (x, w, b), {}),
        "matmul": (ops.matmul, (x, weight), {"transpose_b": True}),
        "elementwise": (silu_mul, (x, x), {}),
    }[op]
    calls, names = _python_calls(fn, *args, **kwargs)
    assert calls <= MAX_PYTHON_CALLS, f"{op} on {framework}: {calls} Python calls: {names}"


def _kernelkit_calls(fn, *args, **kwargs) -> list[str]:
    for _ in range(3):  # prepared at the first, its unchecked run made at its first use
        fn(*args, **kwargs)
    profile = cProfile.Profile()
    profile.enable()
    fn(*args, **kwargs)
    profile.disable()
    return [
        f"{file.rsplit('/', 1)[-1]}:{name}"
        for (file, _line, name), _ in pstats.Stats(profile).stats.items()
        if "kernelkit" in file
    ]


@pytest.mark.parametrize("op", ["softmax", "rms_norm", "layer_norm", "matmul", "elementwise"])
def test_a_warm_op_call_on_jax_arrays_is_prepared(op):
    """JAX arrays get prepared calls too (issue 26: an op on JAX arrays validated and selected
    on every call, 100-250 µs on an H100 host): no validation on the warm call. JAX's direct
    path waits for the inputs, allocates through another framework, synchronizes and wraps the
    output (``_arrays/_jax.py``): at most 20 of kernelkit's own Python functions (not JAX's)."""
    jnp = pytest.importorskip("jax.numpy")
    x, w, b, weight = (jnp.asarray(a) for a in _arrays("numpy"))
    silu_mul = ops.elementwise("y = a * b / (1 + exp(-b))")
    fn, args, kwargs = {
        "softmax": (ops.softmax, (x,), {}),
        "rms_norm": (ops.rms_norm, (x, w), {}),
        "layer_norm": (ops.layer_norm, (x, w, b), {}),
        "matmul": (ops.matmul, (x, weight), {"transpose_b": True}),
        "elementwise": (silu_mul, (x, x), {}),
    }[op]
    names = _kernelkit_calls(fn, *args, **kwargs)
    assert not [n for n in names if "_first" in n or ":_call" in n or "_bind" in n], names
    assert len(names) <= 20, names
