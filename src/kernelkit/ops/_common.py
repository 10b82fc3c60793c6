"""How a built-in op runs: bind its arrays (once per signature), decide through the selection
stage, and carry the choice out with a kernelkit kernel. Nothing here is op-specific."""

from __future__ import annotations

import dataclasses
import numbers
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._arrays import CHECKS_BLOCKED
from .._arrays.lookup import adapter_for
from .._errors import ArgumentError, ArgumentTypeError
from .._pipeline.bind import bind
from .._pipeline.key import MISS
from .._records import KernelSpec, Problem
from .._select.decide import decide, explain_selection
from .._select.override import forced
from .._select.records import KernelChoice
from .._select.registry import Op
from .._select.select import Selection
from ._prepared import direct_launch

__all__ = [
    "FLOAT_DTYPES",
    "OpRunner",
    "direct_of",
    "float_array",
    "kernel_caller",
    "one_output_launch",
    "row_contiguous",
    "signature_of",
    "vec_width",
]

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")  # what the ops compute in


def float_array(x: Any, op: str, what: str) -> str:
    """``x``'s dtype name, after checking that it is an array of a dtype the ops compute in
    (float16, bfloat16, float32); ArgumentTypeError naming ``what`` otherwise."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ArgumentTypeError(f"[{op}] {what} must be an array, got {type(x).__name__}")
    dtype = str(x.dtype).split(".")[-1]
    if dtype not in FLOAT_DTYPES:
        raise ArgumentTypeError(f"[{op}] {what} must be float16, bfloat16 or float32, got {dtype}")
    return dtype


def row_contiguous(x: Any) -> bool:
    """Whether an array's elements are in row-major order without gaps (torch, NumPy, CuPy;
    an object without flags, a JAX array, always is)."""
    if hasattr(x, "is_contiguous"):  # torch
        return bool(x.is_contiguous())
    flags = getattr(x, "flags", None)
    return flags is None or bool(flags["C_CONTIGUOUS"])


def vec_width(dtype: str) -> int:
    """Elements per 16-byte vector load of ``dtype``."""
    return 16 // _ITEMSIZE[dtype]


def _torch_signature(x: Any) -> Any:
    # get_device() is -1 for CPU and meta tensors alike: is_cuda and is_cpu tell them apart;
    # a sparse COO tensor has strides too (all 0, as an expanded dense one): the layout
    return (
        x.__class__,
        x.dtype,
        x.shape,
        x.stride(),
        x.get_device(),
        x.is_cuda,
        x.is_cpu,
        x.layout,
    )


def _numpy_signature(x: Any) -> Any:
    return (x.__class__, x.dtype, x.shape, x.strides)


def _generic_signature(x: Any) -> Any:
    if x is None or isinstance(x, bool | int | float):
        return (x.__class__,)
    device = x.get_device() if hasattr(x, "get_device") else str(getattr(x, "device", ""))
    strides = getattr(x, "strides", None)
    return (x.__class__, str(x.dtype), tuple(x.shape), strides, device)


_SIGNATURES: dict[type, Callable[[Any], Any]] = {}


def signature_of(x: Any) -> Any:
    """A cheap, hashable description of an array or scalar for the per-signature caches:
    framework type, dtype, shape, strides, device. Never the data."""
    fn = _SIGNATURES.get(x.__class__)
    if fn is None:
        module = x.__class__.__module__.split(".")[0]
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):  # subclasses defined anywhere
            fn = _torch_signature
        elif module == "numpy" and hasattr(x, "strides") and hasattr(x, "shape"):
            fn = _numpy_signature
        else:
            fn = _generic_signature
        _SIGNATURES[x.__class__] = fn
    try:
        return fn(x)
    except Exception as e:
        raise TypeError(f"no signature for a {type(x).__name__}") from e


def _out_signature(out: Any) -> Any:
    if out is None:
        return None
    if isinstance(out, list | tuple):
        return tuple(signature_of(o) for o in out)
    return signature_of(out)


@dataclasses.dataclass
class OpRunner:
    """Runs one op: ``spec`` names its inputs and outputs for binding, ``attrs`` turns the bound
    problem into the op's named dimensions (rows, N, ...), ``op`` decides."""

    op: Op
    spec: KernelSpec
    attrs: Callable[[Problem, dict[str, Any]], dict[str, Any]]
    # the shape every out= array must have (checked once a signature), if the op checks none
    out_shape: Callable[[Problem], tuple[int, ...]] | None = None
    # whether out= may be an input itself (the same memory and layout: each element is read
    # before it is written by the same thread); a partial overlap is always refused
    in_place: bool = True
    names: tuple[str, ...] = ()  # the inputs as the op's caller names them (default: spec's)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    _bound: dict[Any, Any] = dataclasses.field(default_factory=dict)
    _ready: dict[Any, Any] = dataclasses.field(default_factory=dict)

    def problem(
        self, inputs: Sequence[Any], output_dtype: Any, out: Any, options: dict[str, Any]
    ) -> tuple[Problem, Any, Any]:
        """(problem, target, backend) for these arguments, bound once per signature."""
        try:
            key: Any = (
                tuple(signature_of(x) for x in inputs),
                _out_signature(out),
                str(output_dtype),
                tuple(sorted(options.items())),
            )
        except TypeError:  # not arrays: bind names what is wrong
            key = None
        found = None if key is None else self._bound.get(key)
        if found is None:
            outs = None if out is None else list(out) if isinstance(out, list | tuple) else [out]
            dtypes = [output_dtype] * len(self.spec.output_names)
            b = bind(self.spec, list(inputs), dtypes, outs, None)
            if outs is not None and self.out_shape is not None:
                want = self.out_shape(b.problem)
                for a in b.problem.args:
                    if a.is_output and a.shape != want:
                        raise ArgumentError(
                            f"[{self.op.name}] out must have shape {want}, got {a.shape}"
                        )
            attrs = self.attrs(b.problem, options)
            problem = dataclasses.replace(
                b.problem, name=self.op.name, attrs=tuple(sorted(attrs.items()))
            )
            found = (problem, b.target, b.backend)
            if key is None:
                return found
            with self._lock:
                if len(self._bound) > 4096:
                    self._bound.clear()
                self._bound[key] = found
        return found

    def choose(
        self, inputs: Sequence[Any], output_dtype: Any, out: Any, options: dict[str, Any]
    ) -> tuple[Problem, KernelChoice]:
        problem, target, backend = self.problem(inputs, output_dtype, out, options)
        return problem, decide(self.op, problem, target, backend)

    def run(
        self,
        inputs: Sequence[Any],
        output_dtype: Any,
        out: Any,
        options: dict[str, Any],
        signature: Any = None,
    ) -> Any:
        """Run the op: a repeated signature costs its signature, one dictionary lookup and the
        kernel call; the decision is remembered per exact signature (and override) until the
        op forgets its decisions (tuning, imports). ``signature``: the caller's own signature
        of these arguments when it already has one that fixes dtype and options too."""
        if signature is None:
            try:
                signature = (
                    tuple([signature_of(x) for x in inputs]),
                    _out_signature(out),
                    output_dtype,
                    tuple(options.items()) if options else (),
                )
            except TypeError:  # no signature: validated (and refused) without caching
                problem, choice = self.choose(inputs, output_dtype, out, options)
                return self._launcher(choice, problem, output_dtype)(inputs, out)
        key = (signature, forced(self.op.name))
        entry = self._ready.get(key)
        if entry is None or entry[0] != self.op.generation:
            generation = self.op.generation
            problem, choice = self.choose(inputs, output_dtype, out, options)
            spans = None if out is None else _spans(inputs, _as_list(out))
            entry = (generation, self._launcher(choice, problem, output_dtype), spans)
            with self._lock:
                if len(self._ready) > 4096:
                    self._ready.clear()
                self._ready[key] = entry
        if entry[2] is not None:
            self._refuse_overlap(inputs, _as_list(out), entry[2])
        return entry[1](inputs, out)

    def first(
        self, inputs: Sequence[Any], output_dtype: Any, out: Any, options: dict[str, Any]
    ) -> tuple[Any, Callable[[Any, Any], Any]]:
        """(the result of this call, ``run(arrays, out)`` for later calls of the same
        signature): validates, decides and launches once; ``run`` goes straight to the
        launcher's prepared hot path (``_prepared.direct_launch``), reading per call only what
        no signature holds (the pointers, for out='s overlap check: the hot path's own where it
        covers the op's, ``_same_pointers``, else ``_refuse_overlap`` first)."""
        problem, choice = self.choose(inputs, output_dtype, out, options)
        launch = self._launcher(choice, problem, output_dtype)
        spans = None if out is None else _spans(inputs, _as_list(out))
        if spans is not None:
            self._refuse_overlap(inputs, _as_list(out), spans)
        result = launch(inputs, out)
        run = direct_launch(launch, out is not None)
        if spans is None:
            return result, run

        def refuse(arrays: Any, out: Any) -> None:
            self._refuse_overlap(arrays, _as_list(out), spans)

        same = self._same_pointers(inputs, _as_list(out), spans)
        if run is not launch and same is not None:  # the hot path's check covers the op's
            return result, direct_launch(launch, True, refuse, same)
        fast = run
        in_spans, out_spans = spans
        if len(out_spans) != 1 or isinstance(out, list | tuple):

            def checked(arrays: Any, out: Any) -> Any:
                self._refuse_overlap(arrays, _as_list(out), spans)
                return fast(arrays, out)

            return result, checked
        optr, olo, ohi, _ = out_spans[0]
        ins = tuple((i, ptr, lo, hi) for i, ptr, lo, hi, _ in in_spans) if ohi > olo else ()
        # the launcher's whole call (*inputs, out=out), offered for a row-contiguous out
        whole = getattr(launch, "whole_out", None) if row_contiguous(out) else None

        def checked_one(arrays: Any, out: Any) -> Any:
            """One out: its byte range against each input's; where two meet, the full check
            decides (an input passed as its own out, where the op allows it, goes on)."""
            if ins:
                base = optr(out)
                for i, ptr, lo, hi in ins:
                    p = ptr(arrays[i])
                    if p + lo < base + ohi and base + olo < p + hi:
                        self._refuse_overlap(arrays, [out], spans)
                        break
            if whole is not None:  # the launcher's whole call (its frame and checks left out)
                return whole(*arrays, out=out)
            return fast(arrays, out)

        return result, checked_one

    def _same_pointers(self, inputs: Sequence[Any], outs: list[Any], spans: tuple) -> Any:
        """Per signature, whether the generated hot path's overlap check (``launch``'s
        ``_overlap_lines``: any two arrays that meet, unless one is the other with the same
        bytes) refuses all that ``_refuse_overlap`` refuses, once the inputs that the op refuses
        even as the out itself are compared by pointer: those (index, pointer getter, out's
        pointer getter), or None where it does not (several outs, or an array that is not
        row-contiguous, which the hot path may copy before it compares)."""
        arrays = [x for x in (*inputs, *outs) if x is not None and hasattr(x, "shape")]
        if len(outs) != 1 or not all(row_contiguous(x) for x in arrays):
            return None
        in_spans, out_spans = spans
        if not out_spans:
            return ()
        _, olo, ohi, olay = out_spans[0]
        out_ptr = out_spans[0][0]
        return tuple(
            (i, ptr, out_ptr)
            for i, ptr, lo, hi, lay in in_spans
            if (lo, hi) == (olo, ohi) and not (self.in_place and lay == olay)
        )

    def _refuse_overlap(self, inputs: Sequence[Any], outs: list[Any], spans: tuple) -> None:
        """ArgumentError when an out= array shares memory with an input, other than being that
        input itself where the op allows it (pointers are read per call: no signature has them)."""
        in_spans, out_spans = spans
        seen: list[tuple[int, int]] = []  # the outs' byte ranges so far: outs must not meet
        for j, (o, (optr, olo, ohi, olay)) in enumerate(zip(outs, out_spans)):
            if ohi <= olo:
                continue
            base = optr(o)
            for lo, hi in seen:
                if lo < base + ohi and base + olo < hi:
                    raise ArgumentError(f"[{self.op.name}] out[{j}] overlaps an earlier out")
            seen.append((base + olo, base + ohi))
            for i, ptr, lo, hi, lay in in_spans:
                p = ptr(inputs[i])
                if p + lo < base + ohi and base + olo < p + hi:
                    if self.in_place and p == base and (lo, hi, lay) == (olo, ohi, olay):
                        continue
                    name = (self.names or self.spec.input_names)[i]
                    raise ArgumentError(
                        f"[{self.op.name}] out= overlaps input {name!r} (it would be read after "
                        "parts of it are written); pass a separate array"
                        + (" or the input itself" if self.in_place else "")
                    )

    def _launcher(
        self, choice: KernelChoice, problem: Problem, output_dtype: Any
    ) -> Callable[[Any, Any], Any]:
        """``launch(inputs, out)`` carrying out ``choice`` (prepared once where the
        implementation can prepare)."""
        impl = self.op.get(choice.impl)
        if impl is None:  # cannot happen: select only returns registered implementations
            raise ArgumentError(f"[{self.op.name}] no implementation {choice.impl!r}")
        if impl.prepare is not None:
            return impl.prepare(choice, problem, output_dtype)
        run = impl.run
        return lambda inputs, out: run(choice, (problem, inputs, output_dtype, out))

    def explain(
        self, inputs: Sequence[Any], output_dtype: Any, out: Any, options: dict[str, Any]
    ) -> Selection:
        problem, target, backend = self.problem(inputs, output_dtype, out, options)
        return explain_selection(self.op, problem, target, backend)


