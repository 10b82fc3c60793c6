"""A kernel call repeated in C.

A decode loop calls a kernel with arrays of the same layouts, the same geometry and the same
options again and again, and the generated hot path (``launch``) checks each array in Python
on every such call. Where the backend launches through the native module (CUDA's
``kk_launch.c``: the launcher's ``native_call``) and the arrays' framework checks arrays in C
(``_arrays.CHECKERS``: torch's ``TensorGuards``), a plan keeps up to ``Repeats.LIMIT`` of its
recent calls as C objects (``kk_launch.Call``), each made from one call that its generated run
served: its argument block (shapes, strides, scalars: what the run wrote) copied, its arrays'
check, its other arguments' values. A later call like it is checked and launched in one C call,
no Python frame; one that differs only in its grid, threadgroup or shared memory size is
launched too (the argument block does not depend on them), a geometry of int tuples checked in C
against the limits ``Geometries.bounds`` gives, anything else asked of ``Geometries.of``. Any
other call is handed down the chain, whose end is ``Repeats.miss``: the plan's generated run,
which checks everything as before.

A call is made into one only when nothing in it may change unseen: inputs in a list or tuple,
every array a checked framework's (none needing a gradient, none passed twice: torch's check
refuses both), every array input that the kernel needs row-contiguous already so, an optional
input left out None again (compared as a scalar, by identity), scalars and options of plain
values (bool, int, float, str, tuples of them, dtypes; NumPy scalars as inputs),
``init_value`` None and the stream None or an int. The outputs of an ``out=`` call that meet
an input or each other go down the chain (the run names them).
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._arrays import CHECKERS, NULL
from .._dtypes import DTYPES, normalize_dtype
from .._records import CxxName
from .key import MISS
from .launch import HotPath, generate_run, like_inputs, thread_packs
from .pack import ArgPack

__all__ = ["Repeats", "repeats_for"]

_NO = object()  # a value that a Call cannot compare
# CallArgs positions that a Call compares with the call it was made from: output_shapes,
# output_dtypes, grid, threadgroup, template, init_value, backend, check, shared_memory
_COMPARED = (1, 2, 3, 4, 5, 6, 9, 10, 11)
# and those of a decided Call: the launch settings (grid, threadgroup, template, shared_memory)
# are left out, its caller having derived them from what the Call checks
_DECIDED = (1, 2, 6, 9, 10)
_SCALARS = (bool, int, float)


def repeats_for(hot: HotPath, run: Callable[..., Any]) -> Repeats | None:
    """``Repeats`` for a plan whose generated run is ``run``, or None where its calls cannot
    be repeated in C: a launcher without ``native_call``, a framework that synchronizes its
    results, an input that is not an array, a scalar or an optional input left out
    (structs, tensor maps), an output without its adapter."""
    make = getattr(hot.loaded.launch, "native_call", None)
    if make is None or hot.out_adapter.synchronous:
        return None
    for r in hot.ins:
        if r.kind == "array" and r.adapter is not None:  # (NULL: an optional input left out)
            continue
        if r.kind != "scalar":
            return None
    if any(r.adapter is None for r in hot.outs):
        return None
    return Repeats(hot, run, make)


class Repeats:
    """One plan's calls repeated in C, the newest first (``head``). The last one hands a call
    that none of them took to the plan's generated run, in C, except once every ``EVERY``
    such calls (every one while fewer than ``LIMIT`` tries were made) to ``miss``, which runs
    it and makes a new Call of it: a kernel called with a new size every time pays no Python
    frame of this module. ``follow`` receives each new head (the kernel tries it first)."""

    LIMIT = 4
    EVERY = 256
    __slots__ = (
        "end", "fill", "follow", "front", "head", "hot", "keep", "lock", "make", "packs",
        "run", "seen", "served", "stream", "tries",
    )  # fmt: skip

    def __init__(self, hot: HotPath, run: Callable[..., Any], make: Callable[..., Any]) -> None:
        self.hot, self.run, self.make = hot, run, make
        self.packs = thread_packs(run)
        self.stream = hot.out_adapter.stream_getter(*hot.where)
        self.head: Any = None
        self.follow: Callable[[Any], None] | None = None
        self.tries = self.served = 0
        self.seen = False  # the kernel has run this plan once (its second call makes a Call)
        self.keep = self.LIMIT  # Calls kept in the chain: one while none of them serves
        self.end = self.miss
        self.lock = threading.Lock()  # one thread at a time changes the chain
        self.fill: Callable[..., ArgPack] | None = None  # ``call_for``'s dry run, when needed
        # the native module's ``Front`` (``Kernel.__call__`` in C), which the kernel takes
        self.front: Callable[..., Any] | None = getattr(hot.loaded.launch, "native_front", None)

    def miss(self, *args: Any) -> Any:
        """The chain's retry (``end``: this method bound once): the call run, and made into a
        Call where it can be. Past ``LIMIT`` tries, a chain none of whose Calls served a call
        since the last retry is cut to the newest (a kernel called with a new size every
        time then checks one Call a call, not four)."""
        served = self._served()
        idle = self.tries >= self.LIMIT and served == self.served
        self.keep = 1 if idle else self.LIMIT
        result = self.prepare(args)
        if result is not MISS and self.tries >= self.LIMIT and self.head is not None:
            with self.lock:  # from now on, rarely
                self._relink()
        self.served = self._served()
        return result

    def _served(self) -> int:
        """Calls the chain's Calls have launched (those of Calls cut off are not counted)."""
        total, node = 0, self.head
        kind = node.__class__
        while node is not None and node.__class__ is kind:
            total, node = total + node.served, node.next
        return total

    def prepare(self, args: tuple) -> Any:
        """Run the call (``CallArgs``' order) through the generated run, then keep it as a
        call repeated in C where it may be one; the run's result (``MISS`` for another
        specialization's call, which is never kept)."""
        result = self.run(*args)
        if result is MISS:
            return result
        self.tries += 1
        call = self._make(args, getattr(self.packs, "pack", None))
        if call is not None:
            self._push(call)
        return result

    def call_for(self, args: tuple, decided: Callable[..., Any] | None = None) -> Any:
        """A call repeated in C for calls like ``args`` (``CallArgs``' order), made without
        launching (a dry run writes the argument block), outside the chain (its calls that
        differ go to the run); None where it cannot be made. For callers that keep their own
        run per signature (the built-in ops' prepared calls).

        ``decided``: a Call for a caller that derives ``args``' launch settings (grid,
        threadgroup, template, shared memory) from what a Call checks (arrays' types,
        shapes, strides, dtypes and devices; scalars; options), as an autotuned kernel's
        key does: it does not compare them (the caller may pass anything there) and hands
        every call it does not take to ``decided``, never to the run."""
        fill = self.fill
        if fill is None:
            fill = self.fill = generate_run(self.hot, None, dry=True)[0]
        try:
            pack = fill(*args)
        except Exception:  # noqa: BLE001 - the checked run reports what is wrong
            return None
        if decided is not None:
            return self._make(args, pack, _DECIDED, decided)
        call = self._make(args, pack)
        if call is not None:
            call.retry(self.end, self.EVERY)
        return call

    def _push(self, call: Any) -> None:
        with self.lock:
            if self.head is not None:
                call.next = self.head
            self.head = call
            self._relink()
            if self.follow is not None:
                self.follow(call)

    def _relink(self) -> None:
        """The chain cut after ``keep`` Calls, its last one handing calls to the run and
        retrying through ``miss``, the others to the next Call only."""
        node, n = self.head, 1
        while n < self.keep and node.next.__class__ is node.__class__:
            node.retry(None, 1)
            node, n = node.next, n + 1
        node.next = self.run
        node.retry(self.end, 1 if self.tries < self.LIMIT else self.EVERY)

    def _make(
        self,
        args: tuple,
        pack: ArgPack | None,
        compared: tuple[int, ...] = _COMPARED,
        after: Callable[..., Any] | None = None,
    ) -> Any:
        """A ``kk_launch.Call`` of a call whose argument block ``pack`` holds, comparing the
        arguments at ``compared`` with ``args``' and handing other calls to ``after`` (the
        run by default), or None."""
        hot = self.hot
        inputs, stream, out = args[0], args[7], args[8]
        if inputs.__class__ not in (list, tuple) or args[6] is not None:
            return None
        if not (stream is None or stream.__class__ is int):
            return None
        if hot.has_out and (out.__class__ not in (list, tuple) or len(out) != len(hot.outs)):
            return None
        expected = tuple((at, _frozen(args[at])) for at in compared)
        if any(value is _NO for _, value in expected):
            return None
        if pack is None:
            return None
        blob, offsets = _block(pack)
        arrays: list[Any] = []
        ins = _inputs(hot, inputs, offsets, arrays)
        outs = _outputs(hot, args, offsets, arrays)
        if ins is None or outs is None or not arrays:
            return None
        checker = CHECKERS.get(arrays[0].__class__)
        if checker is None or any(CHECKERS.get(x.__class__) is not checker for x in arrays):
            return None
        try:
            check = checker(tuple(arrays))
            if check is None or not check(*arrays):
                return None  # (one tensor passed twice, a gradient, a dispatch mode)
            geometry = hot.loaded.geometries(args[3], args[4], args[11])
            alias_ok = all(r.contiguous for r in hot.outs) and all(
                r.contiguous for r in hot.ins if r.kind == "array"
            )
            # (a decided Call compares no geometry: it launches the one it was made with)
            geometries = hot.loaded.geometries
            others = (geometries.of, geometries.bounds()) if after is None else (None, None)
            return self.make(
                self.run if after is None else after, inputs.__class__, ins, outs,
                hot.has_out, alias_ok, check, expected, self.stream, tuple(geometry), blob,
                offsets, *others,
            )  # fmt: skip
        except Exception:  # noqa: BLE001 - a call it cannot make: the run serves it
            return None


