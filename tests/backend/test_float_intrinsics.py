"""CUDA's rounding-mode intrinsics and conversions on the CPU backend against exact references
(Python fractions), the GPU's saturating conversions (NaN to 0, out-of-range values to the
ends); and, with a GPU, every result of ``float_intrinsics.py`` bit for bit against the GPU's
own on 65536 inputs (a NaN matches any NaN)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from float_intrinsics import MODES, TO_INT, inputs, kernel, outputs
from parity import results

torch = pytest.importorskip("torch")
SAMPLE = [*range(10), *range(1000, 1100), *range(40000, 40100)]  # specials, any, cancellations


def run(device: str) -> dict[str, np.ndarray]:
    arrays = [torch.from_numpy(x).to(device) for x in inputs()]
    return results(kernel(), arrays, [n for n, _, _ in outputs()], device)


@pytest.fixture(scope="module")
def cpu():
    return run("cpu")


def _round(x: Fraction, mode: str, dtype: type) -> float:
    """x rounded to float32 or float64 in ``mode``, exactly (inf past the largest finite)."""
    info = np.finfo(dtype)
    top = Fraction(float(info.max))
    if abs(x) > top:  # between the largest finite value and infinity
        big = top + (top - Fraction(float(np.nextafter(info.max, dtype(0))))) / 2
        lo, hi = (dtype(info.max), dtype(np.inf)) if x > 0 else (dtype(-np.inf), -dtype(info.max))
        if mode == "rn":
            return float(hi if x > 0 else lo) if abs(x) >= big else float(lo if x > 0 else hi)
    else:
        r = dtype(float(x))  # within one step of each answer
        lo = r if Fraction(float(r)) <= x else np.nextafter(r, dtype(-np.inf))
        hi = r if Fraction(float(r)) >= x else np.nextafter(r, dtype(np.inf))
    if mode == "rd":
        return float(lo)
    if mode == "ru":
        return float(hi)
    if mode == "rz":
        return float(lo if x >= 0 else hi)
    dlo, dhi = x - Fraction(float(lo)), Fraction(float(hi)) - x
    if dlo != dhi:
        return float(lo if dlo < dhi else hi)
    bits = np.array([lo]).view(np.uint32 if dtype == np.float32 else np.uint64)[0]
    return float(lo if bits % 2 == 0 else hi)


def _as_float(bits: np.ndarray, kind: str) -> np.ndarray:
    return bits.astype(np.int32).view(np.float32) if kind == "f" else bits.view(np.float64)


@pytest.mark.parametrize("mode", MODES)
def test_float_arithmetic_in_each_mode(cpu, mode):
    fa, fb, fc, dd, de, _, _ = inputs()
    exact = {
        "__fadd": lambda k: Fraction(float(fa[k])) + Fraction(float(fb[k])),
        "__fsub": lambda k: Fraction(float(fa[k])) - Fraction(float(fb[k])),
        "__fmul": lambda k: Fraction(float(fa[k])) * Fraction(float(fb[k])),
        "__fdiv": lambda k: Fraction(float(fa[k])) / Fraction(float(fb[k])),
        "__fmaf": lambda k: Fraction(float(fa[k])) * Fraction(float(fb[k]))
        + Fraction(float(fc[k])),
        "__dadd": lambda k: Fraction(float(dd[k])) + Fraction(float(de[k])),
        "__ddiv": lambda k: Fraction(float(dd[k])) / Fraction(float(de[k])),
    }  # fmt: skip
    for name, fn in exact.items():
        kind = "d" if name.startswith("__d") else "f"
        got = _as_float(cpu[f"{name}_{mode}"], kind)
        for k in SAMPLE:
            ins = (dd[k], de[k]) if kind == "d" else (fa[k], fb[k], fc[k])
            if not all(np.isfinite(ins)) or (name.endswith("div") and ins[1] == 0):
                continue
            want = _round(fn(k), mode, np.float64 if kind == "d" else np.float32)
            if want == 0 and got[k] == 0:
                continue  # zeros: the sign is checked on the GPU, bit for bit
            assert got[k] == want, (name, mode, ins, got[k], want)


def test_signs_of_exact_zero_sums(cpu):
    """x + (-x) is +0 except rounding down (-0); two zeros of one sign keep it (IEEE 754)."""
    for mode in MODES:
        got = np.signbit(_as_float(cpu[f"__fadd_{mode}"][:7], "f"))
        # #0 +0 + +0, #1 -0 + -0, #5 1 + -1, #6 -1 + 1
        assert list(got[[0, 1, 5, 6]]) == [False, True, mode == "rd", mode == "rd"], mode


@pytest.mark.parametrize("mode", MODES)
def test_conversions_in_each_mode(cpu, mode):
    fa, _, _, dd, _, il, _ = inputs()
    fn = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}[mode]
    with np.errstate(invalid="ignore"):  # signalling NaNs convert as quiet ones
        fa64 = fa.astype(np.float64)
    for src, vals in (("float", fa64), ("double", dd)):
        for short, _ in TO_INT:
            info = np.iinfo(
                {"int": np.int32, "uint": np.uint32, "ll": np.int64}.get(short, np.uint64)
            )
            got = cpu[f"__{src}2{short}_{mode}"]
            for k in SAMPLE:
                x = vals[k]
                if np.isnan(x):
                    # the GPU's cvt: the lowest bit pattern of 64-bit integers and of 32-bit
                    # ones from a double, else 0
                    low = {"int": -(2**31), "uint": 2**31} if src == "double" else {}
                    want = -(2**63) if short in ("ll", "ull") else low.get(short, 0)
                else:
                    t = fn(x)
                    want = info.min if t <= info.min else info.max if t >= info.max else int(t)
                if short == "ull" and want >= 2**63:
                    want -= 2**64  # stored as a signed 64-bit integer
                assert got[k] == want, (src, short, mode, x, got[k], want)
    got = _as_float(cpu[f"__ll2float_{mode}"], "f")
    for k in SAMPLE:
        assert got[k] == _round(Fraction(int(il[k])), mode, np.float32), (mode, il[k])
    got = _as_float(cpu[f"__ll2double_{mode}"], "d")
    for k in SAMPLE:
        assert got[k] == _round(Fraction(int(il[k])), mode, np.float64), (mode, il[k])


def test_cpu_and_gpu_agree_bit_for_bit(cpu):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gpu = run("cuda")
    fa, fb = inputs()[:2]
    signalling = [np.isnan(x) & (x.view(np.uint32) & 0x00400000 == 0) for x in (fa, fb)]
    bad = []
    for name, kind, _ in outputs():
        differ = cpu[name] != gpu[name]
        if name in ("fminf", "fmaxf"):  # the host's libm: NaN for a signalling NaN, and it
            # may order -0 and +0 either way (CUDA's max and min are kernelkit's own: checked)
            zeros = (fa == 0) & (fb == 0)
            differ &= ~(signalling[0] | signalling[1] | zeros)
        if kind in "fd":  # any NaN matches any
            both = np.isnan(_as_float(cpu[name], kind)) & np.isnan(_as_float(gpu[name], kind))
            differ &= ~both
        where = np.nonzero(differ)[0]
        if where.size:
            k = where[0]
            c, g = cpu[name][k], gpu[name][k]
            bad.append(f"{name}: {where.size} differ, e.g. #{k}: cpu {c:#x} gpu {g:#x}")
    assert not bad, "\n".join(bad)


def _lanes(x: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """[n, lanes] of the words' 8- or 16-bit lanes, low lane first."""
    u = x.astype(np.int64) & 0xFFFFFFFF
    lanes = np.stack([(u >> s) & ((1 << width) - 1) for s in range(0, 32, width)], axis=1)
    return np.where(signed & (lanes >= 1 << (width - 1)), lanes - (1 << width), lanes)


