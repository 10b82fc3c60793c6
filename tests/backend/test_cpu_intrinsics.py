"""CUDA device functions the CPU backend added for real kernels (see the CPU DESIGN.md list):
integer intrinsics, conversions, CUDA-only math, scoped and half2 atomics, __trap."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(99)

INT_BODY = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= a_shape[0]) return;
unsigned ua = (unsigned)a[i], ub = (unsigned)b[i];
out[6 * i + 0] = (long long)__funnelshift_l(ua, ub, (unsigned)i);
out[6 * i + 1] = (long long)__funnelshift_r(ua, ub, (unsigned)i);
out[6 * i + 2] = __dp4a(a[i], b[i], 7);
out[6 * i + 3] = (long long)__dp4a(ua, ub, 7u);
out[6 * i + 4] = __hadd(a[i], b[i]) + 3LL * __rhadd(a[i], b[i]);
out[6 * i + 5] = (long long)__urhadd(ua, ub) + __usad(ua, ub, 1u);
"""
INTS = kernelkit.kernel("in_ints", ["a", "b"], ["out"], INT_BODY)


def _bytes(v, signed):
    return ((v[:, None] >> np.arange(0, 32, 8)) & 0xFF).astype(np.int64) - (
        (((v[:, None] >> np.arange(0, 32, 8)) & 0x80) != 0) * 256 if signed else 0
    )


def test_integer_intrinsics():
    n = 77
    a = RNG.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    b = RNG.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)
    (out,) = INTS(
        [a, b],
        output_shapes=[(6 * n,)],
        output_dtypes=[np.int64],
        grid=(n, 1, 1),
        threadgroup=(32, 1, 1),
        backend="cpu",
    )
    ua, ub = a.astype(np.int64) & 0xFFFFFFFF, b.astype(np.int64) & 0xFFFFFFFF
    s = np.arange(n) & 31
    wide = [(int(h) << 32) | int(lo) for h, lo in zip(ub, ua)]
    fl = np.array([(w << int(k)) >> 32 & 0xFFFFFFFF for w, k in zip(wide, s)])
    fr = np.array([(w >> int(k)) & 0xFFFFFFFF for w, k in zip(wide, s)])
    dp_s = (_bytes(ua, True) * _bytes(ub, True)).sum(1) + 7
    dp_u = ((_bytes(ua, False) * _bytes(ub, False)).sum(1) + 7) & 0xFFFFFFFF
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    hadd = (a64 + b64) >> 1
    rhadd = (a64 + b64 + 1) >> 1
    urhadd = (ua + ub + 1) >> 1
    usad = (np.abs(ua - ub) + 1) & 0xFFFFFFFF
    ref = np.stack([fl, fr, dp_s, dp_u, hadd + 3 * rhadd, urhadd + usad], 1).reshape(-1)
    np.testing.assert_array_equal(out, ref)


MATH = kernelkit.kernel(
    "in_math",
    ["x"],
    ["y"],
    """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= x_shape[0]) return;
float v = x[i], s, c;
sincospif(v, &s, &c);
y[8 * i + 0] = sinpif(v) + s;
y[8 * i + 1] = cospif(v) + c;
y[8 * i + 2] = rhypotf(v, 2.0f);
y[8 * i + 3] = rnorm3df(v, 1.0f, 2.0f) + norm4df(v, v, 1.0f, 1.0f);
y[8 * i + 4] = (float)__double2uint_rz(fabs(v) * 1000.0) + __float2uint_rd(fabsf(v) * 10.0f);
y[8 * i + 5] = (float)__hiloint2double(__double2hiint((double)v), __double2loint((double)v));
y[8 * i + 6] = (float)(__float2ll_ru(v * 10.0f) + __double2ll_rn(v * 100.0));
y[8 * i + 7] = (float)(__dsqrt_rn(fabs((double)v)) + __ddiv_rn(1.0, 4.0));
""",
)


def test_cuda_only_math_and_conversions():
    n = 53
    x = RNG.uniform(-3, 3, n).astype(np.float32)
    (y,) = MATH(
        [x],
        output_shapes=[(8 * n,)],
        output_dtypes=[np.float32],
        grid=(n, 1, 1),
        threadgroup=(32, 1, 1),
        backend="cpu",
    )
    v = x.astype(np.float64)
    ref = np.stack(
        [
            2 * np.sin(np.pi * v),
            2 * np.cos(np.pi * v),
            1 / np.hypot(v, 2),
            1 / np.sqrt(v * v + 5) + np.sqrt(2 * v * v + 2),
            np.trunc(np.abs(v) * 1000) + np.floor(np.abs(x) * np.float32(10)),
            v,
            np.ceil(x * np.float32(10)) + np.round(v * 100),
            np.sqrt(np.abs(v)) + 0.25,
        ],
        1,
    ).reshape(-1)
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)


