"""One kernel that calls CUDA's float, double and integer intrinsics whose results are exact
(rounding-mode arithmetic and conversions, the IEEE functions, integer bit tricks) on every
input, each result as a 64-bit integer (a float's or double's bits, an integer), for the CPU
backend's reference test and the GPU's bit-for-bit comparison with the CPU backend."""

from __future__ import annotations

import numpy as np

import kernelkit

MODES = ("rn", "rz", "rd", "ru")
TO_INT = (("int", "int"), ("uint", "unsigned"), ("ll", "long long"), ("ull", "unsigned long long"))


def outputs() -> list[tuple[str, str, str]]:
    """(name, kind, C++ expression): kind "f" a float's bits, "d" a double's, "i" an integer.
    Inputs: floats a, b, c; doubles d, e; int i, j; unsigned u, v; long long l, m."""
    out: list[tuple[str, str, str]] = []
    for md in MODES:
        out += [
            (f"__fadd_{md}", "f", f"__fadd_{md}(a, b)"),
            (f"__fsub_{md}", "f", f"__fsub_{md}(a, b)"),
            (f"__fmul_{md}", "f", f"__fmul_{md}(a, b)"),
            (f"__fdiv_{md}", "f", f"__fdiv_{md}(a, b)"),
            (f"__fmaf_{md}", "f", f"__fmaf_{md}(a, b, c)"),
            (f"__frcp_{md}", "f", f"__frcp_{md}(a)"),
            (f"__fsqrt_{md}", "f", f"__fsqrt_{md}(a)"),
            (f"__dadd_{md}", "d", f"__dadd_{md}(d, e)"),
            (f"__dmul_{md}", "d", f"__dmul_{md}(d, e)"),
            (f"__ddiv_{md}", "d", f"__ddiv_{md}(d, e)"),
            (f"__dsqrt_{md}", "d", f"__dsqrt_{md}(d)"),
            (f"__double2float_{md}", "f", f"__double2float_{md}(d)"),
            (f"__int2float_{md}", "f", f"__int2float_{md}(i)"),
            (f"__uint2float_{md}", "f", f"__uint2float_{md}(u)"),
            (f"__ll2float_{md}", "f", f"__ll2float_{md}(l)"),
            (f"__ull2float_{md}", "f", f"__ull2float_{md}((unsigned long long)l)"),
            (f"__ll2double_{md}", "d", f"__ll2double_{md}(l)"),
            (f"__ull2double_{md}", "d", f"__ull2double_{md}((unsigned long long)l)"),
        ]
        out += [(f"__float2{n}_{md}", "i", f"(long long)__float2{n}_{md}(a)") for n, _ in TO_INT]
        out += [(f"__double2{n}_{md}", "i", f"(long long)__double2{n}_{md}(d)") for n, _ in TO_INT]
    out += [
        ("__frsqrt_rn", "f", "__frsqrt_rn(a)"),
        ("__fma_rn", "d", "__fma_rn(d, e, d)"),
        ("__saturatef", "f", "__saturatef(a)"),
        ("fminf", "f", "fminf(a, b)"),
        ("fmaxf", "f", "fmaxf(a, b)"),
        ("copysignf", "f", "copysignf(a, b)"),
        ("rintf", "f", "rintf(a)"),
        ("roundf", "f", "roundf(a)"),
        ("truncf", "f", "truncf(a)"),
        ("nearbyintf", "f", "nearbyintf(a)"),
        ("fmodf", "f", "fmodf(a, b)"),
        ("remainderf", "f", "remainderf(a, b)"),
        ("ldexpf", "f", "ldexpf(a, i % 64)"),
        ("ilogbf", "i", "ilogbf(a)"),
        ("a / b", "f", "a / b"),
        ("sqrtf", "f", "sqrtf(a)"),
        ("fmaf", "f", "fmaf(a, b, c)"),
        ("fdimf", "f", "fdimf(a, b)"),
        ("__popc", "i", "__popc(u)"),
        ("__popcll", "i", "__popcll((unsigned long long)l)"),
        ("__clz", "i", "__clz(i)"),
        ("__clzll", "i", "__clzll(l)"),
        ("__ffs", "i", "__ffs(i)"),
        ("__ffsll", "i", "__ffsll(l)"),
        ("__brev", "i", "__brev(u)"),
        ("__brevll", "i", "(long long)__brevll((unsigned long long)l)"),
        ("__byte_perm", "i", "__byte_perm(u, v, (unsigned)j)"),
        ("__funnelshift_l", "i", "__funnelshift_l(u, v, (unsigned)j)"),
        ("__funnelshift_lc", "i", "__funnelshift_lc(u, v, (unsigned)j)"),
        ("__funnelshift_r", "i", "__funnelshift_r(u, v, (unsigned)j)"),
        ("__funnelshift_rc", "i", "__funnelshift_rc(u, v, (unsigned)j)"),
        ("__mulhi", "i", "__mulhi(i, j)"),
        ("__umulhi", "i", "__umulhi(u, v)"),
        ("__mul64hi", "i", "__mul64hi(l, m)"),
        ("__umul64hi", "i", "(long long)__umul64hi((unsigned long long)l, (unsigned long long)m)"),
        ("__mul24", "i", "__mul24(i, j)"),
        ("__umul24", "i", "__umul24(u, v)"),
        ("__sad", "i", "__sad(i, j, u)"),
        ("__usad", "i", "__usad(u, v, u)"),
        ("__hadd", "i", "__hadd(i, j)"),
        ("__rhadd", "i", "__rhadd(i, j)"),
        ("__uhadd", "i", "__uhadd(u, v)"),
        ("__urhadd", "i", "__urhadd(u, v)"),
        ("__dp4a", "i", "__dp4a(i, j, (int)u)"),
        ("__dp4a_u", "i", "__dp4a(u, v, u)"),
        ("abs", "i", "abs(i)"),
        ("max_iu", "i", "max(i, u)"),
        ("min_ll", "i", "min(l, m)"),
        ("max_ff", "f", "max(a, b)"),
        ("min_ff", "f", "min(a, b)"),
        ("max_dd", "d", "max(d, e)"),
        ("min_dd", "d", "min(d, e)"),
        ("max_fi", "f", "max(a, i)"),
        ("min_if", "f", "min(i, b)"),
        ("max_di", "d", "max(d, i)"),
        ("__fns", "i", "__fns(u, (unsigned)i & 31u, (int)(v % 67u) - 33)"),
    ]
    for w in ("2", "4"):
        out += [(f"__v{f}{w}", "i", f"__v{f}{w}(u)") for f in ("abs", "absss", "neg", "negss")]
        out += [(f"__v{f}{w}", "i", f"__v{f}{w}(u, v)") for f in SIMD]
    return out


