"""``template=`` as real C++ template parameters, compiled by NVRTC for sm_90 without a GPU:
ggml's norm body at block size 32 (its ``static_assert(block_size == 1024)`` sits in an
``if constexpr`` branch that must be discarded), enum and function template values, tensor maps
reaching a template body by reference (TMA reads the kernel's parameter space)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
sys.path.insert(0, str(Path(__file__).parents[1] / "backend"))
from test_real_templates import GGML_HEADER, NORM_F32, ORDERED, SORT_HEADER

F32, I32, I64 = DTYPES["float32"], DTYPES["int32"], DTYPES["int64"]


def _request(cuda, k, inputs, outputs, template):
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
    )
    return req


@pytest.mark.parametrize("block_size", [32, 1024])
def test_ggml_norm_compiles_at_both_block_sizes(cuda, block_size):
    k = kernelkit.kernel(
        "ggml_norm_f32",
        ["x", "ncols", "stride_row", "stride_channel", "stride_sample", "eps"],
        ["dst"],
        NORM_F32,
        header=GGML_HEADER,
    )
    inputs = [("array", F32), ("scalar", I32), *[("scalar", I64)] * 3, ("scalar", F32)]
    req = _request(cuda, k, inputs, [F32], [("block_size", block_size)])
    assert "template <int block_size>" in req.source
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.entry == "ggml_norm_f32"


def test_enum_and_function_values_compile(cuda):
    k = kernelkit.kernel("ordered", ["x", "n"], ["y"], ORDERED, header=SORT_HEADER)
    template = [
        ("order", kernelkit.cxx("GGML_SORT_ORDER_DESC")),
        ("F", kernelkit.cxx("act::twice")),
    ]
    req = _request(cuda, k, [("array", F32), ("scalar", I32)], [F32], template)
    assert "kk_body<GGML_SORT_ORDER_DESC, act::twice>(" in req.source
    assert cuda.compile(req).kind == "cubin"


def test_a_static_assert_in_the_taken_branch_still_fires(cuda):
    k = kernelkit.kernel(
        "ordered", ["x", "n"], ["y"], ORDERED.replace("GGML_SORT_ORDER_DESC,", "0,"),
        header=SORT_HEADER,
    )  # fmt: skip
    template = [("order", kernelkit.cxx("GGML_SORT_ORDER_DESC")), ("F", kernelkit.cxx("negate"))]
    req = _request(cuda, k, [("array", F32), ("scalar", I32)], [F32], template)
    with pytest.raises(kernelkit.CompileError, match="unknown order"):
        cuda.compile(req)


def test_tensor_map_reaches_a_template_body_by_reference(cuda):
    k = kernelkit.kernel("tm", ["m"], ["y"], "y[0] = (float)N + (float)sizeof(m);")
    req = _request(cuda, k, [("tensor_map", F32)], [F32], [("N", 2)])
    assert "const kk_tensor_map& m" in req.source
    assert "const __grid_constant__ kk_tensor_map m" in req.source
    assert cuda.compile(req).kind == "cubin"