ATOMICS = kernelkit.kernel(
    "in_atomics",
    ["x"],
    ["total", "pairs", "hi"],
    """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= x_shape[0]) return;
atomicAdd_block(&total[0], 1);
atomicAdd_system(&total[1], 2);
atomicMax_block(&hi[0], (int)(x[i] * 1000.0f));
atomicOr_system((unsigned*)&hi[1], 1u << (i % 32));
atomicAdd(reinterpret_cast<__half2*>(pairs), __floats2half2_rn(1.0f, 0.5f));
""",
)


def test_scoped_and_half2_atomics():
    n = 300
    x = RNG.standard_normal(n).astype(np.float32)
    total, pairs, hi = ATOMICS(
        [x],
        output_shapes=[(2,), (2,), (2,)],
        output_dtypes=[np.int32, np.float16, np.int32],
        init_value=0,
        grid=(n, 1, 1),
        threadgroup=(64, 1, 1),
        backend="cpu",
    )
    np.testing.assert_array_equal(total, [n, 2 * n])
    np.testing.assert_array_equal(pairs, [n, n / 2])  # exact in half: small integers and halves
    assert hi[0] == int(x.max() * 1000) and hi[1] == -1


@pytest.mark.parametrize("check", [False, True])
def test_trap_is_a_fault_naming_the_thread(check):
    k = kernelkit.kernel(
        "in_trap", ["x"], ["y"], "if (threadIdx.x == 3) __trap();\ny[threadIdx.x] = x[threadIdx.x];"
    )
    x = np.ones(32, np.float32)
    with pytest.raises(
        kernelkit.KernelFault, match=r"__trap\(\) called by block \([01],0,0\) thread \(3,0,0\)"
    ):
        k(
            [x],
            output_shapes=[(32,)],
            output_dtypes=[np.float32],
            grid=(64, 1, 1),
            threadgroup=(32, 1, 1),
            backend="cpu",
            check=check,
        )


@pytest.mark.parametrize("check", [False, True])
def test_programmatic_dependent_launch_calls_run(check):
    """cudaGridDependencySynchronize / cudaTriggerProgrammaticLaunchCompletion, which ggml calls
    outside any arch guard in some kernels: launches here run in order, so both do nothing."""
    k = kernelkit.kernel(
        "in_pdl",
        ["x"],
        ["y"],
        "cudaGridDependencySynchronize();\nint i = threadIdx.x;\ny[i] = 2.0f * x[i];\n"
        "cudaTriggerProgrammaticLaunchCompletion();",
    )
    x = RNG.standard_normal(32).astype(np.float32)
    (y,) = k(
        [x],
        output_shapes=[(32,)],
        output_dtypes=[np.float32],
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        backend="cpu",
        check=check,
    )
    np.testing.assert_array_equal(y, 2 * x)


LIMITS_BODY = """
using L = std::numeric_limits<T>;
static_assert(L::is_specialized && L::has_quiet_NaN && !L::is_integer, "16-bit limits");
y[0] = float(L::quiet_NaN()); y[1] = float(L::infinity()); y[2] = float(L::max());
y[3] = float(L::lowest()); y[4] = float(L::min()); y[5] = float(L::epsilon());
y[6] = float(L::denorm_min()); y[7] = float(L::digits); y[8] = float(L::max_exponent);
"""
LIMITS_HEADER = "#include <limits>"


@pytest.mark.parametrize(
    ("dtype", "want"),
    [
        ("float16", [np.inf, 65504.0, -65504.0, 2.0**-14, 2.0**-10, 2.0**-24, 11, 16]),
        ("bfloat16", [np.inf, 3.3895313892515355e38, -3.3895313892515355e38, 2.0**-126,
                      2.0**-7, 2.0**-133, 8, 128]),
    ],
)  # fmt: skip
def test_numeric_limits_of_16_bit_floats(dtype, want):
    """std::numeric_limits<__half> / <__nv_bfloat16> as libcu++ has them (the primary template
    answered 0 for quiet_NaN(): PyTorch's NLL loss gave 0 where it returns NaN)."""
    k = kernelkit.kernel("in_limits", ["x"], ["y"], LIMITS_BODY, header=LIMITS_HEADER)
    (y,) = k(
        [np.zeros(1, np.float32)],
        output_shapes=[(9,)],
        output_dtypes=[np.float32],
        grid=(1, 1, 1),
        threadgroup=(1, 1, 1),
        template=[("T", dtype)],
        backend="cpu",
    )
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:], np.array(want, np.float32))
