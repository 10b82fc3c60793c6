"""The hot path of one specialization, generated as straight-line Python.

A repeated call must cost little more than the launch itself, so each ``LaunchPlan`` gets a
``run`` function written out for its exact arguments: no loops over binders, no isinstance
cascades, no keyword plumbing. The text is built only from kernelkit's own fragments (slot
indices and helper names, never user text) and kept on the plan as ``run_source`` for reading.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._arrays import NULL, Adapter
from .._dtypes import DTYPES
from .._errors import ArgumentError, ArgumentTypeError, KernelkitError
from .._generated import execute
from .._records import MAP_BYTES, MAX_NDIM, Param
from . import launch_checks as checks
from .key import CALL_ARGS, Guard, guard_lines
from .load import LoadedProgram
from .overlap import overlap_check
from .pack import ArgPack, scalar_bits
from .structs import struct_copier


@dataclass
class ArgRoute:
    """Where one input or output goes: its slot, adapter and the per-call work it needs."""

    what: str  # e.g. "[k] input 'x'" for messages
    slot: int
    kind: str  # "array", "scalar_array", "scalar", "tensor_map" or "struct"
    adapter: Adapter | None = None
    dtype: str = ""
    contiguous: bool = True  # make/require row-contiguous
    meta: dict[str, int] = field(default_factory=dict)  # "shape"/"strides"/"ndim"/"extent" -> slot
    nbytes: int = 0  # struct: the value's size
    flat: bool = False  # an output whose metadata are its flat view's (``KernelSpec.flat_outputs``)


def meta_lines(
    var: str, meta: dict[str, int], adapter: Adapter, ns: dict[str, Any], what: str, flat: bool
) -> list[str]:
    """Lines writing shape, strides (elements), ndim and extent of ``var`` into their slots
    (``flat``: those of its flat view, a row-contiguous array's elements in one dimension)."""
    if flat:
        return _flat_meta_lines(var, meta, adapter, ns)
    tag = f"{var}_"
    ns[f"_layout_{var}"] = adapter.layout
    ns[f"_ndim_error_{var}"] = checks.ndim_error(what)
    need_layout = "strides" in meta or "extent" in meta or not adapter.shape_attribute
    lines = [
        f"    {tag}sh, {tag}st = _layout_{var}({var})"
        if need_layout
        else f"    {tag}sh = {var}.shape"
    ]
    if "shape" in meta or "strides" in meta:
        lines += [f"    if len({tag}sh) > {MAX_NDIM}:", f"        _ndim_error_{var}(len({tag}sh))"]
    if "shape" in meta:
        lines.append(f"    s[{meta['shape']}][:len({tag}sh)] = {tag}sh")
    if "strides" in meta:
        lines.append(f"    s[{meta['strides']}][:len({tag}st)] = {tag}st")
    if "ndim" in meta:
        lines.append(f"    s[{meta['ndim']}].value = len({tag}sh)")
    if "extent" in meta:
        ns["_extent"] = extent
        lines.append(f"    s[{meta['extent']}].value = _extent({tag}sh, {tag}st)")
    return lines


def _flat_meta_lines(
    var: str, meta: dict[str, int], adapter: Adapter, ns: dict[str, Any]
) -> list[str]:
    """``meta_lines`` of a flat view: shape (elements,), strides (1,), ndim 1, extent."""
    ns["_prod"] = math.prod
    ns[f"_layout_{var}"] = adapter.layout
    shape = f"{var}.shape" if adapter.shape_attribute else f"_layout_{var}({var})[0]"
    lines = [f"    {var}_n = _prod({shape})"]
    if "shape" in meta:
        lines.append(f"    s[{meta['shape']}][0] = {var}_n")
    if "strides" in meta:
        lines.append(f"    s[{meta['strides']}][0] = 1")
    if "ndim" in meta:
        lines.append(f"    s[{meta['ndim']}].value = 1")
    if "extent" in meta:
        lines.append(f"    s[{meta['extent']}].value = {var}_n")
    return lines


def extent(shape: Any, strides: Any) -> int:
    """Elements reachable from an array's pointer (for checked mode's bounds)."""
    if not all(shape):
        return 0
    return 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))


# scalars of these dtypes are range-checked (int32, int64) or converted to raw bits (half
# types, ``pack.scalar_bits``) by their setter; any other dtype's setter returns its value
# unchanged, so the hot path stores it without calling one
_SET_THROUGH = frozenset({"int32", "int64", "float16", "bfloat16"})


