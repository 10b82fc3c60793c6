"""A built-in op's warm call: one dictionary lookup from the call's signature to a function
prepared for it, which allocates, launches and returns.

The first call with a new signature (array classes, dtypes, shapes, strides, devices and the
op's options) runs the op's validating path; what it decided (the implementation, the kernel's
specialization, a framework route) is then fixed in one closure over the kernel's unchecked hot
path (``Kernel._direct_run``). Later calls with the same signature cost the signature, the
lookup and that closure: a handful of Python calls in all.

Which array classes get a signature here is a table (``SIGNERS``): NumPy arrays from the start;
torch tensors once the torch integration, above the ops, has made the ops visible to torch's
tracers (``HOOKS``), so that nothing traced ever reaches a prepared closure. ``HOOKS`` are how
integrations take a call away from the eager path (``torch.compile``, autograd): the ops never
import them.

Where the arrays' framework can check them in C (``CHECKERS``: torch's ``TensorGuards``, with
which Dynamo guards its compiled graphs), an op also keeps its few most recent prepared calls
(``Recent``), each behind such a check of its arrays and a comparison of its other arguments,
and tries them before the signature: a decode loop calls each op with one or two signatures, and
the check of two tensors costs 0.15 µs where the signature and the lookup cost 0.8 (2-core VM).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import _arrays
from .._errors import ArgumentError
from .._select.override import FORCED

__all__ = [
    "AD",
    "EAGER_SIGNERS",
    "FORCED",
    "HOOKS",
    "SIGNERS",
    "Recent",
    "direct_launch",
    "numpy_signature",
    "routed",
    "signature",
    "store",
]

# an array class -> signature(tuple of arrays or None) -> hashable; KeyError/AttributeError/
# TypeError for arguments it cannot describe (the validating path then names what is wrong)
SIGNERS = _arrays.SIGNERS
EAGER_SIGNERS = _arrays.EAGER_SIGNERS  # the torch ops' implementations' (``_arrays``)

CHECKERS = _arrays.CHECKERS  # an array class -> checker(arrays) -> check(*arrays) or None

# hook(op name, arrays, args, out) -> NotImplemented (the eager path runs) or the call's result
# through the integration (the op's ``args`` as its integration takes them), after validation
HOOKS = _arrays.OP_HOOKS

# kernelkit.force's context variable: its .get() and KERNELKIT_SELECT_FORCE's text (as read by
# _config) are part of every prepared key, as selection reads both
FORCED = FORCED
_LIMIT = 4096  # prepared signatures kept per op (a table past it starts over)


class _NoLevels:
    """Until the torch integration names torch's forward-mode AD module: never inside a level."""

    _current_level = -1


class _ForwardAD:
    """Where torch keeps its forward-mode AD level (``torch.autograd.forward_ad``'s
    ``_current_level``: -1 outside ``dual_level()``), set by the torch integration. Inside a
    level a tensor may carry a tangent that neither an array's signature nor torch's C check
    sees, and the ops' kernels would drop it: the ops put the level in their keys' options (a
    call inside a level never matches a call prepared outside one) and prepare nothing inside
    one (``store``, ``Recent.remember``), so every such call takes the validating path, where
    the torch integration refuses a tangent by name."""

    __slots__ = ("module",)

    def __init__(self) -> None:
        self.module: Any = _NoLevels


AD = _ForwardAD()


def numpy_signature(arrays: tuple) -> tuple:
    """NumPy arrays (or None): class, dtype (byte order included), shape, strides."""
    sig = []
    for a in arrays:
        sig.append(None if a is None else (a.__class__, a.dtype, a.shape, a.strides))
    return tuple(sig)


def _install_numpy() -> None:
    import sys

    np = sys.modules.get("numpy")
    if np is not None:
        SIGNERS[np.ndarray] = numpy_signature


