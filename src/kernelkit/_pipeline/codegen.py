"""Body -> backend-neutral kernel pieces: parameters, template constants, attribute locals.

Nothing user-supplied reaches generated text unchecked: names must be C identifiers that are not
keywords, template values are bools, ints, known dtypes or ``kernelkit.cxx`` names (qualified
identifiers). The body and header are the user's code.
"""

from __future__ import annotations

import functools
import numbers
import re
from collections.abc import Iterable, Sequence
from typing import Any

from .._abi import METADATA, metadata_param
from .._dtypes import normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from .._records import CxxName, KernelSource, KernelSpec, Param, StructType

__all__ = [
    "METAL_ATTRIBUTES",
    "check_identifier",
    "cxx",
    "make_source",
    "scan_body",
    "struct",
    "template_params",
]

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_CXX_KEYWORDS = frozenset(
    """alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await
    co_return co_yield decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq private protected public register reinterpret_cast requires return
    short signed sizeof static static_assert static_cast struct switch template this thread_local
    throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t while
    xor xor_eq threadIdx blockIdx blockDim gridDim warpSize main""".split()
)

# Metal thread attribute -> C++ definition (CUDA builtins, which every backend's prelude provides).
METAL_ATTRIBUTES: dict[str, str] = {
    "thread_position_in_grid": "const uint3 thread_position_in_grid = make_uint3("
    "blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y, "
    "blockIdx.z * blockDim.z + threadIdx.z);",
    "threads_per_threadgroup": "const uint3 threads_per_threadgroup = "
    "make_uint3(blockDim.x, blockDim.y, blockDim.z);",
    "thread_position_in_threadgroup": "const uint3 thread_position_in_threadgroup = "
    "make_uint3(threadIdx.x, threadIdx.y, threadIdx.z);",
    "threadgroup_position_in_grid": "const uint3 threadgroup_position_in_grid = "
    "make_uint3(blockIdx.x, blockIdx.y, blockIdx.z);",
    "threads_per_grid": "const uint3 threads_per_grid = make_uint3(gridDim.x * blockDim.x, "
    "gridDim.y * blockDim.y, gridDim.z * blockDim.z);",
    "threadgroups_per_grid": "const uint3 threadgroups_per_grid = "
    "make_uint3(gridDim.x, gridDim.y, gridDim.z);",
    "thread_index_in_threadgroup": "const unsigned thread_index_in_threadgroup = kk_linear_tid();",
    "thread_index_in_simdgroup": "const unsigned thread_index_in_simdgroup = "
    "kk_linear_tid() % KK_WARP_SIZE;",
    "simdgroup_index_in_threadgroup": "const unsigned simdgroup_index_in_threadgroup = "
    "kk_linear_tid() / KK_WARP_SIZE;",
    "threads_per_simdgroup": "const unsigned threads_per_simdgroup = KK_WARP_SIZE;",
}
_ATTR_RE = re.compile(r"\b(" + "|".join(METAL_ATTRIBUTES) + r")\b")

_NEEDS = {
    "fp16": re.compile(
        r"\b(__half2?|half2?|__float2half\w*|__half2float|__h[a-z]\w*|h2[a-z]\w*|"
        r"hexp|hlog|hsqrt|hrsqrt|hrcp|hsin|hcos|hfma|hmax|hmin|hneg|habs)\b"
    ),
    "bf16": re.compile(
        r"\b(__nv_bfloat162?|nv_bfloat162?|bfloat16|__float2bfloat16\w*|"
        r"__bfloat162float|\w*bf16\w*)\b"
    ),
    # std::min, std::numeric_limits, ...: the CPU backend's C++ prelude always has them; NVRTC
    # gets the standard headers (libcu++) when a body names std:: (or numeric_limits alone)
    "std": re.compile(r"\bstd\s*::"),
    "limits": re.compile(r"\bnumeric_limits\s*<"),
    # `cg::`, `cooperative_groups::`, `using namespace cooperative_groups;`, a namespace alias
    "cg": re.compile(r"\bcg\s*::|\bcooperative_groups\b"),
    "metal": re.compile(r"\bmetal\s*::"),
}
_DTYPE_NEEDS = {"float16": "fp16", "bfloat16": "bf16"}


