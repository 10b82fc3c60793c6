"""Eager ``kernel(...)`` calls on JAX CUDA arrays, on XLA's stream, with no host sync.

JAX does not share its stream, so the direct path (``_arrays._jax``) waits for the inputs,
launches on another framework's stream and synchronizes before handing the outputs to JAX. When
the FFI shim is available (``jax_shim``: it needs a C++ compiler once), a plan for JAX CUDA
arrays runs instead through an ``EagerRoute``: one jitted ``jax.ffi.ffi_call`` of the shim's
CUDA handler per (input shapes, scalar values, output shapes, geometry), built from the plan's
own parameters and loaded program and cached. Calling it only enqueues work on XLA's stream.

What stays on the direct path: calls with ``init_value=`` or ``stream=`` (XLA owns its outputs
and its stream), and, past ``MAX_VARIANTS`` compiled variants of one plan, new variants (each
costs an XLA compile: a scalar that changes every call should be a 0-d array). When the shim
cannot be built, every call takes the direct path and kernelkit warns once, saying why. The
plan's ``run_source`` starts with the route it runs.
"""

from __future__ import annotations

import struct
import threading
import warnings
from collections.abc import Callable
from typing import Any

from .._arrays import DLPACK_CPU, DLPACK_CUDA, NULL
from .._dtypes import DTYPES
from .._errors import KernelkitError
from .._pipeline.key import MISS, guard_function
from . import jax_pack, jax_shim

__all__ = ["EAGER_PLATFORMS", "MAX_VARIANTS", "EagerRoute", "run_for"]

# XLA platforms whose eager calls take the route ("cpu" works too: tests turn it on in CI,
# where there is no GPU; there it would only trade a cheap wait for an XLA dispatch).
EAGER_PLATFORMS = frozenset({"cuda"})
MAX_VARIANTS = 64  # compiled XLA calls kept per plan
_PLATFORM_OF = {DLPACK_CPU: "cpu", DLPACK_CUDA: "cuda"}
_TARGET_OF = {"cpu": jax_shim.CPU_TARGET, "cuda": jax_shim.CUDA_TARGET}
_warned: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(f"kernelkit: {message}", RuntimeWarning, stacklevel=3)


def run_for(plan: Any, bound: Any, guard: Any) -> Callable[..., Any]:
    """``JaxAdapter.run_for`` (through ``RUNS_FOR``): an ``EagerRoute`` for a plan whose
    arrays are all JAX arrays on an ``EAGER_PLATFORMS`` device and whose outputs kernelkit
    allocates, when the shim is available; else the plan's own run."""
    from .._arrays._jax import JaxAdapter

    platform = _PLATFORM_OF.get(bound.problem.device_type)
    adapters = bound.adapters
    if (
        platform not in EAGER_PLATFORMS
        or adapters.outputs is not None
        or not all(a is None or a is NULL or isinstance(a, JaxAdapter) for a in adapters.inputs)
    ):
        return plan.run
    problem = jax_shim.problem()
    if problem is not None:
        _warn_once(
            "shim",
            "eager calls on JAX GPU arrays synchronize the host (they would run on XLA's "
            f"stream through XLA's FFI, but {problem})",
        )
        return plan.run
    return EagerRoute(plan, bound.problem, guard, platform)


