"""cuda_fp16.h / cuda_bf16.h's functions on the CPU backend: the rounding-mode conversions
against exact references (every half value sorted; Python fractions for 64-bit integers),
NaN and signed-zero rules of max/min, ordered and unordered comparisons; and, with a GPU, every
function of ``half_intrinsics.py`` bit for bit against the GPU's own on all 65536 inputs."""

from __future__ import annotations

import bisect
import functools
from fractions import Fraction

import numpy as np
import pytest
from half_intrinsics import FLOAT_BITS, INTS, MODES, inputs, kernel, outputs
from parity import results

torch = pytest.importorskip("torch")
DTYPES = ("float16", "bfloat16")
NP = {"float16": np.float16}


def _values(dtype: str, bits: np.ndarray) -> np.ndarray:
    """float64 values of 16-bit patterns."""
    with np.errstate(invalid="ignore"):  # signalling NaNs convert as quiet ones
        if dtype == "float16":
            return bits.view(np.float16).astype(np.float64)
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def run(dtype: str, device: str) -> dict[str, np.ndarray]:
    a, b, f, v = inputs(dtype)
    tdt = getattr(torch, dtype)

    def put(arr: np.ndarray, dt: object) -> object:
        as_int16 = dt not in (torch.float32, torch.int64)  # 16-bit patterns, viewed as dt
        return torch.from_numpy(arr.view(np.int16) if as_int16 else arr).view(dt).to(device)

    arrays = [put(a, tdt), put(b, tdt), put(f, torch.float32), put(v, torch.int64)]
    names = [n for n, _ in outputs(dtype)]
    return results(kernel(dtype), arrays, names, device, template=[("T", dtype)])


@pytest.fixture(scope="module", params=DTYPES)
def cpu_results(request):
    return request.param, run(request.param, "cpu")


def _sorted_finite(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    bits = np.arange(65536, dtype=np.uint16)
    vals = _values(dtype, bits)
    keep = np.isfinite(vals) & ~((vals == 0) & (bits >> 15 == 1))  # one zero: +0
    order = np.argsort(vals[keep], kind="stable")
    return vals[keep][order], bits[keep][order]


def _directed(dtype: str, x: np.ndarray, mode: str) -> np.ndarray:
    """Exact rd/ru/rz of float64 values to the type's values (as float64; inf past the ends)."""
    vals, _ = _sorted_finite(dtype)
    lo_i = np.searchsorted(vals, x, side="right") - 1  # largest value <= x
    hi_i = np.searchsorted(vals, x, side="left")  # smallest value >= x
    lo = np.where(lo_i >= 0, vals[np.clip(lo_i, 0, vals.size - 1)], -np.inf)
    hi = np.where(hi_i < vals.size, vals[np.clip(hi_i, 0, vals.size - 1)], np.inf)
    if mode == "rd":
        return lo
    if mode == "ru":
        return hi
    return np.where(x >= 0, lo, hi)


@pytest.mark.parametrize("mode", ["rz", "rd", "ru"])
def test_float_to_half_in_directed_modes(cpu_results, mode):
    dtype, res = cpu_results
    _, _, f, _ = inputs(dtype)
    s = "half" if dtype == "float16" else "bfloat16"
    got = _values(dtype, res[f"__float2{s}_{mode}"].astype(np.uint16))
    x = f.astype(np.float64)
    finite = np.isfinite(x)
    np.testing.assert_array_equal(got[finite], _directed(dtype, x[finite], mode))
    assert np.isnan(got[np.isnan(x)]).all()
    np.testing.assert_array_equal(got[np.isinf(x)], x[np.isinf(x)])


@functools.cache
def _exact(dtype: str) -> tuple[list[Fraction], np.ndarray]:
    vals, bits = _sorted_finite(dtype)
    return [Fraction(float(x)) for x in vals], bits


def _round_exact(v: int | Fraction, dtype: str, mode: str) -> float:
    """Exact rounding of a Python int or fraction to the type's values (ties to even for rn)."""
    vals, bits = _exact(dtype)
    fv = Fraction(v)
    i = bisect.bisect_right(vals, fv) - 1  # vals[i] <= fv < vals[i + 1]
    lo = vals[i] if i >= 0 else None
    hi = vals[i] if lo == fv else (vals[i + 1] if i + 1 < len(vals) else None)
    big = 2 * vals[-1] - vals[-2]  # where the step past the largest would be
    as_float = lambda x, sign: float(x) if x is not None else sign * np.inf
    if mode == "rd" or (mode == "rz" and v >= 0):
        return as_float(lo, -1)
    if mode == "ru" or mode == "rz":
        return as_float(hi, 1)
    dlo = fv - (lo if lo is not None else -big)
    dhi = (hi if hi is not None else big) - fv
    if dlo != dhi:
        return as_float(lo, -1) if dlo < dhi else as_float(hi, 1)
    lo_odd = lo is not None and int(bits[i]) % 2 == 1
    return as_float(hi, 1) if lo_odd else as_float(lo, -1)


def test_integers_to_half_in_every_mode(cpu_results):
    dtype, res = cpu_results
    _, _, _, v = inputs(dtype)
    s = "half" if dtype == "float16" else "bfloat16"
    wrap = {"int": np.int32, "uint": np.uint32, "short": np.int16, "ushort": np.uint16}
    picks = [*range(6), *range(20000, 20030), *range(36000, 36030), *range(50000, 50030)]
    for name in INTS:
        for mode in MODES:
            got = _values(dtype, res[f"__{name}2{s}_{mode}"].astype(np.uint16))
            for i in picks:
                x = int(v[i].astype(wrap[name])) if name in wrap else int(v[i])
                if name == "ull":
                    x %= 2**64
                want = _round_exact(x, dtype, mode)
                assert got[i] == want, (name, mode, x, got[i], want)


def test_hcmadd_is_four_roundings_of_fma(cpu_results):
    # __hcmadd(a, b, c): re = fma(-a.y, b.y, fma(a.x, b.x, c.x)), im = fma(a.y, b.x,
    # fma(a.x, b.y, c.y)), each fma rounded once (cuda_fp16.hpp); here a = (x, y), b = (y, x),
    # c = (x, y) for the kernel's x = a and y = b
    dtype, res = cpu_results
    a, b, _, _ = inputs(dtype)
    x, y = _values(dtype, a), _values(dtype, b)
    re = _values(dtype, res["__hcmadd.x"].astype(np.uint16))
    im = _values(dtype, res["__hcmadd.y"].astype(np.uint16))
    rng = np.random.default_rng(3)
    finite = np.flatnonzero(np.isfinite(x) & np.isfinite(y) & (np.abs(x) < 200) & (np.abs(y) < 200))
    checked = 0
    for i in rng.choice(finite, 1500, replace=False):
        fx, fy = Fraction(float(x[i])), Fraction(float(y[i]))
        r1, i1 = _round_exact(fx * fy + fx, dtype, "rn"), _round_exact(fx * fx + fy, dtype, "rn")
        if not (np.isfinite(r1) and np.isfinite(i1)):
            continue
        want_re = _round_exact(Fraction(r1) - fy * fx, dtype, "rn")
        want_im = _round_exact(Fraction(i1) + fy * fy, dtype, "rn")
        assert (re[i], im[i]) == (want_re, want_im), (float(fx), float(fy), re[i], im[i])
        checked += 1
    assert checked > 1000


def test_half_to_integers_in_every_mode(cpu_results):
    dtype, res = cpu_results
    a, _, _, _ = inputs(dtype)
    x = _values(dtype, a)
    s = "half" if dtype == "float16" else "bfloat16"
    fn = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}
    lim = {"int": np.int32, "uint": np.uint32, "short": np.int16, "ushort": np.uint16}
    for name in INTS:
        info = np.iinfo(lim.get(name, np.int64 if name == "ll" else np.uint64))
        for mode in MODES:
            with np.errstate(invalid="ignore"):
                r = fn[mode](x)
            nan_as = 2**63 if name == "ull" else info.min if name == "ll" else 0  # the GPU's cvt
            want = [
                nan_as
                if np.isnan(t)
                else info.min
                if t <= info.min
                else info.max
                if t >= info.max
                else int(t)
                for t in r
            ]
            got = res[f"__{s}2{name}_{mode}"]
            if name == "ull":
                got = got.astype(np.uint64)
            np.testing.assert_array_equal(got, np.array(want, dtype=got.dtype), err_msg=name + mode)


