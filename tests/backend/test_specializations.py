"""Alternating specializations of one kernel: each call runs its own plan (the last-plan fast
path must never run a call through a plan of another dtype, scalar type, template or geometry)."""

from __future__ import annotations

import numpy as np

import kernelkit

K = kernelkit.kernel(
    "sp_axpy",
    ["x", "a"],
    ["y"],
    "uint i = blockIdx.x * blockDim.x + threadIdx.x;"
    " if (i < x_shape[0]) y[i] = (T)(a * (float)x[i] + B);",
)


def test_alternating_calls_each_use_their_own_specialization(backend, arrays):
    rng = np.random.default_rng(7)
    x32 = rng.standard_normal(301).astype(np.float32)
    x16 = x32.astype(np.float16)
    cases = [
        (x32, 2.0, [("T", "float32"), ("B", 1)], (301, 1, 1), np.float32),
        (x16, 2.0, [("T", "float16"), ("B", 1)], (301, 1, 1), np.float16),
        (x32, 3, [("T", "float32"), ("B", 1)], [301, 1, 1], np.float32),  # int scalar, list
        (x32, 2.0, [("T", "float32"), ("B", 5)], (301, 1, 1), np.float32),  # another template
        (x32, 2.0, [("T", "float64"), ("B", 1)], (301, 1, 1), np.float64),
    ]
    for _ in range(3):
        for x, a, template, grid, out_dtype in cases:
            dx = arrays.put(x)
            (y,) = K(
                [dx, a],
                output_shapes=[x.shape],
                output_dtypes=[out_dtype],
                grid=grid,
                threadgroup=(64, 1, 1),
                template=template,
                backend=backend,
            )
            got = arrays.get(y)
            b = dict(template)["B"]
            want = (a * x.astype(np.float32) + b).astype(out_dtype)
            assert got.dtype == out_dtype
            # the GPU may fuse a * x + B into one FMA: compare with an absolute floor too
            tol = 1e-3 if out_dtype == np.float16 else 1e-6
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert len({id(p) for p in K._plans.values()}) >= 5


def test_verbose_call_runs_the_kernel_exactly_once(backend, arrays, capsys):
    inc = kernelkit.kernel(
        "sp_inc",
        ["x"],
        ["y"],
        "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] += 1.0f;",
    )
    y = arrays.put(np.zeros(100, np.float32))
    for verbose in (False, True, True, False):  # in place: a second launch would show
        inc(
            [y], grid=(100, 1, 1), threadgroup=(32, 1, 1), out=[y], verbose=verbose, backend=backend
        )
    np.testing.assert_array_equal(arrays.get(y), np.full(100, 4.0, np.float32))
    assert capsys.readouterr().out.count("sp_inc") >= 2


def test_unhashable_template_value_never_serves_another_call(backend, arrays):
    k = kernelkit.kernel(
        "sp_unhashable",
        ["x"],
        ["y"],
        "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] * S;",
    )
    x = arrays.put(np.arange(64, dtype=np.float32))
    # a list as a template entry cannot be hashed: that call's plan is built but not kept
    (a,) = k(
        [x],
        output_shapes=[(64,)],
        output_dtypes=[np.float32],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
        template=[["S", 2]],
        backend=backend,
    )
    (b,) = k(
        [x],
        output_shapes=[(64,)],
        output_dtypes=[np.float32],
        grid=(64, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("S", 3)],
        backend=backend,
    )
    np.testing.assert_array_equal(arrays.get(a), 2 * np.arange(64, dtype=np.float32))
    np.testing.assert_array_equal(arrays.get(b), 3 * np.arange(64, dtype=np.float32))
