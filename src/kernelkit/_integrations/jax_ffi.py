"""A kernelkit kernel inside ``jax.jit``: ``Kernel.as_jax_callable(...)``, through XLA's FFI.

Tracing fixes what a call's inputs are (shapes, dtypes, scalar values) and resolves the rules
(output shapes and dtypes, grid, ...) into a ``TracedCall``, the parameter of one JAX primitive,
``kernelkit_call``. The platform is decided when JAX lowers the computation, not while
tracing: abstract inputs carry no device, and JAX reuses one trace for arguments committed to
any device, lowering it once per platform (so the default backend would be wrong for arrays
committed elsewhere). The primitive therefore has one lowering rule per XLA platform: "cpu"
specializes the kernel on the CPU backend, "cuda" on the CUDA backend, loaded on every CUDA
device JAX uses in this process (one lowering serves all of a platform's devices; at run time
the handler launches the function loaded in the context of XLA's stream). Plans are made from
``AbstractArray``s and compiled through the usual caches.
Each rule emits one FFI custom call to the handler of its platform in the C++ shim
(``jax_shim``), with the attributes ``jax_pack`` builds: launch entry or CUfunctions, geometry,
and the argument pack with its constant slots filled. At run time XLA calls the handler with its
buffers (and on CUDA its stream): no Python, no copy, no sync.

``jax.vmap`` runs the call once per batch element (a ``lax.map``): the kernel is specialized
for one element's shapes. Outside ``jax.jit`` the primitive runs as a jitted call of its own,
compiled once per specialization. JAX is imported when a callable is made, never at kernelkit's
import. Eager ``kernel(...)`` calls on JAX CUDA arrays use the same shim (``jax_eager``).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._arrays import DLPACK_CPU, DLPACK_CUDA
from .._errors import ArgumentError, ArgumentTypeError
from . import jax_shim

if TYPE_CHECKING:
    from .._api import Kernel

__all__ = ["JaxCallable", "TracedCall", "as_jax_callable"]

# XLA platform -> (kernelkit backend, DLPack device type of its arrays, the shim's FFI target)
PLATFORMS = {
    "cpu": ("cpu", DLPACK_CPU, jax_shim.CPU_TARGET),
    "cuda": ("cuda", DLPACK_CUDA, jax_shim.CUDA_TARGET),
}
_lock = threading.Lock()
_primitive: Any = None


@dataclass(frozen=True, eq=False)
class TracedCall:
    """One specialization of a ``JaxCallable``, fixed by tracing; the primitive's parameter
    (compared by identity). ``inputs`` holds a ``jax.ShapeDtypeStruct`` per array input and
    the value of every other input (a scalar, or None for an absent optional input)."""

    kernel: Kernel
    inputs: tuple[Any, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    out_dtypes: tuple[Any, ...]  # numpy dtypes
    launch: tuple[Any, Any, Any]  # grid, threadgroup, shared memory
    template: Any
    _lowered: dict[tuple, dict[str, Any]] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:  # shown in jaxprs
        return f"TracedCall({self.kernel.name!r}, inputs={self.inputs}, launch={self.launch})"

    @functools.cached_property
    def out_avals(self) -> list[Any]:
        import jax

        return [jax.core.ShapedArray(s, d) for s, d in zip(self.out_shapes, self.out_dtypes)]

    @functools.cached_property
    def jitted(self) -> Callable[..., Any]:
        """The primitive alone, compiled: how it runs outside ``jax.jit``."""
        import jax

        return jax.jit(functools.partial(_kernelkit_call().bind, call=self))

    def _plan(self, platform: str, device: int) -> Any:
        """The kernel specialized on ``platform``'s backend for ``device`` (a LaunchPlan)."""
        from .._arrays._abstract import AbstractArray
        from .._pipeline.key import CallArgs

        backend, device_type, _ = PLATFORMS[platform]
        pinned = self.kernel.spec.backend
        if pinned not in (None, backend):
            raise ArgumentError(
                f"[{self.kernel.name}] is pinned to backend {pinned!r}, but this computation "
                f"runs on XLA's {platform} platform"
            )
        inputs = [
            AbstractArray(tuple(d.shape), d.dtype, device_type, device)
            if hasattr(d, "shape")
            else d
            for d in self.inputs
        ]
        grid, threadgroup, shared = self.launch
        args = CallArgs(
            inputs, list(self.out_shapes), list(self.out_dtypes), grid, threadgroup,
            self.template, None, None, None, backend, None, shared,
        )  # fmt: skip
        return self.kernel._specialize(args, False)

    def attributes(self, platform: str, devices: tuple[int, ...]) -> dict[str, Any]:
        """The FFI attributes for ``platform`` and these devices (once each)."""
        key = (platform, devices)
        found = self._lowered.get(key)
        if found is None:
            spec = self.kernel.spec
            arrays: dict[str, tuple[int, ...] | None] = {}
            scalars: dict[str, Any] = {}
            for name, d in zip(spec.input_names, self.inputs):
                if hasattr(d, "shape"):
                    arrays[name] = tuple(d.shape)
                elif d is None:
                    arrays[name] = None
                else:
                    scalars[name] = d
            arrays.update(zip(spec.output_names, self.out_shapes))
            plans = [self._plan(platform, device) for device in devices]
            flat = spec.output_names if spec.flat_outputs else ()  # as jax_eager passes them
            # (and NumPy) when a call is first lowered, not at kernelkit's import
            from . import jax_pack

            found = jax_pack.attributes(platform, plans, arrays, scalars, self.launch, flat)
            self._lowered[key] = found
        return found


