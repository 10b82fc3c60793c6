"""What the CPU backend accepts, NVRTC accepts: the kernel bodies of
tests/backend/test_real_kernels.py and test_cpu_intrinsics.py compile for a GPU (no GPU needed),
and so do bodies that use
``INFINITY``/``M_PI``/``NULL`` and ``using namespace cooperative_groups;``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.codegen import make_source
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")

F16, F32, I32, U32 = (DTYPES[n] for n in ("float16", "float32", "int32", "uint32"))
A = "array"


def _load(name):
    path = Path(__file__).parents[1] / "backend" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_{name}_for_nvrtc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RK, IN = _load("test_real_kernels"), _load("test_cpu_intrinsics")
I64 = DTYPES["int64"]
# kernel -> (inputs, output dtypes, template)
CASES = {
    "popc_active": (RK.POPC_ACTIVE, [(A, F32)], [I32], ()),
    "agg_inc": (RK.AGG, [(A, F32)], [F32, U32], ()),
    "agg_inc_cg": (RK.AGG_CG, [(A, F32)], [F32, I32], ()),
    "partition": (RK.PARTITION, [(A, F32)], [I32, I32, I32], ()),
    "thread_group_64": (RK.TG, [(A, F32)], [F32], (("TILE", 64),)),
    "wide_tile": (RK.WIDE_TILE, [(A, F32)], [F32], ()),
    "early_return": (RK.EARLY_RETURN, [(A, F32)], [F32], ()),
    "layernorm": (
        RK.LAYERNORM,
        [(A, F32), (A, F32), (A, F32), ("scalar", I32), ("scalar", I32)],
        [F32, F32, F32],
        (),
    ),
    "hints": (RK.HINTS, [(A, F32)], [F32], ()),
    "half2_dot": (RK.HALF2_DOT, [(A, F16), (A, F16)], [F32], ()),
    "advance": (RK.ADVANCE, [(A, F32), (A, F32), ("scalar", I32)], [F32], ()),
    "pointer_helpers": (RK.POINTER_HELPERS, [(A, F16), (A, F32)], [F32], ()),
    "constants": (RK.CONSTANTS, [(A, F32)], [F32], ()),
    "integer_intrinsics": (IN.INTS, [(A, I32), (A, I32)], [I64], ()),
    "math_and_conversions": (IN.MATH, [(A, F32)], [F32], ()),
    "scoped_and_half2_atomics": (IN.ATOMICS, [(A, F32)], [I32, F16, I32], ()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_real_kernel_bodies_compile_with_nvrtc(cuda, case):
    k, inputs, outputs, template = CASES[case]
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_80"), inputs, outputs, template, False
    )
    assert cuda.compile(req).kind == "cubin"


def test_using_namespace_cooperative_groups_brings_the_header(cuda):
    k = kernelkit.kernel(
        "cg_using",
        ["x"],
        ["y"],
        "using namespace cooperative_groups;\n"
        "thread_block b = this_thread_block();\n"
        "y[b.thread_rank()] = x[b.thread_rank()];\nb.sync();",
    )
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_80"), [(A, F32)], [F32], (), False
    )
    assert "cooperative_groups.h" in req.source
    assert cuda.compile(req).kind == "cubin"


@pytest.mark.parametrize(
    "text",
    [
        "using namespace cooperative_groups;",
        "using namespace  cooperative_groups ;",
        "namespace cgx = cooperative_groups;",
        "cg::thread_block b = cg::this_thread_block();",
        "cooperative_groups::thread_block b;",
    ],
)
def test_cooperative_groups_need_is_detected(text):
    from kernelkit._records import KernelSpec

    spec = KernelSpec(name="k", input_names=(), output_names=(), source=text)
    assert "cg" in make_source(spec, (), ()).needs


def test_infinity_and_nan_are_constants_not_divisions(cuda):
    """The prelude's INFINITY/NAN used to be ``(1.0f / 0.0f)``: NVRTC emitted a run-time IEEE
    division (with its slow-path function) at each use. They must fold to constants, and still
    be constant expressions."""
    k = kernelkit.kernel(
        "inf_nan_constants",
        ["x"],
        ["y"],
        "constexpr float big = INFINITY;\n"
        "const float v = x[threadIdx.x];\n"
        "y[threadIdx.x] = v == -big ? 0.0f : (v == INFINITY ? NAN : v);",
    )
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [(A, F32)], [F32], (), False
    )
    art = cuda.compile(req)
    assert b"div_rn" not in art.binary and b"rcp_rn" not in art.binary
    assert "warning" not in art.log  # e.g. an unused-variable warning from the prelude


# Bodies that name the standard library, C constants or mixed min/max without including a
# header: the CPU backend's C++ prelude has them, so NVRTC must too (libcu++ through
# include/std, the prelude's constants and overloads).
STD_BODIES = {
    "std_min_max": "y[0] = std::min(x[0], x[1]) + std::max<float>(x[0], 2.0f);",
    "std_math": "y[0] = std::sqrt(x[0]) + std::exp(x[1]) + std::floor(x[1]);",
    "std_traits": "y[0] = std::is_same_v<float, decltype(x[0] + 1.0f)> ? (std::int64_t)1 : 0;",
    "std_utility": "std::pair<float, int> p(x[0], 2); std::array<float, 2> a{x[0], x[1]};\n"
    "float u = a[0], v = a[1]; std::swap(u, v); y[0] = p.first + u + std::clamp(v, 0.f, 1.f);",
    "std_limits": "y[0] = x[0] < std::numeric_limits<float>::lowest() ? 1.0f : 0.0f;",
    "huge_val": "y[0] = x[0] == HUGE_VALF || (double)x[0] == HUGE_VAL ? 1.0f : 0.0f;",
    "mixed_min_max": "y[0] = max(x[0], 1) + min(2, x[1]) + max((double)x[0], 3);",
    "assert": "assert(x[0] == x[0]); y[0] = x[0];",
    # integers of different widths: CUDA's overloads were ambiguous (ggml's min(int, int64_t))
    "mixed_int_min_max": "const int i = (int)x[1]; const long long n = 5000000000LL;\n"
    "y[0] = (float)(min(i, n) + max((short)i, 9ULL) + min((unsigned char)i, 3L));",
    # a kernel's own two-argument template wins over both preludes' min
    "own_min_template": "const int i = (int)x[1];\n"
    "y[0] = (float)(min(i, 3000000000LL) + min((short)i, (short)1));",
    # cuda_fp8.h's pairs through the half2 raw struct, and an unscoped enum to an fp8 type
    "fp8_raw_pairs": "enum { kOne = 1 }; __nv_fp8_e4m3 a(kOne);\n"
    "const __nv_fp8x2_storage_t s = (__nv_fp8x2_storage_t)0x3c38;\n"
    "__half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(s, __NV_E4M3));\n"
    "float2 f = __half22float2(__nv_cvt_fp8x2_to_halfraw2(s, __NV_E4M3));\n"
    "y[0] = float(a) + f.x + f.y\n"
    "     + (float)__nv_cvt_halfraw2_to_fp8x2(h, __NV_SATFINITE, __NV_E4M3);",
}
STD_HEADERS = {
    "own_min_template": "template <class T, class U> __device__ T min(T a, U b) "
    "{ return a < b ? a : (T)b; }",
    "fp8_raw_pairs": "#include <cuda_fp8.h>",
}
STD_EXPECT = {
    "mixed_int_min_max": 2 + 9 + 2,
    "own_min_template": 2 + 1,
    "fp8_raw_pairs": 1 + 2.5 + 0x3C38,
}


@pytest.mark.parametrize("name", list(STD_BODIES))
def test_what_the_cpu_prelude_gives_nvrtc_gives(cuda, name):
    header = STD_HEADERS.get(name, "")
    k = kernelkit.kernel(f"std_{name}", ["x"], ["y"], STD_BODIES[name], header=header)
    x = np.array([0.5, 2.0], np.float32)
    (cpu,) = k([x], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
               threadgroup=(1, 1, 1), backend="cpu")  # fmt: skip
    assert np.isfinite(cpu).all()
    if name in STD_EXPECT:
        assert cpu[0] == STD_EXPECT[name]
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [(A, F32)], [F32], (), False
    )
    assert cuda.compile(req).kind == "cubin"
