"""Array adapters: one per framework, found by the array's type with one dictionary lookup.

An adapter answers, for arrays of its framework: a small hashable key for the specialization
(dtype, device, 0-d: described once as ``key_fields``, from which both the key function and the
hot path's inline test are derived), full facts (shape, strides in elements, device) on the slow
path, the data pointer on the hot path, allocation of outputs, and the framework's current stream.

This module is the base every framework's module imports; ``lookup.adapter_for`` finds an
array's adapter and imports the framework's module on first sight of its type.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._dtypes import DType
from .._generated import execute

__all__ = [
    "BY_TYPE",
    "DLPACK_CPU",
    "DLPACK_CUDA",
    "KEY_FN",
    "NULL",
    "Adapter",
    "ArrayInfo",
    "register",
    "row_strides",
]

DLPACK_CPU = 1
DLPACK_CUDA = 2


def row_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The row-major strides (in elements) of ``shape``."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


@dataclass(frozen=True)
class ArrayInfo:
    """Facts about one array, gathered once per specialization (slow path)."""

    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # in elements
    device_type: int  # DLPack device type
    device_index: int
    contiguous: bool


CLASS = "{x}.__class__"  # a key field that the guard has already tested (see Adapter.guard)


class Adapter:
    """Base adapter; subclasses implement one framework. Methods take the array first.

    The specialization key is described once, by ``key_fields``: Python expressions over
    ``{x}`` (the argument), each of bool, int or otherwise hashable value, or a tuple of
    mutually exclusive flags (the index of the true one, -1 for none: one test when one is
    true); the key is their tuple. ``key`` (the plan dictionary's) and ``guard`` (the generated
    hot path's inline test) are both derived from it. An adapter whose key is not a few
    attribute reads (a view through another framework) leaves ``key_fields`` None and defines
    ``key``; its guard calls it."""

    framework: str = "?"
    synchronous: bool = False  # the framework cannot share a stream: sync after launch
    shape_attribute: bool = True  # arrays have a ``.shape`` tuple (cheaper than ``layout``)
    # the built-in ops' signatures of these arrays hold their strides, so one signature is one
    # layout (a run fixed for it need not test contiguity per call: ``launch.Fixed``)
    strides_in_signature: bool = False
    key_fields: tuple[str | tuple[str, ...], ...] | None = None
    # ``pointer`` as a Python expression over ``{x}`` that the generated hot path inlines (no
    # Python frame per array), or None: the hot path calls ``pointer``
    pointer_expr: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = cls.__dict__.get("key_fields")
        if fields is not None:  # a plain function: no bound method on the hot path
            text = f"def key(x):\n    return ({''.join(_key_expr(f) + ', ' for f in fields)})\n"
            cls.key = staticmethod(execute(text, {}, "adapter key")["key"])  # type: ignore[method-assign]

    def key(self, x: Any) -> Any:
        raise NotImplementedError

    def info(self, x: Any, what: str) -> ArrayInfo:
        raise NotImplementedError

    def guard(self, var: str, key: Any, tag: str) -> tuple[str, dict[str, Any]]:
        """A Python expression, true exactly when ``self.key(var) == key`` for an argument
        whose class was already found to be this adapter's, for the generated hot path; names
        it needs are returned in a namespace, each starting with ``tag``. Derived from
        ``key_fields``: a constant field or the class needs no test, a bool or int is inlined."""
        if self.key_fields is None:
            return f"{tag}kf({var}) == {tag}k", {f"{tag}kf": self.key, f"{tag}k": key}
        tests, ns = [], {}
        for i, (field, value) in enumerate(zip(self.key_fields, key)):
            if isinstance(field, tuple):  # exclusive flags: the true one implies the others
                flags = [f.format(x=var) for f in field]
                tests += [f"({flags[value]})"] if value >= 0 else [f"not ({f})" for f in flags]
                continue
            expr = field.format(x=var)
            if field == CLASS or "{x}" not in field:
                continue
            if value is True or value is False:
                tests.append(f"({expr})" if value else f"not ({expr})")
            elif value is None:
                tests.append(f"{expr} is None")
            elif type(value) is int:
                tests.append(f"{expr} == {value!r}")
            else:
                tests.append(f"{expr} == {tag}f{i}")
                ns[f"{tag}f{i}"] = value
        return " and ".join(tests) or "True", ns

    def pointer(self, x: Any) -> int:
        raise NotImplementedError

    def output_pointer(self, what: str) -> Callable[[Any], int]:
        """Like ``pointer``, for an array the kernel writes: refuses read-only memory with an
        ArgumentError naming ``what`` (default: the framework's arrays are always writable)."""
        return self.pointer

    def layout(self, x: Any) -> tuple[Sequence[int], Sequence[int]]:
        """(shape, strides in elements), cheaply: used per call when the body reads them."""
        info = self.info(x, "array")
        return info.shape, info.strides

    def is_contiguous(self, x: Any) -> bool:
        raise NotImplementedError

    def contiguous(self, x: Any) -> Any:
        raise NotImplementedError

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        """A callable ``shape -> new uninitialized array`` (prepared once per specialization)."""
        raise NotImplementedError

    def signer(self, tp: type) -> Callable[[tuple], Any] | None:
        """``signature(arrays)`` for the built-in ops' prepared calls (``SIGNERS``) on arrays of
        type ``tp`` whose class, dtype, shape, strides and device describe a call: one hashable
        value, KeyError/AttributeError/TypeError for what it cannot describe. None: such calls
        are validated every time (the default; torch's and NumPy's are installed from above)."""
        return None

    def like(self, dtype: DType) -> tuple[Any, Callable[[Any], Any]] | None:
        """(this framework's dtype object for ``dtype``, ``empty_like``) where a new array shaped,
        typed and placed as a row-contiguous input is cheaper to make from that input than from a
        shape (torch: 3.9 µs against 6.5 on an H100 host); None: always the allocator."""
        return None

    # ``empty_like`` for an input whose strides are already the standard row-major ones (no
    # memory format to ask for: torch's parses no keyword), or None
    plain_like: Callable[[Any], Any] | None = None

    def fixed_empty(
        self, dtype: DType, device_type: int, device_index: int, shape: tuple[int, ...]
    ) -> tuple[Callable[[], Any], ...] | None:
        """(make, fallback, *conditions): ``make()`` gives a new uninitialized row-major array
        of this one ``shape``, ``dtype`` and device, where the framework makes such an array
        faster than from a shape or an input (for a call repeated in C, whose outputs' layouts
        are fixed), and ``fallback()`` one as the framework's own allocator would, which the
        Call takes where every ``condition()`` is true; None: none faster."""
        return None

    def fill(self, x: Any, value: Any) -> None:
        raise NotImplementedError

    def stream(self, device_index: int) -> int:
        """The framework's current stream on this device, as an int handle (0: default)."""
        return 0

    def stream_getter(self, device_type: int, device_index: int) -> Callable[[], int]:
        """A no-argument callable returning ``stream(device_index)``, prepared once per plan;
        host memory has no stream (and must not touch the framework's GPU runtime: a CPU-only
        torch build has none)."""
        if device_type == DLPACK_CPU:
            return _no_stream
        return functools.partial(self.stream, device_index)

    def prepare(self, x: Any) -> Any:
        """Make the array safe to read from another stream (e.g. wait for JAX); default: as is."""
        return x

    def wrap(self, x: Any) -> Any:
        """Turn an array this adapter allocated into what the user gets back."""
        return x

    def run_for(self, plan: Any, bound: Any, guard: Any) -> Callable[..., Any]:
        """The run a new plan (``_plan.LaunchPlan``) of this framework's arrays uses: its own
        ``plan.run`` (the default), or one that launches through the framework's runtime
        instead (JAX: XLA's FFI, on XLA's stream) and falls back to ``plan.run``. ``bound`` is
        bind's result and ``guard`` the plan's (None: unguarded). Called once per plan."""
        return plan.run


def _key_expr(field: str | tuple[str, ...]) -> str:
    """One key field as an expression of ``x`` (exclusive flags: the true one's index, or -1)."""
    if isinstance(field, str):
        return field.format(x="x")
    return "".join(f"{i} if ({f.format(x='x')}) else " for i, f in enumerate(field)) + "-1"


# framework -> run_for(plan, bound, guard): how plans of that framework's arrays launch, when an
# integration above (``_integrations.jax_eager``) installs one; ``Adapter.run_for`` asks it
RUNS_FOR: dict[str, Callable[..., Any]] = {}
# array class -> signature(tuple of arrays or None) -> hashable, for the built-in ops' prepared
# calls (``ops._prepared``); NumPy's from the ops, torch's from the torch integration
SIGNERS: dict[type, Callable[[tuple], Any]] = {}
# the same for the torch ops' own implementations (``ops.*.eager_*``, which Dynamo never traces):
# set where the torch ops are defined, whether or not the public ops' SIGNERS entry is (that one
# waits for Dynamo's ``substitute_in_graph``), so a torch op called directly, as an exported or
# compiled program does, takes the prepared call from its second call on
EAGER_SIGNERS: dict[type, Callable[[tuple], Any]] = {}
# array class -> checker(tuple of arrays) -> check(*arrays) -> bool, or None: a check made in C
# that later arrays are like these (class, dtype, device, shape, strides, no gradient), for the
# built-in ops' most recent prepared calls (``ops._prepared.Recent``) and the kernels' calls
# repeated in C (``_pipeline.repeat``); torch's set by its adapter (``_torch.checker``)
CHECKERS: dict[type, Callable[[tuple], Any]] = {}
# () -> bool: whether the thread is where no check can be made that serves later calls (torch:
# under a dispatch mode, as a compiled graph's first run is, or inside a torch.func transform);
# a recent call is then tried again later, not given up (``ops._prepared.Recent.again``)
CHECKS_BLOCKED: list[Callable[[], bool]] = []
# the native module's ``Guards(fields, arrays)`` (``kk_launch.c``: each array's exact class and
# the values of attribute paths, compared in C), once that module is loaded
# (``_backends.cuda.native``); ``attribute_checker`` makes CHECKERS entries from it
GUARDS: list[Callable[[tuple, tuple], Any]] = []


def attribute_checker(fields: tuple[tuple[str, ...], ...]) -> Callable[[tuple], Any]:
    """A CHECKERS entry for arrays that describe themselves through attributes (``fields``:
    paths such as ``("data", "device_id")``, which with the exact class must say everything a
    signature does): ``Guards(fields, arrays).check``, or None while the native module that
    makes it is not loaded (then the signature serves every call)."""

    def checker(arrays: tuple) -> Any:
        return GUARDS[0](fields, arrays).check if GUARDS else None

    return checker


# hook(op name, arrays, args, out) -> NotImplemented (the op's eager path runs) or the call's
# result through an integration (``_integrations.torch_route``), asked on a signature's first call
OP_HOOKS: list[Callable[..., Any]] = []

_no_stream = int  # int() is 0, with no Python frame per call


class ScalarAdapter(Adapter):
    """Python scalars: passed by value; only their type is in the key."""

    framework = "scalar"
    key_fields = (CLASS,)


class NumpyScalarAdapter(ScalarAdapter):
    """NumPy scalars: passed by value; only their dtype is in the key."""

    key_fields = ("{x}.dtype",)


class NullAdapter(Adapter):
    """``None`` for an input declared in ``optional_inputs``: a null pointer, no elements."""

    framework = "none"
    shape_attribute = False
    key_fields = ()
    pointer_expr = "0"
    # True for None, with no Python frame; a C function in place of the method, same call shape
    is_contiguous = staticmethod(operator.not_)  # type: ignore[assignment]

    def pointer(self, x: Any) -> int:
        return 0

    def layout(self, x: Any) -> tuple[Sequence[int], Sequence[int]]:
        return (0,), (1,)


NULL = NullAdapter()

BY_TYPE: dict[type, Adapter] = {
    type(None): NULL,
    bool: ScalarAdapter(),
    int: ScalarAdapter(),
    float: ScalarAdapter(),
}


# type -> adapter.key, for the hot path's one-call-per-argument key (no bound-method creation)
KEY_FN: dict[type, Callable[[Any], Any]] = {t: a.key for t, a in BY_TYPE.items()}


def register(tp: type, adapter: Adapter) -> None:
    """Make ``adapter`` the one for arguments of type ``tp`` (kernelkit's own argument types)."""
    BY_TYPE[tp] = adapter
    KEY_FN[tp] = adapter.key
