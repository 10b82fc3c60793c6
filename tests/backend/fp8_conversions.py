"""One kernel that calls cuda_fp8.h's conversions (float, double and half to e4m3 and e5m2,
saturating and not; the types' constructors and their conversions to half, float, bfloat16 and
integers) on every input, each result as a 64-bit integer, for the CPU backend's reference test
and the GPU's bit-for-bit comparison with the CPU backend."""

from __future__ import annotations

import numpy as np

import kernelkit

KINDS = (("e4m3", "__NV_E4M3"), ("e5m2", "__NV_E5M2"))
SATS = (("sat", "__NV_SATFINITE"), ("nosat", "__NV_NOSAT"))


def outputs() -> list[tuple[str, str]]:
    """(name, C++ expression) of each result: f a float, d a double, c a code (0-255)."""
    out = []
    for k, kind in KINDS:
        for s, sat in SATS:
            out += [
                (f"float_{k}_{s}", f"__nv_cvt_float_to_fp8(f, {sat}, {kind})"),
                (f"double_{k}_{s}", f"__nv_cvt_double_to_fp8(d, {sat}, {kind})"),
                (f"half_{k}_{s}", f"__nv_cvt_halfraw_to_fp8(__half_raw(__half(f)), {sat}, {kind})"),
            ]
        t = f"__nv_fp8_{k}"
        out += [
            (f"{k}_to_half", f"__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, {kind}).x"),
            (f"{k}_pair", f"__nv_cvt_float2_to_fp8x2(make_float2(f, -f), __NV_SATFINITE, {kind})"),
            (f"{k}_ctor", f"{t}(f).__x"),
            (f"{k}_float", f"__float_as_int(float(v_{k}))"),
            (f"{k}_bf16", f"__bfloat16_as_ushort(__nv_bfloat16(v_{k}))"),
            (f"{k}_int", f"int(v_{k})"),
            (f"{k}_uchar", f"(unsigned char)(v_{k})"),
            (f"{k}_schar", f"(signed char)(v_{k})"),
            (f"{k}_ull", f"(long long)(unsigned long long)(v_{k})"),
            (f"{k}_bool", f"bool(v_{k})"),
        ]
    return out


def kernel() -> kernelkit.Kernel:
    lines = [
        "const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
        "const long long n = fs_shape[0];",
        "if (i >= n) return;",
        "const float f = fs[i];",
        "const double d = ds[i];",
        "const int c = cs[i];",
        "__nv_fp8_e4m3 v_e4m3; v_e4m3.__x = (__nv_fp8_storage_t)c;",
        "__nv_fp8_e5m2 v_e5m2; v_e5m2.__x = (__nv_fp8_storage_t)c;",
    ]
    lines += [f"r[{k} * n + i] = (long long)({e});" for k, (_, e) in enumerate(outputs())]
    return kernelkit.kernel(
        "fp8_conversions", ["fs", "ds", "cs"], ["r"], "\n".join(lines),
        header="#include <cuda_fp8.h>",
    )  # fmt: skip


def values(man: int, bias: int) -> np.ndarray:
    """The values of codes 0-127 of a format with ``man`` mantissa bits and exponent ``bias``
    (codes past the largest finite one included: rounding overflows at their ties)."""
    codes = np.arange(128)
    e, m = codes >> man, codes & ((1 << man) - 1)
    return np.where(e == 0, m * 2.0 ** (1 - bias - man), (m + 2**man) * 2.0 ** (e - bias - man))


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Floats: every code's value of both formats, the midpoints between neighbours (ties),
    a little either side of them, the ranges' ends and past them, specials, random values
    across and past both ranges; doubles the same with NaNs of either sign and payload; codes
    0-255 over and over."""
    rng = np.random.default_rng(seed)
    vals = []
    for man, bias in ((3, 7), (2, 15)):
        v = values(man, bias)
        mid = ((v[:-1] + v[1:]) / 2).astype(np.float32)  # exact: ties
        up, down = np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))
        vals += [v.astype(np.float32), mid, up, down]
    ends = [464.0, 480.0, 500.0, 57344.0, 61440.0, 65536.0, 1e30, np.inf, 2.0**-10, 2.0**-17, 0.0]
    base = np.concatenate([*vals, np.array(ends, np.float32)])
    rand = rng.uniform(-20, 18, 4096)
    f = np.concatenate([base, -base, np.sign(rng.uniform(-1, 1, 4096)) * 2.0**rand])
    f = np.concatenate([f, [np.nan]]).astype(np.float32)
    n = 1 << int(np.ceil(np.log2(f.size)))
    f = np.resize(f, n)
    d = f.astype(np.float64)
    # doubles between floats: a tie's neighbours closer than any float (half of them)
    near = np.arange(n) % 2 == 1
    d[near] = d[near] * (1 + np.where(np.arange(n)[near] % 4 == 1, 2.0**-40, -(2.0**-40)))
    d[-4:] = [np.nan, -np.nan, np.float64("nan"), 1e300]
    bits = d.view(np.uint64)
    bits[-2] = 0x7FF4000000000001  # a signalling NaN with a payload
    c = (np.arange(n) % 256).astype(np.int32)
    return f, d, c