def _inputs(hot: HotPath, inputs: Any, offsets: tuple, arrays: list) -> tuple | None:
    """``Call``'s per-input entries, the array inputs appended to ``arrays``; None where the
    call cannot be repeated in C."""
    if len(inputs) != len(hot.ins):
        return None
    entries: list[tuple] = []
    for r, x in zip(hot.ins, inputs):
        if r.kind == "scalar":
            if x.__class__ not in _SCALARS and not _numpy_scalar(x):
                return None
            entries.append((1, x))
            continue
        a = r.adapter
        if a is NULL:  # an optional input left out: the block holds its null pointer and
            if x is not None:  # extents, and a call passes None there again (compared as a
                return None  # scalar: by identity)
            entries.append((1, None))
            continue
        if a is None or (r.contiguous and not a.is_contiguous(x)):
            return None
        span = _span(a, x, DTYPES[r.dtype].itemsize)
        if span is None:
            return None
        entries.append((0, a.pointer, offsets[r.slot], span))
        arrays.append(x)
    return tuple(entries)


def _outputs(hot: HotPath, args: tuple, offsets: tuple, arrays: list) -> tuple | None:
    """``Call``'s per-output entries: ``out=``'s arrays (appended to ``arrays``), or how each
    output is made (as the run makes it: ``empty_like`` of an input of its shape and dtype,
    else the allocator with the output's shape)."""
    entries: list[tuple] = []
    likes = like_inputs(hot.ins, hot.outs)
    inputs, shapes, out = args[0], args[1], args[8]
    for j, r in enumerate(hot.outs):
        a = r.adapter
        if a is None:
            return None
        if hot.has_out:
            y = out[j]
            if r.contiguous and not a.is_contiguous(y):
                return None
            span = _span(a, y, DTYPES[r.dtype].itemsize)
            if span is None:
                return None
            entries.append((a.output_pointer(r.what), offsets[r.slot], span, None, -1))
            arrays.append(y)
            continue
        source, allocate = -1, hot.allocators[j]  # allocate(shape); (x); or () with -2
        if j in likes and shapes is not None:
            i, dtype, like = likes[j]
            x, made = inputs[i], hot.ins[i].adapter
            if made is not None and made is not NULL and x.dtype is dtype and shapes[j] == x.shape:
                plain = made.plain_like  # without a memory format where none is needed
                use = plain if plain is not None and _standard(*made.layout(x)) else like
                source, allocate = i, use
        fixed = _fixed_empty(a, DTYPES[r.dtype], hot.where, shapes, j)
        if fixed is not None:  # the output's layout is the Call's own: made from nothing
            source, allocate = -2, fixed  # type: ignore[assignment]
        entries.append((a.pointer, offsets[r.slot], 0, allocate, source))
    return tuple(entries)


