"""The plain records that join kernelkit's stages: frozen, validated, free of side effects."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = [
    "MAP_BYTES",
    "MAX_NDIM",
    "ArgFacts",
    "Artifact",
    "CompileRequest",
    "CxxName",
    "KernelSource",
    "KernelSpec",
    "Param",
    "Problem",
    "StructType",
    "Target",
    "TensorMapRequest",
]

MAX_NDIM = 8  # shape/strides travel by value as a fixed array of int64 (kk_dims)
MAP_BYTES = 128  # a tensor map (CUtensorMap) travels by value as 128 opaque bytes

ParamKind = Literal[
    "array", "scalar", "scalar_array", "dims", "ndim", "extent", "tensor_map", "struct"
]


@dataclass(frozen=True)
class CxxName:
    """A C++ name used as a template value: an enumerator (``ggml_sort_order::ASC``) or a
    function (``silu``) that the kernel's ``header=`` declares. Made by ``kernelkit.cxx``,
    which checks that ``name`` is a (qualified) identifier and nothing else."""

    name: str


@dataclass(frozen=True)
class StructType:
    """A POD C++ type that ``header=`` defines, passed by value (``kernelkit.struct``): its name
    (a qualified identifier) and its size in bytes, which both Python and the compiler check."""

    ctype: str
    nbytes: int


@dataclass(frozen=True)
class KernelSpec:
    """What ``kernelkit.kernel(...)`` was given, validated, plus what the body refers to."""

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str = ""
    ensure_row_contiguous: bool = True
    shared_memory_bytes: int = 0
    backend: str | None = None
    arch_specific: bool = False
    metadata_refs: frozenset[str] = frozenset()  # e.g. {"x_shape", "y_strides", "x_ndim"}
    attribute_refs: frozenset[str] = frozenset()  # Metal thread attribute names used in the body
    optional_inputs: tuple[tuple[str, str], ...] = ()  # (input, dtype name): may be None (null)
    launch_bounds: tuple[int, ...] = ()  # (max threads per block[, min blocks per SM])
    cluster_dims: tuple[int, ...] = ()  # thread-block cluster shape (x[, y[, z]]), () for none
    struct_inputs: tuple[tuple[str, StructType], ...] = ()  # (input, its type): by value
    cooperative: bool = False  # launched so that all blocks are resident (grid-wide sync)
    # the outputs reach the body as their flat views (shape (elements,), strides (1,), ndim 1;
    # row-contiguous): for the built-in ops' flat kernels, so no output is reshaped per call
    flat_outputs: bool = False


@dataclass(frozen=True)
class Param:
    """One kernel parameter in signature order.

    ``array``: pointer to elements (``const T*`` for inputs, ``T*`` for outputs);
    ``scalar``: a Python scalar passed by value as ``const T name``;
    ``scalar_array``: a 0-d array, passed as ``const T* name`` (read as ``name[0]``);
    ``dims``: ``kk_dims`` (MAX_NDIM int64 by value) for ``x_shape``/``x_strides``;
    ``ndim``: ``int`` for ``x_ndim``;
    ``extent``: ``long long`` element count reachable through array ``dtype``-less param
    ``kk_extent_<array>`` (only in checked mode, for backends that bounds-check);
    ``tensor_map``: a ``kernelkit.tensor_map`` by value, ``const __grid_constant__ kk_tensor_map``
    (128 bytes; ``dtype`` is its array's);
    ``struct``: a POD C++ type by value, ``const <ctype> name`` (``nbytes`` bytes, declared with
    ``kernelkit.struct``; its type comes from the kernel's ``header=``).
    """

    name: str
    kind: ParamKind
    dtype: str | None = None
    is_output: bool = False
    ctype: str | None = None  # struct: the C++ type's name
    nbytes: int = 0  # struct: its size in bytes

    def __post_init__(self) -> None:
        if self.kind in ("array", "scalar", "scalar_array", "tensor_map") and self.dtype is None:
            raise ValueError(f"param {self.name!r} of kind {self.kind} needs a dtype")
        if self.kind == "struct" and (not self.ctype or self.nbytes <= 0):
            raise ValueError(f"param {self.name!r} of kind struct needs a ctype and nbytes > 0")


@dataclass(frozen=True)
class KernelSource:
    """Backend-neutral pieces of one specialization; a backend's ``render`` assembles them."""

    kernel: str  # the user's kernel name (used in messages and #line file names)
    entry: str  # the C symbol of the kernel function
    params: tuple[Param, ...]
    header: str
    preamble: str  # attribute locals (Metal thread attributes), placed before the body
    body: str
    # (parameter declaration, argument) per template value, e.g. ("int block_size", "32"),
    # ("typename T", "float"), ("auto order", "ggml_sort_order::ASC"): the body is a function
    # template instantiated with them (see _abi.template_head / template_args)
    template: tuple[tuple[str, str], ...] = ()
    cooperative: bool = False  # launched with every block resident (grid-wide sync)
    needs: frozenset[str] = frozenset()  # prelude parts: "fp16", "bf16", "cg", "metal"
    arch_specific: bool = False  # needs arch-specific instructions (sm_90a: wgmma, setmaxnreg)
    launch_bounds: tuple[int, ...] = ()  # render as __launch_bounds__(...) on the kernel function
    cluster_dims: tuple[int, ...] = ()  # render as __cluster_dims__(...) (CUDA, sm_90+)


@dataclass(frozen=True)
class Target:
    """One device a backend can run on, and its limits. Built by a backend's probe."""

    backend: str
    device: int
    arch: str  # what the compiler targets, e.g. "sm_90" or "x86_64"
    name: str
    max_threads_per_block: int
    max_block_dims: tuple[int, int, int]
    max_grid_dims: tuple[int, int, int]
    max_shared_memory_bytes: int  # without opting in
    max_shared_memory_optin_bytes: int  # the most a kernel may ask for after raising its limit
    warp_size: int = 32
    features: frozenset[str] = frozenset()
    # streaming multiprocessors (CUDA's cuDeviceGetAttribute MULTIPROCESSOR_COUNT): how many blocks
    # one wave of a grid holds, which the heuristics size split work by; 1 where a backend does
    # not say (no wave to fill)
    multiprocessor_count: int = 1

    def to_json(self) -> str:
        d = asdict(self)
        d["features"] = sorted(self.features)
        return json.dumps(d, sort_keys=True)


@dataclass(frozen=True)
class CompileRequest:
    """Everything that decides a binary; with the compiler identity it forms the cache key."""

    backend: str
    kernel: str
    entry: str
    arch: str
    source: str
    options: tuple[str, ...]
    headers: tuple[tuple[str, str], ...] = ()  # (include name, sha256 of its bytes) it may include
    param_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class TensorMapRequest:
    """What a backend encodes a tensor map (``kernelkit.tensor_map``) from: the array at
    ``address`` on ``device``, ``shape``, ``strides_bytes`` and ``box`` in the array's order (the
    last dimension contiguous), ``swizzle`` in bytes (0, 32, 64, 128); zeros past the edges."""

    device: int
    address: int
    dtype: str
    shape: tuple[int, ...]
    strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int


@dataclass(frozen=True)
class Artifact:
    """A compiled kernel: the bytes the cache keeps, and the facts needed to load and launch it."""

    kind: str  # "cubin", "ptx", "so", ...
    binary: bytes = field(repr=False)
    entry: str  # lowered (symbol) name to look up after loading
    arch: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)
    log: str = field(default="", compare=False)


@dataclass(frozen=True)
class ArgFacts:
    """One argument of a call as selection sees it (no pointers, no framework objects)."""

    name: str
    kind: Literal["array", "scalar", "scalar_array", "null", "tensor_map", "struct"]
    dtype: str
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()  # in elements
    contiguous: bool = True
    is_output: bool = False


@dataclass(frozen=True)
class Problem:
    """What a call asks for, as the selection stage sees it: its arguments' dtypes, shapes and
    layouts, named dimensions and attributes (an op's ``M``, ``N``, ``K``, ``activation``), and
    where it runs. Built by bind (or by an op from its arrays); frozen and hashable."""

    name: str  # the kernel's or op's name
    args: tuple[ArgFacts, ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()
    device_type: int = 1  # DLPack device type
    device_index: int = 0

    def arg(self, name: str) -> ArgFacts:
        """The argument called ``name``; KeyError naming the ones there are."""
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(
            f"{self.name} has no argument {name!r} (it has {[a.name for a in self.args]})"
        )

    def attr(self, name: str) -> Any:
        """The attribute (named dimension) ``name``; KeyError naming the ones there are."""
        for k, v in self.attrs:
            if k == name:
                return v
        raise KeyError(
            f"{self.name} has no attribute {name!r} (it has {[k for k, _ in self.attrs]})"
        )
