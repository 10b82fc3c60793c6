"""``elementwise``: a fused kernel from a C expression over named inputs.

``elementwise("y = a * silu(b)")`` returns a callable ``f(a=..., b=...)``. The expression is
checked when the op is made, token by token and for its form (names of inputs, calls of an
allowlisted set of math functions with their number of arguments, plain decimal numbers, the
operators ``+ - * /`` and parentheses; nothing else reaches the generated source). Numbers are
float32 values of their decimal text (``1/2`` is 0.5, not C's integer division), inputs are read
as float (0-d arrays broadcast as in NumPy) and results written in the output dtype; ``out=``
arrays must have the output's shape and dtype and be row-contiguous. Two implementations,
chosen by the selection stage: ``flat`` when every array is contiguous with the output's shape
(16-byte vector loads and stores where aligned, a grid-stride loop, 32-bit indexing when the size
allows), ``strided`` otherwise (inputs broadcast by the kernel itself, any layout;
by 16-byte vectors too where each input's rows allow: a bias [N], a per-row scale [M, 1], rows
sliced out of a wider array).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Any

from .. import _config
from .._api import Kernel, kernel
from .._dtypes import normalize_dtype
from .._errors import ArgumentError, ArgumentTypeError
from .._generated import execute
from .._pipeline.key import MISS
from .._records import Problem
from .._select.records import KernelChoice
from .._select.registry import Implementation, Op
from .._select.select import Selection
from . import _elementwise_rules as rules
from ._common import (
    OpRunner,
    decided_of,
    direct_of,
    kernel_caller,
    row_contiguous,
    run_prepared,
    signature_of,
    vec_width,
)
from ._elementwise_kernels import HEADER, body
from ._elementwise_parse import (
    PYTHON_FUNCTIONS,
    parse_expression,
    python_native_source,
    python_source,
    python_traced_source,
    tree,
)
from ._prepared import AD, FORCED, SIGNERS, Recent, routed, signature, store

__all__ = ["Elementwise", "elementwise"]


def _python_expression(trees: tuple, n: int) -> Callable[..., tuple]:
    """The trees as one Python function (``python_source``), for tracers (torch.compile)."""
    return execute(python_source(trees, n), {}, "elementwise expression", PYTHON_FUNCTIONS)[
        "expression"
    ]


class Elementwise:
    """A fused elementwise op; call it with the inputs by name (or in order of first use)."""

    def __init__(self, expression: str, output_dtype: Any = None) -> None:
        self.expression = expression
        self.outputs, inputs, self._exprs = parse_expression(expression)
        self.trees = tuple(tree(x) for x in self._exprs)  # for tracers (torch.compile)
        self.inputs = list(inputs)
        self.python_expression = _python_expression(self.trees, len(self.inputs))
        # one +, - or * of two inputs in their own dtype, else None (``torch_traced``)
        self.python_native = execute(
            python_native_source(self.trees, len(self.inputs)), {}, "elementwise native", {}
        )["native"]
        self.output_dtype = (
            None
            if output_dtype is None
            else normalize_dtype(output_dtype, "[elementwise] output_dtype").name
        )
        # a compiled call's common case whole, every fact about the expression a constant of
        # its code (``torch_traced.elementwise``: the call guards on nothing else of this object)
        self.python_traced = execute(
            python_traced_source(self.trees, len(self.inputs), self.output_dtype),
            {}, "elementwise traced", PYTHON_FUNCTIONS,
        )["traced"]  # fmt: skip
        self._kernels: dict[Any, Any] = {}
        self._known: dict[Any, Any] = {}  # argument signature -> (dtype, options, no views)
        self._table: dict[Any, Any] = {}  # (signature, generation, forced) -> run(arrays, out)
        self._recent = Recent()  # (check(*arrays), (generation, forced), run): no out=
        self._numbered = False  # whether _table holds calls with Python numbers (_with_numbers)
        self._lock = threading.Lock()
        self.op = Op(f"elementwise({expression})", key=["ndim", "dtypes", "layout"])
        for impl in ("flat", "strided"):
            self.op.register(
                Implementation(
                    impl,
                    run=self._run,
                    prepare=self._prepare_launch,
                    grid=rules.grid,
                    configs=rules.CONFIGS,
                    default=rules.DEFAULT,
                    match=rules.flat_match if impl == "flat" else None,
                )
            )
        # binding only needs the argument names: x0..xk in, y0.. out
        spec_kernel = kernel(
            "ops_elementwise_bind",
            [f"x{i}" for i in range(len(self.inputs))],
            [f"y{j}" for j in range(len(self.outputs))],
            "",
        )
        self._runner = OpRunner(self.op, spec_kernel.spec, self._attrs, names=tuple(self.inputs))

    def __repr__(self) -> str:
        return f"elementwise({self.expression!r})"

    def _attrs(self, problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
        return dict(options)

    def _kernel(self, flat: bool, scalars: tuple[bool, ...]) -> Any:
        key = (flat, scalars)
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = kernel(
                    "ops_elementwise",
                    [f"x{i}" for i in range(len(self.inputs))],
                    [f"y{j}" for j in range(len(self.outputs))],
                    body(len(self.inputs), self._exprs, scalars, flat),
                    header=HEADER,
                    # flat: every array is row-contiguous already (the hot path then compares
                    # an out='s bytes with the inputs' without reading layouts)
                    ensure_row_contiguous=flat,
                )
                if flat:  # the body reads y0_shape[0] as the element count: flat views
                    k = Kernel(dataclasses.replace(k.spec, flat_outputs=True))
                self._kernels[key] = k
        return k

    def _run(self, choice: KernelChoice, call: Any) -> Any:
        return run_prepared(self._prepare_launch)(choice, call)

    def _prepare_launch(
        self, choice: KernelChoice, problem: Problem, output_dtype: Any
    ) -> Callable[[Any, Any], Any]:
        """``launch(arrays, out)`` for this choice and problem, everything else fixed here."""
        flat = choice.impl.endswith("/flat")
        # by-value scalars (Python numbers); a 0-d array ("scalar_array") is read through its
        # pointer like any other array
        scalars = tuple(a.kind == "scalar" for a in problem.args[: len(self.inputs)])
        k = self._kernel(flat, scalars)
        shape = problem.attr("shape")
        n = problem.attr("elements")
        template: list[tuple[str, Any]] = [
            (f"TY{j}", output_dtype) for j in range(len(self.outputs))
        ]
        # both paths: 16-byte vectors of VEC elements where every array and the output have
        # one width (the strided path where the rows also allow: _elementwise_kernels)
        template.append(("IDX", rules.index_type(n, choice.grid[0])))
        array_dtypes = [problem.args[i].dtype for i, s in enumerate(scalars) if not s]
        template += [(f"TX{i}", problem.args[i].dtype) for i, s in enumerate(scalars) if not s]
        every = (*array_dtypes, output_dtype)
        widths = {vec_width(d) for d in every if d in rules.VEC_DTYPES}
        same = len(widths) == 1 and all(d in rules.VEC_DTYPES for d in every)
        template.append(("VEC", widths.pop() if same else 1))
        if not flat:  # y's rank and each array input's (which the kernel broadcasts)
            template.append(("ND", len(shape)))
            template += [
                (f"XND{i}", len(problem.args[i].shape)) for i, s in enumerate(scalars) if not s
            ]
        call = kernel_caller(
            k, {"grid": choice.grid, "threadgroup": choice.config.threadgroup, "template": template}
        )
        # the flat body reads y0_shape[0] as the element count: the kernel sees its outputs as
        # flat views (KernelSpec.flat_outputs), and the inputs only through their pointers (but
        # 0-d ones, passed as 1-element arrays)
        flat_in = flat and not shape
        shapes = [shape] * len(self.outputs)
        dtypes = [output_dtype] * len(self.outputs)
        single = len(self.outputs) == 1

        def launch(arrays: Any, out: Any) -> Any:
            """-> the output (one: ``out`` an array or None) or the list of outputs."""
            if flat_in:
                arrays = [a if s else a.reshape(-1) for a, s in zip(arrays, scalars)]
            if out is not None:
                outs = [out] if single else list(out)
                call(arrays, None, None, outs)
                return out if single else outs
            results = call(arrays, shapes, dtypes, None)
            return results[0] if single else results

        if single and not flat_in:
            launch.direct = direct_of(call, shapes, dtypes)  # type: ignore[attr-defined]
            launch.decided = decided_of(call, shapes, dtypes)  # type: ignore[attr-defined]
        return launch

    def _prepare(self, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Any], tuple, str]:
        values, arrays, dtype = self.check_values(args, kwargs)
        shape = _broadcast_shape([tuple(a.shape) for a in arrays], str(self))
        return values, shape, dtype

    def check_values(self, args: tuple, kwargs: dict[str, Any]) -> tuple[list[Any], list, str]:
        """(the inputs in order, those that are arrays, the output dtype): the checks that need
        neither data nor shapes (a tracer's too); ArgumentError naming what is wrong."""
        if args and kwargs:
            raise ArgumentError(f"[{self}] pass the inputs by name or in order, not both")
        if args:
            if len(args) != len(self.inputs):
                raise ArgumentError(
                    f"[{self}] expected {len(self.inputs)} inputs {self.inputs}, got {len(args)}"
                )
            values = list(args)
        else:
            missing = [n for n in self.inputs if n not in kwargs]
            extra = sorted(set(kwargs) - set(self.inputs))
            if missing or extra:
                raise ArgumentError(
                    f"[{self}] inputs are {self.inputs}; missing {missing}, unexpected {extra}"
                )
            values = [kwargs[n] for n in self.inputs]
        arrays = []
        for name, v in zip(self.inputs, values):
            # a Python number is tested for first, by type: under torch.compile(dynamic=True)
            # it is a SymInt/SymFloat, which Dynamo shows as an int or float (its type, not its
            # __class__) and cannot ask hasattr of
            kind = type(v)
            if not (kind is float or kind is int or kind is bool) and hasattr(v, "shape"):
                layout = getattr(v, "layout", None)  # torch: sparse tensors have no strides
                if layout is not None and str(layout) != "torch.strided":
                    raise ArgumentTypeError(
                        f"[{self}] input {name!r} is a {layout} tensor; pass a dense one "
                        "(x.to_dense())"
                    )
                arrays.append(v)
            elif not isinstance(v, int | float):
                raise ArgumentTypeError(
                    f"[{self}] input {name!r} must be an array or a real number, "
                    f"got {type(v).__name__}"
                )
            # 2^1024 - 2^970: the least int float() refuses, written out so that a traced call
            # reads no global for it (a float of any value is taken, as float32: inf past its
            # range); the message joined from constants (Dynamo 2.11 shows an f-string
            # unformatted)
            elif isinstance(v, int) and not -(2**1024 - 2**970) < v < 2**1024 - 2**970:
                where = "[elementwise(" + repr(self.expression) + ")] input " + repr(name)
                raise ArgumentError(where + " (an int) is too large for a float")
        if not arrays:
            raise ArgumentError(f"[{self}] at least one input must be an array")
        dtypes = [str(getattr(a, "dtype", "")).split(".")[-1] for a in arrays]
        return values, arrays, self.output_dtype or promote_dtypes(dtypes, str(self))

    def _bind_args(self, args: tuple, kwargs: dict[str, Any], out: Any) -> tuple:
        """(the inputs as the kernel takes them: arrays as they are, broadcast by the strided
        kernel itself, numbers as floats; output dtype, problem attributes, outs)."""
        values, shape, dtype = self._prepare(args, kwargs)
        if out is not None:
            out = [out] if not isinstance(out, list | tuple) else list(out)
            if len(out) != len(self.outputs):
                raise ArgumentError(
                    f"[{self}] out= needs {len(self.outputs)} arrays, got {len(out)}"
                )
            # the kernel writes each out as a row-contiguous array of the output's shape and
            # dtype: anything else would be written past its end or only partly
            for j, o in enumerate(out):
                what = f"out[{j}] ({self.outputs[j]!r})" if len(out) > 1 else "out"
                if not hasattr(o, "shape") or not hasattr(o, "dtype"):
                    raise ArgumentTypeError(
                        f"[{self}] {what} must be an array, got {type(o).__name__}"
                    )
                if tuple(o.shape) != shape:
                    raise ArgumentError(
                        f"[{self}] {what} must have the output shape {shape}, got {tuple(o.shape)}"
                    )
                if str(o.dtype).split(".")[-1] != dtype:
                    raise ArgumentError(
                        f"[{self}] {what} must have the output dtype {dtype}, got "
                        f"{str(o.dtype).split('.')[-1]}"
                    )
                if not row_contiguous(o):
                    raise ArgumentError(f"[{self}] {what} must be row-contiguous")
        views = [v if hasattr(v, "shape") else float(v) for v in values]
        flat = all(
            not hasattr(v, "shape") or (row_contiguous(v) and tuple(v.shape) == shape)
            for v in values
        ) and all(row_contiguous(o) for o in out or ())
        options = {
            "shape": shape,
            "elements": _size(shape),
            "layout": "flat" if flat else "strided",
            "ndim": len(shape),
            "dtypes": ",".join(str(getattr(v, "dtype", "scalar")) for v in views) + f"->{dtype}",
        }
        return views, dtype, options, out

    def __call__(self, *args: Any, out: Any = None, **kwargs: Any) -> Any:
        """Run on arrays of one framework (and Python scalars); returns the output, or a list
        when the expression has several."""
        return call(self, args, out, kwargs)

    def _call(self, args: tuple, out: Any, kwargs: dict[str, Any]) -> Any:
        """A call of a new (or an unprepared) signature: validate, describe, run, prepare."""
        scalars_np = _numpy_scalars(args, kwargs)
        if scalars_np:  # NumPy scalars (np.float32(2)) go as Python numbers, never prepared
            args, kwargs = scalars_np
        values: tuple[Any, ...] = args if args else tuple(kwargs.get(n) for n in self.inputs)
        result = routed(
            "elementwise", [v for v in values if hasattr(v, "shape")] or [None],
            (self, args, kwargs), out,
        )  # fmt: skip
        if result is not NotImplemented:  # torch.compile: the torch op
            return result
        outs = None if out is None else list(out) if isinstance(out, list | tuple) else [out]
        try:
            sig = (
                len(args),
                tuple(kwargs),
                tuple([signature_of(v) for v in values]),
                None if outs is None else tuple([signature_of(o) for o in outs]),
            )
        except TypeError:  # not an array or a number: _bind_args says which
            self._bind_args(args, kwargs, out)
            raise
        known = self._known.get(sig) if len(kwargs) <= len(self.inputs) else None
        if known is None:  # validate and describe once per argument signature
            views, dtype, options, outs = self._bind_args(args, kwargs, out)
            scalars = not all(hasattr(v, "shape") for v in values)
            with self._lock:
                if len(self._known) > 4096:
                    self._known.clear()
                self._known[sig] = (dtype, options, scalars)
        else:
            dtype, options, scalars = known
            if scalars:  # Python numbers go as floats, as on the first call
                try:
                    views = [v if hasattr(v, "shape") else float(v) for v in values]
                except OverflowError:  # an int too large for a float: _bind_args names it
                    self._bind_args(args, kwargs, out)
                    raise
            else:
                views = list(values)
        # one output: the launchers take and give it as an array, not a list
        outs = outs[0] if outs is not None and len(self.outputs) == 1 else outs
        try:
            key = None
            # (several outputs: prepared without out= only, whose lists no signature takes)
            if args and not kwargs and (out is None or len(self.outputs) == 1) and not scalars_np:
                key = signature((*args, out)) if not scalars else _numbers_key(args, out)
            if key is None:
                return self._runner.run(views, dtype, outs, options, signature=sig)
            result, run = self._runner.first(views, dtype, outs, options)
            extras = (self.op.generation, FORCED.get(),
                      _config.config.select_force, AD.module._current_level)  # fmt: skip
            store(self._table, (key, *extras), run)
            self._numbered = self._numbered or scalars
            # numbers: a call repeated in C takes later calls with the same floats
            if out is None and (not scalars or _floats_only(key[0])):
                self._recent.remember(args, extras, run)
        except OverflowError:  # an int scalar too large for a float: the same error as above
            self._bind_args(args, kwargs, out)
            raise
        return result

    def explain(self, *args: Any, **kwargs: Any) -> Selection:
        """The choice a call with these arguments makes, and why."""
        views, dtype, options, _ = self._bind_args(args, kwargs, None)
        return self._runner.explain(views, dtype, None, options)


def elementwise(expression: str, output_dtype: Any = None) -> Elementwise:
    """A fused elementwise op from ``"out = expr"`` statements (``;``-separated) over named
    inputs; inputs broadcast as NumPy does, compute in float32, outputs in ``output_dtype``
    (default: the inputs' common floating dtype).

    Example::

        >>> import numpy as np
        >>> from kernelkit import ops
        >>> swiglu = ops.elementwise("y = a * silu(b)")
        >>> a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
        >>> swiglu(a=a, b=b).tolist()
        [0.0, 0.0, 0.0, 0.0]
    """
    return Elementwise(expression, output_dtype)


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _broadcast_shape(shapes: list[tuple[int, ...]], what: str) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    out = []
    for axis in range(ndim):
        sizes = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ArgumentError(f"[{what}] shapes {shapes} do not broadcast (axis {axis})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def promote_dtypes(dtypes: list[str], what: str) -> str:
    order = ["bfloat16", "float16", "float32", "float64"]
    floats = [d for d in dtypes if d in order]
    if not floats:
        raise ArgumentError(f"[{what}] give output_dtype= for inputs of dtypes {dtypes}")
    if "bfloat16" in floats and "float16" in floats:
        return "float32"
    return max(floats, key=order.index)


def call(self: Elementwise, args: tuple, out: Any, kwargs: dict[str, Any]) -> Any:
    """``Elementwise.__call__``: a prepared signature's run, else ``Elementwise._call``. A
    module function, so that ``torch.compile`` can trace another in its place
    (``torch_traced``): Dynamo substitutes functions, not the methods it finds on a class."""
    if kwargs and not args and len(kwargs) == len(self.inputs):
        try:  # every input by name: the same call as in order
            args, kwargs = tuple(map(kwargs.__getitem__, self.inputs)), {}
        except KeyError:  # a name that is no input's: _call says which
            pass
    if args and not kwargs:  # a prepared signature: arrays in order, one out= or none
        extras = (self.op.generation, FORCED.get(),
                  _config.config.select_force, AD.module._current_level)  # fmt: skip
        if out is None and len(args) == len(self.inputs):
            for call, kept, rest in self._recent.calls:
                if kept == extras:
                    ys = call(list(args), *rest)
                    if ys is not MISS:
                        return ys[0]
            for check, kept, run in self._recent.entries:
                if kept == extras and check(*args):
                    return run(list(args), None)
        elif len(args) == len(self.inputs):  # (a prepared out= is one array: see _call)
            for check, kept, run in self._recent.outs:
                if kept == extras and check(*args, out):
                    return run(list(args), out)
        # Python numbers among the inputs, of an op that has such calls prepared: one
        # signature, no raise (the test runs in C: array-only calls sign once, below)
        if self._numbered and not _NUMBER_SET.isdisjoint(map(type, args)):
            result = _with_numbers(self, args, out, extras)
            if result is not MISS:
                return result
        sign = SIGNERS.get(args[0].__class__)
        if sign is not None:
            try:
                key = (sign((*args, out)), *extras)
                run = self._table[key]
            except Exception:  # noqa: BLE001, S110 - a new signature: validated below
                pass
            else:
                if run not in self._recent.tried:
                    self._recent.again(args, extras, run, None, out)
                return run(list(args), out)
    return self._call(args, out, kwargs)


_NUMBERS = (float, int, bool)  # inputs passed by value (as float32), by their exact class
_NUMBER_SET = frozenset(_NUMBERS)


def _numbers_key(args: tuple, out: Any) -> Any:
    """The prepared key of a call whose inputs include Python numbers: the arrays' signature
    (None in each number's place) and every input's class; None where the arrays have none."""
    kinds = tuple(map(type, args))
    arrays = tuple(None if k in _NUMBERS else a for k, a in zip(kinds, args))
    sig = signature((*arrays, out))
    return None if sig is None else (kinds, sig)


def _floats_only(kinds: tuple) -> bool:
    """Whether the numbers among inputs of these classes are all floats (ints and bools go to
    the kernel as floats, which a call repeated in C, comparing classes, would never take)."""
    return int not in kinds and bool not in kinds


def _with_numbers(self: Elementwise, args: tuple, out: Any, extras: tuple) -> Any:
    """``call``'s prepared run for inputs that include Python numbers (``_numbers_key``), each
    passed as a float, signed by the first array's class (``f(0.5, x)`` as ``f(x, 0.5)``);
    ``MISS`` where none is prepared, or a number is no float (an int too large: the validating
    path names it). Loops, not comprehensions: each of those would be one
    more Python call on every warm call. Without out=, the run's call repeated in C is kept
    (``Recent.again``): it takes later calls whose numbers are the same floats (a scale, an
    epsilon: what a decode loop passes), checking the arrays and the numbers' bits in C, and
    hands any other call back here."""
    kinds = tuple(map(type, args))
    arrays: list[Any] = []
    values: list[Any] = []
    sign: Any = None
    try:
        for k, a in zip(kinds, args):
            number = k in _NUMBERS
            if sign is None and not number:
                sign = SIGNERS.get(k)
            arrays.append(None if number else a)
            values.append(float(a) if number else a)
        arrays.append(out)
        key = ((kinds, sign(tuple(arrays))), *extras)  # (no signer: TypeError, MISS)
        run = self._table[key]
    except Exception:  # noqa: BLE001 - not prepared (or not a call it can describe)
        return MISS
    if out is None and run not in self._recent.tried:  # once a run
        if _floats_only(kinds):
            self._recent.again(args, extras, run)
        else:  # no call repeated in C for these: marked tried, never asked again
            self._recent.tried.add(run)
    return run(values, out)


def _numpy_scalars(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]] | None:
    """(args, kwargs) with each NumPy scalar (``np.generic``: a shape and a dtype, but no array
    adapter, and on no device) as the Python number it holds, taken as Python numbers are (by
    value, as float32; as torch takes them); None where there is none."""
    np = sys.modules.get("numpy")
    if np is None or not any(isinstance(v, np.generic) for v in (*args, *kwargs.values())):
        return None
    return (
        tuple(v.item() if isinstance(v, np.generic) else v for v in args),
        {k: v.item() if isinstance(v, np.generic) else v for k, v in kwargs.items()},
    )
