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


@pytest.mark.parametrize("form", ["lists", "dicts"])
def test_bfloat16_arrays_in_and_out(form):
    # np.asarray on an MLX bfloat16 array raises (no PEP 3118 format): the kernel must read the
    # bits through a same-size view and hand back an MLX bfloat16 array (issue 25 item 8)
    k = kernelkit.metal_kernel(
        name=f"mlx_bf16_exp_{form}",
        input_names=["inp"] if form == "lists" else None,
        output_names=["out"] if form == "lists" else None,
        source=EXP,
    )
    a = (mx.random.normal(shape=(3, 37)) * 0.5).astype(mx.bfloat16)
    kw = dict(grid=(a.size, 1, 1), threadgroup=(64, 1, 1))
    if form == "lists":
        (out,) = k(inputs=[a], template=[("T", mx.bfloat16)], output_shapes=[a.shape],
                   output_dtypes=[mx.bfloat16], **kw)  # fmt: skip
    else:
        out = k(inputs={"inp": a}, template={"T": mx.bfloat16}, output_shapes={"out": a.shape},
                output_dtypes={"out": mx.bfloat16}, **kw)["out"]  # fmt: skip
    assert isinstance(out, mx.array) and out.dtype == mx.bfloat16 and out.shape == a.shape
    ref = np.exp(np.array(a.astype(mx.float32)).astype(np.float64))
    np.testing.assert_allclose(np.array(out.astype(mx.float32)), ref, rtol=2e-2)


def test_bfloat16_input_is_read_in_place_and_strided_views_work():
    from kernelkit._metal_api import _from_mlx

    a = mx.random.normal(shape=(6, 5)).astype(mx.bfloat16)
    first = _from_mlx(a)
    assert first.dtype.name == "bfloat16"
    # the same MLX buffer each time: a view, not a copy
    assert first.__array_interface__["data"][0] == _from_mlx(a).__array_interface__["data"][0]
    np.testing.assert_array_equal(first.astype(np.float32), np.array(a.astype(mx.float32)))
    t = a.T  # strided: ensure_row_contiguous=False reads it through its strides
    k = kernelkit.metal_kernel(
        name="mlx_bf16_strided", input_names=["inp"], output_names=["out"], source=STRIDED,
        ensure_row_contiguous=False,
    )  # fmt: skip
    (o,) = k(
        inputs=[t],
        template=[("T", mx.float32)],
        grid=(t.size, 1, 1),
        threadgroup=(32, 1, 1),
        output_shapes=[t.shape],
        output_dtypes=[mx.float32],
    )
    ref = np.exp(np.array(t.astype(mx.float32)).astype(np.float64))
    np.testing.assert_allclose(np.array(o), ref, rtol=1e-5)