def byte_span(x: Any) -> tuple[Callable[[Any], int], int, int, tuple] | None:
    """(its framework's pointer getter, lowest byte, one past the highest byte, (shape,
    strides)) of an array's elements relative to its pointer (strides may be negative or 0);
    None for scalars and None."""
    if x is None or not hasattr(x, "shape"):
        return None
    adapter = adapter_for(x, "[op]")
    info = adapter.info(x, "[op]")
    lo = hi = 0
    for n, st in zip(info.shape, info.strides):
        if n == 0:
            return adapter.pointer, 0, 0, ()
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    size = info.dtype.itemsize
    return adapter.pointer, lo * size, (hi + 1) * size, (info.shape, info.strides)


def _as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, list | tuple) else [out]


def _spans(inputs: Sequence[Any], outs: list[Any]) -> tuple:
    """What ``OpRunner._refuse_overlap`` needs per signature: (input index, pointer getter,
    span, layout) of each input array with elements, and (getter, span, layout) of each out."""
    ins = [(i, byte_span(x)) for i, x in enumerate(inputs)]
    in_spans = tuple((i, *sp) for i, sp in ins if sp is not None and sp[2] > sp[1])
    out_spans = tuple(byte_span(o) for o in outs)
    return in_spans, tuple(sp for sp in out_spans if sp is not None)


