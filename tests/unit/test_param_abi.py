"""The parameter ABI is defined once: ``MAX_NDIM`` (``_records``) reaches every prelude as
``KK_MAX_NDIM`` through each backend's render, and one helper names the metadata parameters."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest

import kernelkit
from kernelkit import _records
from kernelkit._abi import METADATA, abi_options, extent_param, metadata_param
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline import pack as _pack
from kernelkit._pipeline.codegen import make_source, scan_body
from kernelkit._pipeline.render import make_params, render_request
from kernelkit._records import MAX_NDIM

SRC = Path(kernelkit.__file__).parent
TESTS = Path(__file__).resolve().parents[1]
PRELUDES = [
    SRC / "_backends/cuda/include/kernelkit_prelude.cuh",
    SRC / "_backends/cpu/include/kk_cpu.h",
    TESTS / "plugins/kk_sim_backend/kk_sim_backend/_backend.py",
]
F32 = DTYPES["float32"]
# A kernel that compiles only if kk_dims is exactly KK_MAX_NDIM int64 and KK_MAX_NDIM is MAX_NDIM.
BODY = (
    'static_assert(sizeof(kk_dims) == 8 * KK_MAX_NDIM, "kk_dims");\n'
    'static_assert(KK_MAX_NDIM == EXPECT, "KK_MAX_NDIM");\n'
    "if (threadIdx.x == 0) y[0] = x[0] + x_shape[0];"
)


@pytest.mark.parametrize("path", PRELUDES, ids=lambda p: p.name)
def test_no_prelude_repeats_the_number(path: Path) -> None:
    text = path.read_text()
    assert re.search(r"long long v\[\s*\d+\s*\]", text) is None
    assert "long long v[KK_MAX_NDIM]" in text


def test_the_define_comes_from_max_ndim(monkeypatch: pytest.MonkeyPatch) -> None:
    assert abi_options() == (f"-DKK_MAX_NDIM={MAX_NDIM}",)
    monkeypatch.setattr(_records, "MAX_NDIM", 5)  # one place: every render follows it
    assert abi_options() == ("-DKK_MAX_NDIM=5",)
    assert ctypes.sizeof(_pack.Dims) == 8 * MAX_NDIM  # the packer's kk_dims


def _request(backend, target, expect: int):
    k = kernelkit.kernel("abi_k", ["x"], ["y"], BODY, header=f"#define EXPECT {expect}")
    return render_request(k.spec, backend, target, [("array", F32)], [F32], None, False)[1]


@pytest.mark.parametrize("max_ndim", [MAX_NDIM, 3])
def test_cpu_render_passes_the_define_and_the_kernel_sees_it(
    monkeypatch: pytest.MonkeyPatch, max_ndim: int
) -> None:
    from kernelkit._backends.registry import get_backend

    cpu = get_backend("cpu")
    monkeypatch.setattr(_records, "MAX_NDIM", max_ndim)
    request = _request(cpu, cpu.targets()[0], max_ndim)
    assert f"-DKK_MAX_NDIM={max_ndim}" in request.options
    cpu.compile(request)  # the static_asserts hold (a CompileError otherwise)


def test_cpu_prelude_refuses_to_compile_without_the_define() -> None:
    from kernelkit._backends.registry import get_backend

    cpu = get_backend("cpu")
    request = _request(cpu, cpu.targets()[0], MAX_NDIM)
    bare = type(request)(
        **{**request.__dict__, "options": tuple(o for o in request.options if "KK_MAX" not in o)}
    )
    with pytest.raises(kernelkit.CompileError, match="KK_MAX_NDIM is not defined"):
        cpu.compile(bare)


def test_cuda_render_passes_the_define_and_nvrtc_sees_it(cuda) -> None:
    request = _request(cuda, cuda.target_for_arch("sm_80"), MAX_NDIM)
    assert f"-DKK_MAX_NDIM={MAX_NDIM}" in request.options
    cuda.compile(request)


def test_sim_plugin_defines_it_from_max_ndim() -> None:
    sim = pytest.importorskip("kk_sim_backend._backend")
    backend = sim.SimBackend()
    spec = kernelkit.kernel("abi_s", ["x"], ["y"], "y[0] = x[0] + x_shape[0];").spec
    params = make_params(spec, [("array", F32)], [F32], False)
    request = backend.render(make_source(spec, params, ()), backend.targets()[0])
    assert f"#define KK_MAX_NDIM {MAX_NDIM}" in request.source
    backend.compile(request)


def test_one_helper_names_the_metadata_parameters() -> None:
    assert [metadata_param("x", f) for f, _ in METADATA] == ["x_shape", "x_strides", "x_ndim"]
    assert extent_param("x") == "kk_extent_x"
    refs, _ = scan_body("x_shape[0] + y_ndim + x_strides[1]", ["x", "y"])
    assert refs == {"x_shape", "x_strides", "y_ndim"}
    spec = kernelkit.kernel("abi_m", ["x"], ["y"], "y[0] = x_shape[0] + x_ndim;").spec
    params = make_params(spec, [("array", F32)], [F32], True)
    assert [p.name for p in params] == [
        "x",
        extent_param("x"),
        "x_shape",
        "x_ndim",
        "y",
        "kk_extent_y",
    ]
