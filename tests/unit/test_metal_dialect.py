"""The Metal dialect's translator (no device): what each MSL construct becomes, that lines are
kept, and the refusals naming the construct and its line."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit._dialects.metal import ATTRIBUTES, attributes_used, prelude, translate


def body(src: str, header: str = "") -> str:
    """The translated body without line 1's attribute locals and grid guard."""
    return translate("k", src, header).body.split("return; ", 1)[1]


def test_lines_are_kept():
    src = "uint i = thread_position_in_grid.x;\n\nthreadgroup_barrier(\n mem_flags::mem_device);\n"
    t = translate("k", src, "float f(float x) {\n  return x;\n}\n")
    assert t.body.count("\n") == src.count("\n")
    user_header = t.header.split('#line 1 "k.header"\n', 1)[1]
    assert user_header.count("\n") == 3


def test_address_spaces():
    out = body(
        "threadgroup float buf[32]; threadgroup float* p = buf; const device float* a = x;"
        " constant float& c = y; device atomic<float>* z = (device atomic<float>*)o;"
    )
    assert "__shared__ float buf[32];" in out
    assert " float* p = buf;" in out and "__shared__ float*" not in out
    assert "const  float* a" in out
    assert "const float& c" in out
    assert "metal::atomic<float>* z = ( metal::atomic<float>*)o" in out


def test_header_constant_at_namespace_scope_is_constant_memory():
    t = translate(
        "k", "", "constant float k1 = 2;\nconstexpr constant int N = 4;\nvoid f(constant int& a) {}"
    )
    user = t.header.split('#line 1 "k.header"\n', 1)[1]
    assert "__constant__ float k1 = 2;" in user
    assert "constexpr  int N = 4;" in user
    assert "void f(const int& a)" in user


def test_barriers_and_library_names():
    out = body(
        "threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);"
        " simdgroup_barrier(mem_flags::mem_none); float s = simd_sum(x) + max(a, b);"
        " float4 v = float4(1); half2 h; uint3 u;"
    )
    assert "__syncthreads()  ;" in out
    assert "metal::simdgroup_barrier(metal::mem_flags::mem_none)" in out
    assert "metal::simd_sum(x) + metal::max(a, b)" in out
    assert "metal::float4 v = metal::float4(1); metal::half2 h; metal::uint3 u;" in out


def test_fast_and_precise_become_metal():
    out = body(
        "a = fast::exp(x) + metal::fast::exp(y) + metal::precise::sqrt(z) + precise::cos(w);"
    )
    assert out == "a = metal::exp(x) + metal::exp(y) + metal::sqrt(z) + metal::cos(w);"


def test_functions_only_where_called_and_not_the_headers_own():
    out = body(
        "float length = 2; float step = length * 3; y = dot(a, b) + sigmoid(c);",
        "float dot(float4 a, float4 b) { return 0; }",
    )
    assert out == "float length = 2; float step = length * 3; y = dot(a, b) + sigmoid(c);"


def test_swizzles():
    out = body("v.xy = w.zw; float3 c = p.rgb; q->xyz += r.xxx; s.x = t.y;")
    assert "v.template kk_swr<0, 1>() = w.template kk_swz<2, 3>();" in out
    assert "p.template kk_swz<0, 1, 2>()" in out
    assert "q->template kk_swr<0, 1, 2>() += r.template kk_swz<0, 0, 0>();" in out
    assert "s.x = t.y;" in out


def test_half_literals_and_includes():
    t = translate("k", "half h = 1.5h;", "#include <metal_stdlib>\nusing namespace metal;\n")
    assert "half h = half(1.5f);" in t.body
    assert "#include <metal_stdlib>" not in t.header
    assert "KK_VTYPES(half, half)" in t.header  # the half section came with the literal


def test_prelude_sections_by_need():
    assert "simd_sum" not in prelude("x[0] = 1;")
    assert "simd_sum" in prelude("y = simd_sum(x);")
    assert "atomic_fetch_add_explicit" in prelude("atomic_fetch_add_explicit(&o[0], 1, r);")
    # the CPU backend reads "all(" as a warp vote: without all/any, no such text
    assert "all(" not in prelude("x[0] = 1;")


def test_attributes_follow_mlx_table():
    assert attributes_used("uint i = thread_index_in_simdgroup + thread_position_in_grid.x;") == (
        "thread_index_in_simdgroup",
        "thread_position_in_grid",
    )
    assert ATTRIBUTES["thread_position_in_grid"][0] == "uint3"
    assert ATTRIBUTES["simdgroup_index_in_threadgroup"][0] == "uint"
    t = translate("k", "uint3 p = threads_per_grid;")
    assert "const metal::uint3 threads_per_grid = metal::uint3(kk_metal_grid_x" in t.body


def test_zero_d_inputs_are_references():
    t = translate("k", "y[0] = s * 2;", zero_d_inputs=(("s", "auto"),))
    assert "const auto& kk_0d_s = s[0]; { const auto& s = kk_0d_s; y[0] = s * 2;\n}" in t.body


