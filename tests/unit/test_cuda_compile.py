"""The CUDA backend's render + NVRTC compile, without a GPU: one source for many archs, arch
branches settled by NVRTC (read back from PTX and cubins), compile errors, cache keys."""

from __future__ import annotations

import dataclasses
import re
import struct

import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")


BF16, F32, I32 = DTYPES["bfloat16"], DTYPES["float32"], DTYPES["int32"]

# bf16 math through the prelude's headers: native bf16 instructions on sm_80+, float on sm_75
BF16_BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) {
    __nv_bfloat16 a = x[i];
    y[i] = a * a + a;
}
"""
# settled by NVRTC: only an arch-specific sm_90a compile defines __CUDA_ARCH_FEAT_SM90_ALL
WGMMA_BODY = "y[0] = KK_HAS_WGMMA ? 1234567 : 7654321;"
WGMMA_YES, WGMMA_NO = struct.pack("<i", 1234567), struct.pack("<i", 7654321)


def request_for(cuda, k, arch, inputs, outputs, template=()):
    _, req = render_request(
        k.spec,
        cuda,
        cuda.target_for_arch(arch),
        [("array", d) for d in inputs],
        outputs,
        template,
        False,
    )
    return req


def as_ptx(request):
    """The same request compiled to PTX (NVRTC gives PTX for a compute_XX arch)."""
    arch = request.arch.replace("sm_", "compute_")
    return dataclasses.replace(
        request, arch=arch, options=tuple(o.replace(request.arch, arch) for o in request.options)
    )


def bf16_instructions(ptx: str) -> set[str]:
    return set(re.findall(r"\b(?:fma|add|mul|sub)(?:\.rn)?\.bf16(?:x2)?\b", ptx))


@pytest.fixture(scope="module")
def bf16_kernel():
    return kernelkit.kernel("bf16_axpx", ["x"], ["y"], BF16_BODY)


@pytest.mark.parametrize(
    ("arch", "arch_specific", "expect"),
    [
        ("sm_75", False, "sm_75"),
        ("sm_80", False, "sm_80"),
        ("sm_90", False, "sm_90"),
        ("sm_90a", True, "sm_90a"),
        ("sm_100", False, "sm_100"),
        ("sm_120", False, "sm_120"),
    ],
)
def test_one_bf16_source_compiles_to_cubins_for_every_arch(cuda, arch, arch_specific, expect):
    if int(expect[3:].rstrip("a")) not in _supported(cuda):
        pytest.skip(f"this NVRTC cannot target {expect}")
    k = kernelkit.kernel("bf16_axpx", ["x"], ["y"], BF16_BODY, arch_specific=arch_specific)
    req = request_for(cuda, k, arch, [BF16], [BF16])
    assert req.arch == expect
    assert f"--gpu-architecture={expect}" in req.options
    assert "#include <cuda_bf16.h>" in req.source
    assert "__CUDA_ARCH__" in req.source  # arch branches reach NVRTC unresolved
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.arch == expect and art.entry == "bf16_axpx"
    assert art.binary[:4] == b"\x7fELF"


def _supported(cuda):
    from kernelkit._backends.cuda import nvrtc

    return nvrtc.supported_archs()


def test_the_source_is_the_same_for_every_arch(cuda, bf16_kernel):
    sources = {
        request_for(cuda, bf16_kernel, a, [BF16], [BF16]).source
        for a in ("sm_75", "sm_80", "sm_90", "sm_120")
    }
    assert len(sources) == 1


def test_native_bf16_instructions_only_where_the_arch_has_them(cuda, bf16_kernel):
    ptx = {}
    for arch in ("sm_75", "sm_80", "sm_90"):
        art = cuda.compile(as_ptx(request_for(cuda, bf16_kernel, arch, [BF16], [BF16])))
        assert art.kind == "ptx"
        ptx[arch] = art.binary.decode()
        assert f".target {arch}" in ptx[arch]
    assert bf16_instructions(ptx["sm_75"]) == set()
    assert "fma.rn.f32" in ptx["sm_75"] or "mul.f32" in ptx["sm_75"] or "mul.rn.f32" in ptx["sm_75"]
    assert bf16_instructions(ptx["sm_80"])  # fma.rn.bf16
    assert bf16_instructions(ptx["sm_90"])  # mul.bf16 / add.bf16 (or fma.rn.bf16)


def test_wgmma_macro_is_settled_by_nvrtc_for_sm90a_only(cuda):
    plain = kernelkit.kernel("wg", ["x"], ["y"], WGMMA_BODY)
    special = kernelkit.kernel("wg", ["x"], ["y"], WGMMA_BODY, arch_specific=True)
    r90 = request_for(cuda, plain, "sm_90", [I32], [I32])
    r90a = request_for(cuda, special, "sm_90", [I32], [I32])
    assert (r90.arch, r90a.arch) == ("sm_90", "sm_90a")
    assert r90.source == r90a.source  # only the arch differs: the choice is NVRTC's
    # in PTX: the constant stored
    p90 = cuda.compile(as_ptx(r90)).binary.decode()
    p90a = cuda.compile(as_ptx(r90a)).binary.decode()
    assert ".target sm_90a" in p90a and ".target sm_90\n" in p90
    assert "7654321" in p90 and "1234567" not in p90
    assert "1234567" in p90a and "7654321" not in p90a
    # in the cubins: the immediate in the SASS
    c90, c90a = cuda.compile(r90).binary, cuda.compile(r90a).binary
    assert WGMMA_NO in c90 and WGMMA_YES not in c90
    assert WGMMA_YES in c90a and WGMMA_NO not in c90a


def test_arch_specific_is_ignored_before_sm90(cuda):
    special = kernelkit.kernel("wg", ["x"], ["y"], WGMMA_BODY, arch_specific=True)
    assert request_for(cuda, special, "sm_80", [I32], [I32]).arch == "sm_80"


def test_features_by_arch(cuda):
    assert "bf16" not in cuda.target_for_arch("sm_75").features
    assert {"bf16", "cp_async"} <= cuda.target_for_arch("sm_80").features
    assert {"tma", "arch_specific"} <= cuda.target_for_arch("sm_90").features
    assert "sm_90" in cuda.compile_targets()


BAD_BODY = """uint i = threadIdx.x;
float ok = x[i];
y[i] = ok + undeclared_thing;
"""


def test_compile_error_points_at_the_users_line(cuda):
    k = kernelkit.kernel("broken_kernel", ["x"], ["y"], BAD_BODY)
    req = request_for(cuda, k, "sm_80", [F32], [F32])
    with pytest.raises(kernelkit.CompileError) as info:
        cuda.compile(req)
    e = info.value
    assert re.search(r"broken_kernel\(3\): error", e.log), e.log
    assert "undeclared_thing" in e.log
    assert e.source == req.source and BAD_BODY in e.source
    assert "kk_dims" in e.source  # the full generated source, prelude included
    assert e.options == req.options and e.kernel == "broken_kernel"
    assert str(e).startswith("[broken_kernel] compilation failed:")
    assert isinstance(e, kernelkit.KernelkitError)


def test_compile_error_in_the_header_names_the_header(cuda):
    k = kernelkit.kernel(
        "hdr_kernel",
        ["x"],
        ["y"],
        "y[0] = f(x[0]);",
        header="__device__ float f(float v) {\n  return v +;\n}",
    )
    with pytest.raises(kernelkit.CompileError) as info:
        cuda.compile(request_for(cuda, k, "sm_80", [F32], [F32]))
    assert re.search(r"hdr_kernel\.header\(2\)", info.value.log), info.value.log


def test_template_constants_reach_the_source(cuda):
    k = kernelkit.kernel("tk", ["x"], ["y"], "y[0] = (float)(T)(x[0] * N) + (FLAG ? 1.0f : 0.0f);")
    req = request_for(cuda, k, "sm_80", [F32], [F32], [("T", "float16"), ("N", 3), ("FLAG", True)])
    assert "template <typename T, int N, bool FLAG>" in req.source
    assert "kk_body<__half, 3, true>(" in req.source
    assert "#include <cuda_fp16.h>" in req.source
    assert cuda.compile(req).kind == "cubin"


# --- cache keys ----------------------------------------------------------------------------


def key(cuda, request, compiler=None):
    from kernelkit._cache.keys import cache_key

    return cache_key(request, compiler or cuda.compiler_identity()).digest


def test_cache_key_is_stable_for_the_same_request(cuda, bf16_kernel):
    a = request_for(cuda, bf16_kernel, "sm_80", [BF16], [BF16])
    b = request_for(
        cuda, kernelkit.kernel("bf16_axpx", ["x"], ["y"], BF16_BODY), "sm_80", [BF16], [BF16]
    )
    assert a == b and key(cuda, a) == key(cuda, b)


def test_cache_key_differs_on_each_axis(cuda, bf16_kernel):
    r = request_for(cuda, bf16_kernel, "sm_80", [BF16], [BF16])
    base = key(cuda, r)
    variants = {
        "source": dataclasses.replace(r, source=r.source + "\n"),
        "options": dataclasses.replace(r, options=(*r.options, "-lineinfo")),
        "arch": request_for(cuda, bf16_kernel, "sm_90", [BF16], [BF16]),
        "headers": dataclasses.replace(r, headers=(("cuda_bf16.h", "0" * 64),)),
    }
    keys = {name: key(cuda, v) for name, v in variants.items()}
    keys["compiler"] = key(cuda, r, compiler="nvrtc-99.9")
    assert base not in keys.values()
    assert len(set(keys.values())) == len(keys)


def test_dtype_change_changes_the_key(cuda, bf16_kernel):
    k = kernelkit.kernel("cp", ["x"], ["y"], "y[threadIdx.x] = x[threadIdx.x];")
    a = request_for(cuda, k, "sm_80", [F32], [F32])
    b = request_for(cuda, k, "sm_80", [I32], [I32])
    assert key(cuda, a) != key(cuda, b)


def test_kernel_redefined_under_the_same_name_gets_another_key(cuda):
    from kernelkit._cache import compile_cached

    one = kernelkit.kernel("same_name", ["x"], ["y"], "y[0] = x[0] + 1;")
    two = kernelkit.kernel("same_name", ["x"], ["y"], "y[0] = x[0] + 2;")
    r1 = request_for(cuda, one, "sm_80", [F32], [F32])
    r2 = request_for(cuda, two, "sm_80", [F32], [F32])
    assert r1.kernel == r2.kernel == "same_name"
    assert key(cuda, r1) != key(cuda, r2)
    a1, a2 = compile_cached(cuda, r1), compile_cached(cuda, r2)
    assert a1.binary != a2.binary
    assert compile_cached(cuda, r1) is a1  # the first is still there, not overwritten


def test_a_device_newer_than_nvrtc_gets_ptx_for_the_newest_known_arch():
    from kernelkit._backends.cuda import CUDABackend, nvrtc

    newest = max(nvrtc.supported_archs())
    assert CUDABackend.arch_for(newest) == f"sm_{newest}"
    assert CUDABackend.arch_for(newest + 50) == f"compute_{newest}"


@pytest.mark.parametrize("name", ["exp", "sqrtf", "printf"])
def test_a_kernel_named_like_a_c_function_compiles(cuda, name):
    k = kernelkit.kernel(name, ["x"], ["y"], "y[threadIdx.x] = exp(x[threadIdx.x]);")
    req = request_for(cuda, k, "sm_90", [F32], [F32])
    art = cuda.compile(req)
    assert (
        art.kind == "cubin"
        and art.entry == f"kk_kernel_{name}"
        and art.entry.encode() in art.binary
    )