def test_max_min_and_comparisons_follow_cuda_rules(cpu_results):
    dtype, res = cpu_results
    a, b, _, _ = inputs(dtype)
    x, y = _values(dtype, a), _values(dtype, b)
    nx, ny = np.isnan(x), np.isnan(y)
    hmax = _values(dtype, res["__hmax"].astype(np.uint16))
    both = ~nx & ~ny
    np.testing.assert_array_equal(hmax[both], np.maximum(x, y)[both])
    np.testing.assert_array_equal(hmax[nx & ~ny], y[nx & ~ny])  # a NaN gives the other
    assert (res["__hmax"][nx & ny] == 0x7FFF).all()  # two NaNs: the canonical NaN
    assert (res["__hmax_nan"][nx | ny] == 0x7FFF).all()
    zeros = (x == 0) & (y == 0) & (a != b)  # +0 and -0
    assert (res["__hmax"][zeros] == 0).all() and (res["__hmin"][zeros] == 0x8000).all()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(res["__hne"].astype(bool), (x < y) | (x > y))
        np.testing.assert_array_equal(res["__hneu"].astype(bool), ~(x == y))
        np.testing.assert_array_equal(res["__hltu"].astype(bool), ~(x >= y))
        np.testing.assert_array_equal(res["__hequ"].astype(bool), ~((x < y) | (x > y)))
    np.testing.assert_array_equal(res["__hisinf"], np.where(np.isinf(x), np.sign(x), 0))


def test_cpu_and_gpu_agree_bit_for_bit():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    bad = []
    for dtype in DTYPES:
        cpu, gpu = run(dtype, "cpu"), run(dtype, "cuda")
        a = inputs(dtype)[0]
        for name in cpu:
            differ = cpu[name] != gpu[name]
            if name in FLOAT_BITS:
                nan = lambda r: np.isnan(r.astype(np.int32).view(np.float32))
                differ &= ~(nan(cpu[name]) & nan(gpu[name]))
            diff = np.nonzero(differ)[0]
            if diff.size:
                i = diff[0]
                bad.append(
                    f"{dtype} {name}: {diff.size} of {a.size} differ, e.g. a=0x{a[i]:04x}: "
                    f"cpu {cpu[name][i]:#x} gpu {gpu[name][i]:#x}"
                )
    assert not bad, "\n".join(bad)
