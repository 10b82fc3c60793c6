"""The bind stage: a call's arguments -> a frozen ``Problem`` (what the call asks for) and what
running it needs: the array adapters, the backend and the target. Errors name the argument.

Runs once per specialization (the slow path). The ``Problem`` is what later stages decide on;
the adapters (``Adapters``) are only for the hot path that ``plan`` builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._arrays import NULL, Adapter, ArrayInfo
from .._arrays.lookup import adapter_for
from .._backends.registry import backend_call, backend_for_device_type, get_backend
from .._dtypes import PY_SCALAR_DTYPES, normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from .._records import ArgFacts, KernelSpec, Problem, Target
from .._tensor_map import ADAPTER as TENSOR_MAP_ADAPTER
from .._tensor_map import TensorMap
from ..backend import Backend
from .structs import key_struct_type

__all__ = ["Adapters", "Bound", "bind"]


@dataclass(frozen=True)
class Adapters:
    """What only the hot path needs: the adapter of each argument."""

    inputs: tuple[Adapter | None, ...]  # per input: None for a by-value scalar, NULL for None
    outputs: tuple[Adapter, ...] | None  # per out= array; None: kernelkit allocates the outputs
    result: Adapter  # the first array's: allocates outputs, wraps them, gives the stream


@dataclass(frozen=True)
class Bound:
    """Bind's result: the problem, and the adapters, backend and target that run it."""

    problem: Problem
    adapters: Adapters
    backend: Backend
    target: Target


def is_scalar(x: Any) -> bool:
    if type(x) in PY_SCALAR_DTYPES:
        return True
    import numpy as np

    return isinstance(x, np.generic)


def _facts(name: str, kind: Any, info: ArrayInfo, is_output: bool = False) -> ArgFacts:
    return ArgFacts(
        name, kind, info.dtype.name, info.shape, info.strides, info.contiguous, is_output
    )


def bind(
    spec: KernelSpec, inputs: Any, output_dtypes: Any, out: Any, backend_name: str | None
) -> Bound:
    """Validate the call's arrays and pick backend and target. Errors name the argument."""
    name = spec.name
    if not isinstance(inputs, list | tuple):
        raise ArgumentTypeError(f"[{name}] inputs must be a list, got {type(inputs).__name__}")
    if len(inputs) != len(spec.input_names):
        raise ArgumentError(
            f"[{name}] expected {len(spec.input_names)} inputs "
            f"{list(spec.input_names)}, got {len(inputs)}"
        )
    facts: list[ArgFacts] = []
    in_adapters: list[Adapter | None] = []
    arrays: list[tuple[str, ArrayInfo]] = []
    maps: list[tuple[str, TensorMap]] = []
    first_adapter: Adapter | None = None
    optional, structs = dict(spec.optional_inputs), dict(spec.struct_inputs)
    for iname, x in zip(spec.input_names, inputs):
        what = f"input {iname!r}"
        if iname in structs:  # by value: bytes of the declared type (size checked per call)
            key_struct_type(x)
            facts.append(ArgFacts(iname, "struct", structs[iname].ctype))
            in_adapters.append(None)
            continue
        if x is None:
            facts.append(_facts(iname, "null", _null_info(name, iname, optional)))
            in_adapters.append(NULL)
            continue
        if x.__class__ is TensorMap:
            facts.append(ArgFacts(iname, "tensor_map", x.array_dtype))
            in_adapters.append(TENSOR_MAP_ADAPTER)
            maps.append((what, x))
            continue
        if is_scalar(x):
            dt = normalize_dtype(PY_SCALAR_DTYPES.get(type(x)) or x.dtype, f"[{name}] {what}")
            if type(x) is int and not -(2**31) <= x < 2**31:
                raise ArgumentError(
                    f"[{name}] {what} = {x} does not fit in int32; "
                    "pass numpy.int64(...) for a 64-bit scalar"
                )
            facts.append(ArgFacts(iname, "scalar", dt.name))
            in_adapters.append(None)
            continue
        adapter = adapter_for(x, f"[{name}] {what}")
        x = adapter.prepare(x)
        info = adapter.info(x, f"[{name}] {what}")
        facts.append(_facts(iname, "scalar_array" if len(info.shape) == 0 else "array", info))
        in_adapters.append(adapter)
        arrays.append((what, info))
        if first_adapter is None:
            first_adapter = adapter_for(x, what)
    out_facts, out_adapters = _bind_outputs(spec, output_dtypes, out, arrays)
    if first_adapter is None:
        if out_adapters is None:
            raise ArgumentError(
                f"[{name}] at least one input or out= array must be an array, so "
                "kernelkit knows where to run and what to return"
            )
        first_adapter = out_adapters[0]
    first_what, first = arrays[0]
    for what, info in arrays:
        if (info.device_type, info.device_index) != (first.device_type, first.device_index):
            raise ArgumentError(
                f"[{name}] arrays live on different devices: {first_what} on "
                f"{_where(first)}, {what} on {_where(info)}"
            )
    for what, m in maps:
        if (m.device_type, m.device_index) != (first.device_type, first.device_index):
            raise ArgumentError(
                f"[{name}] {what} is a tensor map of memory on another device than "
                f"{first_what} ({_where(first)})"
            )
    backend = _pick_backend(spec, backend_name, first, first_what)
    for what, info in arrays:
        if info.device_type not in backend.dlpack_devices:
            raise ArgumentError(
                f"[{name}] {what} lives in {_where(info)} memory, which backend "
                f"{backend.name!r} cannot use"
            )
    target = _target(backend, first.device_index, name)
    problem = Problem(
        name, (*facts, *out_facts), device_type=first.device_type, device_index=first.device_index
    )
    adapters = Adapters(tuple(in_adapters), out_adapters, first_adapter)
    return Bound(problem, adapters, backend, target)


