"""``ops.elementwise``: fused expressions against a float64 reference, broadcasting, scalars,
several outputs, layouts (flat vector path, misaligned views, strided and broadcast views),
dtypes, out=, and expressions that must never reach the generated source."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import ops

RNG = np.random.default_rng(5)


def silu(x):
    return x / (1 + np.exp(-x))


SWIGLU = ops.elementwise("y = a * silu(b)")


@pytest.mark.parametrize("n", [1, 3, 7, 8, 33, 1000, 4099])
def test_flat_path_all_sizes(arrays, n):
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    y = SWIGLU(a=arrays.put(a), b=arrays.put(b))
    np.testing.assert_allclose(arrays.get(y), a * silu(b.astype(np.float64)), rtol=2e-6, atol=1e-6)
    assert SWIGLU.explain(a=arrays.put(a), b=arrays.put(b)).choice.impl.endswith("/flat")


def test_misaligned_views_take_the_element_loop(arrays):
    a, b = (
        RNG.standard_normal(1025).astype(np.float32),
        RNG.standard_normal(1025).astype(np.float32),
    )
    da, db = arrays.put(a), arrays.put(b)
    y = SWIGLU(da[1:], db[1:])  # contiguous, 4 bytes off 16-byte alignment
    np.testing.assert_allclose(
        arrays.get(y), a[1:] * silu(b[1:].astype(np.float64)), rtol=2e-6, atol=1e-6
    )


def test_broadcasting_scalars_and_strided_views(arrays):
    a = RNG.standard_normal((4, 1, 6)).astype(np.float32)
    b = RNG.standard_normal((5, 1)).astype(np.float32)
    f = ops.elementwise("y = a * b + c")
    y = f(a=arrays.put(a), b=arrays.put(b), c=0.5)
    assert tuple(y.shape) == (4, 5, 6)
    np.testing.assert_allclose(arrays.get(y), a * b + 0.5, rtol=1e-6, atol=1e-6)
    t = RNG.standard_normal((6, 8)).astype(np.float32)
    view = arrays.put(t)[:, ::2]  # non-contiguous
    y = f(view, 2.0, 1.0)
    np.testing.assert_allclose(arrays.get(y), t[:, ::2] * 2 + 1, rtol=1e-6)
    assert f.explain(view, 2.0, 1.0).choice.impl.endswith("/strided")


def test_a_new_size_compiles_nothing_on_either_path(arrays):
    """The strided (broadcast) path took its element count as a template value: every new size
    compiled a kernel. Sizes now travel with the call, on both paths."""
    f = ops.elementwise("y = a * silu(b) + 1")
    b = RNG.standard_normal((1, 8)).astype(np.float32)
    for rows, compiled_before in ((3, None), (5, True), (9, True), (2, True)):
        a = RNG.standard_normal((rows, 8)).astype(np.float32)
        before = kernelkit.cache_stats()["compiles"]
        for x, w in ((a, b), (a, np.broadcast_to(b, a.shape).copy())):  # strided, then flat
            y = f(a=arrays.put(x), b=arrays.put(w))
            ref = x.astype(np.float64) * w / (1 + np.exp(-w.astype(np.float64))) + 1
            np.testing.assert_allclose(arrays.get(y), ref, rtol=1e-5, atol=1e-6)
        if compiled_before:
            assert kernelkit.cache_stats()["compiles"] == before, rows
    assert f.explain(arrays.put(a), arrays.put(b)).choice.impl.endswith("/strided")


def test_several_outputs_math_functions_and_out(arrays):
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    y = RNG.uniform(0.5, 2.0, (3, 50)).astype(np.float32)
    f = ops.elementwise("s = exp(x) + log(y) * 2e-1; g = gelu(x) - max(x, y); r = rsqrt(y)")
    outs = [arrays.put(np.full((3, 50), np.nan, np.float32)) for _ in range(3)]
    got = f(x=arrays.put(x), y=arrays.put(y), out=outs)
    assert [g is o for g, o in zip(got, outs)] == [True] * 3
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    from math import erf

    gelu = 0.5 * xd * (1 + np.vectorize(erf)(xd / np.sqrt(2)))
    np.testing.assert_allclose(arrays.get(outs[0]), np.exp(xd) + np.log(yd) * 0.2, rtol=2e-6)
    np.testing.assert_allclose(arrays.get(outs[1]), gelu - np.maximum(xd, yd), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(arrays.get(outs[2]), 1 / np.sqrt(yd), rtol=2e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_compute_in_float(arrays, dtype):
    if not arrays.use_torch:
        pytest.skip("half dtypes through torch tensors")
    torch = arrays.torch
    tdt = getattr(torch, dtype)
    a = torch.randn(7, 1031).to(tdt)
    b = torch.randn(7, 1031).to(tdt)
    if arrays.on_gpu:
        a, b = a.cuda(), b.cuda()
    y = SWIGLU(a=a, b=b)
    assert y.dtype == tdt
    ref = a.double() * torch.nn.functional.silu(b.double())
    tol = 1e-2 if dtype == "float16" else 4e-2
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        ('y = a; system("rm -rf /")', "not 'out = expr'"),
        ('y = a + "x"', "unexpected"),
        ("y = a } void evil() { ", "unexpected"),
        ("y = a # include", "unexpected"),
        ("y = printf(a)", "unknown function 'printf'"),
        ("y = kk_secret + a", "reserved"),
        ("y = __nv_x + a", "reserved"),
        ("y = exp", "is a function"),
        ("a + b", "not 'out = expr'"),
        ("y = a; y = b", "assigned twice"),
        ("y = y + 1", "both an input and an output"),
        ("y = ", "empty expression"),
        ("", "no 'out = expr'"),
    ],
)
def test_bad_expressions_never_reach_the_source(expression, match):
    with pytest.raises(kernelkit.ArgumentError, match=match):
        ops.elementwise(expression)


def test_bad_calls_name_the_problem_and_the_next_call_works(arrays):
    a = arrays.put(np.ones(4, np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="missing"):
        SWIGLU(a=a)
    with pytest.raises(kernelkit.ArgumentError, match="do not broadcast"):
        SWIGLU(a=a, b=arrays.put(np.ones(3, np.float32)))
    with pytest.raises(kernelkit.ArgumentError, match="at least one input must be an array"):
        SWIGLU(a=1.0, b=2.0)
    np.testing.assert_allclose(arrays.get(SWIGLU(a=a, b=a)), np.full(4, silu(1.0)), rtol=1e-6)


def test_empty_inputs(arrays):
    y = SWIGLU(
        a=arrays.put(np.zeros((0, 3), np.float32)), b=arrays.put(np.zeros((0, 3), np.float32))
    )
    assert tuple(y.shape) == (0, 3)