def _scalar_setter(route: ArgRoute) -> Callable[[Any], Any]:
    dtype, what = route.dtype, route.what
    lo, hi = {"int32": (-(2**31), 2**31), "int64": (-(2**63), 2**63)}.get(dtype, (None, None))

    def convert(x: Any) -> Any:
        if lo is not None and not lo <= x < hi:
            raise ArgumentError(f"{what} = {x} does not fit in {dtype}")
        try:
            return scalar_bits(x, dtype)
        except (TypeError, ValueError, OverflowError) as e:
            raise ArgumentTypeError(f"{what} = {x!r} cannot be passed as {dtype}: {e}") from None

    return convert


def stream_handle(stream: Any) -> int:
    """An int handle from a torch/CuPy stream object, or anything with ``__cuda_stream__``."""
    for attr in ("cuda_stream", "ptr", "handle"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    raise ArgumentTypeError(
        f"stream= must be an int handle or a torch/CuPy stream, got {type(stream).__name__}"
    )


@dataclass(frozen=True, eq=False)
class HotPath:
    """Everything one specialization's hot path is generated from (``plan.build`` makes it)."""

    kernel: str
    params: tuple[Param, ...]
    ins: tuple[ArgRoute, ...]
    outs: tuple[ArgRoute, ...]
    has_out: bool  # the caller passes out= arrays (else outputs are allocated: ``allocators``)
    allocators: tuple[Callable[[Any], Any], ...]
    out_adapter: Adapter  # the result's framework: stream, wrapping, synchronous or not
    loaded: LoadedProgram
    where: tuple[int, int]  # the (DLPack device type, index) the plan runs on
    synchronize: Callable[[int], None]
    backend: str


@dataclass(frozen=True)
class Fixed:
    """What every call of one caller shares (the built-in ops' prepared calls: one signature,
    one geometry), read once instead of per call: the checked geometry, the inputs known to be
    row-contiguous (no check, no copy) and the outputs made as ``empty_like`` of an input."""

    geometry: Any
    contiguous: frozenset[int]
    like: frozenset[int]


def fixed_for(hot: HotPath, args: tuple) -> Fixed:
    """``Fixed`` of the calls like ``args`` (``CallArgs``' order), checked as a call checks."""
    inputs, shapes, grid, group, smem = args[0], args[1], args[3], args[4], args[11]
    geometry = hot.loaded.geometries(grid, group, smem)
    contiguous = frozenset(
        i
        for i, r in enumerate(hot.ins)
        if r.kind == "array" and r.contiguous and r.adapter is not None
        and r.adapter.strides_in_signature and not r.adapter.synchronous
        and inputs[i] is not None and r.adapter.is_contiguous(inputs[i])
    )  # fmt: skip
    like: frozenset[int] = frozenset()
    if not hot.has_out and shapes is not None and len(shapes) == len(hot.outs):
        like = frozenset(
            j
            for j, (i, dtype, _) in like_inputs(hot.ins, hot.outs).items()
            if i in contiguous and inputs[i].dtype is dtype and shapes[j] == inputs[i].shape
        )
    return Fixed(geometry, contiguous, like)


def generate_run(
    hot: HotPath, guard: Guard | None, fixed: Fixed | None = None, dry: bool = False
) -> tuple[Callable, str]:
    """Write and compile ``run(*CallArgs) -> outputs``, which first checks that the call is
    this plan's specialization (``key.guard_lines``: the same test as ``key.call_key``'s
    dictionary lookup) and returns ``MISS`` if not. Without a guard (unhashable arguments) the
    check is left out. With ``fixed`` (no guard), what it fixes is not read per call: such a
    run serves only calls that share it. ``dry``: a run that writes the thread's argument pack
    as a call would (outputs made) and returns it instead of launching (``repeat``)."""
    kernel, ins, outs, out_adapter = hot.kernel, hot.ins, hot.outs, hot.out_adapter
    params = hot.params  # not ``hot`` itself in the namespace: it holds the loaded program,
    # which must go with its plan, not wait for the collector (run and its namespace are a cycle)
    ns = _namespace(hot, params)
    code = [
        f"def run({CALL_ARGS}):",
        *(guard_lines(guard, ns) if guard is not None else []),
        *_preamble_lines(fixed, ns),
    ]
    for i, r in enumerate(ins):
        known = fixed is not None and i in fixed.contiguous
        once = fixed is not None and r.adapter is not None and r.adapter.strides_in_signature
        code += _input_lines(i, r, ns, known, once)
    likes = like_inputs(ins, outs)
    like = fixed.like if fixed is not None else frozenset()
    code += _output_lines(outs, hot.has_out, hot.allocators, ns, likes, like, fixed is not None)
    if hot.has_out:
        code += _overlap_lines(kernel, ins, outs, ns)
    if fixed is not None:
        code += ["    if fresh:", "        _local.pack = pack"]
    if dry:
        source = "\n".join([*code, "    return pack"]) + "\n"
        execute(source, ns, "argument pack")
        return ns["run"], source
    code += [
        "    if stream is None:",
        "        stream = _stream()",
        "    elif stream.__class__ is not int:",
        "        stream = _stream_handle(stream)",
        "    try:",
        "        _launch(pack.address, stream, geo)",
        "    except _KernelkitError:",
        "        raise",
        "    except Exception as e:",
        "        _launch_failed(e)",
    ]
    names = ", ".join(f"o{j}" for j in range(len(outs)))
    if out_adapter.synchronous:
        code += ["    _synchronize(stream)", f"    return [_wrap(o) for o in ({names},)]"]
    else:
        code.append(f"    return [{names}]")
    source = "\n".join(code) + "\n"
    execute(source, ns, "hot path")
    return ns["run"], source


def thread_packs(run: Callable[..., Any]) -> threading.local:
    """Where a generated ``run`` keeps each thread's argument pack (``.pack``, once made): the
    pack it last wrote in this thread."""
    return run.__globals__["_local"]


def _namespace(hot: HotPath, params: tuple[Param, ...]) -> dict[str, Any]:
    """The names every generated run reads (the per-array ones are added as lines are made)."""
    kernel, outs, out_adapter = hot.kernel, hot.outs, hot.out_adapter
    return {
        "_local": threading.local(),
        "_new_pack": lambda: ArgPack(params),
        "_launch": hot.loaded.launch,
        "_geo": hot.loaded.geometries.table,
        "_new_geo": hot.loaded.geometries,
        "_stream": out_adapter.stream_getter(*hot.where),
        "_stream_handle": stream_handle,
        "_synchronize": hot.synchronize,
        "_wrap": out_adapter.wrap,
        "_fill": checks.filler(kernel),
        "_bad_shapes": checks.shape_error(kernel, len(outs), out_adapter.framework),
        "_check_shapes": checks.shape_check(kernel),
        "_KernelkitError": KernelkitError,
        "_launch_failed": checks.launch_error(kernel, hot.backend),
        "_not_contiguous": checks.contiguity_error(outs),
    }


def _preamble_lines(fixed: Fixed | None, ns: dict[str, Any]) -> list[str]:
    """``geo`` (looked up per call, or a fixed run's) and the thread's argument pack. A fixed
    run's pack is its own: the arrays' metadata, fixed with their layouts, are written when a
    thread's pack is made (``fresh``), and the pack is kept only once all of them are (a call
    that raises before its launch keeps none)."""
    if fixed is None:
        return [
            "    try:",
            "        geo = _geo[grid, threadgroup, shared_memory]",
            "    except (KeyError, TypeError):",
            "        geo = _new_geo(grid, threadgroup, shared_memory)",
            "    try:",
            "        pack = _local.pack",
            "    except AttributeError:",
            "        pack = _local.pack = _new_pack()",
            "    s = pack.slots",
        ]
    ns["_GEO"] = fixed.geometry
    return [
        "    geo = _GEO",
        "    try:",
        "        pack = _local.pack",
        "        fresh = False",
        "    except AttributeError:",
        "        pack = _new_pack()",
        "        fresh = True",
        "    s = pack.slots",
    ]


def _once(lines: list[str]) -> list[str]:
    """``lines`` run only when the thread's pack is new (a fixed run's ``fresh``)."""
    return ["    if fresh:", *("    " + line for line in lines)] if lines else []


def _input_lines(
    i: int, r: ArgRoute, ns: dict[str, Any], known_contiguous: bool, meta_once: bool
) -> list[str]:
    if r.kind == "scalar":
        if r.dtype not in _SET_THROUGH:
            return [f"    s[{r.slot}].value = inputs[{i}]"]
        ns[f"_scalar{i}"] = _scalar_setter(r)
        return [f"    s[{r.slot}].value = _scalar{i}(inputs[{i}])"]
    if r.kind == "struct":  # its bytes into the slot, size checked
        ns[f"_struct{i}"] = struct_copier(r.what, r.nbytes)
        return [f"    _struct{i}(s[{r.slot}], inputs[{i}])"]
    if r.kind == "tensor_map":  # its 128 bytes into the slot (the guard checked the class)
        ns["_memmove"] = ctypes.memmove
        return [f"    _memmove(s[{r.slot}], inputs[{i}].words, {MAP_BYTES})"]
    a = r.adapter
    assert a is not None  # noqa: S101 - for mypy: an array route always has its adapter
    ns.update(
        {
            f"_ptr{i}": a.pointer,
            f"_isc{i}": a.is_contiguous,
            f"_contig{i}": a.contiguous,
            f"_prep{i}": a.prepare,
        }
    )
    lines = [f"    a{i} = inputs[{i}]"]
    if a.synchronous:
        lines.append(f"    a{i} = _prep{i}(a{i})")
    if r.contiguous and not known_contiguous:
        lines += [f"    if not _isc{i}(a{i}):", f"        a{i} = _contig{i}(a{i})"]
    ptr = a.pointer_expr.format(x=f"a{i}") if a.pointer_expr else f"_ptr{i}(a{i})"
    lines.append(f"    s[{r.slot}].value = {ptr}")
    if r.meta:
        meta = meta_lines(f"a{i}", r.meta, a, ns, r.what, False)
        lines += _once(meta) if meta_once else meta
    return lines


def like_inputs(
    ins: Sequence[ArgRoute], outs: Sequence[ArgRoute]
) -> dict[int, tuple[int, Any, Any]]:
    """Output j -> (input i, the framework's dtype, empty_like) where output j may be made as
    ``empty_like(input i)`` when a call asks for input i's shape: an array input of the output's
    framework, made row-contiguous by the run, whose adapter has a cheaper ``like``."""
    found: dict[int, tuple[int, Any, Any]] = {}
    for j, o in enumerate(outs):
        like = o.adapter.like(DTYPES[o.dtype]) if o.adapter is not None else None
        if like is None:
            continue
        for i, r in enumerate(ins):
            if r.kind == "array" and r.contiguous and r.adapter is o.adapter:
                found[j] = (i, *like)
                break
    return found


def _output_lines(
    outs: Sequence[ArgRoute],
    has_out: bool,
    allocators: Sequence[Callable[[Any], Any]],
    ns: dict[str, Any],
    likes: dict[int, tuple[int, Any, Any]],
    known: frozenset[int] = frozenset(),
    meta_once: bool = False,
) -> list[str]:
    """The outputs' lines: ``out``'s arrays (``has_out``), else new ones (``known``: those a
    fixed run makes as ``empty_like`` of their input untested, ``Fixed.like``); ``meta_once``:
    a fixed run's, whose outputs' metadata are written with a new pack where their layouts are
    fixed (new arrays; ``out=`` arrays whose signatures hold their strides)."""
    n = len(outs)
    if has_out:
        lines = ["    if output_shapes is not None:", "        _check_shapes(out, output_shapes)"]
        lines += [f"    o{j} = out[{j}]" for j in range(n)]
    else:
        lines = _new_output_lines(n, allocators, ns, likes, known)
    outs_tuple = ", ".join(f"o{j}" for j in range(n))
    lines += ["    if init_value is not None:", f"        _fill(({outs_tuple},), init_value)"]
    for j, r in enumerate(outs):
        a = r.adapter
        if a is None:  # allocated through another framework (JAX): look its adapter up
            lines.append(f"    s[{r.slot}].value = _optr{j}(o{j})")
            ns[f"_optr{j}"] = checks.output_pointer_any(r.what)
            if r.meta:
                lines += meta_lines(f"o{j}", r.meta, checks.LookupAdapter(), ns, r.what, r.flat)
            continue
        ns.update(
            {
                f"_optr{j}": a.output_pointer(r.what),
                f"_oisc{j}": a.is_contiguous,
            }
        )
        if r.contiguous:
            lines += [f"    if not _oisc{j}(o{j}):", f"        _not_contiguous({j})"]
        lines.append(f"    s[{r.slot}].value = _optr{j}(o{j})")
        if r.meta:
            meta = meta_lines(f"o{j}", r.meta, a, ns, r.what, r.flat)
            fixed_layout = meta_once and (not has_out or a.strides_in_signature)
            lines += _once(meta) if fixed_layout else meta
    return lines


def _new_output_lines(
    n: int,
    allocators: Sequence[Callable[[Any], Any]],
    ns: dict[str, Any],
    likes: dict[int, tuple[int, Any, Any]],
    known: frozenset[int],
) -> list[str]:
    """``o0``, ``o1``, ... made per call: ``empty_like`` of an input whose shape and dtype the
    call asks for (``known``: without the test), else the allocator; a failure reported by
    ``_bad_shapes``. The call's ``output_shapes`` are not read where every output is known."""
    lines = [] if len(known) == n else [
        f"    if output_shapes is None or len(output_shapes) != {n}:",
        "        _bad_shapes(output_shapes, None)",
    ]  # fmt: skip
    lines.append("    try:")
    for j in range(n):
        ns[f"_alloc{j}"] = allocators[j]
        if j in likes:  # input i's shape asked for: empty_like(input i), else by shape
            i, ns[f"_likedt{j}"], ns[f"_like{j}"] = likes[j]
            if j in known:
                lines.append(f"        o{j} = _like{j}(a{i})")
                continue
            lines += [
                f"        if a{i}.dtype is _likedt{j} and output_shapes[{j}] == a{i}.shape:",
                f"            o{j} = _like{j}(a{i})",
                "        else:",
                f"            o{j} = _alloc{j}(output_shapes[{j}])",
            ]
            continue
        lines.append(f"        o{j} = _alloc{j}(output_shapes[{j}])")
    return [*lines, "    except Exception as e:", "        _bad_shapes(output_shapes, e)"]


def _overlap_lines(
    kernel: str, ins: Sequence[ArgRoute], outs: Sequence[ArgRoute], ns: dict[str, Any]
) -> list[str]:
    """A call with ``out=``: refuse outputs that overlap an input or each other (``overlap``).
    Row-contiguous arrays (the common case) are compared inline by ``nbytes``; others, or an
    array without ``nbytes``, through ``overlap``'s check."""
    arrays = [
        (i, r)
        for i, r in enumerate(ins)
        if r.kind in ("array", "scalar_array") and r.adapter is not None and r.adapter is not NULL
    ]
    ns["_overlap"] = overlap_check(
        kernel, [_overlap_row(r) for _, r in arrays], [_overlap_row(r) for r in outs]
    )
    call = "_overlap({}, {}, {}, {})".format(
        _tuple(f"a{i}" for i, _ in arrays),
        _tuple(f"s[{r.slot}].value" for _, r in arrays),
        _tuple(f"o{j}" for j in range(len(outs))),
        _tuple(f"s[{r.slot}].value" for r in outs),
    )
    if not all(r.contiguous for r in outs) or not all(r.contiguous for _, r in arrays):
        return [f"    {call}"]
    lines = ["    try:"]
    for j, r in enumerate(outs):
        lines.append(f"        p{j} = s[{r.slot}].value; e{j} = p{j} + o{j}.nbytes")
    for i, r in arrays:
        lines.append(f"        q{i} = s[{r.slot}].value; f{i} = q{i} + a{i}.nbytes")
    for j in range(len(outs)):
        tests = [f"(p{k} < e{j} and p{j} < e{k})" for k in range(j)]
        tests += [f"(q{i} < e{j} and p{j} < f{i} and (q{i} != p{j} or f{i} != e{j}))"
                  for i, _ in arrays]  # fmt: skip
        if tests:  # any meeting goes to the full check, which names the arrays
            lines.append(f"        if p{j} < e{j} and ({' or '.join(tests)}):")
            lines.append(f"            {call}")
    lines += ["    except AttributeError:", f"        {call}"]
    return lines


def _tuple(items: Any) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")"


def _overlap_row(r: ArgRoute) -> tuple[str, Adapter, int, bool]:
    assert r.adapter is not None  # noqa: S101 - for mypy: only array routes come here
    return r.what.split("] ", 1)[-1], r.adapter, DTYPES[r.dtype].itemsize, r.contiguous