SIMD = (
    "absdiffs", "absdiffu", "add", "addss", "addus", "sub", "subss", "subus", "avgs", "avgu",
    "haddu", "maxs", "maxu", "mins", "minu", "cmpeq", "cmpne", "seteq", "setne", "sads", "sadu",
    *(f"{k}{r}{s}" for k in ("cmp", "set") for r in ("ge", "gt", "le", "lt") for s in "su"),
)  # fmt: skip


def kernel() -> kernelkit.Kernel:
    lines = [
        "const long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
        "const long long n = fa_shape[0];",
        "if (k >= n) return;",
        "const float a = fa[k], b = fb[k], c = fc[k];",
        "const double d = dd[k], e = de[k];",
        "const long long l = il[k], m = im[k];",
        "const int i = (int)l, j = (int)m;",
        "const unsigned u = (unsigned)(l >> 32), v = (unsigned)(m >> 32);",
    ]
    as_bits = {"f": "__float_as_int({})", "d": "__double_as_longlong({})", "i": "{}"}
    for k, (_, kind, e) in enumerate(outputs()):
        lines.append(f"r[{k} * n + k] = (long long)({as_bits[kind].format(e)});")
    return kernelkit.kernel(
        "float_intrinsics", ["fa", "fb", "fc", "dd", "de", "il", "im"], ["r"], "\n".join(lines)
    )


def _floats(rng: np.random.Generator, size: int, dtype: type) -> np.ndarray:
    """Half of them any bit pattern (NaNs, infinities, subnormals, huge and tiny values), half
    ordinary values of every scale; a few specials first."""
    ints = np.uint32 if dtype == np.float32 else np.uint64
    bits = rng.integers(0, np.iinfo(ints).max, size, dtype=ints, endpoint=True).view(dtype)
    nice = (rng.standard_normal(size) * 10.0 ** rng.integers(-8, 9, size)).astype(dtype)
    out = np.where(rng.random(size) < 0.5, bits, nice).astype(dtype)
    out[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.5, -3.5]
    return out


def inputs(size: int = 65536, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    fa, fb, fc = (_floats(rng, size, np.float32) for _ in range(3))
    with np.errstate(invalid="ignore", over="ignore"):  # NaN, inf and huge inputs among them
        fb[size // 2 :] = -fa[size // 2 :] * np.float32(1 + 2**-20)  # near cancellations
    fb[5:7] = [-1.0, 1.0]  # exact zero sums with fa's 1 and -1
    fa[10:14], fb[10:14] = [0.0, -0.0, np.nan, 1.0], [-0.0, 0.0, 1.0, np.nan]  # max, min
    dd, de = (_floats(rng, size, np.float64) for _ in range(2))
    il = rng.integers(-(2**63), 2**63 - 1, size, dtype=np.int64)
    im = rng.integers(-(2**63), 2**63 - 1, size, dtype=np.int64)
    il[size // 4 : size // 2] >>= rng.integers(0, 63, size // 4)  # smaller magnitudes too
    im[:8] = [0, 1, 31, 32, 33, -1, 64, 65]
    return fa, fb, fc, dd, de, il, im
