"""CUDA's special functions that the C library lacks (erfinv, erfcinv, normcdfinv, erfcx, the
modified Bessel functions I0 and I1, sinpi/cospi with exact zeros, norms) on the CPU backend,
against exact or higher-precision references; with a GPU, within CUDA's documented error bound
(in units in the last place) of the GPU's own results."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import numpy as np
import pytest

import kernelkit

torch = pytest.importorskip("torch")
# name, C++ expression of x in [-1, 1], CUDA's maximum error in ulp (float, double)
FUNCS = [
    ("erfinv", "erfinv{f}(x)", 2, 5),
    ("erfcinv", "erfcinv{f}(x + 1)", 4, 6),
    ("normcdfinv", "normcdfinv{f}((x + 1) / 2)", 5, 8),
    ("erfcx", "erfcx{f}(x * 30)", 4, 4),
    ("i0", "cyl_bessel_i0{f}(x * 40)", 6, 9),
    ("i1", "cyl_bessel_i1{f}(x * 40)", 6, 9),
    ("sinpi", "sinpi{f}(x * 1000)", 1, 1),
    ("cospi", "cospi{f}(x * 1000)", 1, 1),
]
X = np.concatenate([np.linspace(-0.9999, 0.9999, 1999), [0.0, 0.5, -0.5, 0.25, 1e-30, -1e-30]])


def run(dtype: str, device: str) -> np.ndarray:
    f = "f" if dtype == "float32" else ""
    t = "float" if dtype == "float32" else "double"
    lines = [
        "const int i = blockIdx.x * blockDim.x + threadIdx.x, n = xs_shape[0];",
        "if (i >= n) return;",
        f"const {t} x = xs[i];",
    ]
    lines += [f"y[{k} * n + i] = {e.format(f=f)};" for k, (_, e, _, _) in enumerate(FUNCS)]
    k = kernelkit.kernel(f"special_{dtype}", ["xs"], ["y"], "\n".join(lines))
    x = torch.from_numpy(X.astype(dtype)).to(device)
    y = torch.full((len(FUNCS) * X.size,), float("nan"), dtype=x.dtype, device=device)
    k([x], out=[y], grid=(X.size, 1, 1), threadgroup=(128, 1, 1),
      backend="cuda" if device == "cuda" else "cpu")  # fmt: skip
    return y.cpu().numpy().reshape(len(FUNCS), -1)


def _bessel(n: int, x: float) -> float:
    q = Fraction(x) ** 2 / 4
    term = Fraction(1) if n == 0 else Fraction(x) / 2
    total = term
    for k in range(1, 120):
        term = term * q / (k * (k + n))
        total += term
    return float(total)


def test_against_references():
    y = run("float64", "cpu")
    got = dict(zip([name for name, *_ in FUNCS], y, strict=True))
    nd = statistics.NormalDist()
    inner = np.abs(X) < 0.999
    for x, v in zip(X[inner], got["erfinv"][inner], strict=True):
        assert math.erf(v) == pytest.approx(x, rel=4e-16, abs=1e-300)
    for x, v in zip(X, got["erfcinv"], strict=True):
        assert math.erfc(v) == pytest.approx(x + 1, rel=4e-15)
    for x, v in zip(X[inner], got["normcdfinv"][inner], strict=True):
        assert v == pytest.approx(nd.inv_cdf((x + 1) / 2), rel=1e-14, abs=1e-300)
    small = np.abs(X * 30) < 5  # where exp(x^2) erfc(x) in double is itself accurate
    for x, v in zip(X[small], got["erfcx"][small], strict=True):
        assert v == pytest.approx(math.exp((x * 30) ** 2) * math.erfc(x * 30), rel=1e-14)
    for x, v0, v1 in zip(X[::20], got["i0"][::20], got["i1"][::20], strict=True):
        assert v0 == pytest.approx(_bessel(0, x * 40), rel=1e-15)
        assert v1 == pytest.approx(_bessel(1, x * 40), rel=1e-15, abs=1e-300)
    ints = np.round(X * 1000) == (X * 1000)  # sinpi of an integer is an exact zero
    assert (got["sinpi"][ints] == 0).all()
    halves = ((X * 1000) % 1) == 0.5
    assert (got["cospi"][halves] == 0).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_within_cudas_error_bounds_of_the_gpu(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cpu, gpu = run(dtype, "cpu"), run(dtype, "cuda")
    bad = []
    for k, (name, _, ulp_f, ulp_d) in enumerate(FUNCS):
        bound = (ulp_f if dtype == "float32" else ulp_d) + 1
        ulp = np.spacing(np.abs(gpu[k]).astype(dtype))
        with np.errstate(invalid="ignore"):
            off = np.abs(cpu[k] - gpu[k]) / ulp
        ok = (off <= bound) | (cpu[k] == gpu[k]) | (np.isnan(cpu[k]) & np.isnan(gpu[k]))
        if not ok.all():
            i = np.nonzero(~ok)[0][0]
            bad.append(f"{name} {dtype}: {int((~ok).sum())} beyond {bound} ulp, e.g. x={X[i]}: "
                       f"cpu {cpu[k][i]!r} gpu {gpu[k][i]!r}")  # fmt: skip
    assert not bad, "\n".join(bad)
