"""The bit-for-bit parity kernels (tests/backend/half_intrinsics.py, float_intrinsics.py,
warp_intrinsics.py, fp8_conversions.py) compile under NVRTC for sm_90 without a GPU: every
function the CPU backend's tests check against exact references is one the GPU has, spelled
the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
sys.path.insert(0, str(Path(__file__).parents[1] / "backend"))
import float_intrinsics
import fp8_conversions
import half_intrinsics
import warp_intrinsics

I64 = DTYPES["int64"]


def _compile(cuda, kernel, inputs, template=()):
    arrays = [("array", DTYPES[d]) for d in inputs]
    _, req = render_request(
        kernel.spec, cuda, cuda.target_for_arch("sm_90"), arrays, [I64], list(template), False
    )
    art = cuda.compile(req)
    assert art.kind == "cubin"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_intrinsics_compile_for_sm90(cuda, dtype):
    kernel = half_intrinsics.kernel(dtype)
    _compile(cuda, kernel, [dtype, dtype, "float32", "int64"], [("T", dtype)])


def test_float_intrinsics_compile_for_sm90(cuda):
    kernel = float_intrinsics.kernel()
    inputs = ["float32", "float32", "float32", "float64", "float64", "int64", "int64"]
    _compile(cuda, kernel, inputs)


def test_warp_intrinsics_compile_for_sm90(cuda):
    _compile(cuda, warp_intrinsics.kernel(), ["int32", "int32"])


def test_fp8_conversions_compile_for_sm90(cuda):
    _compile(cuda, fp8_conversions.kernel(), ["float32", "float64", "int32"])