class Recent:
    """An op's most recent prepared calls without ``out=``, newest first: ``entries`` holds
    (check, extras, run), where ``check(*arrays)`` (made in C by the arrays' framework) is true
    for arrays of the same class, dtype, device, shape and strides as those the run was prepared
    for, none needing a gradient, and ``extras`` is the rest of the call's prepared key (options,
    the tables' generation, the forced choices), which the op compares. An op's warm call tries
    them before its signature; one that matches none takes the signature and the table, as
    before. Entries are added when a signature is first prepared, at most ``LIMIT`` kept (the
    oldest dropped), and replaced as one tuple, so a reading thread sees one or the other.
    (torch's check also refuses one tensor passed twice, as ``f(a, a)``: such calls take the
    signature.)

    Where the run launches through a call repeated in C that takes the signature's calls whole
    (``_common.decided_of``: it checks all that ``check`` does, scalars too, and returns
    ``MISS`` for any other call), ``calls`` holds (that Call, extras, its arguments after the
    inputs) instead, which the op tries first: one C call checks and launches, no Python frame
    of kernelkit's and no second check of the arrays (``call(inputs, *rest)`` gives the outputs'
    list, or ``MISS``).

    Calls with ``out=`` have their own entries (``outs``: check(*arrays, out), extras, run),
    made from a warm call that the signature served (``again``), the check covering the out as
    it covers the inputs; the run is the one the signature's table holds, which checks the
    out's overlap with the inputs on every call, as it does there."""

    LIMIT = 4
    __slots__ = ("calls", "entries", "outs", "tried")

    def __init__(self) -> None:
        self.entries: tuple[tuple[Any, tuple, Any], ...] = ()
        self.calls: tuple[tuple[Any, tuple, tuple], ...] = ()
        self.outs: tuple[tuple[Any, tuple, Any], ...] = ()
        self.tried: set[Any] = set()  # the runs that a warm call has tried to ``again``

    def remember(
        self, arrays: tuple, extras: tuple, run: Any, kept: Any = None, out: bool = False
    ) -> None:
        """Keep ``run`` (the prepared run; ``kept``: the op's own form of it, to hold in its
        place) for calls with arrays like ``arrays`` and these ``extras``, where the arrays'
        framework has a checker that takes them (none needs a gradient) and passes them
        (torch's refuses one tensor passed twice); as its decided Call where it has one
        (``calls``). ``out``: ``arrays`` ends with a call's out= array (``outs``)."""
        if AD.module._current_level >= 0:  # tangents no check sees: nothing kept (``AD``)
            return
        taken = None if out else getattr(run, "decided", None)
        found = None if taken is None else taken()
        if found is not None:
            entry = (found[0], extras, found[1])
            if not any(c is entry[0] and kept == extras for c, kept, _ in self.calls):
                self.calls = (entry, *self.calls[: self.LIMIT - 1])
                return
            # kept already: a call it declined (another scalar value, another dispatch state)
            # gets the arrays' check, which serves any scalar
        checker = CHECKERS.get(arrays[0].__class__)
        if checker is None:
            return
        try:
            check = checker(arrays)
            passed = check is not None and check(*arrays)
        except Exception:  # noqa: BLE001 - arrays it cannot check: the signature serves them
            return
        if passed and out:
            self.outs = ((check, extras, run), *self.outs[: self.LIMIT - 1])
        elif passed:
            entry = (check, extras, run if kept is None else kept)
            self.entries = (entry, *self.entries[: self.LIMIT - 1])

    def again(
        self,
        arrays: tuple,
        extras: tuple,
        run: Callable[..., Any],
        kept: Any = None,
        out: Any = None,
    ) -> None:
        """``remember`` from a warm call that the signature served, once per run: a
        signature's first call may have run where no entry that serves later calls could be
        made (inside a torch dispatch mode's handler, as a compiled graph's first run is), and
        an op with more signatures than ``LIMIT`` would otherwise make entries on every call.
        ``kept``: what the entry holds in place of ``run`` (an op's own form of it); ``out``:
        the call's out= array, or None. (A call that passes one array twice spends the try: no
        check passes it.) Where no check can be made now (a tracer's dispatch mode:
        ``CHECKS_BLOCKED``) the try is not spent: a later call makes the entry; nor where the
        run has not yet tried to make its call repeated in C (its first call ran under such a
        mode), which it does on this call: the next one keeps it."""
        if any(blocked() for blocked in _arrays.CHECKS_BLOCKED):
            return
        if out is None and getattr(getattr(run, "decided", None), "pending", _never)():
            return  # the run makes its Call on this call (``_common.decided_of``): the next asks
        if len(self.tried) >= _LIMIT:
            self.tried.clear()
        self.tried.add(run)
        if out is None:
            self.remember(arrays, extras, run, kept)
        else:
            self.remember((*arrays, out), extras, run, None, True)


