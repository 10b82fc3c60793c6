"""The kernel ABI, defined once: how an array's metadata parameters are named and travel, the C
parameter list, the template head and arguments, the function attributes, and the defines every
backend passes to its prelude. Render (``_pipeline.codegen``) and every backend's source writer
share it, so it sits below both."""

from __future__ import annotations

import re

from . import _records
from ._dtypes import DTYPES
from ._records import KernelSource, Param

__all__ = [
    "METADATA",
    "abi_options",
    "cluster_dims",
    "extent_param",
    "launch_bounds",
    "metadata_param",
    "prelude_undefs",
    "signature",
    "template_args",
    "template_head",
]

# What an array's metadata parameters are called and how
# they travel (Param kinds), and the defines every backend's render passes to its prelude.
METADATA = (("shape", "dims"), ("strides", "dims"), ("ndim", "ndim"))  # x_shape, x_strides, x_ndim


def metadata_param(array: str, field: str) -> str:
    """The parameter carrying ``field`` ("shape", "strides" or "ndim") of ``array``."""
    return f"{array}_{field}"


def extent_param(array: str) -> str:
    """The checked-mode parameter carrying the elements reachable through ``array``."""
    return f"kk_extent_{array}"


def abi_options() -> tuple[str, ...]:
    """Compiler defines that size the prelude's parameter types (``kk_dims`` holds
    ``KK_MAX_NDIM`` int64): every backend's render passes them, so MAX_NDIM is written once."""
    return (f"-DKK_MAX_NDIM={_records.MAX_NDIM}",)


def template_head(source: KernelSource) -> str:
    """``template <int block_size, typename T>`` before the body's function, or ""."""
    if not source.template:
        return ""
    return f"template <{', '.join(decl for decl, _ in source.template)}>"


def template_args(source: KernelSource) -> str:
    """``<32, float>`` after the body function's name where it is called, or ""."""
    if not source.template:
        return ""
    return f"<{', '.join(arg for _, arg in source.template)}>"


# The prelude's convenience macros (WARP_SIZE) that a user's code may declare as names of its
# own (`static const int WARP_SIZE = 32;`, `template <int WARP_SIZE>`): such code gets `#undef`.
_DECLARES = {
    name: re.compile(
        rf"\b(?:int|unsigned|long|short|size_t|auto|uint|u?int\d+_t)\s+{name}\b|"
        rf"(?<!#define )\b{name}\s*(?:=(?!=)|\{{)"
    )
    for name in ("WARP_SIZE",)
}


def prelude_undefs(source: KernelSource) -> str:
    """``#undef`` lines for the prelude macros that the kernel's own code declares as names
    (placed after the prelude, before the user's header)."""
    text = source.header + "\n" + source.body
    return "\n".join(f"#undef {n}" for n, rx in _DECLARES.items() if rx.search(text))


def launch_bounds(source: KernelSource) -> str:
    """``__launch_bounds__(...) `` for the kernel function, or "" (a no-op macro on the CPU
    backend, which still renders it so that kernels differing only in bounds differ in key)."""
    if not source.launch_bounds:
        return ""
    return f"__launch_bounds__({', '.join(map(str, source.launch_bounds))}) "


def cluster_dims(source: KernelSource) -> str:
    """``__cluster_dims__(...) `` for a CUDA kernel function, or "" (compile-time cluster shape:
    a plain launch then runs the blocks in clusters; sm_90+)."""
    if not source.cluster_dims:
        return ""
    return f"__cluster_dims__({', '.join(map(str, source.cluster_dims))}) "


def signature(params: tuple[Param, ...], for_body: bool = False) -> str:
    """The C parameter list shared by every backend that uses the standard prelude types.
    ``for_body``: the list of a function the kernel calls with its own parameters (a template
    body): tensor maps by reference, so TMA still reads the kernel's parameter space."""
    parts = []
    for p in params:
        if for_body and p.kind == "tensor_map":
            parts.append(f"const kk_tensor_map& {p.name}")
            continue
        if p.kind == "array":
            # no __restrict__: an output may alias an input (in place through out=)
            ctype = _ctype(p)
            parts.append(f"{ctype}* {p.name}" if p.is_output else f"const {ctype}* {p.name}")
        elif p.kind == "scalar":  # by value, as real CUDA code takes scalars (deduces as T)
            parts.append(f"const {_ctype(p)} {p.name}")
        elif p.kind == "scalar_array":  # a 0-d array: read on the device as name[0]
            parts.append(f"const {_ctype(p)}* {p.name}")
        elif p.kind == "dims":
            parts.append(f"const kk_dims {p.name}")
        elif p.kind == "tensor_map":  # TMA reads it from the parameter space: never copied
            parts.append(f"const __grid_constant__ kk_tensor_map {p.name}")
        elif p.kind == "struct":  # a header= type by value, as real kernels take them
            parts.append(f"const {p.ctype} {p.name}")
        else:
            parts.append(f"const int {p.name}")
    return ", ".join(parts)


def _ctype(p: Param) -> str:
    return DTYPES[p.dtype].ctype  # type: ignore[index]
