"""``tuner.compare_outputs``: the verdict on a candidate's output against the float64 reference.
It compares floating outputs a chunk at a time (a prefill-sized output, 2048 x 128256, is
hundreds of MB); the chunked verdict must be that of one pass over the whole array, which
``_whole`` spells out as the definition, with the same figures when the error is a size.
Property-tested with hypothesis over sizes around the chunk, NaNs, infinities and small
errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkit._tune import tuner


def _whole(a: np.ndarray, b: np.ndarray, dtype: str) -> str | None:
    """The verdict over the whole array at once (the definition the chunks must agree with)."""
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    if not np.array_equal(np.isnan(a64), np.isnan(b64)):
        return "NaN"
    finite = np.isfinite(a64) & np.isfinite(b64)
    if not np.array_equal(a64[~finite & ~np.isnan(a64)], b64[~finite & ~np.isnan(b64)]):
        return "infinities"
    if not finite.any():
        return None
    err = float(np.max(np.abs(a64[finite] - b64[finite])))
    scale = float(np.max(np.abs(a64[finite])))
    return f"{err:.3g} " if err > tuner.RTOL[dtype] * scale else None


SPECIALS = st.sampled_from([np.nan, np.inf, -np.inf])


@st.composite
def pairs(draw):
    """A reference and an output of the same size (around two small chunks), with a few
    elements set to NaN or an infinity in either and a few perturbed."""
    n = draw(st.integers(0, 3 * 8 + 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n).astype(np.float32)
    b = a.copy()
    for _ in range(draw(st.integers(0, 3))):
        if n:
            where = draw(st.integers(0, n - 1))
            value = draw(SPECIALS)
            for arr in draw(st.sampled_from([(a,), (b,), (a, b)])):
                arr[where] = value
    for _ in range(draw(st.integers(0, 3))):
        if n:
            where = draw(st.integers(0, n - 1))
            b[where] += np.float32(draw(st.sampled_from([1e-7, 1e-3, 1.0])))
    return a, b


@settings(max_examples=400, deadline=None)
@given(pairs())
def test_the_chunked_verdict_is_the_whole_arrays(monkeypatch_chunk, pair):
    a, b = pair
    got = tuner.compare_outputs([a], [b], ["float32"])
    want = _whole(a, b, "float32")
    if want is None:
        assert got is None
    elif want in ("NaN", "infinities"):  # which of the two comes first may differ by chunk
        assert got is not None and ("NaN" in got or "infinities" in got), (got, want)
    else:  # the same largest error, over the same tolerance
        assert got is not None and f"by up to {want}" in got, (got, want)


@pytest.fixture(scope="module")
def monkeypatch_chunk():
    """Chunks of 8 elements, so that small arrays span several."""
    old = tuner.COMPARE_CHUNK
    tuner.COMPARE_CHUNK = 8
    yield
    tuner.COMPARE_CHUNK = old


def test_shapes_and_integers_are_checked_as_before():
    a = np.zeros((2, 3), np.float32)
    assert "shape" in tuner.compare_outputs([a], [np.zeros((3, 2), np.float32)], ["float32"])
    ints = np.arange(6, dtype=np.int32)
    other = ints.copy()
    other[2] = 7
    assert "differs in 1 of 6" in tuner.compare_outputs([ints], [other], ["int32"])
    x = np.linspace(1.0, 2.0, 6, dtype=np.float32)
    assert tuner.compare_outputs([x], [x + np.float32(1e-6)], ["float32"]) is None
    assert "by up to 0.01" in tuner.compare_outputs([x], [x + np.float32(0.01)], ["float32"])


@settings(max_examples=300, deadline=None)
@given(pairs())
def test_the_verdict_on_the_device_is_the_whole_arrays(monkeypatch_chunk, pair):
    """``compare_on_device`` (the output compared where it lies: a torch tensor, here on the
    host's device) against the same definition, chunks of 8 elements, float32 and bfloat16."""
    torch = pytest.importorskip("torch")
    a, b = pair
    for dtype, tdtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        out = torch.from_numpy(b).to(tdtype)
        got = tuner.compare_on_device(a.astype(np.float64), out, dtype)
        want = _whole(a, out.float().numpy(), dtype)
        if want is None:
            assert got is None, (got, dtype)
        elif want in ("NaN", "infinities"):
            assert got is not None and want in got, (got, want, dtype)
        else:
            assert got is not None and f"by up to {want}" in got, (got, want, dtype)
        assert (got is None) == (tuner.compare_outputs([a], [out.float().numpy()], [dtype]) is None)


def test_on_device_shapes_and_integers():
    torch = pytest.importorskip("torch")
    ref = np.zeros((2, 3))
    assert "shape" in tuner.compare_on_device(ref, torch.zeros(3, 2), "float32")
    ints = torch.arange(6, dtype=torch.int32)
    other = ints.clone()
    other[2] = 7
    assert "differs in 1 of 6" in tuner.compare_on_device(ints.numpy(), other, "int32")
    assert tuner.compare_on_device(ref, torch.zeros(2, 3), "float32") is None
    ref.flags.writeable = False  # a read-only reference: no warning (torch.from_numpy's)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuner.compare_on_device(ref, torch.zeros(2, 3), "float32") is None
        assert tuner.compare_on_device(ref, torch.zeros(3, 2).T, "float16") is None
    assert not tuner.on_device(torch.zeros(2)) and not tuner.on_device(np.zeros(2))