def _is_numpy_bool(value: Any) -> bool:
    return (
        getattr(value, "shape", None) == ()
        and getattr(getattr(value, "dtype", None), "kind", "") == "b"
    )


def check_identifier(name: Any, what: str, kernel: str = "kernel") -> str:
    """``name`` if it is a usable C identifier; else ValueError naming ``what``."""
    if not isinstance(name, str):
        raise ArgumentTypeError(f"[{kernel}] {what} must be a str, got {type(name).__name__}")
    if not _IDENT.match(name) or name in _CXX_KEYWORDS:
        raise ArgumentError(f"[{kernel}] {what} {name!r} is not a valid C identifier")
    if name.startswith(("kk_", "__")):
        raise ArgumentError(f"[{kernel}] {what} {name!r} uses a reserved prefix ('kk_' or '__')")
    return name


def scan_body(source: str, names: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """(referenced ``x_shape``/``x_strides``/``x_ndim`` names, referenced Metal attributes)."""
    refs = set()
    for name in names:
        for field, _ in METADATA:
            if re.search(rf"\b{metadata_param(name, field)}\b", source):
                refs.add(metadata_param(name, field))
    return frozenset(refs), frozenset(_ATTR_RE.findall(source))


_CXX_TOKEN = re.compile(r"\s*(::|[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[<>,*&])")
# keywords a template argument may spell a type or value with (vllm::silu_kernel<unsigned int>)
_CXX_ARG_KEYWORDS = frozenset(
    "bool char const double false float int long short signed true unsigned void".split()
)


def _cxx_tokens(name: str) -> list[str] | None:
    tokens, pos = [], 0
    while pos < len(name.rstrip()):
        m = _CXX_TOKEN.match(name, pos)
        if not m:
            return None
        tokens.append(m.group(1))
        pos = m.end()
    return tokens


def _cxx_parse(tokens: list[str], i: int, arg: bool) -> int:
    """The index past a (qualified, possibly templated) name starting at ``tokens[i]``, or a
    template argument when ``arg``; ValueError where the grammar breaks."""
    if i >= len(tokens):
        raise ValueError("the end")
    if arg and (tokens[i] in _CXX_ARG_KEYWORDS or tokens[i].isdigit()):
        while i < len(tokens) and tokens[i] in _CXX_ARG_KEYWORDS | {"*", "&"}:
            i += 1
        return i + (i < len(tokens) and tokens[i].isdigit())
    if tokens[i] == "::":
        i += 1
    while True:
        if i >= len(tokens) or not _IDENT.match(tokens[i]) or tokens[i] in _CXX_KEYWORDS:
            raise ValueError(tokens[i] if i < len(tokens) else "the end")
        i += 1
        if i < len(tokens) and tokens[i] == "<":
            i = _cxx_parse(tokens, i + 1, True)
            while i < len(tokens) and tokens[i] == ",":
                i = _cxx_parse(tokens, i + 1, True)
            if i >= len(tokens) or tokens[i] != ">":
                raise ValueError("an unclosed '<'")
            i += 1
        if i < len(tokens) and tokens[i] == "::":
            i += 1
            continue
        while arg and i < len(tokens) and tokens[i] in ("*", "&"):
            i += 1
        return i


def cxx(name: str) -> CxxName:
    """A C++ name as a ``template=`` value: an enumerator or a function that ``header=``
    declares, e.g. ``kernelkit.cxx("ggml_sort_order::ASC")``, ``kernelkit.cxx("silu")`` or a
    function template's specialization, ``kernelkit.cxx("vllm::silu_kernel<__half>")``; the body
    receives it as a template parameter (``template <auto order>``). Only a (qualified,
    possibly templated) name is accepted, never an expression. The same name gives the same
    object (a call repeated in C compares template values of this kind by identity).

    Example::

        >>> import kernelkit
        >>> kernelkit.cxx("ggml_sort_order::ASC")
        CxxName(name='ggml_sort_order::ASC')
    """
    if not isinstance(name, str):
        raise ArgumentTypeError(f"[cxx] name must be a str, got {type(name).__name__}")
    return _cxx(name)


@functools.lru_cache(maxsize=4096)
def _cxx(name: str) -> CxxName:
    tokens = _cxx_tokens(name)
    try:
        if not tokens or _cxx_parse(tokens, 0, False) != len(tokens):
            raise ValueError("what follows the name")
    except ValueError as e:
        raise ArgumentError(
            f"[cxx] {name!r} is not a C++ name (identifiers joined by '::', with template "
            f"arguments, such as 'ggml_sort_order::ASC' or 'vllm::silu_kernel<float>'): "
            f"unexpected {e}"
        ) from None
    return CxxName(name.strip())


MAX_STRUCT_BYTES = 4096  # a CUDA kernel's parameters may take 4 KB in all (32 KB from CUDA 12.1)


def struct(ctype: str, size: int) -> StructType:
    """Declare a by-value input of a POD C++ type that ``header=`` defines, for
    ``kernel(..., structs={"params": kernelkit.struct("soft_max_params", 96)})``: the body
    receives ``const soft_max_params params`` as the original kernel did; a call passes a NumPy
    structured scalar (or 0-d array) or ``bytes`` of exactly ``size`` bytes, laid out as the C++
    type is (the compiler checks ``sizeof`` against ``size``).

    Example::

        >>> import kernelkit
        >>> kernelkit.struct("uint3", 12)
        StructType(ctype='uint3', nbytes=12)
    """
    name = cxx(ctype).name if isinstance(ctype, str) else ctype
    if not isinstance(name, str):
        raise ArgumentTypeError(f"[struct] ctype must be a str, got {type(ctype).__name__}")
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ArgumentError(f"[struct] size must be a positive int (bytes), got {size!r}")
    if size > MAX_STRUCT_BYTES:
        raise ArgumentError(
            f"[struct] size {size} bytes exceeds the {MAX_STRUCT_BYTES} bytes a kernel's "
            "parameters may take"
        )
    return StructType(name, int(size))


def _template_param(name: str, value: Any, kernel: str) -> tuple[tuple[str, str], str | None]:
    """((parameter declaration, argument), the dtype it names or None) for one value."""
    if isinstance(value, bool) or _is_numpy_bool(value):
        return (f"bool {name}", "true" if bool(value) else "false"), None
    if isinstance(value, numbers.Integral):
        v = int(value)
        if not -(2**63) <= v < 2**63:
            raise ArgumentError(f"[{kernel}] template {name!r} = {v} does not fit in 64 bits")
        if -(2**31) <= v < 2**31:
            return (f"int {name}", str(v)), None
        return (f"long long {name}", f"{v}LL"), None
    if isinstance(value, CxxName):
        return (f"auto {name}", cxx(value.name).name), None  # checked again: records are open
    try:
        dt = normalize_dtype(value, f"template {name!r}")
    except TypeError:
        raise ArgumentTypeError(
            f"[{kernel}] template {name!r} must be a bool, an int, a dtype or a "
            f"kernelkit.cxx name, got {type(value).__name__} {value!r}"
        ) from None
    return (f"typename {name}", dt.ctype), dt.name


def template_params(
    template: Sequence[tuple[str, Any]], kernel: str = "kernel"
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(parameter declaration, argument) per template value, and the dtypes they name.
    Validates every entry."""
    out, dtypes, seen = [], [], set()
    for i, item in enumerate(template):
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise ArgumentTypeError(
                f"[{kernel}] template[{i}] must be a (name, value) pair, got {item!r}"
            )
        name, value = item
        check_identifier(name, f"template name at template[{i}]", kernel)
        if name in seen:
            raise ArgumentError(f"[{kernel}] template name {name!r} is given twice")
        seen.add(name)
        param, dtype = _template_param(name, value, kernel)
        out.append(param)
        if dtype is not None:
            dtypes.append(dtype)
    return tuple(out), tuple(dtypes)


def _as_local(decl: str, arg: str) -> str:
    """A template parameter as a local of a non-template body: ``constexpr int N = 3;``,
    ``using T = float;``."""
    kind, name = decl.rsplit(" ", 1)
    if kind == "typename":
        return f"using {name} = {arg};"
    return f"constexpr {kind} {name} = {arg};"


def make_source(
    spec: KernelSpec,
    params: tuple[Param, ...],
    template: Sequence[tuple[str, Any]],
    as_template: bool = True,
) -> KernelSource:
    """The neutral pieces of one specialization (params already bound to dtypes).
    ``as_template``: the template values as the body's template parameters (``.template``);
    False: as constexpr locals at the top of the preamble (backends without templates)."""
    tparams, tdtypes = template_params(template, spec.name)
    clash = {n for n, _ in template} & {p.name for p in params}
    if clash:
        raise ArgumentError(
            f"[{spec.name}] template name {sorted(clash)[0]!r} clashes with a parameter"
        )
    attrs = [METAL_ATTRIBUTES[a] for a in METAL_ATTRIBUTES if a in spec.attribute_refs]
    checks = [_struct_checks(spec.name, p) for p in params if p.kind == "struct"]
    locals_ = [] if as_template else [_as_local(decl, arg) for decl, arg in tparams]
    preamble = "\n".join([*locals_, *attrs, *checks])
    needs = {_DTYPE_NEEDS[d] for d in (*tdtypes, *(p.dtype for p in params)) if d in _DTYPE_NEEDS}
    text = spec.header + "\n" + spec.source
    needs.update(k for k, rx in _NEEDS.items() if rx.search(text))
    if "bf16" in needs:
        needs.add("fp16")
    return KernelSource(
        kernel=spec.name,
        entry=entry_symbol(spec.name),
        params=params,
        header=spec.header,
        preamble=preamble,
        body=spec.source,
        needs=frozenset(needs),
        arch_specific=spec.arch_specific,
        launch_bounds=spec.launch_bounds,
        cluster_dims=spec.cluster_dims,
        template=tparams if as_template else (),
        cooperative=spec.cooperative,
    )


def _struct_checks(kernel: str, p: Param) -> str:
    """Compile-time checks that a struct parameter's C++ type is what Python packs: its size and
    that it can be copied as bytes (a C++ error naming the input otherwise). "" for others."""
    if p.kind != "struct":
        return ""
    return (
        f"static_assert(sizeof({p.ctype}) == {p.nbytes}, \"[{kernel}] struct input '{p.name}': "
        f'sizeof({p.ctype}) is not the {p.nbytes} bytes kernelkit.struct declares"); '
        f'static_assert(__is_trivially_copyable({p.ctype}), "[{kernel}] struct input '
        f"'{p.name}': {p.ctype} must be trivially copyable (a POD) to be passed as bytes\");"
    )


# C and CUDA functions a kernel's extern "C" symbol would collide with (a kernel named "exp"
# would redeclare exp()): such kernels get the symbol "kk_kernel_<name>" instead.
_C_FUNCTIONS = frozenset(
    """abs acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2
    expm1 fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log
    log10 log1p log2 logb lrint lround max min modf nan nearbyint nextafter pow remainder remquo
    rint round rsqrt scalbn signbit sin sinh sqrt tan tanh tgamma trunc printf malloc free memcpy
    memset assert clock""".split()
)
_C_FUNCTIONS = _C_FUNCTIONS | {f + "f" for f in _C_FUNCTIONS}


def entry_symbol(name: str) -> str:
    """The exported symbol of kernel ``name``: the name itself, unless a C or CUDA library
    function already has it."""
    return f"kk_kernel_{name}" if name in _C_FUNCTIONS else name
