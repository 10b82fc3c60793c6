"""The slow path, run once per specialization: bind the call, render, compile (cached), load,
and build a ``LaunchPlan`` whose ``run`` is the hot path: pack pointers, launch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _config
from ._arrays import NULL, Adapter, ArrayInfo, adapter_for
from ._codegen import make_source
from ._dtypes import PY_SCALAR_DTYPES, DType, normalize_dtype
from ._errors import ArgumentError, ArgumentTypeError, KernelkitError
from ._hotpath import ArgRoute, generate_run
from ._launch import LoadedProgram, load
from ._records import CompileRequest, KernelSpec, Param, Target
from ._registry import backend_call, backend_for_device_type, get_backend
from .backend import Backend


@dataclass
class Bound:
    """One call's arguments, understood: what each input is and where everything lives."""

    inputs: list[tuple[str, Adapter | None, Any]]  # (kind, adapter, ArrayInfo | DType)
    outputs: list[tuple[Adapter, DType, ArrayInfo | None]]
    out_adapter: Adapter
    backend: Backend
    target: Target
    where: ArrayInfo  # the first array's facts: where outputs are allocated


def _is_scalar(x: Any) -> bool:
    if type(x) in PY_SCALAR_DTYPES:
        return True
    import numpy as np

    return isinstance(x, np.generic)


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
    bound_in: list[tuple[str, Adapter | None, Any]] = []
    arrays: list[tuple[str, ArrayInfo]] = []
    first_adapter: Adapter | None = None
    optional = dict(spec.optional_inputs)
    for iname, x in zip(spec.input_names, inputs):
        what = f"input {iname!r}"
        if x is None:
            bound_in.append(("array", NULL, _null_info(name, iname, optional)))
            continue
        if _is_scalar(x):
            dt = normalize_dtype(PY_SCALAR_DTYPES.get(type(x)) or x.dtype, f"[{name}] {what}")
            if type(x) is int and not -(2**31) <= x < 2**31:
                raise ArgumentError(
                    f"[{name}] {what} = {x} does not fit in int32; "
                    "pass numpy.int64(...) for a 64-bit scalar"
                )
            bound_in.append(("scalar", None, dt))
            continue
        adapter = adapter_for(x, f"[{name}] {what}")
        x = adapter.prepare(x)
        info = adapter.info(x, f"[{name}] {what}")
        kind = "scalar_array" if len(info.shape) == 0 else "array"
        bound_in.append((kind, adapter, info))
        arrays.append((what, info))
        if first_adapter is None:
            first_adapter = adapter_for(x, what)
    bound_out = _bind_outputs(spec, output_dtypes, out, arrays)
    if first_adapter is None:
        if out is None:
            raise ArgumentError(
                f"[{name}] at least one input or out= array must be an array, so "
                "kernelkit knows where to run and what to return"
            )
        first_adapter = bound_out[0][0]
    first_what, first = arrays[0]
    for what, info in arrays:
        if (info.device_type, info.device_index) != (first.device_type, first.device_index):
            raise ArgumentError(
                f"[{name}] arrays live on different devices: {first_what} on "
                f"{_where(first)}, {what} on {_where(info)}"
            )
    where = arrays[0][1]
    backend = _pick_backend(spec, backend_name, where, arrays[0][0])
    for what, info in arrays:
        if info.device_type not in backend.dlpack_devices:
            raise ArgumentError(
                f"[{name}] {what} lives in {_where(info)} memory, which backend "
                f"{backend.name!r} cannot use"
            )
    target = _target(backend, where.device_index, name)
    return Bound(bound_in, bound_out, first_adapter, backend, target, where)


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
) -> list[tuple[Adapter, DType, ArrayInfo | None]]:
    name, n = spec.name, len(spec.output_names)
    if out is not None:
        if not isinstance(out, list | tuple) or len(out) != n:
            raise ArgumentError(
                f"[{name}] out= must be a list of {n} arrays {list(spec.output_names)}"
            )
        bound = []
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
            bound.append((adapter, info.dtype, info))
        return bound
    if output_dtypes is None or not isinstance(output_dtypes, list | tuple):
        raise ArgumentError(f"[{name}] output_dtypes must be a list of {n} dtypes (or pass out=)")
    if len(output_dtypes) != n:
        raise ArgumentError(
            f"[{name}] expected {n} output_dtypes for {list(spec.output_names)}, "
            f"got {len(output_dtypes)}"
        )
    return [
        (None, normalize_dtype(d, f"[{name}] output_dtypes[{i}]"), None)  # type: ignore[misc]
        for i, d in enumerate(output_dtypes)
    ]


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


