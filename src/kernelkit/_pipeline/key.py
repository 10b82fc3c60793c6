"""The specialization key, described once (``KEY``), and the order of a call's arguments
(``CallArgs``). From ``KEY`` come both the plan dictionary's key (``call_key``) and the test
that a plan's generated ``run`` makes first (``guard_lines``), so the two cannot drift apart.

What decides a specialization: the arguments' adapters' keys (types, dtypes, devices; never
shapes or values), ``output_dtypes``, ``template``, ``backend`` and ``check``. The launch
geometry, ``output_shapes``, ``init_value``, ``stream`` and ``shared_memory`` never do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .._arrays import BY_TYPE, KEY_FN
from .._generated import execute

__all__ = [
    "CALL_ARGS",
    "KEY",
    "MISS",
    "CallArgs",
    "Guard",
    "call_key",
    "guard_function",
    "guard_lines",
    "guard_of",
]

MISS = object()  # returned by a plan's run when the call belongs to another specialization


class CallArgs(NamedTuple):
    """A call's arguments in the order they travel (``Kernel.__call__`` builds this tuple as a
    plain tuple on the hot path; a generated ``run`` takes them as parameters)."""

    inputs: Any
    output_shapes: Any
    output_dtypes: Any
    grid: Any
    threadgroup: Any
    template: Any
    init_value: Any
    stream: Any
    out: Any
    backend: Any
    check: Any
    shared_memory: Any


CALL_ARGS = ", ".join(CallArgs._fields)  # a generated function's parameter list

# How a part of the key is compared; each kind says how the key is built and how it is tested.
ARRAYS = "arrays"  # the sequence's class and each element's adapter key
OPTIONAL_ARRAYS = "optional arrays"  # None, or each element's adapter key
OPTIONAL_TUPLE = "optional tuple"  # None, or the sequence as a tuple
VALUE = "value"  # compared as it is

# The key: (call argument, kind), in the key's order.
KEY: tuple[tuple[str, str], ...] = (
    ("inputs", ARRAYS),
    ("out", OPTIONAL_ARRAYS),
    ("output_dtypes", OPTIONAL_TUPLE),
    ("template", OPTIONAL_TUPLE),
    ("backend", VALUE),
    ("check", VALUE),
)

_ELEMENTS = "tuple([_key_fn[type(a)](a) for a in {v}])"
_KEY_EXPR = {
    ARRAYS: f"(type({{v}}), {_ELEMENTS})",
    OPTIONAL_ARRAYS: f"None if {{v}} is None else {_ELEMENTS}",
    OPTIONAL_TUPLE: "None if {v} is None else tuple({v})",
    VALUE: "{v}",
}


def _make_call_key() -> Callable[..., tuple]:
    parts = "".join(f"\n        {_KEY_EXPR[kind].format(v=name)}," for name, kind in KEY)
    source = f"def call_key({CALL_ARGS}):\n    return ({parts}\n    )\n"
    ns: dict[str, Any] = {"_key_fn": KEY_FN}
    execute(source, ns, "call_key")
    fn = ns["call_key"]
    fn.source = source
    return fn


call_key = _make_call_key()
call_key.__doc__ = """The plan dictionary's key of a call (its arguments as ``CallArgs``);
raises for an argument of a type without an adapter yet, or TypeError when unhashable."""


class Guard(NamedTuple):
    """What a plan's guard is written from: the key of the call it was built for, and the
    types of the array arguments of each ``ARRAYS``/``OPTIONAL_ARRAYS`` part (never the
    arrays themselves: a plan must not keep its first call's arrays alive)."""

    key: tuple
    types: tuple[tuple[type, ...], ...]


def guard_of(args: CallArgs) -> Guard | None:
    """The call's key and guard facts; None when the key is unhashable (a list template value:
    such a plan is not kept, and its run checks nothing)."""
    try:
        key = call_key(*args)
        hash(key)
    except TypeError:
        return None
    types = tuple(
        tuple(type(a) for a in getattr(args, name) or ())
        for name, kind in KEY
        if kind in (ARRAYS, OPTIONAL_ARRAYS)
    )
    return Guard(key, types)


def guard_lines(guard: Guard, ns: dict[str, Any]) -> list[str]:
    """Lines returning ``_MISS`` unless the call's key is exactly ``guard.key``: the same test
    as the plan dictionary's, without building and hashing a key. ``ns`` receives the names."""
    tests: list[str] = []
    types = iter(guard.types)
    for (name, kind), value in zip(KEY, guard.key):
        if kind == VALUE:
            ns[f"_{name}"] = value
            tests.append(f"{name} == _{name}")
        elif kind == OPTIONAL_TUPLE:
            ns[f"_{name}"] = value
            tests.append(
                f"{name} is None"
                if value is None
                else f"{name} is not None and tuple({name}) == _{name}"
            )
        else:
            arg_types = next(types)
            if kind == ARRAYS:
                cls, keys = value
                ns[f"_{name}_class"] = cls
                tests.append(f"{name}.__class__ is _{name}_class")
            elif value is None:
                tests.append(f"{name} is None")
                continue
            else:
                keys = value
                tests.append(f"{name} is not None")
            tests.append(f"len({name}) == {len(keys)}")
            tests += [
                _arg_test(f"{name}[{i}]", t, k, f"_{name}{i}_", ns)
                for i, (t, k) in enumerate(zip(arg_types, keys))
            ]
    ns.update(_MISS=MISS, _key_of=_key_of)
    body = " and\n            ".join(tests)
    return [
        "    try:",
        f"        if not ({body}):",
        "            return _MISS",
        "    except Exception:",
        "        return _MISS",
    ]


def guard_function(guard: Guard) -> Callable[..., bool]:
    """``guard_lines`` alone as a function of the call's arguments: True when the call is the
    guard's specialization (for tests and for reading)."""
    ns: dict[str, Any] = {}
    source = f"def matches({CALL_ARGS}):\n" + "\n".join(guard_lines(guard, ns))
    source += "\n    return True\n"
    execute(source, ns, "guard")
    return lambda *args: ns["matches"](*args) is True


def _arg_test(var: str, tp: type, key: Any, tag: str, ns: dict[str, Any]) -> str:
    """For the type seen at build time, the adapter's own inline test; any other type is
    compared the generic way (its adapter's key), exactly as the dictionary would."""
    expr, extra = BY_TYPE[tp].guard(var, key, tag)
    ns.update(extra)
    ns[f"{tag}t"], ns[f"{tag}k"] = tp, key
    return f"(({expr}) if {var}.__class__ is {tag}t else _key_of({var}) == {tag}k)"


def _key_of(x: Any) -> Any:
    return KEY_FN[type(x)](x)
