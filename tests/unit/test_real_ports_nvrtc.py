"""Every ported real kernel (tests/backend/test_real_ports_*.py) compiles under NVRTC for sm_90,
in each dtype it runs in, without a GPU: the same body the CPU backend runs is what a GPU gets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
sys.path.insert(0, str(Path(__file__).parents[1] / "backend"))
sys.path.insert(0, str(Path(__file__).parent))
import test_real_ports_apex
import test_real_ports_caffe
import test_real_ports_darknet
import test_real_ports_ggml
import test_real_ports_more
import test_real_ports_pytorch
import test_real_ports_third
import test_real_ports_vllm
from real_ports import dtype_of
from test_cuda_compile import as_ptx

MODULES = (
    test_real_ports_apex,
    test_real_ports_caffe,
    test_real_ports_darknet,
    test_real_ports_ggml,
    test_real_ports_more,
    test_real_ports_pytorch,
    test_real_ports_third,
    test_real_ports_vllm,
)
CASES = [
    pytest.param(m, p, d, id=f"{m.__name__[16:]}-{p.name}-{d}")
    for m in MODULES
    for p in m.PORTS
    for d in p.dtypes
]


def _input(kind: str, dtype: str) -> tuple[str, object]:
    if kind == "struct":
        return ("struct", None)
    if kind == "bool":
        return ("scalar", DTYPES["bool"])
    return ("array" if kind.endswith("*") else "scalar", DTYPES[dtype_of(kind, dtype)])


@pytest.mark.parametrize(("module", "port", "dtype"), CASES)
def test_real_port_compiles_for_sm90(cuda, module, port, dtype):
    k = port.kernel(dtype)
    inputs = [_input(p.split(":")[1], dtype) for p in port.inputs]
    outputs = [DTYPES[dtype_of(p.split(":")[1], dtype)] for p in port.outputs]
    fixed = getattr(module, "template_for", lambda p, _: [(n, v[0]) for n, v in p.fixed])
    template = [(t, dtype) for t in port.template] + fixed(port, dtype)
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
    )
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.entry == port.name


def _pdl_request(cuda, arch):
    k = kernelkit.kernel(
        "pdl",
        ["x"],
        ["y"],
        "cudaGridDependencySynchronize();\ny[0] = x[0];\n"
        "cudaTriggerProgrammaticLaunchCompletion();",
    )
    f32 = DTYPES["float32"]
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch(arch), [("array", f32)], [f32], (), False
    )
    return req


def test_programmatic_dependent_launch_functions_on_sm90(cuda):
    """NVRTC has no cuda_device_runtime_api.h: kernelkit's prelude gives the two PDL functions
    (griddepcontrol) from sm_90 on, as nvcc's forced cuda_runtime.h does."""
    art = cuda.compile(as_ptx(_pdl_request(cuda, "sm_90")))
    assert art.kind == "ptx"
    ptx = art.binary.decode()
    assert "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx


def test_programmatic_dependent_launch_before_sm90_names_the_function(cuda):
    with pytest.raises(kernelkit.CompileError, match="cudaGridDependencySynchronize"):
        cuda.compile(_pdl_request(cuda, "sm_80"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_numeric_limits_of_16_bit_floats_compile(cuda, dtype):
    """The CPU backend's std::numeric_limits<__half/__nv_bfloat16> test body compiles under
    NVRTC too (libcu++ specializes both): the same names on both backends."""
    from test_cpu_intrinsics import LIMITS_BODY, LIMITS_HEADER

    k = kernelkit.kernel("in_limits", ["x"], ["y"], LIMITS_BODY, header=LIMITS_HEADER)
    f32 = DTYPES["float32"]
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [("array", f32)], [f32], [("T", dtype)],
        False,
    )  # fmt: skip
    assert cuda.compile(req).kind == "cubin"


@pytest.mark.parametrize("header", ["cassert", "assert.h"])
def test_assert_fail_called_directly_compiles(cuda, header):
    """c10's CUDA_KERNEL_ASSERT calls glibc's __assert_fail, which nvcc declares as a device
    builtin; under NVRTC kernelkit's <cassert>/<assert.h> forward it to __assertfail."""
    k = kernelkit.kernel(
        "c10_assert",
        ["x"],
        ["y"],
        'if (!(x[0] >= 0.f)) { __assert_fail("x[0] >= 0.f", __FILE__, __LINE__, __func__); }\n'
        "y[0] = x[0];",
        header=f"#include <{header}>",
    )
    f32 = DTYPES["float32"]
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [("array", f32)], [f32], (), False
    )
    art = cuda.compile(as_ptx(req))
    assert "__assertfail" in art.binary.decode()