def _null_info(name: str, iname: str, optional: dict[str, str]) -> ArrayInfo:
    """A None input: a null pointer of the dtype ``optional_inputs`` declares for it."""
    if iname not in optional:
        raise ArgumentError(
            f"[{name}] input {iname!r} is None; declare it with "
            f"kernel(..., optional_inputs={{{iname!r}: dtype}}) to pass a null pointer"
        )
    return ArrayInfo(normalize_dtype(optional[iname], iname), (0,), (1,), 0, -1, True)


def _where(info: ArrayInfo) -> str:
    names = {1: "host", 2: "cuda", 3: "cuda-host", 13: "cuda-managed", 10: "rocm"}
    kind = names.get(info.device_type, f"device type {info.device_type}")
    return kind if info.device_type == 1 else f"{kind}:{info.device_index}"


def _bind_outputs(
    spec: KernelSpec, output_dtypes: Any, out: Any, arrays: list[tuple[str, ArrayInfo]]
) -> tuple[tuple[ArgFacts, ...], tuple[Adapter, ...] | None]:
    """The outputs' facts, and the adapters of the ``out=`` arrays (None: kernelkit allocates;
    an allocated output's shape comes per call, so its facts hold only its dtype)."""
    name, n = spec.name, len(spec.output_names)
    if out is not None:
        if not isinstance(out, list | tuple) or len(out) != n:
            raise ArgumentError(
                f"[{name}] out= must be a list of {n} arrays {list(spec.output_names)}"
            )
        facts, adapters = [], []
        for i, (oname, o) in enumerate(zip(spec.output_names, out)):
            what = f"out[{i}] ({oname!r})"
            adapter = adapter_for(o, f"[{name}] {what}")
            if adapter.synchronous:
                raise ArgumentTypeError(
                    f"[{name}] {what} is immutable ({adapter.framework}); "
                    "let kernelkit allocate outputs instead"
                )
            info = adapter.info(o, f"[{name}] {what}")
            if output_dtypes is not None and len(output_dtypes) == n:
                want = normalize_dtype(output_dtypes[i], f"[{name}] output_dtypes[{i}]")
                if want != info.dtype:
                    raise ArgumentError(
                        f"[{name}] {what} has dtype {info.dtype.name}, but "
                        f"output_dtypes[{i}] is {want.name}"
                    )
            arrays.append((what, info))
            facts.append(_facts(oname, "array", info, is_output=True))
            adapters.append(adapter)
        return tuple(facts), tuple(adapters)
    if output_dtypes is None or not isinstance(output_dtypes, list | tuple):
        raise ArgumentError(f"[{name}] output_dtypes must be a list of {n} dtypes (or pass out=)")
    if len(output_dtypes) != n:
        raise ArgumentError(
            f"[{name}] expected {n} output_dtypes for {list(spec.output_names)}, "
            f"got {len(output_dtypes)}"
        )
    facts = [
        ArgFacts(
            oname, "array", normalize_dtype(d, f"[{name}] output_dtypes[{i}]").name, is_output=True
        )
        for i, (oname, d) in enumerate(zip(spec.output_names, output_dtypes))
    ]
    return tuple(facts), None


def _pick_backend(
    spec: KernelSpec, backend_name: str | None, where: ArrayInfo, what: str
) -> Backend:
    chosen = backend_name or spec.backend
    if chosen is not None:
        return get_backend(chosen)
    return backend_for_device_type(where.device_type, f"[{spec.name}] {what}")


def _target(backend: Backend, device: int, name: str) -> Target:
    with backend_call(backend, "probing devices"):
        targets = backend.targets()
    for t in targets:
        if t.device == device:
            return t
    raise ArgumentError(
        f"[{name}] backend {backend.name!r} has no device {device} "
        f"(it sees {len(backend.targets())})"
    )
