"""A kernelkit kernel as a ``torch.library`` op: ``Kernel.as_torch_op("ns::name", ...)``.

Two overloads are defined per op: ``ns::name`` (functional: allocates and returns its outputs)
and ``ns::name.out`` (writes into given tensors, declared ``Tensor(a!)``, returns nothing), so
``torch.compile`` sees exactly what each call reads and writes: a call is one node in the graph,
traced through a fake implementation built from the output shape and dtype rules, and an
``out=`` or in-place call is functionalized like any mutating aten op.

The ops are defined with ``torch.library.Library`` directly rather than ``custom_op``, and run
a generated implementation (``torch_impl``): an eager call costs about 6 µs over the bare kernel
call on a 2-core VM, where a ``custom_op`` around the same call costs about 22 µs (its Python
autograd and checking layers; ``benchmarks/launch_overhead.py --backend cpu``). torch is
imported when an op is defined, never at kernelkit's import.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._dtypes import normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from .torch_grad import refuse_tangents
from .torch_impl import Constant, generate

__all__ = ["OpSchema", "TorchOp", "as_torch_op", "checked", "define"]

_SCALAR_TYPES = {float: "float", int: "int", bool: "bool"}
_NAME = re.compile(r"([A-Za-z_]\w*)::([A-Za-z_]\w*)\Z")
_lock = threading.Lock()
_REGISTERED: dict[str, TorchOp] = {}  # keeps every op's Library (and so its registration) alive


@dataclass(frozen=True)
class OpSchema:
    """An op's name, its parameters as (name, torch schema type) and its outputs' names."""

    qualname: str  # "namespace::name"
    params: tuple[tuple[str, str], ...]
    outputs: tuple[str, ...]

    @property
    def namespace(self) -> str:
        return self.qualname.split("::")[0]

    @property
    def op_name(self) -> str:
        return self.qualname.split("::")[1]

    def functional(self) -> str:
        """``name(Tensor x, float s) -> Tensor``: allocates its outputs."""
        n = len(self.outputs)
        returns = "Tensor" if n == 1 else f"({', '.join(['Tensor'] * n)})"
        return f"{self.op_name}({self._params()}) -> {returns}"

    def out(self) -> str:
        """``name.out(Tensor x, float s, Tensor(a!) y) -> ()``: writes into its last arguments."""
        outs = ", ".join(f"Tensor({_alias(i)}!) {n}" for i, n in enumerate(self.outputs))
        return f"{self.op_name}.out({self._params()}, {outs}) -> ()"

    def _params(self) -> str:
        return ", ".join(f"{t} {n}" for n, t in self.params)


def _alias(i: int) -> str:
    return "abcdefghijklmnopqrstuvwxyz"[i] if i < 26 else f"a{i}"


class TorchOp:
    """A kernel registered as a torch op: ``op(*inputs)`` returns the output (a tuple for
    several), ``op(*inputs, out=y)`` writes into ``y`` (a tensor, or a sequence for several
    outputs; an input may be passed as its own output: in place) and returns it.

    ``default`` and ``out`` are the ``torch.ops`` overloads (``torch.ops.ns.name.default`` and
    ``.out``); ``differentiable`` is set by ``kernelkit.custom_vjp``."""

    def __init__(self, schema: OpSchema, library: Any, kernel: Any = None) -> None:
        import torch

        self.schema = schema
        self.name = schema.qualname
        self.kernel = kernel
        self.input_names = tuple(n for n, _ in schema.params)
        self.output_names = schema.outputs
        self.differentiable = False
        self.impl_source = ""  # the generated implementations (torch_impl), for reading
        self._library = library
        packet = getattr(getattr(torch.ops, schema.namespace), schema.op_name)
        self.default = packet.default
        self.out = packet.out
        self._single = len(schema.outputs) == 1
        self.tensor_positions = tuple(i for i, (_, t) in enumerate(schema.params) if "Tensor" in t)

    def __repr__(self) -> str:
        return f"TorchOp({self.name!r}, {self.schema.functional()!r})"

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        if out is None:
            return self.default(*inputs)
        if self._single:
            self.out(*inputs, out)
        else:
            self.out(*inputs, *out)
        return out

    def check_grad(self, args: tuple) -> None:
        """Raises when a tensor input requires grad and the op has no gradients (torch's
        fallback would only warn at backward, and return wrong gradients)."""
        if self.differentiable:  # then this runs under autograd's forward, never with grad on
            return
        for i in self.tensor_positions:
            a = args[i]
            if a is not None and a.requires_grad:
                raise ArgumentError(
                    f"[{self.name}] input {self.input_names[i]!r} requires grad, but the op has "
                    "no gradient: pair it with backward kernels (kernelkit.custom_vjp), or call "
                    "it under torch.no_grad() or on .detach()ed tensors"
                )

    def check_out(self, args: tuple) -> None:
        """Raises when an ``out=`` tensor requires grad: an out= call is not differentiable."""
        for name, o in zip(self.output_names, args[len(self.input_names) :]):
            if o.requires_grad:
                raise ArgumentError(
                    f"[{self.name}] out= tensor {name!r} requires grad; out= calls are not "
                    "differentiable (call the op without out=, or under torch.no_grad())"
                )


def define(
    schema: OpSchema,
    make: Callable[[TorchOp], tuple[Callable[..., Any], Callable[..., None]]],
    fake: Callable[..., Any],
    kernel: Any = None,
) -> TorchOp:
    """Define ``schema``'s two overloads: ``make(op)`` returns their implementations (registered
    for CPU and CUDA tensors), ``fake`` the functional one's for tracing (the ``.out``
    overload's fake returns nothing). Until ``custom_vjp`` gives the op gradients, a call that
    would need them raises (``checked`` adds that test to plain implementations)."""
    import torch

    with _lock:
        if schema.qualname in _REGISTERED:
            raise ArgumentError(
                f"[{schema.qualname}] a torch op of this name is already registered in this "
                f"process: {_REGISTERED[schema.qualname]!r}"
            )
        lib = torch.library.Library(schema.namespace, "FRAGMENT")
        try:
            lib.define(schema.functional())
            lib.define(schema.out())
        except RuntimeError as e:
            raise ArgumentError(f"[{schema.qualname}] torch refused the op's schema: {e}") from e
        op = TorchOp(schema, lib, kernel)
        impl, impl_out = make(op)
        is_grad_enabled = torch.is_grad_enabled

        def checked_fake(*args: Any) -> Any:
            if is_grad_enabled():
                op.check_grad(args)  # while tracing too: AOTAutograd would only warn at backward
            return fake(*args)

        for key in ("CPU", "CUDA"):
            lib.impl(schema.op_name, impl, key)
            lib.impl(f"{schema.op_name}.out", impl_out, key)
        torch.library.register_fake(schema.qualname, checked_fake, lib=lib)
        torch.library.register_fake(f"{schema.qualname}.out", _fake_out, lib=lib)
        _REGISTERED[schema.qualname] = op
    return op


def checked(op: TorchOp, run: Callable[..., Any]) -> tuple[Callable[..., Any], Callable[..., None]]:
    """The op's implementations from ``run(*args, out)`` (out None: allocate): behind the op's
    gradient tests, and the out= one followed by the version bump of its output (the last
    argument), as torch's own out= ops do; an input with a forward-mode AD tangent refused
    (the op has no JVP). ``run`` is called directly: one Python frame of kernelkit's between
    the dispatcher and the eager op."""
    import torch

    is_grad_enabled, bump = torch.is_grad_enabled, torch.autograd.graph.increment_version
    forward = torch.autograd.forward_ad  # its level: >= 0 inside dual_level()

    def impl(*args: Any) -> Any:
        if is_grad_enabled():
            op.check_grad(args)
        if forward._current_level >= 0:
            refuse_tangents(torch, op.name, op.input_names, args)
        return run(*args, None)

    def impl_out(*args: Any) -> None:
        if is_grad_enabled():
            op.check_out(args)
        if forward._current_level >= 0:
            refuse_tangents(torch, op.name, op.input_names, args)
        run(*args[:-1], args[-1])
        bump(args[-1])

    return impl, impl_out


def _fake_out(*args: Any) -> None:
    return None


def as_torch_op(
    kernel: Any,
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
    """``Kernel.as_torch_op``: see its docstring."""
    spec = kernel.spec
    where = f"[{spec.name}] as_torch_op"
    schema = _schema(spec, name, scalars, where)
    ins = spec.input_names
    first_tensor = next(i for i, (_, t) in enumerate(schema.params) if t == "Tensor")
    shapes = _rule(output_shapes, "output_shapes", ins, where, _same_shape(len(spec.output_names)))
    dtypes = _rule(output_dtypes, "output_dtypes", ins, where, _same_dtype(len(spec.output_names)))
    grid_of = _rule(grid, "grid", ins, where, _one_thread_each)
    block_of = _rule(threadgroup, "threadgroup", ins, where, None)
    template_of = _rule(template, "template", ins, where, None)
    shared_of = _rule(shared_memory, "shared_memory", ins, where, None)
    if init_value is not None and (
        isinstance(init_value, bool) or not isinstance(init_value, int | float)
    ):
        raise ArgumentTypeError(f"{where}: init_value must be a number or None")
    single = len(spec.output_names) == 1
    rules = {
        "shapes": shapes,
        "dtypes": dtypes,
        "grid": grid_of,
        "block": block_of,
        "template": template_of,
        "shared": shared_of,
    }

    def fake(*args: Any) -> Any:
        import torch

        device = _device(args, first_tensor)
        ys = tuple(
            torch.empty(tuple(s), dtype=torch_dtype(d, where), device=device)
            for s, d in zip(shapes(args), dtypes(args))
        )
        return ys[0] if single else ys

    return define(schema, lambda op: generate(op, kernel, rules, init_value), fake, kernel)


def _schema(spec: Any, name: str, scalars: Any, where: str) -> OpSchema:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ArgumentError(f"{where}: name must look like 'namespace::op_name', got {name!r}")
    scalars = dict(scalars or {})
    optional = dict(spec.optional_inputs)
    for sname, stype in scalars.items():
        if sname not in spec.input_names:
            raise ArgumentError(
                f"{where}: scalars names {sname!r}, which is not an input {list(spec.input_names)}"
            )
        if stype not in _SCALAR_TYPES:
            raise ArgumentTypeError(
                f"{where}: scalars[{sname!r}] must be float, int or bool, got {stype!r}"
            )
        if sname in optional:
            raise ArgumentError(f"{where}: {sname!r} is an optional input, not a scalar")
    if "out" in spec.input_names:
        raise ArgumentError(f"{where}: an input named 'out' would clash with the op's out=")
    params = tuple(
        (n, _SCALAR_TYPES[scalars[n]] if n in scalars else "Tensor?" if n in optional else "Tensor")
        for n in spec.input_names
    )
    if not any(t == "Tensor" for _, t in params):
        raise ArgumentError(
            f"{where}: the op needs at least one required tensor input (outputs are made on "
            "its device)"
        )
    return OpSchema(name, params, tuple(spec.output_names))


def _rule(
    value: Any,
    what: str,
    inputs: Sequence[str],
    where: str,
    by_name: Callable[[int], Callable[[tuple], Any]] | None,
) -> Callable[[tuple], Any]:
    """``value`` as a function of the call's inputs: a callable taking them positionally, an
    input's name (``by_name``: e.g. that input's shape), or a constant."""
    if callable(value):
        return lambda args: value(*args)
    if isinstance(value, str):
        if by_name is None or value not in inputs:
            allowed = f"an input name {list(inputs)}, " if by_name is not None else ""
            raise ArgumentError(
                f"{where}: {what} must be {allowed}a function of the inputs or a constant, "
                f"got {value!r}"
            )
        return by_name(list(inputs).index(value))
    if what in ("output_shapes", "output_dtypes"):
        if not isinstance(value, list | tuple):
            raise ArgumentTypeError(
                f"{where}: {what} must be a function of the inputs, an input's name or a list, "
                f"got {value!r}"
            )
        value = list(value)
    return Constant(value)


def _same_shape(n: int) -> Callable[[int], Callable[[tuple], Any]]:
    return lambda i: lambda args: [args[i].shape] * n


def _same_dtype(n: int) -> Callable[[int], Callable[[tuple], Any]]:
    return lambda i: lambda args: [args[i].dtype] * n


def _one_thread_each(i: int) -> Callable[[tuple], Any]:
    return lambda args: (max(1, args[i].numel()), 1, 1)


def _device(args: tuple, first: int) -> Any:
    x = args[first]
    return x.device


def torch_dtype(value: Any, where: str) -> Any:
    """The torch dtype for any framework's dtype spelling."""
    import torch

    if isinstance(value, torch.dtype):
        return value
    from .._arrays._torch import TORCH_DTYPES

    name = normalize_dtype(value, f"{where} output dtype").name
    if name not in TORCH_DTYPES:
        raise ArgumentTypeError(f"{where}: torch has no dtype {name}")
    return TORCH_DTYPES[name]