def _fixed_empty(
    a: Any, dtype: Any, where: tuple[int, int], shapes: Any, j: int
) -> tuple[Callable[[], Any], ...] | None:
    """The framework's (make, fallback, *conditions) for output ``j`` of the call's
    ``output_shapes`` (which a Call compares: every call it serves makes this one shape), or
    None."""
    try:
        shape = tuple(int(n) for n in shapes[j])
    except (TypeError, ValueError, IndexError):
        return None
    return a.fixed_empty(dtype, *where, shape)


def _numpy_scalar(x: Any) -> bool:
    """Whether ``x`` is a NumPy scalar (a Call compares its type and bytes)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.generic) and x.__class__.__module__ == "numpy"


def _frozen(value: Any, depth: int = 0) -> Any:
    """``value`` as a Call compares it (``kk_matches``): None, bool, int, float and str as
    they are, lists and tuples (torch.Size) as tuples of such, dtypes and C++ names by
    identity; else ``_NO``."""
    if value is None or value.__class__ in (bool, int, float, str):
        return value
    if value.__class__ is list or isinstance(value, tuple):  # (torch.Size)
        items = tuple(_frozen(v, depth + 1) for v in value) if depth < 4 else (_NO,)
        return _NO if any(v is _NO for v in items) else items
    if value.__class__ is CxxName:  # frozen, and ``kernelkit.cxx`` gives one object a name
        return value
    try:
        normalize_dtype(value)
    except Exception:  # noqa: BLE001 - not a dtype: a value a Call cannot compare
        return _NO
    return value


def _span(adapter: Any, x: Any, itemsize: int) -> int | None:
    """The bytes from ``x``'s pointer that it may touch (None: negative strides)."""
    shape, strides = adapter.layout(x)
    if not all(shape):
        return 0
    if any(s < 0 for s in strides):
        return None
    return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * itemsize


def _standard(shape: Any, strides: Any) -> bool:
    """Whether ``strides`` (elements) are the row-major ones of ``shape``."""
    step = 1
    for n, st in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if st != step:
            return False
        step *= n
    return True


def _block(pack: ArgPack) -> tuple[bytearray, tuple[int, ...]]:
    """The pack's slots copied into one block, each 8-byte aligned, and where each starts."""
    blob, offsets = bytearray(), []
    for slot in pack.slots:
        offsets.append(len(blob))
        blob += ctypes.string_at(ctypes.addressof(slot), ctypes.sizeof(slot))
        blob += bytearray(-len(blob) % 8)
    return blob, tuple(offsets)
