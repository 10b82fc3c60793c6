"""cuda_fp8.h on the CPU backend: its conversions against torch's float8 types (round to
nearest even; torch's casts do not saturate, so __NV_NOSAT is torch's and __NV_SATFINITE torch's
with the overflows clamped) and CUDA's rules for NaN, infinities and integers; with a GPU, every
result of ``fp8_conversions.py`` bit for bit against the GPU's own."""

from __future__ import annotations

import numpy as np
import pytest
from fp8_conversions import inputs, kernel, outputs, values
from parity import results

torch = pytest.importorskip("torch")
LARGEST = {"e4m3": 0x7E, "e5m2": 0x7B}
TORCH = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def run(device: str) -> dict[str, np.ndarray]:
    arrays = [torch.from_numpy(a).to(device) for a in inputs()]
    return results(kernel(), arrays, [n for n, _ in outputs()], device)


@pytest.fixture(scope="module")
def cpu():
    return run("cpu")


FORMAT = {"e4m3": (3, 7, 0x7F), "e5m2": (2, 15, 0x7C)}  # mantissa bits, bias, overflow code


def _exact_codes(x: np.ndarray, k: str, sat: bool) -> np.ndarray:
    """float64 values (not NaN) to codes by exact round to nearest even over the format's
    values (written here, independent of the header): past the largest finite value, the
    largest (sat) or the overflow code (e4m3's NaN 0x7f, e5m2's infinity 0x7c)."""
    man, bias, top = FORMAT[k]
    v = values(man, bias)[: top + 1]  # codes 0..top, top standing for the overflow
    a = np.abs(x)
    lo = np.clip(np.searchsorted(v, a, side="right") - 1, 0, top)
    hi = np.minimum(lo + 1, top)
    below, above = a - v[lo], v[hi] - a
    code = np.where(below < above, lo, np.where(above < below, hi, np.where(lo % 2, hi, lo)))
    code = np.where(a >= v[top], top, code)
    code = np.where(code >= top, top - 1 if sat else top, code)
    return np.where(np.signbit(x), 0x80, 0) | code


def _torch_codes(x: np.ndarray, k: str) -> np.ndarray:
    t = torch.from_numpy(x.astype(np.float32)).to(getattr(torch, TORCH[k]))
    return t.view(torch.uint8).numpy().astype(np.int64)


@pytest.mark.parametrize("k", ["e4m3", "e5m2"])
def test_float_to_fp8_rounds_to_nearest_even(cpu, k):
    f, d, _ = inputs()
    finite = np.isfinite(f)
    x = f[finite]
    torch_codes = _torch_codes(x, k)  # e4m3: saturates past 448; e5m2: infinity past 57344
    sign = np.where(np.signbit(x), 0x80, 0)
    if k == "e4m3":
        sat = torch_codes
        nosat = np.where(np.abs(x) > 464, sign | 0x7F, torch_codes)  # past 448 + half a step
    else:
        nosat = torch_codes
        sat = np.where((torch_codes & 0x7F) == 0x7C, sign | LARGEST[k], torch_codes)
    np.testing.assert_array_equal(cpu[f"float_{k}_nosat"][finite], nosat)
    np.testing.assert_array_equal(cpu[f"float_{k}_sat"][finite], sat)
    np.testing.assert_array_equal(cpu[f"{k}_ctor"][finite], sat)  # the type saturates
    np.testing.assert_array_equal(cpu[f"float_{k}_nosat"][finite], _exact_codes(x, k, False))
    dfin = np.isfinite(d)  # doubles, half of them between floats
    for s, sat_ in (("sat", True), ("nosat", False)):
        want = _exact_codes(d[dfin], k, sat_)
        np.testing.assert_array_equal(cpu[f"double_{k}_{s}"][dfin], want)
    pair = _exact_codes(x, k, True) | (_exact_codes(-x.astype(np.float64), k, True) << 8)
    np.testing.assert_array_equal(cpu[f"{k}_pair"][finite], pair)  # x in the low byte
    h = f.astype(np.float16)  # through a half: the half's value rounded once more
    hf = np.isfinite(h)
    codes = _torch_codes(h[hf].astype(np.float32), k)
    if k == "e5m2":
        codes = np.where((codes & 0x7F) == 0x7C, (codes & 0x80) | LARGEST[k], codes)
    np.testing.assert_array_equal(cpu[f"half_{k}_sat"][hf], codes)


@pytest.mark.parametrize("k", ["e4m3", "e5m2"])
def test_specials(cpu, k):
    f, d, _ = inputs()
    nan, inf = np.isnan(f), np.isinf(f)
    assert (cpu[f"float_{k}_sat"][nan] == 0x7F).all()  # a float NaN: canonical, sign dropped
    sign = np.where(f[inf] < 0, 0x80, 0)
    np.testing.assert_array_equal(cpu[f"float_{k}_sat"][inf], sign | LARGEST[k])
    np.testing.assert_array_equal(
        cpu[f"float_{k}_nosat"][inf], sign | (0x7F if k == "e4m3" else 0x7C)
    )
    dn = np.isnan(d)
    dsign = (d[dn].view(np.uint64) >> 63).astype(np.int64) << 7
    payload = ((d[dn].view(np.uint64) >> 50) & 3).astype(np.int64)
    want = dsign | (0x7F if k == "e4m3" else 0x7E | payload)
    np.testing.assert_array_equal(cpu[f"double_{k}_sat"][dn], want)


@pytest.mark.parametrize("k", ["e4m3", "e5m2"])
def test_fp8_to_wider_types(cpu, k):
    _, _, c = inputs()
    t = torch.from_numpy(c[:256].astype(np.uint8)).view(getattr(torch, TORCH[k]))
    want = t.to(torch.float32).numpy()
    got = cpu[f"{k}_float"][:256].astype(np.int32).view(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(got[nan]).all()
    half = cpu[f"{k}_to_half"][:256].astype(np.uint16)
    assert (half[nan] == 0x7FFF).all()  # NaN: the canonical half NaN
    np.testing.assert_array_equal(half.view(np.float16)[~nan], want[~nan].astype(np.float16))
    with np.errstate(invalid="ignore"):
        trunc = np.trunc(want.astype(np.float64))
        ints = np.clip(np.where(nan, 0, trunc), -(2.0**31), 2.0**31 - 1).astype(
            np.int64
        )  # inf saturates
        np.testing.assert_array_equal(cpu[f"{k}_int"][:256], ints.astype(np.int64))
        np.testing.assert_array_equal(cpu[f"{k}_uchar"][:256], np.clip(ints, 0, 255))
        np.testing.assert_array_equal(cpu[f"{k}_schar"][:256], np.clip(ints, -128, 127))
        np.testing.assert_array_equal(cpu[f"{k}_bool"][:256], (c[:256] & 0x7F) != 0)


def test_cpu_and_gpu_agree_bit_for_bit(cpu):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gpu = run("cuda")
    bad = []
    for name in cpu:
        differ = cpu[name] != gpu[name]
        if name.endswith("_float"):  # a float NaN's payload: any NaN matches any
            nan = lambda r: np.isnan(r.astype(np.int32).view(np.float32))
            differ &= ~(nan(cpu[name]) & nan(gpu[name]))
        diff = np.nonzero(differ)[0]
        if diff.size:
            i = diff[0]
            bad.append(f"{name}: {diff.size} differ, e.g. #{i}: cpu {cpu[name][i]:#x} "
                       f"gpu {gpu[name][i]:#x}")  # fmt: skip
    assert not bad, "\n".join(bad)
