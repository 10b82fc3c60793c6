"""CUB under NVRTC for sm_90 (no GPU): the umbrella <cub/cub.cuh> (CCCL's refuses NVRTC; kernelkit's
includes the block, warp and thread collectives) and tests/cub_cases.py's kernels, which the CPU
backend runs with its own cub: the real CUB takes the same code."""

from __future__ import annotations

import cub_cases as cases
import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

I32 = DTYPES["int32"]


def _compile(cuda, name, outputs, body, header):
    if "sm_90" not in cuda.compile_targets():
        pytest.skip("this NVRTC cannot target sm_90")
    k = kernelkit.kernel(name, ["x"], outputs, body, header=header)
    target = cuda.target_for_arch("sm_90")
    _, req = render_request(k.spec, cuda, target, [("array", I32)], [I32] * len(outputs), (), False)
    return cuda.compile(req)


def test_umbrella_header_compiles(cuda):
    assert _compile(cuda, "cub_umbrella", ["y"], cases.UMBRELLA_BODY, cases.UMBRELLA_HEADER).binary


def test_block_cases_compile(cuda):
    outs = ["excl", "copy", "sums", "maxes", "scanmax"]
    assert _compile(cuda, "cub_block", outs, cases.BLOCK_BODY, cases.BLOCK_HEADER).binary


def test_warp_cases_compile(cuda):
    outs = ["seg_sum", "seg_max5", "incl", "excl_max", "warp_total"]
    assert _compile(cuda, "cub_warp", outs, cases.WARP_BODY, cases.WARP_HEADER).binary
