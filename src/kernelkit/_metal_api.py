"""``kernelkit.metal_kernel``: MLX's ``mx.fast.metal_kernel``, on every kernelkit backend.

The factory and the call take MLX's arguments (and the older dict form of MLX's documentation).
A call translates the Metal body once per input layout (which inputs are 0-d arrays, which
Metal reads by reference) through ``_dialects.metal`` and runs the result as a CUDA-dialect
``Kernel``: from there on, signature, keys, caches and backends are the CUDA path's own.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ._api import Kernel
from ._dialects import metal as _metal
from ._errors import ArgumentError, ArgumentTypeError, CompileError
from ._pipeline.bind import is_scalar
from ._pipeline.codegen import check_identifier, scan_body
from ._pipeline.load import require_geometry
from ._records import KernelSpec

__all__ = ["MetalKernel", "metal_kernel"]


_PLAIN = (list, tuple)
_PLAIN_OR_NONE = (list, tuple, type(None))  # not "is not dict": any Mapping takes the slow path
_MLX_TYPES: dict[type, bool] = {}


def _is_mlx_type(t: type) -> bool:
    """Whether objects of type ``t`` come from MLX (remembered per type)."""
    found = _MLX_TYPES.get(t)
    if found is None:
        found = _MLX_TYPES[t] = t.__module__.split(".", 1)[0] == "mlx"
    return found


def _is_mlx(x: Any) -> bool:
    return _is_mlx_type(type(x))


def _from_mlx(x: Any) -> Any:
    """An MLX array as a NumPy array over the same memory (bfloat16 through a uint16 view)."""
    import numpy as np

    if str(getattr(x, "dtype", "")) != "mlx.core.bfloat16":
        return np.asarray(x)
    import ml_dtypes
    import mlx.core as mx

    # NumPy's buffer protocol has no bfloat16 format: MLX's same-size view shares the buffer
    return np.asarray(x.view(mx.uint16)).view(ml_dtypes.bfloat16)


def _to_mlx(r: Any) -> Any:
    """A NumPy result as an MLX array (a bfloat16 one through its uint16 bits)."""
    import mlx.core as mx

    if r.dtype.name == "bfloat16":
        return mx.array(r.view("uint16")).view(mx.bfloat16)
    return mx.array(r)


def _dtype(value: Any) -> Any:
    """An MLX dtype (``mx.float32``) as its name; anything else as it is."""
    if _is_mlx(value):
        return str(value).rsplit(".", 1)[-1]
    return value


class MetalKernel:
    """A Metal kernel; call it with MLX's arguments (see ``metal_kernel``)."""

    def __init__(
        self,
        name: str,
        input_names: tuple[str, ...] | None,
        output_names: tuple[str, ...] | None,
        source: str,
        header: str,
        ensure_row_contiguous: bool,
        atomic_outputs: bool,
        math_mode: str = "safe",
    ) -> None:
        self.name = name
        self.input_names = input_names
        self.output_names = output_names
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        self.math_mode = math_mode
        self._kernels: dict[Any, Kernel] = {}
        self._geometry: dict[Any, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._lock = threading.Lock()
        # MLX compiles at the first call: a construct refused here is raised there, so a module
        # that defines several kernels still imports and its other kernels still run
        self._refused: str | None = None
        try:
            _metal.translate(name, source, header)
        except ArgumentError as e:
            self._refused = str(e)

    def __repr__(self) -> str:
        return (
            f"MetalKernel({self.name!r}, inputs={self.input_names}, outputs={self.output_names}, "
            f"translations={len(self._kernels)})"
        )

    def __call__(
        self,
        inputs: Sequence[Any] | Mapping[str, Any],
        output_shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
        output_dtypes: Sequence[Any] | Mapping[str, Any] | None = None,
        grid: Sequence[int] | None = None,
        threadgroup: Sequence[int] | None = None,
        template: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        init_value: float | int | None = None,
        verbose: bool = False,
        stream: Any = None,
        ensure_row_contiguous: bool | None = None,
        out: Sequence[Any] | None = None,
        backend: str | None = None,
        check: bool | None = None,
    ) -> list[Any] | dict[str, Any]:
        """Run the kernel: a list of outputs (a dict by name for the dict form of the call).

        ``grid`` counts threads, exactly as Metal's ``dispatchThreads``: threads past it do not
        run, and the last threadgroup may be partial. ``out=``, ``backend=`` and ``check=`` are
        kernelkit's (see ``Kernel.__call__``).
        """
        if (  # the common call (lists, no MLX objects, seen geometry): a few lookups
            type(inputs) in _PLAIN
            and self.input_names is not None
            and type(output_shapes) in _PLAIN_OR_NONE
            and type(output_dtypes) in _PLAIN_OR_NONE
            and type(template) in _PLAIN_OR_NONE
            and ensure_row_contiguous is None
            and not verbose
        ):
            geo = self._geometry.get((grid, threadgroup)) if type(grid) is tuple else None
            if (
                geo is not None
                and not any(map(_is_mlx_type, map(type, inputs)))
                and not any(map(_is_mlx_type, map(type, output_dtypes or ())))
            ):
                zero_d = tuple(
                    n
                    for n, x in zip(self.input_names, inputs)
                    if getattr(x, "ndim", 1) == 0 and not is_scalar(x)
                )
                key = (self.input_names, self.output_names, zero_d, self.ensure_row_contiguous)
                kernel = self._kernels.get(key)
                if kernel is not None:
                    g, tg = geo
                    # template is a list, a tuple or None here: a type() test mypy cannot narrow
                    if template is not None and any(_is_mlx_type(type(v)) for _, v in template):  # type: ignore[str-unpack]
                        template = [(n, _dtype(v)) for n, v in template]  # type: ignore[str-unpack]
                    return self._launch(
                        kernel, [*inputs, *g], output_shapes, output_dtypes, g, tg, template,
                        init_value, False, stream, out, backend, check,
                    )  # fmt: skip
        return self._call_slow(
            inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value,
            verbose, stream, ensure_row_contiguous, out, backend, check,
        )  # fmt: skip

    def _call_slow(
        self,
        inputs: Any,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any,
        template: Any,
        init_value: Any,
        verbose: bool,
        stream: Any,
        ensure_row_contiguous: bool | None,
        out: Any,
        backend: Any,
        check: Any,
    ) -> list[Any] | dict[str, Any]:
        """Either form of the call, MLX objects, a new geometry or input layout."""
        if self._refused is not None:
            raise ArgumentError(self._refused)
        as_dict = isinstance(inputs, Mapping)
        ins, in_names, outs_names, shapes, dtypes = self._normalize(
            inputs, output_shapes, output_dtypes
        )
        if isinstance(template, Mapping):
            template = list(template.items())
        if template is not None:
            template = [(n, _dtype(v)) for n, v in template]
        mlx = any(_is_mlx(x) for x in ins)
        if mlx:
            ins = [_from_mlx(x) if _is_mlx(x) else x for x in ins]
        zero_d = tuple(
            n for n, x in zip(in_names, ins) if getattr(x, "ndim", 1) == 0 and not is_scalar(x)
        )
        contiguous = (
            self.ensure_row_contiguous if ensure_row_contiguous is None else ensure_row_contiguous
        )
        kernel = self._kernel(in_names, outs_names, zero_d, bool(contiguous))
        g, tg = self._geometry_of(grid, threadgroup)
        if verbose:
            print(f"Metal source of `{self.name}`:\n```\n{self.header}\n{self.source}\n```")  # noqa: T201 - verbose=True asks for it
            print(f"The CUDA it became (`{self.name}`):")  # noqa: T201 - verbose=True asks for it
        results = self._launch(
            kernel, [*ins, *g], shapes, dtypes, g, tg, template, init_value, verbose, stream,
            out, backend, check,
        )  # fmt: skip
        if mlx:
            results = [_to_mlx(r) for r in results]
        return dict(zip(outs_names, results)) if as_dict else results

    def _geometry_of(self, grid: Any, threadgroup: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, threadgroup) as launched: MLX clamps the threadgroup to the grid."""
        require_geometry(self.name, grid, threadgroup)  # both required, as in MLX
        g = tuple(int(v) for v in grid)
        if len(g) != 3 or len(tuple(threadgroup)) != 3:
            raise ArgumentError(f"[{self.name}] grid and threadgroup need 3 values each")
        tg = tuple(max(1, min(int(t), v)) for t, v in zip(threadgroup, g))
        try:
            if len(self._geometry) < 1024:
                self._geometry[grid, threadgroup] = (g, tg)
        except TypeError:  # lists: not remembered
            pass
        return g, tg

    def _launch(self, kernel: Kernel, *args: Any) -> Any:
        """The CUDA-dialect kernel's call; a compile error quotes the Metal lines."""
        ins, shapes, dtypes, g, tg, template, init_value, verbose, stream, out, backend, check = (
            args
        )
        try:
            return kernel(
                ins, shapes, dtypes, g, tg, template, init_value, verbose, stream, out, backend,
                check,
            )  # fmt: skip
        except CompileError as e:
            raise self._metal_error(e) from None

    def _normalize(
        self, inputs: Any, output_shapes: Any, output_dtypes: Any
    ) -> tuple[list[Any], tuple[str, ...], tuple[str, ...], Any, Any]:
        """(inputs, input names, output names, shapes, dtypes) of either form of the call."""
        name = self.name
        if isinstance(inputs, Mapping):
            in_names = self.input_names or tuple(inputs)
            missing = set(in_names) ^ set(inputs)
            if missing:
                raise ArgumentError(
                    f"[{name}] inputs must name exactly the inputs {list(in_names)}, "
                    f"got {list(inputs)}"
                )
            ins = [inputs[n] for n in in_names]
        else:
            if self.input_names is None:
                raise ArgumentTypeError(
                    f"[{name}] this kernel was defined without input_names: pass inputs as a "
                    "dict {name: array}"
                )
            in_names, ins = self.input_names, list(inputs)
        if isinstance(output_shapes, Mapping) or isinstance(output_dtypes, Mapping):
            if not (isinstance(output_shapes, Mapping) and isinstance(output_dtypes, Mapping)):
                raise ArgumentTypeError(
                    f"[{name}] output_shapes and output_dtypes must both be dicts or both lists"
                )
            outs = self.output_names or tuple(output_shapes)
            if set(outs) ^ set(output_shapes) or set(outs) ^ set(output_dtypes):
                raise ArgumentError(
                    f"[{name}] output_shapes and output_dtypes must name exactly the outputs "
                    f"{list(outs)}, got {list(output_shapes)} and {list(output_dtypes)}"
                )
            shapes = [tuple(output_shapes[n]) for n in outs]
            dtypes: list[Any] | None = [_dtype(output_dtypes[n]) for n in outs]
        else:
            if self.output_names is None:
                raise ArgumentTypeError(
                    f"[{name}] this kernel was defined without output_names: pass output_shapes "
                    "and output_dtypes as dicts {name: ...}"
                )
            outs = self.output_names
            shapes = output_shapes
            dtypes = None if output_dtypes is None else [_dtype(d) for d in output_dtypes]
        return ins, tuple(in_names), tuple(outs), shapes, dtypes

    def _kernel(
        self, ins: tuple[str, ...], outs: tuple[str, ...], zero_d: tuple[str, ...], rc: bool
    ) -> Kernel:
        """The CUDA-dialect kernel of one input layout (translated once, then looked up)."""
        key = (ins, outs, zero_d, rc)
        kernel = self._kernels.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._kernels.get(key)
                if kernel is None:
                    kernel = self._kernels[key] = self._define(ins, outs, zero_d, rc)
        return kernel

    def _define(
        self, ins: tuple[str, ...], outs: tuple[str, ...], zero_d: tuple[str, ...], rc: bool
    ) -> Kernel:
        _check_names(self.name, ins, outs)
        t = _metal.translate(
            self.name, self.source, self.header, tuple((n, "auto") for n in zero_d)
        )
        refs, _ = scan_body(self.source, ins + outs)
        spec = KernelSpec(
            name=self.name,
            input_names=ins + _metal.GRID_INPUTS,
            output_names=outs,
            source=t.body,
            header=t.header,
            ensure_row_contiguous=rc,
            metadata_refs=refs,
            attribute_refs=frozenset(),  # the translation binds Metal's own (typed) attributes
        )
        return Kernel(spec)

    def _metal_error(self, e: CompileError) -> CompileError:
        """The compile error, with the Metal lines its log points at quoted under it."""
        quoted = []
        for where, text in (("source", self.source), ("header", self.header)):
            file = self.name if where == "source" else f"{self.name}.header"
            lines = text.split("\n")
            rx = rf"(?<![\w.]){re.escape(file)}(?:\((\d+)\)|:(\d+))"
            for m in dict.fromkeys(re.findall(rx, e.log)):
                n = int(m[0] or m[1])
                if 1 <= n <= len(lines):
                    quoted.append(f"  Metal {where} line {n}: {lines[n - 1].strip()}")
        if _MIXED_CONDITIONAL.search(e.log):
            quoted.append(_MIXED_CONDITIONAL_HINT)
        log = e.log + ("\n" + "\n".join(dict.fromkeys(quoted)) if quoted else "")
        return CompileError(e.kernel, log, e.source, e.options)


# `c ? half_value : 1.0`: Metal's half is arithmetic and promotes; kernelkit's 16-bit types are
# classes (cuda_fp16.h's, and the CPU backend's), and C++ cannot pick a type for the result.
# GCC/Clang: "operands to '?:' have different types"; NVRTC: 'ambiguous "?" operation'.
_MIXED_CONDITIONAL = re.compile(
    r"operands to .\?:. have different types .*(?:__half|__nv_bfloat16)"
    r"|ambiguous \"\?\" operation.*(?:__half|__nv_bfloat16)"
)
_MIXED_CONDITIONAL_HINT = (
    "  hint: a conditional `c ? x : y` mixes a half/bfloat value with another type; Metal "
    "promotes it, kernelkit's 16-bit types are classes and C++ cannot: convert one operand "
    "(static_cast<float>(x)) in the Metal source"
)


def _check_names(kernel: str, ins: tuple[str, ...], outs: tuple[str, ...]) -> None:
    for i, n in enumerate(ins):
        check_identifier(n, f"input name at input_names[{i}]", kernel)
    for i, n in enumerate(outs):
        check_identifier(n, f"output name at output_names[{i}]", kernel)
    if not outs:
        raise ArgumentError(f"[{kernel}] a kernel needs at least one output")
    dup = sorted({n for n in ins + outs if (ins + outs).count(n) > 1})
    if dup:
        raise ArgumentError(f"[{kernel}] name {dup[0]!r} is used more than once in inputs/outputs")


def metal_kernel(
    name: str,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    source: str = "",
    header: str = "",
    ensure_row_contiguous: bool = True,
    atomic_outputs: bool = False,
    compile_options: Mapping[str, Any] | None = None,
) -> MetalKernel:
    """Define a kernel from a Metal Shading Language body, as ``mx.fast.metal_kernel`` does.

    The body sees MLX's signature: inputs as ``const device T*`` (0-d arrays and Python scalars
    as values), outputs as ``device T*`` (``device atomic<T>*`` with ``atomic_outputs``),
    ``x_shape``/``x_strides``/``x_ndim`` and Metal's thread attributes when it names them.
    It is translated to kernelkit's CUDA dialect and runs on every backend (an NVIDIA GPU, or
    the CPU). ``input_names``/``output_names`` may be left out for the older call form that
    passes dicts keyed by name. Unsupported constructs (simdgroup matrices, textures,
    samplers) raise ``ArgumentError`` naming the construct and its line, at the first call (as
    MLX compiles then). ``compile_options`` takes MLX's ``{"math_mode": "safe" | "relaxed" |
    "fast"}``; every mode compiles with kernelkit's IEEE flags (no per-kernel fast-math flag
    exists on either backend), which meet each mode's accuracy: "safe" exactly, "relaxed" and
    "fast" with more precision and special values than they promise.

    Example::

        >>> import numpy as np, kernelkit
        >>> k = kernelkit.metal_kernel("myexp", ["inp"], ["out"],
        ...     "uint i = thread_position_in_grid.x; out[i] = metal::exp(inp[i]);")
        >>> x = np.zeros(4, dtype=np.float32)
        >>> k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(4, 1, 1),
        ...   threadgroup=(32, 1, 1))[0]
        array([1., 1., 1., 1.], dtype=float32)
    """
    check_identifier(name, "kernel name")
    if not isinstance(source, str) or not isinstance(header, str):
        raise ArgumentTypeError(f"[{name}] source and header must be str")
    names = []
    for what, value in (("input_names", input_names), ("output_names", output_names)):
        if value is not None and (isinstance(value, str) or not isinstance(value, list | tuple)):
            raise ArgumentTypeError(f"[{name}] {what} must be a list of names, got {value!r}")
        names.append(None if value is None else tuple(value))
    if names[0] is not None and names[1] is not None:
        _check_names(name, names[0], names[1])
    return MetalKernel(
        name, names[0], names[1], source, header, bool(ensure_row_contiguous),
        bool(atomic_outputs), _math_mode(name, compile_options),
    )  # fmt: skip


_MATH_MODES = ("safe", "relaxed", "fast")


def _math_mode(kernel: str, options: Any) -> str:
    """MLX 0.32's ``compile_options``: a dict of one key, ``math_mode``, checked as MLX does."""
    if options is None:
        return "safe"
    if not isinstance(options, Mapping):
        raise ArgumentTypeError(
            f"[{kernel}] compile_options must be a dict, got {type(options).__name__}"
        )
    for key in options:
        if key != "math_mode":
            raise ArgumentError(
                f"[{kernel}] compile_options: unknown option {key!r} (MLX knows only 'math_mode')"
            )
    mode = options.get("math_mode", "safe")
    if mode not in _MATH_MODES or not isinstance(mode, str):
        raise ArgumentError(
            f"[{kernel}] compile_options: math_mode must be 'safe', 'relaxed' or 'fast', "
            f"got {mode!r}"
        )
    return mode
