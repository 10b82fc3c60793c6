"""Signature generation, template parameters, attribute locals, identifier validation, needs."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit._abi import signature, template_args, template_head
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.codegen import (
    METAL_ATTRIBUTES,
    check_identifier,
    make_source,
    scan_body,
    template_params,
)
from kernelkit._pipeline.render import make_params
from kernelkit._records import Param

F32, F16, BF16, I32 = (DTYPES[n] for n in ("float32", "float16", "bfloat16", "int32"))


def template_lines(template):
    """The template parameters as text, one ``declaration = argument`` per line."""
    params, dtypes = template_params(template)
    return "\n".join(f"{decl} = {arg}" for decl, arg in params), dtypes


def params_for(source: str, inputs: list, outputs: list, ins=("x",), outs=("y",), checked=False):
    spec = kernelkit.kernel("k", list(ins), list(outs), source).spec
    return spec, make_params(spec, inputs, outputs, checked)


# --- signature ------------------------------------------------------------------------------


def test_signature_spells_every_param_kind():
    params = (
        Param("x", "array", "float32"),
        Param("x_shape", "dims"),
        Param("x_ndim", "ndim"),
        Param("s", "scalar", "float16"),
        Param("z", "scalar_array", "int64"),
        Param("y", "array", "bfloat16", is_output=True),
    )
    assert signature(params) == (
        "const float* x, const kk_dims x_shape, const int x_ndim, const __half s, "
        "const int64_t* z, __nv_bfloat16* y"
    )


def test_signature_does_not_mark_outputs_restrict():
    # out= may alias an input; __restrict__ would make that undefined behaviour
    params = (Param("x", "array", "float32"), Param("y", "array", "float32", is_output=True))
    assert "restrict" not in signature(params)


def test_public_render_signature_is_the_same():
    from kernelkit.backend import c_type, render_signature

    params = (Param("x", "array", "uint8"), Param("y", "array", "float64", is_output=True))
    assert render_signature(params) == signature(params) == "const uint8_t* x, double* y"
    assert c_type("bfloat16") == "__nv_bfloat16"


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_every_dtype_has_a_signature_spelling(name):
    (p,) = (Param("x", "array", name),)
    assert signature((p,)) == f"const {DTYPES[name].ctype}* x"


def test_metadata_params_only_when_referenced():
    _, params = params_for("y[0] = x[0];", [("array", F32)], [F32])
    assert [p.name for p in params] == ["x", "y"]


def test_metadata_params_follow_their_array_in_order():
    src = "y[0] = x_ndim + x_strides[0] + y_shape[0] + x_shape[0];"
    _, params = params_for(src, [("array", F32)], [F32])
    assert [(p.name, p.kind) for p in params] == [
        ("x", "array"),
        ("x_shape", "dims"),
        ("x_strides", "dims"),
        ("x_ndim", "ndim"),
        ("y", "array"),
        ("y_shape", "dims"),
    ]
    assert signature(params) == (
        "const float* x, const kk_dims x_shape, const kk_dims x_strides, const int x_ndim, "
        "float* y, const kk_dims y_shape"
    )


@pytest.mark.parametrize(
    "body",
    [
        "y[0] = xx_shape;",  # another name that ends like it
        "y[0] = x_shapes[0];",  # a longer word
        "y[0] = my_x_shape;",
    ],
)
def test_metadata_scan_matches_whole_words_only(body):
    refs, _ = scan_body(body, ["x", "y"])
    assert "x_shape" not in refs


def test_scalar_and_zero_d_params():
    _, params = params_for(
        "y[0] = a + b[0];", [("scalar", F32), ("scalar_array", I32)], [F32], ins=("a", "b")
    )
    # scalars by value (template deduction sees a plain T), 0-d arrays as pointers (b[0])
    assert signature(params) == "const float a, const int32_t* b, float* y"


def test_checked_mode_adds_extents_for_arrays_only():
    _, params = params_for(
        "y[0] = x[0] + a;", [("array", F32), ("scalar", F32)], [F32], ins=("x", "a"), checked=True
    )
    assert [p.name for p in params] == ["x", "kk_extent_x", "a", "y", "kk_extent_y"]


# --- template lines -------------------------------------------------------------------------


def test_template_bool_int_and_wide_int():
    text, dtypes = template_lines(
        [("flag", True), ("off", False), ("n", 7), ("neg", -3), ("big", 2**40)]
    )
    assert text.splitlines() == [
        "bool flag = true",
        "bool off = false",
        "int n = 7",
        "int neg = -3",
        "long long big = 1099511627776LL",
    ]
    assert dtypes == ()


def test_template_numpy_integers_are_ints():
    text, _ = template_lines([("n", np.int64(5)), ("m", np.uint8(3))])
    assert text.splitlines() == ["int n = 5", "int m = 3"]


def test_template_int_beyond_64_bits_is_rejected():
    with pytest.raises(ValueError, match=r"'n'.*64 bits"):
        template_lines([("n", 2**64)])


def _dtype_spellings():
    cases = [
        ("float32", "float"),
        ("float", "float"),
        ("fp32", "float"),
        ("half", "__half"),
        ("float16", "__half"),
        ("bfloat16", "__nv_bfloat16"),
        ("bf16", "__nv_bfloat16"),
        ("int32", "int32_t"),
        ("uint8", "uint8_t"),
        ("bool", "bool"),
        ("float64", "double"),
        (np.float32, "float"),
        (np.float16, "__half"),
        (np.int64, "int64_t"),
        (np.dtype("float64"), "double"),
        (np.dtype("uint32"), "uint32_t"),
        (np.dtype(bool), "bool"),
        (np.bool_, "bool"),
    ]
    return cases


@pytest.mark.parametrize(("value", "ctype"), _dtype_spellings(), ids=repr)
def test_template_dtype_from_numpy_and_strings(value, ctype):
    text, dtypes = template_lines([("T", value)])
    assert text == f"typename T = {ctype}"
    assert len(dtypes) == 1


@pytest.mark.parametrize(
    ("attr", "ctype"),
    [
        ("float32", "float"),
        ("float16", "__half"),
        ("bfloat16", "__nv_bfloat16"),
        ("int8", "int8_t"),
        ("int64", "int64_t"),
        ("bool", "bool"),
        ("uint8", "uint8_t"),
    ],
)
def test_template_dtype_from_torch(attr, ctype):
    torch = pytest.importorskip("torch")
    text, _ = template_lines([("T", getattr(torch, attr))])
    assert text == f"typename T = {ctype}"


@pytest.mark.parametrize("attr", ["float32", "float16", "bfloat16", "int32"])
def test_template_dtype_from_jax(attr):
    jnp = pytest.importorskip("jax.numpy")
    text, _ = template_lines([("T", getattr(jnp, attr))])
    assert text == f"typename T = {DTYPES[attr].ctype}"


@pytest.mark.parametrize("attr", ["float32", "float16", "int32"])
def test_template_dtype_from_cupy(attr):
    cp = pytest.importorskip("cupy")
    text, _ = template_lines([("T", getattr(cp, attr))])
    assert text == f"typename T = {DTYPES[attr].ctype}"


def test_template_dtype_from_ml_dtypes_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    text, _ = template_lines([("T", np.dtype(ml_dtypes.bfloat16))])
    assert text == "typename T = __nv_bfloat16"


@pytest.mark.parametrize(
    "value", [1.5, [1, 2], (3,), None, 'x; system("rm -rf /")', np.complex64, "complex64", {"a": 1}]
)
def test_template_value_of_another_type_is_rejected(value):
    with pytest.raises(TypeError, match="template 'T'"):
        template_lines([("T", value)])


@pytest.mark.parametrize("item", [("T",), ("T", 1, 2), "T", 3])
def test_template_entry_that_is_not_a_pair(item):
    with pytest.raises(TypeError, match=r"template\[0\]"):
        template_lines([item])


def test_template_name_given_twice():
    with pytest.raises(ValueError, match="'N' is given twice"):
        template_lines([("N", 1), ("N", 2)])


def test_template_name_that_clashes_with_a_parameter():
    spec, params = params_for("y[0] = x[0];", [("array", F32)], [F32])
    with pytest.raises(ValueError, match="template name 'x' clashes"):
        make_source(spec, params, [("x", 1)])


# --- identifiers ----------------------------------------------------------------------------

BAD_NAMES = [
    "",
    "1x",
    "x-y",
    "x y",
    "x.y",
    "x\n",
    "é",
    'x; system("id")',
    "x) { evil(); } void f(",
    "int",
    "float",
    "class",
    "template",
    "return",
    "threadIdx",
    "blockDim",
    "warpSize",
    "kk_x",
    "kk_scalar",
    "__x",
    "__global__",
    "a/*",
    "x[0]",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_check_identifier_rejects(name):
    with pytest.raises(ValueError, match="the thing"):
        check_identifier(name, "the thing")


@pytest.mark.parametrize("name", ["x", "_x", "X1", "inp_0", "T", "float32_t", "kkx", "k_k"])
def test_check_identifier_accepts(name):
    assert check_identifier(name, "name") == name


@pytest.mark.parametrize("name", [None, 3, b"x", ["x"]])
def test_check_identifier_needs_a_str(name):
    with pytest.raises(TypeError, match="the thing"):
        check_identifier(name, "the thing")


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_kernel_factory_rejects_bad_names_and_says_which(name):
    with pytest.raises(ValueError, match="kernel name"):
        kernelkit.kernel(name, ["x"], ["y"], "")
    with pytest.raises(ValueError, match=r"input name at input_names\[1\]"):
        kernelkit.kernel("k", ["a", name], ["y"], "")
    with pytest.raises(ValueError, match=r"output name at output_names\[0\]"):
        kernelkit.kernel("k", ["x"], [name], "")


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_template_rejects_bad_names_and_says_which(name):
    with pytest.raises(ValueError, match=r"template name at template\[1\]"):
        template_lines([("ok", 1), (name, 1)])


def test_kernel_factory_checks_the_rest():
    with pytest.raises(ValueError, match="at least one output"):
        kernelkit.kernel("k", ["x"], [], "")
    with pytest.raises(ValueError, match="'x' is used more than once"):
        kernelkit.kernel("k", ["x"], ["x"], "")
    with pytest.raises(TypeError, match="input_names"):
        kernelkit.kernel("k", "x", ["y"], "")
    with pytest.raises(TypeError, match="output_names"):
        kernelkit.kernel("k", ["x"], "y", "")
    with pytest.raises(TypeError, match="source"):
        kernelkit.kernel("k", ["x"], ["y"], None)
    with pytest.raises(ValueError, match="shared_memory"):
        kernelkit.kernel("k", ["x"], ["y"], "", shared_memory=-1)
    with pytest.raises(ValueError, match="shared_memory"):
        kernelkit.kernel("k", ["x"], ["y"], "", shared_memory=1.5)


def test_defining_a_kernel_compiles_nothing():
    stats = kernelkit.cache_stats()
    k = kernelkit.kernel("never_called", ["x"], ["y"], "this is not C++ at all")
    assert kernelkit.cache_stats() == stats
    assert k.name == "never_called"
    assert "never_called" in repr(k)


# --- Metal attributes and needs ------------------------------------------------------------


def test_metal_attribute_locals_only_when_referenced():
    src = "y[thread_position_in_grid.x] = threads_per_simdgroup;"
    spec, params = params_for(src, [("array", F32)], [F32])
    assert spec.attribute_refs == {"thread_position_in_grid", "threads_per_simdgroup"}
    pre = make_source(spec, params, ()).preamble
    assert "const uint3 thread_position_in_grid" in pre
    assert "const unsigned threads_per_simdgroup = KK_WARP_SIZE;" in pre
    others = set(METAL_ATTRIBUTES) - spec.attribute_refs
    assert not any(f" {a} =" in pre for a in others)


def test_no_attribute_locals_in_a_plain_body():
    spec, params = params_for("y[threadIdx.x] = x[threadIdx.x];", [("array", F32)], [F32])
    assert spec.attribute_refs == frozenset()
    assert make_source(spec, params, ()).preamble == ""


def test_every_metal_attribute_is_recognised():
    body = "\n".join(
        f"y[0] += {a}{'.x' if 'position' in a or 'per_' in a else ''};" for a in METAL_ATTRIBUTES
    )
    assert scan_body(body, [])[1] == frozenset(METAL_ATTRIBUTES)
    assert len(METAL_ATTRIBUTES) == 10


def test_attribute_substrings_are_not_attributes():
    assert scan_body("int my_thread_position_in_grid_x = 0;", [])[1] == frozenset()


def test_template_values_are_template_parameters_not_locals():
    spec, params = params_for("y[thread_index_in_threadgroup] = N;", [("array", F32)], [F32])
    src = make_source(spec, params, [("N", 3), ("T", "float16"), ("E", kernelkit.cxx("a::B"))])
    assert src.template == (("int N", "3"), ("typename T", "__half"), ("auto E", "a::B"))
    assert template_head(src) == "template <int N, typename T, auto E>"
    assert template_args(src) == "<3, __half, a::B>"
    pre = src.preamble.splitlines()
    assert pre[0].startswith("const unsigned thread_index_in_threadgroup")
    assert "N" not in src.preamble


@pytest.mark.parametrize(
    "name",
    ["a + b", "f()", "x; system(1)", "1", "::", "a::", "a::::b", "new", "a::class", "",
     "f<", "f<>", "f<int", "f<int,>", "f<a>b", "f<1+2>", "f<new>", "f<int>::", "true", "f<x(1)>"],
)  # fmt: skip
def test_cxx_names_are_qualified_identifiers_only(name):
    with pytest.raises(ValueError, match=r"\[cxx\]"):
        kernelkit.cxx(name)


@pytest.mark.parametrize(
    "name",
    ["vllm::silu_kernel<float>", "f<__half, 3, true>", "ns::g<const float*, a::b<int>>",
     "f<unsigned int>::value", "::a::f<int&>"],
)  # fmt: skip
def test_cxx_names_take_template_arguments(name):
    """vLLM passes ``KERNEL<scalar_t>`` (a function template's specialization) as ACT_FN."""
    assert kernelkit.cxx(name).name == name


def test_cxx_gives_one_object_a_name():
    """A call repeated in C compares C++ template values by identity."""
    assert kernelkit.cxx("ggml_sort_order::ASC") is kernelkit.cxx("ggml_sort_order::ASC")
    assert kernelkit.cxx("a::B") is not kernelkit.cxx("a::C")


def test_cxx_name_of_another_type_is_refused():
    with pytest.raises(TypeError, match=r"\[cxx\] name must be a str"):
        kernelkit.cxx(3)


@pytest.mark.parametrize(
    ("body", "dtype", "template", "needs"),
    [
        ("y[0] = x[0];", F32, (), set()),
        ("y[0] = x[0];", F16, (), {"fp16"}),
        ("y[0] = x[0];", BF16, (), {"bf16", "fp16"}),
        ("y[0] = x[0];", F32, [("T", "float16")], {"fp16"}),
        ("y[0] = x[0];", F32, [("T", "bfloat16")], {"bf16", "fp16"}),
        ("__half h = __float2half(x[0]); y[0] = __half2float(h);", F32, (), {"fp16"}),
        (
            "__nv_bfloat16 b = __float2bfloat16(x[0]); y[0] = __bfloat162float(b);",
            F32,
            (),
            {"bf16", "fp16"},
        ),
        ("auto g = cg::this_thread_block(); y[0] = x[0];", F32, (), {"cg"}),
        ("y[0] = cooperative_groups :: this_grid().size();", F32, (), {"cg"}),
        ("y[0] = metal::exp(x[0]);", F32, (), {"metal"}),
        ("y[0] = metal::precise::exp(x[0]);", F32, (), {"metal"}),
        ("y[0] = x[0]; // a halfway point, no cg here, metallic", F32, (), set()),
    ],
)
def test_needs(body, dtype, template, needs):
    spec, params = params_for(body, [("array", dtype)], [F32])
    assert make_source(spec, params, template).needs == frozenset(needs)


def test_needs_see_the_header_too():
    spec = kernelkit.kernel(
        "k",
        ["x"],
        ["y"],
        "y[0] = f(x[0]);",
        header="__device__ float f(float v) { return metal::exp(v); }",
    ).spec
    params = make_params(spec, [("array", F32)], [F32], False)
    src = make_source(spec, params, ())
    assert src.needs == {"metal"}
    assert src.header == spec.header and src.body == spec.source and src.entry == "k"


def test_template_numpy_bool_value_is_a_bool():
    text, _ = template_lines([("F", np.True_), ("G", np.bool_(False))])
    assert text.splitlines() == ["bool F = true", "bool G = false"]


def test_backends_without_template_parameters_get_constexpr_locals():
    spec, params = params_for("y[0] = N;", [("array", F32)], [F32])
    template = [("N", 3), ("T", "float16"), ("E", kernelkit.cxx("a::B")), ("f", False)]
    src = make_source(spec, params, template, as_template=False)
    assert src.template == ()
    assert src.preamble.splitlines() == [
        "constexpr int N = 3;",
        "using T = __half;",
        "constexpr auto E = a::B;",
        "constexpr bool f = false;",
    ]
