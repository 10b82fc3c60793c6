"""Property test of the Metal translator's conditional casts (issue 25 item 8): random nested
``c ? a : b`` over ints, floats and a 16-bit value, evaluated by a Metal kernel and by Python.
Every value is a small integer, so each type holds it exactly and the answers must be equal."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

LEAVES = st.sampled_from(["a", "h", "f", "1", "2.0f", "3", "0"]).map(
    lambda t: (t, t.replace("2.0f", "2.0"))
)


def _expr(depth: int):
    """(Metal text, Python text) of one expression; conditionals with and without parentheses
    around their parts (a chain ``c1 ? x : c2 ? y : z`` included)."""
    if depth == 0:
        return LEAVES
    sub = _expr(depth - 1)
    return st.one_of(
        LEAVES,
        st.tuples(sub, st.sampled_from(["+", "-"]), sub).map(
            lambda t: (f"({t[0][0]} {t[1]} {t[2][0]})", f"({t[0][1]} {t[1]} {t[2][1]})")
        ),
        st.tuples(sub, sub, sub, sub).map(
            lambda t: (
                f"({t[0][0]} < {t[1][0]} ? {t[2][0]} : {t[3][0]})",
                f"({t[2][1]} if {t[0][1]} < {t[1][1]} else {t[3][1]})",
            )
        ),
        st.tuples(sub, sub, sub, sub, sub).map(
            lambda t: (
                f"({t[0][0]} > 1 ? {t[1][0]} : {t[2][0]} > 2 ? {t[3][0]} : {t[4][0]})",
                f"({t[1][1]} if {t[0][1]} > 1 else ({t[3][1]} if {t[2][1]} > 2 else {t[4][1]}))",
            )
        ),
    )


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@hypothesis.settings(
    max_examples=5,
    deadline=None,
    database=None,
    phases=[hypothesis.Phase.generate],  # a failure is reported as found (each try compiles)
)
@hypothesis.given(exprs=st.lists(_expr(2), min_size=1, max_size=6))
def test_random_conditionals_match_python(exprs, dt):
    ml = pytest.importorskip("ml_dtypes") if dt == "bfloat16" else None
    np_dt = np.dtype(ml.bfloat16) if ml else np.dtype(dt)
    body = ["T h = hx[0]; int a = ax[0]; float f = fx[0];"]
    body += [f"y[{j}] = static_cast<float>({c});" for j, (c, _) in enumerate(exprs)]
    k = kernelkit.metal_kernel("cond_prop", ["ax", "hx", "fx"], ["y"], "\n".join(body))
    a, h, f = 3, 5, 2
    (y,) = k(
        [np.array([a], np.int32), np.array([h], np_dt), np.array([f], np.float32)],
        output_shapes=[(len(exprs),)],
        output_dtypes=[np.float32],
        grid=(1, 1, 1),
        threadgroup=(1, 1, 1),
        template=[("T", dt)],
    )
    want = [float(eval(py, {"a": a, "h": h, "f": f})) for _, py in exprs]  # noqa: S307
    assert list(y) == want, exprs
