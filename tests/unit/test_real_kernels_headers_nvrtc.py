"""The real kernels of tests/real_kernels_headers.py (standard headers, CUB) compile under NVRTC
for sm_90 in each dtype they run in, without a GPU."""

from __future__ import annotations

import pytest
import real_kernels_headers as rk

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._render import render_request


def compile_for_sm90(cuda, k: rk.RealKernel, kinds, template=()):
    if "sm_90" not in cuda.compile_targets():
        pytest.skip("this NVRTC cannot target sm_90")
    spec = kernelkit.kernel(k.name, list(k.inputs), list(k.outputs), k.body, header=k.header).spec
    inputs = [(kind, DTYPES[d]) for kind, d in kinds[: len(k.inputs)]]
    outputs = [DTYPES[d] for _, d in kinds[len(k.inputs) :]]
    _, req = render_request(
        spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
    )
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.binary


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_vllm_rms_norm_compiles(cuda, dtype):
    a, s = "array", "scalar"
    kinds = [(a, dtype), (s, "int64"), (a, dtype), (s, "float32"), (s, "int32"), (s, "int32")]
    compile_for_sm90(cuda, rk.RMS_NORM, [*kinds, (a, dtype)], [("scalar_t", dtype)])


def test_vllm_batched_moe_align_compiles(cuda):
    kinds = [("scalar", "int32")] * 3 + [("array", "int32")] * 4
    compile_for_sm90(cuda, rk.BATCHED_MOE_ALIGN, kinds)


def test_vllm_moe_align_compiles(cuda):
    kinds = [("array", "int32")] + [("scalar", "int32")] * 6 + [("array", "int32")] * 4
    compile_for_sm90(cuda, rk.MOE_ALIGN, kinds, [("scalar_t", "int32")])
