"""Struct parameters and cooperative kernels compiled by NVRTC for sm_90 without a GPU: ggml's
``soft_max_f32_parallelize_cols`` (``soft_max_params`` by value, ``cg::this_grid().sync()``),
and the struct's size checked by the compiler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
sys.path.insert(0, str(Path(__file__).parents[1] / "backend"))
from test_real_structs_coop import (
    GGML_SOFTMAX_HEADER,
    PARALLELIZE_COLS,
    SOFTMAX_COLS,
)

F32 = DTYPES["float32"]


def _request(cuda, spec):
    _, req = render_request(
        spec, cuda, cuda.target_for_arch("sm_90"), [("array", F32), ("struct", None)],
        [F32, F32], (), False,
    )  # fmt: skip
    return req


def test_ggml_softmax_parallelize_cols_compiles(cuda):
    req = _request(cuda, SOFTMAX_COLS.spec)
    assert "const soft_max_params p" in req.source
    assert "static_assert(sizeof(soft_max_params) == 128" in req.source
    art = cuda.compile(req)
    assert art.kind == "cubin"


def test_a_struct_size_that_disagrees_with_the_type_fails_to_compile(cuda):
    k = kernelkit.kernel(
        "softmax_cols_bad",
        ["x", "p"],
        ["dst", "tmp_vals"],
        PARALLELIZE_COLS,
        header=GGML_SOFTMAX_HEADER,
        structs={"p": kernelkit.struct("soft_max_params", 120)},
        cooperative=True,
    )
    with pytest.raises(kernelkit.CompileError, match=r"struct input 'p'.*120 bytes"):
        cuda.compile(_request(cuda, k.spec))
