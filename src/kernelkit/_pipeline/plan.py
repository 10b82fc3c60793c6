"""The slow path, run once per specialization, as a composition of the stages: bind
(``bind``), render (``render``), compile through the caches and load (``load``), then a
``LaunchPlan`` whose ``run`` is the hot path (``launch``): pack pointers, launch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .. import _config
from .._abi import METADATA, extent_param, metadata_param
from .._arrays import Adapter
from .._backends.registry import backend_call
from .._dtypes import DTYPES
from .._records import CompileRequest, KernelSpec, Param
from . import render as _render
from .bind import Bound
from .key import Guard
from .launch import ArgRoute, HotPath, fixed_for, generate_run
from .load import LoadedProgram, load
from .repeat import Repeats, repeats_for

__all__ = ["LaunchPlan", "build"]


@dataclass
class LaunchPlan:
    """A compiled, loaded specialization; ``run`` is its generated hot path."""

    kernel: str
    request: CompileRequest
    params: tuple[Param, ...]
    loaded: LoadedProgram  # shared with every plan of the same binary and device
    run: Callable[..., Any]  # the call's arguments (key.CallArgs) -> outputs, or key.MISS
    guarded: bool  # run checks that a call is this specialization's (else it never returns MISS)
    run_source: str
    # makes ``direct`` on its first use: only the built-in ops ask for it, so a kernel's first
    # call compiles one generated function, not two (each ~0.25 ms)
    make_direct: Callable[[], Callable[..., Any]]
    flat_outputs: bool = False  # the spec's: outputs' metadata are their flat views'
    # makes a ``direct`` for calls that all share one call's geometry, layouts and output
    # shapes (``launch.Fixed``); None where the run launches through its framework
    make_fixed: Callable[[tuple], Callable[..., Any]] | None = None
    # its calls repeated in C (``repeat``); None where they cannot be (the backend, the arrays)
    repeats: Repeats | None = None
    _direct: Callable[..., Any] | None = field(default=None, init=False, repr=False)

    @property
    def direct(self) -> Callable[..., Any]:
        """``run`` without its check that a call is this specialization's, for callers that
        already know it is (the built-in ops key their calls by the arrays' full signatures):
        the same arguments."""
        found = self._direct
        if found is None:  # two threads may both make it: either one is right
            found = self._direct = self.make_direct()
        return found

    def direct_for(self, args: tuple) -> Callable[..., Any]:
        """``direct`` for a caller whose every call shares ``args``' geometry, array layouts
        and output shapes (the built-in ops' prepared calls: one signature each), which it
        then reads once, here, not per call (``launch.Fixed``)."""
        if self.make_fixed is None:
            return self.direct
        return self.make_fixed(args)


def _allocator(
    adapter: Adapter, dtype: str, device_type: int, device_index: int, now: bool
) -> Callable[[Any], Any]:
    """The framework's allocator, made ``now`` (a plan that allocates: no Python frame of ours
    per call) or on first use (a plan of calls with out= never needs one). One that cannot be
    made now is left to its first use, which reports why (``launch_checks.shape_error``)."""
    if now:
        try:
            return adapter.allocator(DTYPES[dtype], device_type, device_index)
        except Exception:  # noqa: BLE001, S110 - raised again, and reported, by its first use
            pass
    made: list[Callable[[Any], Any]] = []

    def alloc(shape: Any) -> Any:
        if not made:
            made.append(adapter.allocator(DTYPES[dtype], device_type, device_index))
        return made[0](shape)

    return alloc


def build(
    spec: KernelSpec,
    bound: Bound,
    template: Any,
    check: bool | None,
    verbose: bool,
    guard: Guard | None = None,
) -> LaunchPlan:
    """Render, compile through the caches, load (once per binary and device), and prepare the
    hot path for one specialization. The launch geometry is not part of it: it comes per call."""
    problem, adapters, backend, target = bound.problem, bound.adapters, bound.backend, bound.target
    with backend_call(backend, "checked mode"):
        checked = backend.resolve_check(check)
    params, request = _render.render_request(
        spec, backend, target, *_render.arg_types(problem), template, checked
    )
    if verbose or _config.config.verbose:
        print(request.source)  # noqa: T201 - verbose=True / KERNELKIT_VERBOSE asks for it
    loaded = load(
        backend,
        target,
        request,
        spec.shared_memory_bytes,
        spec.launch_bounds[0] if spec.launch_bounds else 0,
        spec.cluster_dims,
        spec.cooperative,
    )
    ins, outs = _routes(spec, bound, params)
    where = problem.device_type, problem.device_index
    outputs = [a for a in problem.args if a.is_output]
    now = adapters.outputs is None
    allocators = [_allocator(adapters.result, a.dtype, *where, now) for a in outputs]
    hot = HotPath(
        kernel=spec.name,
        params=params,
        ins=tuple(ins),
        outs=tuple(outs),
        has_out=adapters.outputs is not None,
        allocators=tuple(allocators),
        out_adapter=adapters.result,
        loaded=loaded,
        where=(problem.device_type, target.device),
        synchronize=backend.synchronize,
        backend=backend.name,
    )
    run, run_source = generate_run(hot, guard)
    plan = LaunchPlan(
        kernel=spec.name,
        request=request,
        params=params,
        loaded=loaded,
        run=run,
        run_source=run_source,
        guarded=guard is not None,
        make_direct=_same(run) if guard is None else lambda: generate_run(hot, None)[0],
        flat_outputs=spec.flat_outputs,
        make_fixed=lambda args: generate_run(hot, None, fixed_for(hot, args))[0],
        repeats=repeats_for(hot, run) if guard is not None else None,
    )
    return _framework_run(plan, bound, guard)


def _framework_run(plan: LaunchPlan, bound: Bound, guard: Any) -> LaunchPlan:
    """The plan with the run its arrays' framework launches it through (``Adapter.run_for``:
    JAX on CUDA goes through XLA's FFI), named at the top of ``run_source``."""
    run = bound.adapters.result.run_for(plan, bound, guard)
    if run is plan.run:
        return plan
    source = f"# run: {run!r}; else\n{plan.run_source}"
    # a route may offer its own run for one signature's calls (``fixed``: the ops' prepared
    # calls), which need not check what their signature fixed
    fixed = getattr(run, "fixed", None)
    return replace(
        plan, run=run, run_source=source, make_direct=_same(run), make_fixed=fixed, repeats=None
    )


def _same(run: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """A ``make_direct`` for a run that checks nothing (or launches through its framework)."""
    return lambda: run


def _routes(spec: KernelSpec, bound: Bound, params: tuple[Param, ...]) -> tuple[list, list]:
    """Where each input and output goes in the argument pack, and what it needs per call."""
    index = {p.name: i for i, p in enumerate(params)}

    def meta_of(pname: str) -> dict[str, int]:
        names = {field: metadata_param(pname, field) for field, _ in METADATA}
        names["extent"] = extent_param(pname)
        return {field: index[name] for field, name in names.items() if name in index}

    args, adapters = bound.problem.args, bound.adapters
    n_in = len(spec.input_names)
    ins = []
    for pname, facts, adapter in zip(spec.input_names, args[:n_in], adapters.inputs):
        ins.append(
            ArgRoute(
                f"[{spec.name}] input {pname!r}",
                index[pname],
                "array" if facts.kind == "null" else facts.kind,
                adapter,
                facts.dtype,
                spec.ensure_row_contiguous,
                meta_of(pname),
                params[index[pname]].nbytes,
            )
        )
    outs = []
    for j, (oname, facts) in enumerate(zip(spec.output_names, args[n_in:])):
        what = f"[{spec.name}] output {oname!r}"
        if adapters.outputs is None:  # allocated by kernelkit: the first input's framework
            result = adapters.result
            adapter, contiguous = (None if result.synchronous else result), False
        else:
            adapter = adapters.outputs[j]
            contiguous = spec.flat_outputs or (
                metadata_param(oname, "strides") not in spec.metadata_refs
            )
            what = f"[{spec.name}] out[{j}] ({oname!r})"
        outs.append(
            ArgRoute(
                what,
                index[oname],
                "array",
                adapter,
                facts.dtype,
                contiguous,
                meta_of(oname),
                flat=spec.flat_outputs,
            )
        )
    return ins, outs