def _kernelkit_call() -> Any:
    """The ``kernelkit_call`` primitive, made with its rules on first use."""
    global _primitive
    with _lock:
        if _primitive is None:
            from jax.extend.core import Primitive
            from jax.interpreters import batching, mlir

            prim = Primitive("kernelkit_call")
            prim.multiple_results = True
            prim.def_impl(_impl)
            prim.def_abstract_eval(lambda *avals, call: call.out_avals)
            batching.fancy_primitive_batchers[prim] = _batch  # primitive_batchers: deprecated
            for platform in PLATFORMS:
                rule = functools.partial(_lower, platform=platform)
                mlir.register_lowering(prim, rule, platform=platform)
            _primitive = prim
    return _primitive


def _impl(*arrays: Any, call: TracedCall) -> Any:
    """The primitive applied to concrete arrays: its compiled call (even under disable_jit)."""
    import jax

    with jax.disable_jit(False):
        return call.jitted(*arrays)


def _batch(axis: Any, args: Sequence[Any], dims: Sequence[Any], *, call: TracedCall) -> Any:  # noqa: ARG001  jax's batching-rule signature
    """vmap: one call per batch element, in a ``lax.map`` (the call is one element's)."""
    import jax
    import jax.numpy as jnp

    prim = _kernelkit_call()
    if all(d is None for d in dims):
        outs = prim.bind(*args, call=call)
        return outs, [None] * len(outs)
    moved = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(args, dims)]
    batched = [d is not None for d in dims]

    def one(elements: list[Any]) -> Any:
        it = iter(elements)
        return prim.bind(*(next(it) if b else x for x, b in zip(moved, batched)), call=call)

    outs = jax.lax.map(one, [x for x, b in zip(moved, batched) if b])
    return outs, [0] * len(outs)


def _devices(platform: str) -> tuple[int, ...]:
    """The devices a lowered computation may run on, as kernelkit numbers them (CUDA's
    ordinals): every device of the platform that JAX uses in this process, since JAX compiles
    one lowering for any of them."""
    if platform == "cpu":
        return (0,)
    import jax

    return tuple(sorted(d.local_hardware_id for d in jax.local_devices(backend=platform)))


def _lower(ctx: Any, *operands: Any, call: TracedCall, platform: str) -> Any:
    """The lowering for one XLA platform: specialize there, emit the shim's FFI call."""
    import jax

    jax_shim.ensure_registered()
    attributes = call.attributes(platform, _devices(platform))
    return jax.ffi.ffi_lowering(PLATFORMS[platform][2])(ctx, *operands, **attributes)


def _resolve(value: Any, inputs: tuple) -> Any:
    if callable(value) and not isinstance(value, type):
        return value(*inputs)
    return value


