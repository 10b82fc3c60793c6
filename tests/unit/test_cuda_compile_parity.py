"""What the CPU backend accepts, NVRTC accepts: the kernel bodies of
tests/backend/test_real_kernels.py and test_cpu_intrinsics.py compile for a GPU (no GPU needed),
and so do bodies that use
``INFINITY``/``M_PI``/``NULL`` and ``using namespace cooperative_groups;``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

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
