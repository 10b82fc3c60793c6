"""float16/bfloat16 values mixed with built-in numbers (``h == 0``, ``sum += h``, ``h * 0.5f``,
``2 * h``, a half with a bfloat16) compute in float, with the same result types, on every
backend: PyTorch's kernels are written so (c10::Half converts to float alone). Under
cuda_fp16.h these expressions were ambiguous and NVRTC refused them (the CUDA backend's
``kernelkit_half.cuh`` settles them); the CPU backend's own half types always took them."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

# the result types, checked when compiling on both backends
HEADER = """
template <class A, class B> struct kk_test_same { static constexpr bool v = false; };
template <class A> struct kk_test_same<A, A> { static constexpr bool v = true; };
#define SAME(E, T) static_assert(kk_test_same<decltype(E), T>::v, #E)
"""
BODY = """
T h = x[0];
__nv_bfloat16 b = bx[0];
__half hh = (float)h;
SAME(h + h, T);
SAME(h * 0.5f, float);
SAME(2 * h, float);
SAME(h - 1.5, double);
SAME(h == 0, bool);
SAME(hh + b, float);
float f = 10.0f;
SAME(f -= h, float&);  // unevaluated: f is 10 still
f -= h;
double d = 1.0;
int i = 7;
d += h;
i += h;
T g = h;
g += 1;
y[0] = h * 0.5f;
y[1] = 2 * h;
y[2] = (float)(h - 1.5);
y[3] = (h == 0) ? 1.0f : 0.0f;
y[4] = (h < 1u) ? 1.0f : 0.0f;
y[5] = f;
y[6] = (float)d;
y[7] = (float)i;
y[8] = (float)g;
y[9] = h / (long long)4;
y[10] = b * hh;
y[11] = (b >= hh) ? 1.0f : 0.0f;
"""
CASES = [("float16", 0.75), ("float16", 0.0), ("float16", -3.25), ("bfloat16", 2.5)]


def _expected(h: float, b: float) -> list[float]:
    return [
        h * 0.5,
        2 * h,
        h - 1.5,
        float(h == 0),
        float(h < 1),
        10.0 - h,
        1.0 + h,
        float(int(7 + h)),
        h + 1,
        h / 4,
        b * h,
        float(b >= h),
    ]


def _round(v: float, dtype: str) -> float:
    if dtype == "float16":
        return float(np.float16(v))
    bits = np.array([v], np.float32).view(np.uint32)
    return float(((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)[0])


@pytest.fixture(scope="module")
def mixed():
    return kernelkit.kernel("half_numbers", ["x", "bx"], ["y"], BODY, header=HEADER)


@pytest.mark.parametrize(("dtype", "value"), CASES)
def test_half_with_numbers_computes_in_float(backend, mixed, dtype, value):
    torch = pytest.importorskip("torch")
    device = "cuda" if backend == "cuda" else "cpu"
    tdt = getattr(torch, dtype)
    x = torch.tensor([value], dtype=tdt, device=device)
    bx = torch.tensor([-1.25], dtype=torch.bfloat16, device=device)
    y = torch.full((12,), float("nan"), dtype=torch.float32, device=device)  # poisoned
    mixed([x, bx], out=[y], grid=(1, 1, 1), threadgroup=(1, 1, 1), template=[("T", dtype)])
    h = _round(value, dtype)
    got = y.cpu().numpy().astype(np.float64)
    np.testing.assert_allclose(got, _expected(h, -1.25), rtol=1e-6, atol=0)


def test_nvrtc_takes_them(cuda, mixed):
    """Compiled for sm_90 here, without a GPU (this failed with "more than one operator")."""
    for dtype in ("float16", "bfloat16"):
        _, req = render_request(
            mixed.spec,
            cuda,
            cuda.target_for_arch("sm_90"),
            [("array", DTYPES[dtype]), ("array", DTYPES["bfloat16"])],
            [DTYPES["float32"]],
            [("T", dtype)],
            False,
        )
        assert cuda.compile(req).kind == "cubin"
