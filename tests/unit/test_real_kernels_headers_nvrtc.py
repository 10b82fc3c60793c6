"""The real kernels of tests/real_kernels_headers.py (standard headers, CUB) compile under NVRTC
for sm_90 in each dtype they run in, without a GPU."""

from __future__ import annotations

import pytest
import real_kernels_headers as rk

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request


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


FLOATS = ["float32", "float16", "bfloat16"]
A, S = "array", "scalar"


@pytest.mark.parametrize("use_shared", [True, False])
@pytest.mark.parametrize("k", [rk.CROSS_ENTROPY, rk.CROSS_ENTROPY_BACK], ids=lambda k: k.name)
def test_ggml_cross_entropy_compiles(cuda, k, use_shared):
    arrays = 2 if k is rk.CROSS_ENTROPY else 3
    kinds = [(A, "float32")] * arrays + [(S, "int32")] * (4 - arrays) + [(A, "float32")]
    compile_for_sm90(cuda, k, kinds, [("use_shared", use_shared)])


def test_ggml_argmax_compiles(cuda):
    compile_for_sm90(cuda, rk.ARGMAX, [(A, "float32"), (S, "int64"), (A, "int32")])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("act", sorted(rk.GATED))
def test_vllm_act_and_mul_compiles(cuda, act, dtype):
    kinds = [(A, dtype), (S, "int32"), (A, dtype)]
    template = [("scalar_t", dtype), ("act_first", act == "silu")]
    compile_for_sm90(cuda, rk.GATED[act], kinds, template)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("act", sorted(rk.ELEMENTWISE))
def test_vllm_activation_compiles(cuda, act, dtype):
    kinds = [(A, dtype), (S, "int32"), (A, dtype)]
    compile_for_sm90(cuda, rk.ELEMENTWISE[act], kinds, [("scalar_t", dtype)])


@pytest.mark.parametrize("dtype", FLOATS)
def test_vllm_fatrelu_compiles(cuda, dtype):
    kinds = [(A, dtype), (S, "int32"), (S, "float32"), (A, dtype)]
    compile_for_sm90(cuda, rk.FATRELU, kinds, [("scalar_t", dtype)])


def test_every_kernel_cites_its_source():
    for k in rk.ALL:
        assert k.repo and k.path and len(k.commit) == 40 and k.edits, k.name