def kernel_caller(k: Any, kw: dict[str, Any]) -> Callable[[Any, Any, Any, Any], list[Any]]:
    """``call(arrays, output_shapes, output_dtypes, outs)``: kernel ``k`` with the fixed keywords
    ``kw`` (grid, threadgroup, template, shared_memory), allocating its outputs or writing into
    ``outs``. It serves one op signature (``OpRunner``'s key fixes the arrays' types, dtypes,
    shapes, strides and devices), so after its first call through ``k`` it calls the
    specialization's hot path directly, without checking the arguments a second time."""
    grid, group = kw["grid"], kw["threadgroup"]
    template, smem = kw.get("template"), kw.get("shared_memory")
    direct: dict[bool, Callable[..., Any]] = {}  # outs given? -> the plan's unchecked run
    decided: list[Any] = []  # the call without outs repeated in C as a whole (``decided_of``)

    # -> Any, not list[Any]: a typing.cast here would be one more Python call on every warm call
    def call(arrays: Any, shapes: Any, dtypes: Any, outs: Any) -> Any:
        args = (arrays, shapes, dtypes, grid, group, template, None, None, outs, None, None,
                smem)  # fmt: skip
        run = direct.get(outs is None)
        result = MISS if run is None else run(*args)
        if result is MISS:  # the first call (or a framework route that declines this one)
            result = k(arrays, shapes, dtypes, grid, group, template, out=outs,
                       shared_memory=smem)  # fmt: skip
            if any(blocked() for blocked in CHECKS_BLOCKED):
                # under a dispatch mode (a compiled graph's first run: torch's custom-op
                # analysis mode) no check passes, so what is made now would be the Python
                # path for good: a later call makes the run and the Call
                return result
            found = k._direct_run(args, fixed=True)  # this signature's geometry and layouts
            if found is not None:
                direct[outs is None] = found
            if outs is None and not decided:
                decided.append(k._decided_call(args, _declined))
        return result  # k(...) returns the outputs list; MISS was replaced

    call.direct = direct  # type: ignore[attr-defined]  # read by direct_of
    call.decided = decided  # type: ignore[attr-defined]  # read by decided_of
    call.fixed = (grid, group, template, smem)  # type: ignore[attr-defined]
    return call