def make_params(
    spec: KernelSpec, inputs: Sequence[tuple[str, DType]], outputs: Sequence[DType], checked: bool
) -> tuple[Param, ...]:
    """Signature order: each input then its referenced shape/strides/ndim, then outputs.
    ``inputs`` holds (kind, dtype) per input: "array", "scalar" or "scalar_array"."""
    params: list[Param] = []
    rows = [(n, k, d) for n, (k, d) in zip(spec.input_names, inputs)]
    rows += [(n, "array", d) for n, d in zip(spec.output_names, outputs)]
    n_in = len(spec.input_names)
    for i, (pname, kind, dtype) in enumerate(rows):
        params.append(Param(pname, kind, dtype.name, is_output=i >= n_in))  # type: ignore[arg-type]
        if kind == "array" and checked:
            params.append(Param(f"kk_extent_{pname}", "extent"))
        for suffix, pkind in (("shape", "dims"), ("strides", "dims"), ("ndim", "ndim")):
            if f"{pname}_{suffix}" in spec.metadata_refs:
                params.append(Param(f"{pname}_{suffix}", pkind))  # type: ignore[arg-type]
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
    inputs: Sequence[tuple[str, DType]],
    outputs: Sequence[DType],
    template: Any,
    checked: bool,
) -> tuple[tuple[Param, ...], CompileRequest]:
    """Params and the compile request of one specialization (also used ahead of time)."""
    params = make_params(spec, inputs, outputs, checked)
    source = make_source(spec, params, template or ())
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


def _kinds(bound: Bound) -> list[tuple[str, DType]]:
    return [(k, d if isinstance(d, DType) else d.dtype) for k, _, d in bound.inputs]


@dataclass
class LaunchPlan:
    """A compiled, loaded specialization; ``run`` is its generated hot path."""

    kernel: str
    request: CompileRequest
    params: tuple[Param, ...]
    loaded: LoadedProgram  # shared with every plan of the same binary and device
    run: Callable[..., Any]  # the call's arguments -> outputs, or _hotpath.MISS
    guarded: bool  # run checks that a call is this specialization's (else it never returns MISS)
    run_source: str


def _lazy_allocator(adapter: Adapter, dtype: DType, info: ArrayInfo) -> Callable[[Any], Any]:
    """Prepared on first use: a kernel always called with out= never needs an allocator."""
    made: list[Callable[[Any], Any]] = []

    def alloc(shape: Any) -> Any:
        if not made:
            made.append(adapter.allocator(dtype, info.device_type, info.device_index))
        return made[0](shape)

    return alloc


def build(
    spec: KernelSpec,
    bound: Bound,
    template: Any,
    check: bool | None,
    verbose: bool,
    guard: tuple | None = None,
) -> LaunchPlan:
    """Render, compile through the caches, load (once per binary and device), and prepare the
    hot path for one specialization. The launch geometry is not part of it: it comes per call."""
    backend, target = bound.backend, bound.target
    with backend_call(backend, "checked mode"):
        checked = backend.resolve_check(check)
    params, request = render_request(
        spec, backend, target, _kinds(bound), [dt for _, dt, _ in bound.outputs], template, checked
    )
    if verbose or _config.config.verbose:
        print(request.source)
    loaded = load(
        backend,
        target,
        request,
        spec.shared_memory_bytes,
        spec.launch_bounds[0] if spec.launch_bounds else 0,
    )
    ins, outs = _routes(spec, bound, params)
    info0 = bound.where
    allocators = [_lazy_allocator(bound.out_adapter, dt, info0) for _, dt, _ in bound.outputs]
    run, run_source = generate_run(
        spec.name,
        params,
        ins,
        outs,
        bound.outputs[0][2] is not None,
        allocators,
        bound.out_adapter,
        loaded,
        (info0.device_type, target.device),
        backend.synchronize,
        backend.name,
        guard,
    )
    return LaunchPlan(
        kernel=spec.name,
        request=request,
        params=params,
        loaded=loaded,
        run=run,
        run_source=run_source,
        guarded=guard is not None,
    )


def _routes(spec: KernelSpec, bound: Bound, params: tuple[Param, ...]) -> tuple[list, list]:
    """Where each input and output goes in the argument pack, and what it needs per call."""
    index = {p.name: i for i, p in enumerate(params)}

    def meta_of(pname: str) -> dict[str, int]:
        m = {
            s: index[f"{pname}_{s}"]
            for s in ("shape", "strides", "ndim")
            if f"{pname}_{s}" in index
        }
        if f"kk_extent_{pname}" in index:
            m["extent"] = index[f"kk_extent_{pname}"]
        return m

    ins = []
    for pname, (kind, adapter, d) in zip(spec.input_names, bound.inputs):
        ins.append(
            ArgRoute(
                f"[{spec.name}] input {pname!r}",
                index[pname],
                kind,
                adapter,
                (d if isinstance(d, DType) else d.dtype).name,
                spec.ensure_row_contiguous,
                meta_of(pname),
            )
        )
    outs = []
    for j, (oname, (adapter, dtype, info)) in enumerate(zip(spec.output_names, bound.outputs)):
        what = f"[{spec.name}] output {oname!r}"
        if info is None:  # allocated by kernelkit: the first input's framework, contiguous
            out_adapter = None if bound.out_adapter.synchronous else bound.out_adapter
            adapter, contiguous = out_adapter, False
        else:
            contiguous = f"{oname}_strides" not in spec.metadata_refs
            what = f"[{spec.name}] out[{j}] ({oname!r})"
        outs.append(
            ArgRoute(
                what,
                index[oname],
                "array",
                adapter,
                dtype.name,
                contiguous,
                meta_of(oname),
            )
        )
    return ins, outs
