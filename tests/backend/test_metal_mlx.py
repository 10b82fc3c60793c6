"""``kernelkit.metal_kernel`` on real MLX arrays and dtypes (MLX's CPU build on Linux): both call
forms of MLX's documentation, results back as MLX arrays."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install 'mlx[cpu]')")

EXP = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""
STRIDED = """
    uint elem = thread_position_in_grid.x;
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    out[elem] = metal::exp(tmp);
"""


def test_documentation_exp_on_mlx_arrays():
    k = kernelkit.metal_kernel(
        name="mlx_real_exp", input_names=["inp"], output_names=["out"], source=EXP
    )
    a = mx.random.normal(shape=(4, 16)).astype(mx.float16)
    (out,) = k(
        inputs=[a],
        template=[("T", mx.float32)],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[a.shape],
        output_dtypes=[a.dtype],
    )
    assert isinstance(out, mx.array) and out.dtype == mx.float16 and out.shape == a.shape
    ref = np.exp(np.array(a).astype(np.float64))
    np.testing.assert_allclose(np.array(out).astype(np.float64), ref, rtol=2e-3)


def test_older_documented_form_and_strided_views():
    old = kernelkit.metal_kernel(name="mlx_real_exp_old", source=EXP)
    b = mx.random.normal(shape=(100,))
    outs = old(
        inputs={"inp": b},
        template={"T": mx.float32},
        grid=(100, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes={"out": b.shape},
        output_dtypes={"out": b.dtype},
    )
    assert set(outs) == {"out"}
    np.testing.assert_allclose(np.array(outs["out"]), np.exp(np.array(b)), rtol=1e-6)
    k = kernelkit.metal_kernel(
        name="mlx_real_exp_strided",
        input_names=["inp"],
        output_names=["out"],
        source=STRIDED,
        ensure_row_contiguous=False,
    )
    c = mx.random.normal(shape=(8, 5)).T  # a transposed view
    (o,) = k(
        inputs=[c],
        template=[("T", mx.float32)],
        grid=(c.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[c.shape],
        output_dtypes=[c.dtype],
    )
    np.testing.assert_allclose(np.array(o), np.exp(np.array(c)), rtol=1e-6)