def one_output_launch(
    k: Any, kw: dict[str, Any], shape: Any, output_dtype: Any
) -> Callable[[Any, Any], Any]:
    """``launch(arrays, out)`` calling kernel ``k`` (one output) with the fixed keywords ``kw``
    (``kernel_caller``): into ``out``, or into a new array of ``shape`` and ``output_dtype``."""
    call, shapes, dtypes = kernel_caller(k, kw), [shape], [output_dtype]

    def launch(arrays: Any, out: Any) -> Any:
        if out is not None:
            call(arrays, None, None, [out])
            return out
        return call(arrays, shapes, dtypes, None)[0]

    launch.direct = direct_of(call, shapes, dtypes)  # type: ignore[attr-defined]
    launch.decided = decided_of(call, shapes, dtypes)  # type: ignore[attr-defined]
    return launch


def direct_of(call: Any, shapes: Any, dtypes: Any) -> Callable[[bool], tuple | None]:
    """A launcher's ``direct(has_out)`` for ``_prepared.direct_launch``, over a ``kernel_caller``
    ``call``: (the hot path's unchecked run, shapes, dtypes, grid, threadgroup, template, shared
    memory) once a call with (``has_out``) or without out= has been made, else None."""

    def direct(has_out: bool) -> tuple | None:
        run = call.direct.get(not has_out)
        if run is None:
            return None
        grid, group, template, smem = call.fixed
        return run, shapes, dtypes, grid, group, template, smem

    return direct


