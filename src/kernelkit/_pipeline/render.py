"""The render stage: one specialization's parameter layout, and its ``CompileRequest`` from the
kernel's spec, the argument types and the backend's render (prelude, signature, options).

It carries out what earlier stages decided and decides nothing. Also used ahead of time
(``kernelkit precompile``), where argument types come from declarations instead of arrays.
(``_backends/cpu/_source.py`` is the CPU backend's own part: its C++ translation unit.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._abi import METADATA, extent_param, metadata_param
from .._backends.registry import backend_call
from .._dtypes import DTYPES, DType
from .._errors import ArgumentError, ArgumentTypeError, KernelkitError
from .._records import CompileRequest, KernelSpec, Param, Problem, Target
from ..backend import Backend
from .codegen import make_source

__all__ = ["arg_types", "make_params", "render_request"]


def arg_types(problem: Problem) -> tuple[list[tuple[str, DType | None]], list[DType]]:
    """A bound problem's (kind, dtype) per input and dtype per output, as ``render_request``
    takes them (a None input is a null pointer: an array parameter)."""
    inputs: list[tuple[str, DType | None]] = [
        ("array" if a.kind == "null" else a.kind, DTYPES.get(a.dtype))  # struct: no dtype
        for a in problem.args
        if not a.is_output
    ]
    return inputs, [DTYPES[a.dtype] for a in problem.args if a.is_output]


def make_params(
    spec: KernelSpec,
    inputs: Sequence[tuple[str, DType | None]],
    outputs: Sequence[DType],
    checked: bool,
) -> tuple[Param, ...]:
    """Signature order: each input then its referenced shape/strides/ndim, then outputs.
    ``inputs`` holds (kind, dtype) per input: "array", "scalar", "scalar_array" or
    "tensor_map" (no shape/strides parameters: a map is not an array the body indexes)."""
    params: list[Param] = []
    rows = [(n, k, d) for n, (k, d) in zip(spec.input_names, inputs)]
    rows += [(n, "array", d) for n, d in zip(spec.output_names, outputs)]
    n_in, structs = len(spec.input_names), dict(spec.struct_inputs)
    for i, (pname, kind, dtype) in enumerate(rows):
        if pname in structs and i < n_in:  # a declared type by value: no shape, no dtype
            st = structs[pname]
            refs = [m for m in (metadata_param(pname, f) for f, _ in METADATA)]
            named = [m for m in refs if m in spec.metadata_refs]
            if named:
                raise ArgumentTypeError(
                    f"[{spec.name}] input {pname!r} is a struct: the body's {named[0]} names a "
                    "shape/strides parameter that only arrays have"
                )
            params.append(Param(pname, "struct", ctype=st.ctype, nbytes=st.nbytes))
            continue
        params.append(Param(pname, kind, dtype.name, is_output=i >= n_in))  # type: ignore
        if kind == "array" and checked:
            params.append(Param(extent_param(pname), "extent"))
        if kind == "tensor_map":
            refs = [metadata_param(pname, f) for f, _ in METADATA]
            named = [m for m in refs if m in spec.metadata_refs]
            if named:
                raise ArgumentTypeError(
                    f"[{spec.name}] input {pname!r} is a tensor map: the body's {named[0]} "
                    "names a shape/strides parameter that only arrays have"
                )
            continue
        for field, pkind in METADATA:
            if metadata_param(pname, field) in spec.metadata_refs:
                params.append(Param(metadata_param(pname, field), pkind))  # type: ignore[arg-type]
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise ArgumentError(f"[{spec.name}] parameter name {p.name!r} is used twice")
        seen.add(p.name)
    return tuple(params)


def render_request(
    spec: KernelSpec,
    backend: Backend,
    target: Target,
    inputs: Sequence[tuple[str, DType | None]],
    outputs: Sequence[DType],
    template: Any,
    checked: bool,
) -> tuple[tuple[Param, ...], CompileRequest]:
    """Params and the compile request of one specialization (also used ahead of time)."""
    params = make_params(spec, inputs, outputs, checked)
    source = make_source(spec, params, template or (), backend.template_parameters)
    try:  # a backend refuses what it cannot pass with a TypeError/ValueError naming it
        backend.check_params(params)
    except KernelkitError:
        raise
    except TypeError as e:
        raise ArgumentTypeError(f"[{spec.name}] {e}") from e
    except ValueError as e:
        raise ArgumentError(f"[{spec.name}] {e}") from e
    with backend_call(backend, "render"):
        return params, backend.render(source, target, checked)
