"""``kernelkit.kernel``: define once (validates, compiles nothing), call many times.

The hot path of a repeated call is the last plan's guard, else one key built from the
arguments' types and dtypes (both derived from ``key.KEY``) and one dictionary lookup, then
``LaunchPlan.run`` (pack pointers, launch). Everything else runs once per specialization in
``_pipeline.plan`` (bind, render, compile, load).
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._arrays.lookup import adapter_for
from ._dtypes import normalize_dtype
from ._errors import ArgumentError, ArgumentTypeError
from ._limits import LAUNCH, TIME_LIMIT_FEATURE
from ._pipeline import plan as _plan
from ._pipeline.bind import bind
from ._pipeline.codegen import check_identifier, scan_body
from ._pipeline.key import MISS, CallArgs, call_key, guard_of
from ._pipeline.load import require_geometry
from ._records import KernelSpec, StructType

if TYPE_CHECKING:
    from ._integrations.jax_ffi import JaxCallable
    from ._integrations.torch_op import TorchOp

__all__ = ["Kernel", "cuda_kernel", "kernel"]


def _no_plan(*args: Any) -> Any:
    return MISS


def _follow(kernel: weakref.ref[Kernel], call: Any) -> None:
    """Make ``call`` (a plan's new call repeated in C) the run a kernel tries first."""
    found = kernel()
    if found is not None:
        found._use(call)


MAX_PLANS = 256  # specializations a kernel object keeps (the oldest goes first)
# blocks a cluster may have: 8 is CUDA's portable size, 16 the most sm_90 (H100, H200) allows a
# kernel that opts in (the CUDA backend does so when it loads one with more than 8)
MAX_CLUSTER_BLOCKS = 16
# Kernel.as_torch_op / as_jax_callable: the integrations' wrappers, installed by kernelkit/__init__
# (integrations sit above the API: it never imports them)
WRAPPERS: dict[str, Any] = {}


class Kernel:
    """A kernel defined by its body; call it to compile (once per specialization) and launch."""

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self._plans: dict[Any, _plan.LaunchPlan] = {}  # insertion-ordered: oldest first
        self._lock = threading.Lock()
        self._last: Any = _no_plan  # the run of the most recently used specialization
        # once a plan launches through CUDA's native module, its ``Front``: what ``kernel(...)``
        # then calls (``_entry``), laying the arguments out and calling ``_last`` in C
        # (``kk_launch.c``: no Python frame a call); until then ``_entry`` is ``_call``
        self._front: Any = None

    _entry: Callable[..., list[Any]]  # (``_call`` below the class, the ``Front`` once made)

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        return (
            f"Kernel({self.spec.name!r}, inputs={list(self.spec.input_names)}, "
            f"outputs={list(self.spec.output_names)}, specializations={len(self._plans)})"
        )

    def __getstate__(self) -> dict[str, Any]:
        """A copy's state: the Front stays with its own kernel (it calls that one's methods);
        the copy makes its own where one of its plans is built."""
        state = self.__dict__.copy()
        state.pop("_entry", None)
        state["_front"] = None
        return state

    def _use(self, run: Any) -> None:
        """Make ``run`` the one tried first (``_last``), here and in the ``Front``."""
        self._last = run
        if self._front is not None:
            self._front.last = run

    def _call(
        self,
        inputs: Sequence[Any],
        output_shapes: Sequence[Sequence[int]] | None = None,
        output_dtypes: Sequence[Any] | None = None,
        grid: Sequence[int] | None = None,
        threadgroup: Sequence[int] | None = None,
        template: Sequence[tuple[str, Any]] | None = None,
        init_value: float | int | None = None,
        verbose: bool = False,
        stream: Any = None,
        out: Sequence[Any] | None = None,
        backend: str | None = None,
        check: bool | None = None,
        shared_memory: int | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Run the kernel; returns the outputs as a list (arrays of the first input's framework).

        ``grid`` counts threads per dimension (as in MLX); ``threadgroup`` is the block shape;
        both are required (``ArgumentError`` names the one missing).
        ``out=`` writes into given arrays; ``init_value`` fills outputs first; ``stream=``
        overrides the framework's current stream; ``backend=`` forces a backend by name;
        ``check=True`` bounds-checks every access (backends with a checked mode, e.g. cpu);
        ``shared_memory=`` sets this launch's dynamic shared memory in bytes (default: the
        kernel's). A new grid, threadgroup or shared memory size never compiles or loads again.
        ``timeout=`` (seconds; backends that can stop a launch, e.g. cpu) stops a launch that
        runs longer with ``KernelTimeout``; on the cpu backend Ctrl-C stops a launch too.
        """
        if timeout is None and not verbose:  # the last specialization checks the call is its own
            result = self._last(
                inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value,
                stream, out, backend, check, shared_memory,
            )  # fmt: skip
            if result is not MISS:
                return result
        args = (  # in CallArgs' order (a plain tuple: building a NamedTuple costs a call)
            inputs,
            output_shapes,
            output_dtypes,
            grid,
            threadgroup,
            template,
            init_value,
            stream,
            out,
            backend,
            check,
            shared_memory,
        )
        if timeout is not None:
            return self._call_timed(args, verbose, timeout)
        return self._call_other(args, verbose)

    if TYPE_CHECKING:  # at run time a property (below the class): what a type checker sees
        __call__ = _call

    def _call_other(self, args: tuple, verbose: bool) -> list[Any]:
        """A call of another (or a new) specialization: dictionary lookup, else the slow path."""
        try:
            plan = self._plans[call_key(*args)]
        except Exception:  # noqa: BLE001 - anything unusual takes the validating slow path
            plan = None
        # outside the except: a compile error must not carry the lookup's KeyError as context
        if plan is None:
            plan = self._specialize(CallArgs._make(args), verbose)
        elif verbose:
            print(plan.request.source)  # noqa: T201 - verbose=True asks for it on stdout
        repeats = plan.repeats
        if repeats is None:
            result = plan.run(*args)
        elif repeats.head is not None:  # its calls repeated in C, then its run
            result = repeats.head(*args)
        elif repeats.seen:  # a second call: kept as a call repeated in C where it can be
            result = repeats.prepare(args)
        else:  # a first call makes none (a kernel called once pays nothing for them)
            repeats.seen = True
            result = plan.run(*args)
        if result is MISS:  # cannot happen: a plan's guard is its dictionary key
            raise RuntimeError(f"[{self.name}] internal error: plan guard disagrees with its key")
        if plan.guarded:  # only a plan that checks its calls may be tried first next time
            self._use(
                plan.run if repeats is None
                else repeats.head if repeats.head is not None
                else repeats.end  # the next call, if it is this plan's, makes one
            )  # fmt: skip
        return result

    def _call_timed(self, args: tuple, verbose: bool, timeout: Any) -> list[Any]:
        """A call with ``timeout=``: the plan's run with this thread's launch time limit set."""
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < math.inf
        ):
            raise ArgumentError(
                f"[{self.name}] timeout must be a positive number of seconds, got {timeout!r}"
            )
        try:
            plan = self._plans[call_key(*args)]
        except Exception:  # noqa: BLE001 - as in _call_other
            plan = self._specialize(CallArgs._make(args), verbose)
        target = plan.loaded.geometries.target
        if TIME_LIMIT_FEATURE not in target.features:
            raise ArgumentError(
                f"[{self.name}] timeout= needs a backend that can stop a launch (cpu); "
                f"backend {target.backend!r} cannot"
            )
        LAUNCH.seconds = float(timeout)
        try:
            return plan.run(*args)
        finally:
            LAUNCH.seconds = 0.0

    def _direct_run(self, args: tuple, fixed: bool = False) -> Any:
        """The hot path of the specialization that a call with ``args`` (``CallArgs``' order:
        inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, stream,
        out, backend, check, shared_memory) is of, without the check that a call belongs to
        it; None until such a call has been made. For callers that key their own calls by
        signatures that fix the specialization (the built-in ops), so that a repeated call
        does not check its arguments twice. ``fixed``: a new one that serves only calls
        sharing ``args``' geometry, array layouts and output shapes (``LaunchPlan.direct_for``),
        or the call repeated in C (``Repeats.call_for``: checked in C, its other calls to the
        plan's run) where it can be made."""
        plan = self._plan_of(args)
        if plan is None:
            return None
        if fixed and plan.repeats is not None:  # the call repeated in C, where it can be made
            call = plan.repeats.call_for(args)
            if call is not None:
                return call
        return plan.direct_for(args) if fixed else plan.direct

    def _decided_call(self, args: tuple, after: Callable[..., Any]) -> Any:
        """A call repeated in C of calls like ``args`` (``CallArgs``' order) whose launch
        settings (grid, threadgroup, template, shared_memory) the caller derives from what the
        Call checks, so it does not compare them (``Repeats.call_for``'s ``decided``); the
        calls it does not take go to ``after``. None where it cannot be made (no plan of
        ``args`` yet, or calls of it cannot be repeated in C)."""
        plan = self._plan_of(args)
        if plan is None or plan.repeats is None:
            return None
        return plan.repeats.call_for(args, decided=after)

    def _plan_of(self, args: tuple) -> _plan.LaunchPlan | None:
        """The specialization a call with ``args`` (``CallArgs``' order) is of, if made yet."""
        try:
            return self._plans.get(call_key(*args))
        except Exception:  # noqa: BLE001 - unhashable arguments: no plan to share
            return None

    def precompile(
        self,
        inputs: Sequence[Any],
        output_dtypes: Sequence[Any],
        template: Sequence[tuple[str, Any]] | None = None,
    ) -> Any:
        """Declare a specialization for ``kernelkit precompile`` (compiles nothing now).

        ``inputs`` lists a dtype per array input, or ``float``/``int``/``bool`` for scalars.

        Example::

            >>> import kernelkit
            >>> k = kernelkit.kernel("twice", ["x"], ["y"], "y[threadIdx.x] = 2 * x[threadIdx.x];")
            >>> k.precompile(["float32"], ["float32"])  # doctest: +ELLIPSIS
            Declaration(...)
        """
        from ._pipeline.declare import declare

        return declare(self, inputs, output_dtypes, template)

    def as_torch_op(
        self,
        name: str,
        *,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any = (256, 1, 1),
        template: Any = None,
        shared_memory: Any = None,
        init_value: float | None = None,
        scalars: Mapping[str, type] | None = None,
    ) -> TorchOp:
        """Register this kernel as a ``torch.library`` op ``"namespace::name"``, so that
        ``torch.compile(fullgraph=True)`` traces it as one node; returns a ``kernelkit.TorchOp``.

        Each of ``output_shapes``, ``output_dtypes``, ``grid``, ``threadgroup``, ``template``
        and ``shared_memory`` is a function of the inputs (taken positionally, as tensors or
        scalars, fake ones while tracing: shapes and dtypes only), or a constant; an input's
        name means its shape, its dtype, or one thread per element. ``scalars={"beta": float}``
        declares the inputs passed as Python numbers (float, int or bool); the others are
        tensors (``Tensor?`` for ``optional_inputs``). ``op(*inputs)`` returns the output (a
        tuple for several); ``op(*inputs, out=y)`` writes into ``y`` (in place when ``y`` is an
        input) and allocates nothing. ``kernelkit.custom_vjp`` adds gradients.

        Example::

            >>> import torch, kernelkit
            >>> k = kernelkit.kernel("twice_op", ["x"], ["y"], "uint i = blockIdx.x * blockDim.x"
            ...     " + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];")
            >>> twice = k.as_torch_op("kk_doc::twice", output_shapes="x", output_dtypes="x",
            ...                       grid="x")
            >>> twice(torch.arange(3.0))
            tensor([0., 2., 4.])
        """
        as_torch_op = WRAPPERS["as_torch_op"]  # installed from above (kernelkit/__init__)
        return as_torch_op(
            self,
            name,
            output_shapes=output_shapes,
            output_dtypes=output_dtypes,
            grid=grid,
            threadgroup=threadgroup,
            template=template,
            shared_memory=shared_memory,
            init_value=init_value,
            scalars=scalars,
        )

    def as_jax_callable(
        self,
        *,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any = (256, 1, 1),
        template: Any = None,
        shared_memory: Any = None,
    ) -> JaxCallable:
        """A function of JAX arrays that runs this kernel through XLA's FFI, so it works inside
        ``jax.jit`` (and ``jax.vmap``, one call per batch element), on JAX's CPU platform (the
        CPU backend) and on CUDA GPUs (the CUDA backend, on XLA's stream), whichever XLA
        compiles the computation for. Each of ``output_shapes``, ``output_dtypes``, ``grid``,
        ``threadgroup``, ``template`` and ``shared_memory`` is a constant or a function of the
        inputs (shapes and dtypes only: ``jax.ShapeDtypeStruct``s, and scalar inputs as given).
        Scalar inputs are Python numbers, fixed when traced. Returns the outputs as a list.

        Example::

            >>> import jax, jax.numpy as jnp, kernelkit
            >>> k = kernelkit.kernel("twice_jax", ["x"], ["y"], "uint i = blockIdx.x * "
            ...     "blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];")
            >>> twice = k.as_jax_callable(output_shapes=lambda x: [x.shape],
            ...     output_dtypes=lambda x: [x.dtype], grid=lambda x: (x.shape[0], 1, 1))
            >>> jax.jit(lambda x: twice(x)[0])(jnp.arange(3.0))
            Array([0., 2., 4.], dtype=float32)
        """
        as_jax_callable = WRAPPERS["as_jax_callable"]  # installed from above
        return as_jax_callable(
            self,
            output_shapes=output_shapes,
            output_dtypes=output_dtypes,
            grid=grid,
            threadgroup=threadgroup,
            template=template,
            shared_memory=shared_memory,
        )

    def _specialize(self, args: CallArgs, verbose: bool) -> Any:
        """The slow path: validate everything, then build (or find) the plan for this call."""
        inputs, out, template, backend, check = (
            args.inputs,
            args.out,
            args.template,
            args.backend,
            args.check,
        )
        if template is not None and not isinstance(template, list | tuple):
            raise ArgumentTypeError(f"[{self.name}] template must be a list of (name, value) pairs")
        if backend is not None and not isinstance(backend, str):
            raise ArgumentTypeError(f"[{self.name}] backend must be a backend name (str)")
        if check is not None and not isinstance(check, bool):
            raise ArgumentTypeError(
                f"[{self.name}] check must be True, False or None, got {check!r}"
            )
        bound = bind(self.spec, inputs, args.output_dtypes, out, backend)
        require_geometry(self.name, args.grid, args.threadgroup)  # before compiling anything
        for x in (*inputs, *(out or ())):  # bind registered every argument's adapter
            adapter_for(x, "argument")
        guard = guard_of(args)  # None: unhashable arguments (a list template value), not kept
        key = guard.key if guard is not None else None
        with self._lock:
            plan = self._plans.get(key) if key is not None else None
            if plan is None:
                plan = _plan.build(self.spec, bound, template, check, verbose, guard)
                if plan.repeats is not None:  # a new call repeated in C is tried first
                    plan.repeats.follow = functools.partial(_follow, weakref.ref(self))
                    if self._front is None and plan.repeats.front is not None:
                        self._front = plan.repeats.front(self, MISS)
                        self._front.last = self._last
                        self._entry = self._front
                if key is not None:
                    if len(self._plans) >= MAX_PLANS:
                        del self._plans[next(iter(self._plans))]
                    self._plans[key] = plan
        return plan


class _Entry(property):
    """``Kernel.__call__``: ``kernel(...)`` calls ``kernel._entry``, read by a getter in C
    (``attrgetter``), so that a call through the ``Front`` runs no Python frame at all.
    ``Kernel.__call__(kernel, ...)`` works too, and ``inspect.signature`` gives ``_call``'s."""

    __signature__ = inspect.signature(Kernel._call)

    def __call__(self, kernel: Kernel, *args: Any, **kwargs: Any) -> list[Any]:
        return kernel._entry(*args, **kwargs)


if not TYPE_CHECKING:  # (mypy sees the signature declared in the class)
    Kernel._entry = Kernel._call  # (read through an instance: a method bound per call, no cycle)
    Kernel.__call__ = _Entry(operator.attrgetter("_entry"))
    Kernel.__call__.__doc__ = Kernel._call.__doc__  # (the instance's: the class has its own)
    Kernel._call.__qualname__ = "Kernel.__call__"  # as a wrong call's TypeError names it


def kernel(
    name: str,
    input_names: Sequence[str],
    output_names: Sequence[str],
    source: str,
    header: str = "",
    ensure_row_contiguous: bool = True,
    shared_memory: int = 0,
    backend: str | None = None,
    arch_specific: bool = False,
    optional_inputs: Mapping[str, Any] | None = None,
    launch_bounds: int | Sequence[int] | None = None,
    cluster_dims: int | Sequence[int] | None = None,
    structs: Mapping[str, StructType] | None = None,
    cooperative: bool = False,
) -> Kernel:
    """Define a kernel from the body of its function; nothing is compiled until it is called.

    The signature is generated: each input ``x`` becomes ``const T* x`` (T from its dtype), each
    output ``T* y``; ``x_shape``, ``x_strides`` (in elements) and ``x_ndim`` are passed when the
    body mentions them. ``shared_memory`` is dynamic shared memory in bytes (a call's
    ``shared_memory=`` overrides it). ``arch_specific`` compiles for ``sm_XYa`` (needed for
    wgmma and friends). ``optional_inputs={"bias": "float32"}`` lets a call pass ``None`` for
    ``bias``: the body then sees a null ``const float* bias`` (test ``bias != NULL``).
    ``launch_bounds=256`` or ``(256, 2)`` puts ``__launch_bounds__(256, 2)`` on the kernel and
    refuses launches of more threads per block. ``cluster_dims=2`` or ``(2, 1, 1)`` puts
    ``__cluster_dims__(2, 1, 1)`` on it (CUDA, sm_90+): every launch runs its blocks in clusters
    of that shape, so the grid's blocks must divide into them (checked per launch). Up to 8
    blocks is CUDA's portable cluster size; 9-16 (``cluster_dims=16``) is allowed where the
    GPU offers it (H100, H200: kernelkit opts the kernel in when it loads it).
    A call's ``template=[("block_size", 32), ("T", np.float16), ("order", kernelkit.cxx(
    "ggml_sort_order::ASC"))]`` makes the body a function template instantiated with them
    (ints, bools, dtypes, and enumerators or functions of ``header=`` through ``kernelkit.cxx``),
    so ``if constexpr`` discards as in the original kernel.
    ``structs={"params": kernelkit.struct("soft_max_params", 96)}`` makes input ``params`` a
    POD C++ type from ``header=`` received by value (pass a NumPy structured scalar or bytes).
    ``cooperative=True`` launches so that every block of the grid is resident at once, which
    ``cooperative_groups::this_grid().sync()`` needs (a grid too large to fit is an error).

    Example::

        >>> import numpy as np, kernelkit
        >>> k = kernelkit.kernel("twice", ["x"], ["y"], "uint i = blockIdx.x * blockDim.x"
        ...     " + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];")
        >>> x = np.arange(5, dtype=np.float32)
        >>> k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(5, 1, 1),
        ...   threadgroup=(32, 1, 1))[0]
        array([0., 2., 4., 6., 8.], dtype=float32)
    """
    check_identifier(name, "kernel name")
    ins = tuple(
        check_identifier(n, f"input name at input_names[{i}]", name)
        for i, n in enumerate(_names(input_names, "input_names", name))
    )
    outs = tuple(
        check_identifier(n, f"output name at output_names[{i}]", name)
        for i, n in enumerate(_names(output_names, "output_names", name))
    )
    if not outs:
        raise ArgumentError(f"[{name}] a kernel needs at least one output in output_names")
    dup = sorted({n for n in ins + outs if (ins + outs).count(n) > 1})
    if dup:
        raise ArgumentError(f"[{name}] name {dup[0]!r} is used more than once in inputs/outputs")
    if not isinstance(source, str) or not isinstance(header, str):
        raise ArgumentTypeError(f"[{name}] source and header must be str")
    if isinstance(shared_memory, bool) or not isinstance(shared_memory, int) or shared_memory < 0:
        raise ArgumentError(
            f"[{name}] shared_memory must be a non-negative int (bytes), got {shared_memory!r}"
        )
    if backend is not None and not isinstance(backend, str):
        raise ArgumentTypeError(f"[{name}] backend must be a backend name (str) or None")
    refs, attrs = scan_body(source, ins + outs)
    spec = KernelSpec(
        struct_inputs=_structs(structs, ins, name),
        cooperative=_flag(cooperative, "cooperative", name),
        optional_inputs=_optional(optional_inputs, ins, name),
        launch_bounds=_launch_bounds(launch_bounds, name),
        cluster_dims=_cluster_dims(cluster_dims, name),
        name=name,
        input_names=ins,
        output_names=outs,
        source=source,
        header=header,
        ensure_row_contiguous=bool(ensure_row_contiguous),
        shared_memory_bytes=shared_memory,
        backend=backend,
        arch_specific=bool(arch_specific),
        metadata_refs=refs,
        attribute_refs=attrs,
    )
    return Kernel(spec)


def _optional(value: Any, inputs: tuple[str, ...], kernel_name: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"[{kernel_name}] optional_inputs must map input names to dtypes, got {value!r}"
        )
    out = []
    for iname, dtype in value.items():
        if iname not in inputs:
            raise ArgumentError(
                f"[{kernel_name}] optional_inputs names {iname!r}, which is not in input_names "
                f"{list(inputs)}"
            )
        out.append(
            (iname, normalize_dtype(dtype, f"[{kernel_name}] optional_inputs[{iname!r}]").name)
        )
    return tuple(sorted(out))


def _structs(value: Any, inputs: tuple[str, ...], kernel_name: str) -> tuple:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"[{kernel_name}] structs must map input names to kernelkit.struct(...), got {value!r}"
        )
    for iname, st in value.items():
        if iname not in inputs:
            raise ArgumentError(
                f"[{kernel_name}] structs names {iname!r}, which is not in input_names "
                f"{list(inputs)}"
            )
        if not isinstance(st, StructType):
            raise ArgumentTypeError(
                f"[{kernel_name}] structs[{iname!r}] must be kernelkit.struct(ctype, size), "
                f"got {st!r}"
            )
    return tuple(sorted(value.items()))


def _flag(value: Any, what: str, kernel_name: str) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"[{kernel_name}] {what} must be True or False, got {value!r}")
    return value


def _launch_bounds(value: Any, kernel_name: str) -> tuple[int, ...]:
    if value is None:
        return ()
    bounds = (value,) if isinstance(value, int) else value
    if (
        not isinstance(bounds, tuple | list)
        or not 1 <= len(bounds) <= 3
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in bounds)
    ):
        raise ArgumentError(
            f"[{kernel_name}] launch_bounds must be a positive int or a tuple of 1 to 3 "
            f"positive ints (max threads per block, min blocks per SM, ...), got {value!r}"
        )
    return tuple(bounds)


def _cluster_dims(value: Any, kernel_name: str) -> tuple[int, ...]:
    if value is None:
        return ()
    dims = (value,) if isinstance(value, int) else value
    ok = (
        isinstance(dims, tuple | list)
        and 1 <= len(dims) <= 3
        and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)
    )
    if not ok or math.prod(dims) > MAX_CLUSTER_BLOCKS:
        raise ArgumentError(
            f"[{kernel_name}] cluster_dims must be a positive int or a tuple of 1 to 3 positive "
            f"ints with at most {MAX_CLUSTER_BLOCKS} blocks in all, got {value!r}"
        )
    return (*dims, *(1,) * (3 - len(dims)))


def _names(value: Any, what: str, kernel_name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ArgumentTypeError(f"[{kernel_name}] {what} must be a list of names, got {value!r}")
    return tuple(value)


cuda_kernel = kernel  # MLX's name for the same factory
