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