class JaxCallable:
    """``f(*inputs)`` -> the kernel's outputs (a list) as JAX arrays; usable inside ``jax.jit``
    and ``jax.vmap``. Array inputs are JAX arrays (or anything ``jnp.asarray`` takes); scalar
    inputs are Python numbers, fixed when the call is traced."""

    def __init__(
        self,
        kernel: Kernel,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any,
        template: Any,
        shared_memory: Any,
    ) -> None:
        self.kernel = kernel
        self._rules = (output_shapes, output_dtypes, grid, threadgroup, template, shared_memory)
        self._calls: dict[Any, tuple[TracedCall, tuple[int, ...]]] = {}

    def __repr__(self) -> str:
        return f"JaxCallable({self.kernel.name!r})"

    def __call__(self, *inputs: Any) -> list[Any]:
        import jax
        import jax.numpy as jnp
        import numpy as np

        name = self.kernel.name
        n_in = len(self.kernel.spec.input_names)
        if len(inputs) != n_in:
            raise ArgumentError(
                f"[{name}] expected {n_in} inputs {list(self.kernel.spec.input_names)}, "
                f"got {len(inputs)}"
            )
        arrays: list[Any] = []
        described: list[Any] = []
        for x in inputs:
            if x is None or isinstance(x, int | float | bool):
                described.append(x)
                continue
            if not hasattr(x, "shape") or not hasattr(x, "dtype"):
                x = jnp.asarray(x)
            arrays.append(x)
            described.append(jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype)))
        key = tuple(
            (tuple(d.shape), str(d.dtype)) if isinstance(d, jax.ShapeDtypeStruct) else (type(d), d)
            for d in described
        )
        found = self._calls.get(key)
        if found is None:
            found = self._trace(tuple(described))
            self._calls[key] = found
        call, positions = found
        return list(_kernelkit_call().bind(*(arrays[i] for i in positions), call=call))

    def _trace(self, described: tuple) -> tuple[TracedCall, tuple[int, ...]]:
        """Resolve the rules for these inputs (once per input shapes, dtypes and scalars)."""
        import jax
        import numpy as np

        spec, name = self.kernel.spec, self.kernel.name
        shapes_rule, dtypes_rule, grid_r, tg_r, template_r, shared_r = self._rules
        out_shapes = _resolve(shapes_rule, described)
        out_dtypes = _resolve(dtypes_rule, described)
        if not isinstance(out_shapes, list | tuple) or not isinstance(out_dtypes, list | tuple):
            raise ArgumentTypeError(
                f"[{name}] output_shapes and output_dtypes must be lists (or functions of the "
                "inputs returning lists)"
            )
        if len(out_shapes) != len(spec.output_names) or len(out_dtypes) != len(out_shapes):
            raise ArgumentError(
                f"[{name}] needs {len(spec.output_names)} output shapes and dtypes, got "
                f"{len(out_shapes)} and {len(out_dtypes)}"
            )
        dtypes = tuple(np.dtype(d) for d in out_dtypes)
        for oname, d in zip(spec.output_names, dtypes):
            if jax.dtypes.canonicalize_dtype(d) != d:
                raise ArgumentTypeError(
                    f"[{name}] output {oname!r} has dtype {d}, which JAX holds only with "
                    "jax_enable_x64 on"
                )
        call = TracedCall(
            self.kernel,
            described,
            tuple(tuple(int(n) for n in s) for s in out_shapes),
            dtypes,
            (
                tuple(_resolve(grid_r, described)),
                tuple(_resolve(tg_r, described)),
                _resolve(shared_r, described),
            ),
            _resolve(template_r, described),
        )
        positions = tuple(i for i, d in enumerate(described) if hasattr(d, "shape"))
        return call, positions


def as_jax_callable(
    kernel: Kernel,
    *,
    output_shapes: Any,
    output_dtypes: Any,
    grid: Any,
    threadgroup: Sequence[int] | Callable[..., Any] = (256, 1, 1),
    template: Any = None,
    shared_memory: Any = None,
) -> JaxCallable:
    """See ``Kernel.as_jax_callable``."""
    if kernel.spec.backend not in (None, *(b for b, _, _ in PLATFORMS.values())):
        raise ArgumentError(
            f"[{kernel.name}] as_jax_callable runs on the CPU and CUDA backends; this kernel "
            f"is pinned to backend {kernel.spec.backend!r}"
        )
    return JaxCallable(
        kernel, output_shapes, output_dtypes, grid, threadgroup, template, shared_memory
    )