def decided_of(call: Any, shapes: Any, dtypes: Any) -> Callable[[], tuple | None]:
    """A launcher's ``decided()`` for ``_prepared.direct_launch``, over a ``kernel_caller``
    ``call``: (a call repeated in C that takes the signature's calls without out= whole, its
    arguments after the inputs) once such a call has been made and where it can be, else
    None. It compares what the op's signature fixes (the arrays' types, shapes, strides,
    dtypes and devices, scalars by type and bits; ``Repeats.call_for``'s ``decided``) and
    returns ``MISS`` for any other call, so a caller whose own key fixed the rest (the op's
    options) needs no check of its own before it (``_prepared.Recent``)."""

    def made() -> tuple | None:
        found = call.decided[0] if call.decided else None
        if found is None:
            return None
        grid, group, template, smem = call.fixed
        return found, (shapes, dtypes, grid, group, template, None, None, None, None, None,
                       smem)  # fmt: skip

    def pending() -> bool:  # not tried yet: the run's next call without out= tries
        return not call.decided

    made.pending = pending  # type: ignore[attr-defined]  # read by Recent.again
    return made


def _declined(*args: Any) -> Any:
    """A decided Call's answer to the calls it does not take: the op's own path serves them."""
    return MISS


def run_prepared(
    prepare: Callable[[KernelChoice, Problem, Any], Callable[[Any, Any], Any]],
) -> Callable[[KernelChoice, Any], Any]:
    """An implementation's ``run(choice, call)`` from its ``prepare`` (prepared, then launched)."""

    def run(choice: KernelChoice, call: Any) -> Any:
        problem, arrays, output_dtype, out = call
        return prepare(choice, problem, output_dtype)(arrays, out)

    return run


def move_last(x: Any, dim: Any, name: str) -> tuple[Any, Callable[[Any], Any] | None]:
    """``x`` with ``dim`` moved last (a view), and how to move a result back (None: already
    last). Works for torch (movedim) and NumPy-style frameworks (moveaxis)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise ArgumentTypeError(f"[{name}] x must be an array, got {type(x).__name__}")
    ndim = len(x.shape)
    if ndim == 0:
        raise ArgumentError(f"[{name}] x must have at least one dimension, got a 0-d array")
    ok = dim.__class__ is int or (isinstance(dim, numbers.Integral) and not isinstance(dim, bool))
    if not ok or not -ndim <= dim < ndim:
        raise ArgumentError(f"[{name}] dim must be an int in [{-ndim}, {ndim}), got {dim!r}")
    dim = int(dim) % ndim
    if dim == ndim - 1:
        return x, None
    there, back = movers(x, dim)
    return there(x), back


def movers(x: Any, dim: int) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(move dimension ``dim`` of an array like ``x`` last, move the last back to ``dim``), each
    a view: torch's movedim, or the permutation's transpose (NumPy, CuPy and JAX arrays: a call in
    C, where NumPy's moveaxis runs a dozen Python functions)."""
    if hasattr(x, "movedim"):
        return (lambda a: a.movedim(dim, -1)), (lambda y: y.movedim(-1, dim))
    ndim = len(x.shape)
    order = (*(d for d in range(ndim) if d != dim), dim)
    inverse = tuple(order.index(d) for d in range(ndim))
    return (lambda a: a.transpose(order)), (lambda y: y.transpose(inverse))


def empty(x: Any, shape: Sequence[int]) -> Any:
    """A new uninitialized array of ``x``'s framework, dtype and device (for results with no
    elements: nothing is launched for them)."""
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty(tuple(shape))
    xp = namespace(x)
    return xp.empty(tuple(shape), dtype=x.dtype)


def namespace(x: Any) -> Any:
    """The NumPy-style module of a non-torch array's framework (numpy, cupy, jax.numpy)."""
    import importlib

    module = type(x).__module__.split(".")[0]
    if module in ("jax", "jaxlib"):  # jax.Array is jaxlib's ArrayImpl
        return importlib.import_module("jax.numpy")
    return importlib.import_module(module)
