"""One kernel that calls cuda_fp16.h / cuda_bf16.h's functions (rounding-mode conversions,
saturating and unordered forms, max/min with NaNs, mixed arithmetic) on every input, each
result as a 64-bit integer (a half's bits, a bool, an integer, a float's bits), for the CPU
backend's reference test and the GPU's bit-for-bit comparison with the CPU backend."""

from __future__ import annotations

import numpy as np

import kernelkit

MODES = ("rn", "rz", "rd", "ru")
# results that are a float's bits: any NaN matches any (the GPU's float NaN is canonical, the
# host's keeps its operand's payload)
FLOAT_BITS = ("a * 0.5f", "2 * a", "abs")
INTS = ("int", "uint", "short", "ushort", "ll", "ull")
CTYPE = {
    "int": "int",
    "uint": "unsigned",
    "short": "short",
    "ushort": "unsigned short",
    "ll": "long long",
    "ull": "unsigned long long",
}


def outputs(dtype: str) -> list[tuple[str, str]]:
    """(name, C++ expression) of each result: a, b halves; f a float; v a long long."""
    s = "half" if dtype == "float16" else "bfloat16"
    h2 = "__halves2half2" if dtype == "float16" else "__halves2bfloat162"
    binary = ("__hmax", "__hmin", "__hmax_nan", "__hmin_nan", "__hadd_sat", "__hsub_sat")
    binary += ("__hmul_sat", "__hadd_rn", "__hmul_rn", "max", "min")
    out = [(f, f"B({f}(a, b))") for f in binary]
    out += [("__hfma_relu", "B(__hfma_relu(a, b, a))"), ("__hfma_sat", "B(__hfma_sat(a, b, a))")]
    out += [
        (f"__h{r}", f"__h{r}(a, b)")
        for r in ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu")
    ]
    out += [
        (f"__h{r}2_mask", f"__h{r}2_mask({h2}(a, b), {h2}(b, a))")
        for r in ("eq", "ne", "le", "neu", "gtu")
    ]
    out += [
        ("__hbequ2", f"__hbequ2({h2}(a, b), {h2}(b, a))"),
        ("__hbne2", f"__hbne2({h2}(a, b), {h2}(a, b))"),
        ("__hisinf", "__hisinf(a)"),
        ("__hisnan", "__hisnan(a)"),
        ("isnan", "isnan(a)"),
        ("isinf", "isinf(a)"),
        ("signbit", "signbit(a)"),
        ("a == 0", "a == 0"),
        ("a * 0.5f", "__float_as_int(a * 0.5f)"),
        ("2 * a", "__float_as_int(2 * a)"),
        ("abs", "__float_as_int(abs(a))"),
        (f"__{s}2char_rz", f"__{s}2char_rz(a)"),
        (f"__{s}2uchar_rz", f"__{s}2uchar_rz(a)"),
        ("__hcmadd.x", f"B(__hcmadd({h2}(a, b), {h2}(b, a), {h2}(a, b)).x)"),
        ("__hcmadd.y", f"B(__hcmadd({h2}(a, b), {h2}(b, a), {h2}(a, b)).y)"),
    ]
    out += [(f"__{s}2{i}_{m}", f"(long long)__{s}2{i}_{m}(a)") for i in INTS for m in MODES]
    out += [(f"__float2{s}_{m}", f"B(__float2{s}_{m}(f))") for m in MODES]
    out += [(f"__{i}2{s}_{m}", f"B(__{i}2{s}_{m}(({CTYPE[i]})v))") for i in INTS for m in MODES]
    return out


def kernel(dtype: str) -> kernelkit.Kernel:
    bits = "__half_as_ushort" if dtype == "float16" else "__bfloat16_as_ushort"
    lines = [
        "const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
        "const long long n = x_shape[0];",
        "if (i >= n) return;",
        "const T a = x[i], b = y[i];",
        "const float f = z[i];",
        "const long long v = w[i];",
        f"#define B(h) ((long long){bits}(h))",
    ]
    lines += [f"r[{k} * n + i] = (long long)({e});" for k, (_, e) in enumerate(outputs(dtype))]
    name = "half_intrinsics_" + dtype
    return kernelkit.kernel(name, ["x", "y", "z", "w"], ["r"], "\n".join(lines))


def inputs(dtype: str, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Every 16-bit pattern as a (with a shuffled copy as b), floats across the half's range
    and past it, and integers of every width (as bit patterns: int16 views; the caller makes
    them torch tensors of its dtype)."""
    rng = np.random.default_rng(seed)
    a = np.arange(65536, dtype=np.uint16)
    b = rng.permutation(a)
    b[:64] = a[:64]  # equal pairs
    exps = rng.uniform(-30, 127.9 if dtype == "bfloat16" else 17, 65536)
    f = (rng.choice([-1.0, 1.0], 65536) * 2.0**exps).astype(np.float32)
    f[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, -65519.99]
    v = np.concatenate(
        [
            rng.integers(-(2**63), 2**63 - 1, 16384, dtype=np.int64),
            rng.integers(-(2**31), 2**31 - 1, 16384, dtype=np.int64),
            rng.integers(-70000, 70000, 16384, dtype=np.int64),
            rng.integers(-300, 300, 16384, dtype=np.int64),
        ]
    )
    v[:6] = [0, -1, 2**63 - 1, -(2**63), 65519, 65520]
    return a, b, f, v