@pytest.mark.parametrize(
    ("src", "what", "token"),
    [
        ("\n\nsimdgroup_float8x8 a;", "simdgroup matrices", "simdgroup_float8x8"),
        ("x = 1;\nsimdgroup_multiply_accumulate(c, a, b, c);", "simdgroup matrices", None),
        ("texture2d<float, access::read> t;", "textures", "texture2d"),
        ("constexpr sampler s(filter::linear);", "samplers", "sampler"),
        ("float2x2 m;", "matrix types", "float2x2"),
        ("x = quad_sum(y);", "quad-group functions", "quad_sum"),
    ],
)
def test_refusals_name_the_construct_and_line(src, what, token):
    k = kernelkit.metal_kernel("k", ["x"], ["y"], src)  # defining it does not raise (as MLX)
    with pytest.raises(kernelkit.ArgumentError) as e:
        _call(k)
    line = src[: src.index(token or "simdgroup_multiply")].count("\n") + 1
    assert f"Metal {what} are not supported" in str(e.value)
    assert f"at line {line} of the source" in str(e.value)


def _call(k):
    x = np.zeros(1, np.float32)
    return k([x], output_shapes=[(1,)], output_dtypes=[np.float32], grid=(1, 1, 1),
             threadgroup=(1, 1, 1))  # fmt: skip


def test_refusal_in_the_header_says_header():
    k = kernelkit.metal_kernel("k", ["x"], ["y"], "y[0] = x[0];", header="\nsampler s;")
    with pytest.raises(kernelkit.ArgumentError, match="line 2 of the header"):
        _call(k)
    with pytest.raises(kernelkit.ArgumentError, match="line 2 of the header"):
        _call(k)  # every call, not only the first


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ("fast", "compile_options must be a dict"),
        ({"math_mode": "bogus"}, "math_mode must be 'safe', 'relaxed' or 'fast', got 'bogus'"),
        ({"math_mode": 1}, "math_mode must be"),
        ({"foo": 1}, "unknown option 'foo'"),
    ],
)
def test_compile_options_are_checked_as_mlx_checks_them(options, error):
    with pytest.raises((kernelkit.ArgumentError, TypeError), match=error):
        kernelkit.metal_kernel("k", ["x"], ["y"], "y[0] = x[0];", compile_options=options)


@pytest.mark.parametrize("mode", [None, "safe", "relaxed", "fast"])
def test_compile_options_math_modes_are_taken(mode):
    options = None if mode is None else {"math_mode": mode}
    k = kernelkit.metal_kernel("k", ["x"], ["y"], "y[0] = x[0];", compile_options=options)
    assert k.math_mode == (mode or "safe")
    assert (
        kernelkit.metal_kernel("k", ["x"], ["y"], "y[0] = x[0];", compile_options={}).math_mode
        == "safe"
    )


def test_plain_identifiers_named_like_enums_are_fine():
    kernelkit.metal_kernel("k", ["x"], ["y"], "int filter = 1; int address = 2; y[0] = filter;")


def test_identifiers_that_only_look_like_refused_names_are_fine():
    kernelkit.metal_kernel("k", ["x"], ["y"], "int depth2 = 1; int quad_idx = 2; y[0] = depth2;")


def test_conditionals_of_two_numbers_are_not_cast_and_others_are():
    body = translate("k", "y[0] = c ? 1 : 2.0f; y[1] = c ? h : 0;").body
    assert "c ? 1 : 2.0f;" in body
    assert "c ? static_cast<metal::kk_cond_t<decltype((h)), decltype((0))>>((h))" in body


def test_hex_literals_in_conditionals_stay_whole():
    # "0x7fffffff" was split into "0x" and "7fffffff" by the token pattern (a compile error in
    # a top-k router's `simd_min(v == m ? vi : 0x7fffffff)`)
    body = translate("k", "int w = c ? vi : 0x7fffffff; uint u = c ? 0XFFu : n;").body
    assert "decltype((0x7fffffff)), decltype((vi))>>((0x7fffffff))" in body
    assert "decltype((0XFFu)), decltype((n))>>((0XFFu))" in body


def test_conditional_casts_are_bounded_on_hostile_bodies(monkeypatch):
    # each cast copies its operands into decltype: a body of many long conditionals must not
    # grow without bound (past the budget, 4 MiB, they are left as written; 64 KiB here)
    from kernelkit._dialects import metal_tokens

    monkeypatch.setattr(metal_tokens, "_COND_TOTAL_LIMIT", 1 << 16)
    operand = " + ".join(f"x[{i}]" for i in range(100))
    src = "\n".join(f"y[{j}] = c ? {operand} : {operand};" for j in range(60))
    body = translate("k", src).body
    assert body.count("\n") == src.count("\n")
    assert len(body) < len(src) + (1 << 16) + 1000
    assert "static_cast" in body  # the budget's worth were cast