class EagerRoute:
    """A plan's run for eager calls on JAX arrays through XLA's FFI (see the module
    docstring); ``plan.run`` (the direct path) takes what it cannot."""

    def __init__(self, plan: Any, problem: Any, guard: Any, platform: str) -> None:
        import numpy as np

        from .._arrays._numpy import numpy_dtype

        self._plan = plan
        self._direct = plan.run
        self._matches = guard_function(guard) if guard is not None else None
        self._platform = platform
        ins = [a for a in problem.args if not a.is_output]
        self._inputs = tuple((a.name, a.kind) for a in ins)
        self._is_array = tuple(a.kind in ("array", "scalar_array") for a in ins)
        self._outputs = tuple(
            (a.name, np.dtype(numpy_dtype(DTYPES[a.dtype]))) for a in problem.args if a.is_output
        )
        # outputs whose metadata are their flat views' (``KernelSpec.flat_outputs``)
        self._flat = tuple(name for name, _ in self._outputs) if plan.flat_outputs else ()
        self._calls: dict[Any, Callable[..., Any]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"EagerRoute({self._plan.kernel!r}: a jitted XLA FFI call on XLA's stream per "
            f"input shapes, scalar values, output shapes and geometry, on {self._platform})"
        )

    def __call__(
        self,
        inputs: Any,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any,
        template: Any,
        init_value: Any,
        stream: Any,
        out: Any,
        backend: Any,
        check: Any,
        shared_memory: Any,
    ) -> Any:
        args = (inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value,
                stream, out, backend, check, shared_memory)  # fmt: skip
        if self._matches is not None and not self._matches(*args):
            return MISS
        if init_value is None and stream is None:
            try:
                key = self._key(inputs, output_shapes, grid, threadgroup, shared_memory)
                call = self._calls.get(key) or self._compile(key)
            except (TypeError, ValueError):  # malformed: the direct path says what is wrong
                call = None
            if call is not None:
                return list(call(*[x for x, a in zip(inputs, self._is_array) if a]))
        return self._direct(*args)

    def fixed(self, args: tuple) -> Callable[..., Any]:
        """The run of calls that share ``args``' array shapes, dtypes and devices, output
        shapes and geometry (``LaunchPlan.direct_for``: the built-in ops' prepared calls, whose
        signature fixed them): the compiled XLA call of them, without the route's guard and
        key (with arrays only, that call itself: its list of results as it returns it; a JAX
        dispatch costs 30-40 µs on an H200's host, and each Python frame here about 0.5); a
        call whose scalar inputs differ from ``args``' takes the route. The route itself
        where the call is not one it compiles (``init_value=``, ``stream=``, ``out=``, past
        the variants' limit)."""
        inputs, shapes, grid, threadgroup, shared = args[0], args[1], args[3], args[4], args[11]
        if args[6] is not None or args[7] is not None or args[8] is not None:
            return self
        try:
            key = self._key(inputs, shapes, grid, threadgroup, shared)
            call = self._calls.get(key) or self._compile(key)
        except (TypeError, ValueError):
            return self
        if call is None:
            return self
        is_array = self._is_array
        if all(is_array):  # arrays only (the XLA call returns its list of results)

            def run_arrays(inputs: Any, *rest: Any) -> Any:
                return call(*inputs)

            return run_arrays
        scalars = tuple(
            (i, _scalar_id(x)) for i, (x, a) in enumerate(zip(inputs, is_array)) if not a
        )
        route = self

        def run(inputs: Any, *rest: Any) -> Any:
            for i, held in scalars:  # (the XLA call holds their values)
                if _scalar_id(inputs[i]) != held:
                    return route(inputs, *rest)
            return list(call(*[x for x, a in zip(inputs, is_array) if a]))

        return run

    def _key(self, inputs: Any, shapes: Any, grid: Any, threadgroup: Any, shared: Any) -> tuple:
        """The compiled XLA call's key of a call (TypeError/ValueError where malformed): what
        ``_build`` takes, then the scalars' types and bits (0.0 and -0.0 are equal keys)."""
        pairs = tuple(zip(inputs, self._is_array))
        return (
            tuple([x.shape if a else x for x, a in pairs]),
            tuple(map(tuple, shapes)),
            tuple(grid),
            tuple(threadgroup),
            shared,
            tuple([_scalar_id(x) for x, a in pairs if not a]),
        )

    def _compile(self, key: tuple) -> Callable[..., Any] | None:
        """The jitted FFI call for ``key`` (once), or None to take the direct path."""
        with self._lock:
            found = self._calls.get(key)
            if found is not None:
                return found
            if len(self._calls) >= MAX_VARIANTS:
                _warn_once(
                    f"variants {id(self)}",
                    f"[{self._plan.kernel}] more than {MAX_VARIANTS} eager JAX call variants "
                    "(input shapes, scalar values, output shapes, geometry) of one "
                    "specialization: new ones synchronize the host instead of compiling an XLA "
                    "call each (pass a scalar that changes every call as a 0-d array)",
                )
                return None
            try:
                call = self._build(*key[:5])
            except KernelkitError:  # the direct path raises it with the call's context
                return None
            self._calls[key] = call
            return call

    def _build(
        self, shapes: tuple, out_shapes: tuple, grid: tuple, threadgroup: tuple, shared: Any
    ) -> Callable[..., Any]:
        import jax

        if len(out_shapes) != len(self._outputs):
            raise ValueError("output_shapes does not match the outputs")
        arrays: dict[str, tuple[int, ...] | None] = {}
        scalars: dict[str, Any] = {}
        for (name, kind), value in zip(self._inputs, shapes):
            if kind == "scalar":
                scalars[name] = value
            else:  # an array's shape, or None for an absent optional input
                arrays[name] = None if kind == "null" else tuple(value)
        results = []
        for (name, dtype), shape in zip(self._outputs, out_shapes):
            arrays[name] = tuple(int(n) for n in shape)
            results.append(jax.ShapeDtypeStruct(arrays[name], dtype))
        attributes = jax_pack.attributes(
            self._platform, [self._plan], arrays, scalars, (grid, threadgroup, shared), self._flat
        )
        call = jax.ffi.ffi_call(_TARGET_OF[self._platform], results)
        return jax.jit(lambda *xs: call(*xs, **attributes))


def _scalar_id(x: Any) -> tuple:
    """A scalar input as a compiled XLA call holds it: its type and its bits (-0.0 is not
    0.0; a NaN is itself), for the keys and checks that choose one."""
    if x.__class__ is float:
        return (float, struct.pack("<d", x))
    tobytes = getattr(x, "tobytes", None)  # a NumPy scalar
    return (x.__class__, x if tobytes is None else tobytes())