def test_simd_lanes(cpu):
    """A few of the SIMD intrinsics against per-lane references (the GPU test checks all)."""
    _, _, _, _, _, il, im = inputs()
    u, v = (il >> 32) & 0xFFFFFFFF, (im >> 32) & 0xFFFFFFFF
    for w, width in (("2", 16), ("4", 8)):
        lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
        sa, sb = _lanes(u, width, True), _lanes(v, width, True)
        ua, ub = _lanes(u, width, False), _lanes(v, width, False)
        checks = {
            "subss": np.clip(sa - sb, lo, hi),
            "addus": np.clip(ua + ub, 0, (1 << width) - 1),
            "absdiffu": np.abs(ua - ub),
            "maxs": np.maximum(sa, sb),
            "cmpgtu": np.where(ua > ub, (1 << width) - 1, 0),
            "setles": (sa <= sb).astype(np.int64),
        }
        for name, lanes in checks.items():
            want = sum(
                (lanes[:, k] & ((1 << width) - 1)) << (k * width) for k in range(32 // width)
            )
            np.testing.assert_array_equal(cpu[f"__v{name}{w}"] & 0xFFFFFFFF, want, err_msg=name + w)
        want = np.abs(ua - ub).sum(axis=1)
        np.testing.assert_array_equal(cpu[f"__vsadu{w}"], want)


def _fns(mask: int, base: int, offset: int) -> int:
    """PTX's fns, as its ISA's pseudocode states it."""
    if offset == 0:
        return base if mask >> base & 1 else 0xFFFFFFFF
    count, inc, pos = abs(offset) - 1, 1 if offset > 0 else -1, base
    while 0 <= pos < 32:
        if mask >> pos & 1:
            if count == 0:
                return pos
            count -= 1
        pos += inc
    return 0xFFFFFFFF


def test_fns_finds_the_nth_set_bit(cpu):
    _, _, _, _, _, il, im = inputs()
    u, v = (il >> 32) & 0xFFFFFFFF, (im >> 32) & 0xFFFFFFFF
    base, offset = il & 31, v % 67 - 33
    want = [_fns(int(m), int(b), int(o)) for m, b, o in zip(u, base, offset)]
    np.testing.assert_array_equal(cpu["__fns"] & 0xFFFFFFFF, want)
    assert _fns(0xAAAAAAAA, 2, -1) == 1 and _fns(0xAAAAAAAA, 3, 1) == 3  # the ISA's examples