def routed(name: str, arrays: Sequence[Any], args: tuple, out: Any) -> Any:
    """The result of the first hook that takes this call, else ``NotImplemented``."""
    for hook in HOOKS:
        result = hook(name, arrays, args, out)
        if result is not NotImplemented:
            return result
    return NotImplemented


def signature(arrays: tuple, eager: bool = False) -> Any:
    """The arrays' signature by the first one's class (the first that is not None: an
    elementwise call's Python numbers are None in their places), or None where none is kept for
    it; ``eager``: for the torch ops' implementations' tables (``EAGER_SIGNERS``)."""
    lead = arrays[0] if arrays[0] is not None else next((a for a in arrays if a is not None), None)
    sign = (EAGER_SIGNERS if eager else SIGNERS).get(lead.__class__)
    if sign is None:
        _install_numpy()  # (NumPy imported after the ops)
        return None
    try:
        return sign(arrays)
    except Exception:  # noqa: BLE001 - not arrays it can describe: never prepared
        return None


def _never() -> bool:
    return False


def store(table: dict[Any, Any], key: Any, run: Callable[..., Any]) -> None:
    """Keep ``run`` for ``key`` (bounded: a table past ``_LIMIT`` entries starts over; nothing
    inside a forward-mode AD level, ``AD``)."""
    if AD.module._current_level >= 0:
        return
    if len(table) >= _LIMIT:
        table.clear()
    try:
        table[key] = run
    except TypeError:  # an unhashable option: never prepared
        pass


def direct_launch(
    launch: Any, has_out: bool, refuse: Any = None, same: tuple = ()
) -> Callable[[Any, Any], Any]:
    """``run(arrays, out)`` for a launcher prepared by ``_common.one_output_launch`` that has
    launched once: straight into the kernel's unchecked hot path (the op's signature fixed the
    specialization). Any other launcher is returned as it is.

    With ``out=`` and ``refuse(arrays, out)`` (the op's overlap check, raising its error), the
    hot path's own overlap check stands in for the op's, whose error it raises when the hot path
    refuses a call; ``same`` lists (input index, its pointer getter, out's pointer getter) of the
    inputs the op refuses even as the out itself (which the hot path allows), compared first."""
    found = getattr(launch, "direct", None)
    direct = None if found is None else found(has_out)
    if direct is None:
        return launch
    run, shapes, dtypes, grid, group, template, smem = direct
    if has_out:
        return _run_out(run, grid, group, template, smem, refuse, same)

    def run_new(arrays: Any, out: Any) -> Any:
        return run(arrays, shapes, dtypes, grid, group, template, None, None, None, None, None,
                   smem)[0]  # fmt: skip

    run_new.decided = getattr(launch, "decided", None)  # type: ignore[attr-defined]  # (Recent)
    return run_new


def _run_out(
    run: Any, grid: Any, group: Any, template: Any, smem: Any, refuse: Any, same: tuple
) -> Callable[[Any, Any], Any]:
    """``direct_launch``'s ``run(arrays, out)`` with an ``out=``."""
    if refuse is None:

        def run_out(arrays: Any, out: Any) -> Any:
            run(arrays, None, None, grid, group, template, None, None,
                [out], None, None, smem)  # fmt: skip
            return out

        return run_out

    def run_checked(arrays: Any, out: Any) -> Any:
        try:
            run(arrays, None, None, grid, group, template, None, None,
                [out], None, None, smem)  # fmt: skip
        except ArgumentError:  # the op's own error names its arguments
            refuse(arrays, out)
            raise
        return out

    if not same:
        return run_checked

    def run_same(arrays: Any, out: Any) -> Any:
        for i, ptr, out_ptr in same:
            if ptr(arrays[i]) == out_ptr(out):
                refuse(arrays, out)
        return run_checked(arrays, out)

    return run_same


_install_numpy()
