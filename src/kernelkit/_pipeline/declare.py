"""Ahead-of-time declarations: "these kernels, with these dtypes and templates", so that
``kernelkit precompile`` can build them for listed archs without a GPU (or without arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._backends.registry import backends
from .._dtypes import PY_SCALAR_DTYPES, DType, normalize_dtype
from .._errors import ArgumentError
from .._records import CompileRequest
from .render import render_request

if TYPE_CHECKING:
    from .._api import Kernel


@dataclass(frozen=True)
class Declaration:
    """One specialization to build ahead of time."""

    kernel: Kernel
    inputs: tuple[tuple[str, DType], ...]
    outputs: tuple[DType, ...]
    template: tuple[tuple[str, Any], ...]

    def describe(self) -> str:
        ins = ", ".join(f"{d.name}" if k == "array" else f"{k}:{d.name}" for k, d in self.inputs)
        t = ", ".join(f"{n}={v}" for n, v in self.template)
        return f"{self.kernel.name}({ins}) -> ({', '.join(d.name for d in self.outputs)})" + (
            f" [{t}]" if t else ""
        )

    def request(self, arch: str) -> CompileRequest:
        """The compile request for ``arch``, from whichever backend compiles for it."""
        for backend in backends().values():
            if arch in backend.compile_targets():
                target = backend.target_for_arch(arch)
                _, request = render_request(
                    self.kernel.spec,
                    backend,
                    target,
                    self.inputs,
                    self.outputs,
                    self.template,
                    False,
                )
                return request
        raise ArgumentError(f"[precompile] no installed backend compiles for arch {arch!r}")


_declared: list[Declaration] = []


def declare(
    kernel: Kernel,
    inputs: Sequence[Any],
    output_dtypes: Sequence[Any],
    template: Sequence[tuple[str, Any]] | None,
) -> Declaration:
    """Record a specialization; inputs are dtypes (arrays) or ``float``/``int``/``bool``."""
    name = kernel.name
    if len(inputs) != len(kernel.spec.input_names):
        raise ArgumentError(
            f"[{name}] precompile: expected {len(kernel.spec.input_names)} input "
            f"dtypes, got {len(inputs)}"
        )
    if len(output_dtypes) != len(kernel.spec.output_names):
        raise ArgumentError(
            f"[{name}] precompile: expected {len(kernel.spec.output_names)} "
            f"output dtypes, got {len(output_dtypes)}"
        )
    ins = []
    for i, d in enumerate(inputs):
        if d in PY_SCALAR_DTYPES:
            ins.append(("scalar", normalize_dtype(PY_SCALAR_DTYPES[d])))
        else:
            ins.append(("array", normalize_dtype(d, f"[{name}] precompile inputs[{i}]")))
    outs = tuple(
        normalize_dtype(d, f"[{name}] precompile output_dtypes[{i}]")
        for i, d in enumerate(output_dtypes)
    )
    decl = Declaration(kernel, tuple(ins), outs, tuple(tuple(t) for t in template or ()))
    _declared.append(decl)
    return decl


def declared() -> list[Declaration]:
    """Every declaration made so far in this process."""
    return list(_declared)
