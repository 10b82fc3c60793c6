"""The specialization key is described once (``key.KEY`` and each adapter's ``key_fields``):
the plan dictionary's key (``call_key``) and a plan's generated guard must agree on every
adapter, for matching and non-matching calls alike."""

from __future__ import annotations

import inspect
import itertools
import re

import numpy as np
import pytest

from kernelkit._api import Kernel
from kernelkit._arrays._abstract import AbstractArray
from kernelkit._arrays.lookup import adapter_for
from kernelkit._backends.cuda import native
from kernelkit._pipeline.key import CALL_ARGS, KEY, CallArgs, call_key, guard_function, guard_of


def _call(inputs, out=None, output_dtypes=("float32",), template=None, backend="cpu", check=None):
    for x in (*inputs, *(out or ())):
        adapter_for(x, "argument")  # as bind does: registers each type's adapter
    return CallArgs(
        inputs=inputs,
        output_shapes=None,
        output_dtypes=output_dtypes,
        grid=(1,),
        threadgroup=(1,),
        template=template,
        init_value=None,
        stream=None,
        out=out,
        backend=backend,
        check=check,
        shared_memory=None,
    )


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _arguments() -> list[object]:
    """One of each kind of argument the adapters take (and near misses of each)."""
    f32, f64 = np.ones(4, np.float32), np.ones(4, np.float64)
    args: list[object] = [
        f32,
        f64,
        np.ones((), np.float32),  # 0-d
        _readonly(f32),
        f32[::2],  # not contiguous: same key
        1.0,
        2,
        True,
        np.float32(1.0),
        np.int64(3),
        None,  # an optional input
        AbstractArray((4,), np.dtype(np.float32), 1, 0),  # as_jax_callable's, while lowering
        AbstractArray((4,), np.dtype(np.float32), 2, 0),
        AbstractArray((4,), np.dtype(np.float32), 2, 1),
        AbstractArray((), np.dtype(np.float32), 2, 1),
    ]
    torch = pytest.importorskip("torch")
    args += [
        torch.ones(4),
        torch.ones(4, dtype=torch.float64),
        torch.ones(()),
        torch.ones(4, device="meta"),  # get_device() -1 like a CPU tensor
    ]
    for name in ("cupy", "jax"):
        try:
            mod = __import__(name)
            args += [mod.numpy.ones(4, dtype="float32") if name == "jax" else mod.ones(4, "f4")]
        except Exception:  # noqa: BLE001, S112 - not importable, or no device for it
            continue
    return args


def _agree(built: CallArgs, calls: list[CallArgs]) -> None:
    guard = guard_of(built)
    assert guard is not None
    matches = guard_function(guard)
    for c in calls:
        try:
            same = call_key(*c) == guard.key
        except TypeError:  # unhashable: the dictionary cannot hold it, the guard must refuse
            same = False
        assert matches(*c) is same, (built, c)


def test_key_and_guard_agree_for_every_adapter_and_every_pair_of_arguments() -> None:
    args = _arguments()
    calls = [_call([a, b]) for a, b in itertools.product(args, repeat=2)]
    for built in calls:
        _agree(built, calls)


def test_key_and_guard_agree_on_out_and_the_other_key_parts() -> None:
    f32, f64 = np.ones(4, np.float32), np.ones(4, np.float64)
    calls = [
        _call([f32]),
        _call((f32,)),  # a tuple of inputs is another specialization
        _call([f32], out=[f32], output_dtypes=None),
        _call([f32], out=[_readonly(f32)], output_dtypes=None),  # refused later, same key
        _call([f32], out=[f64], output_dtypes=None),
        _call([f32], out=[f32, f32], output_dtypes=None),
        _call([f32], output_dtypes=["float64"]),
        _call([f32], template=[("T", 1)]),
        _call([f32], template=[("T", 2)]),
        _call([f32], template=[("T", "float32")]),
        _call([f32], backend=None),
        _call([f32], check=True),
        _call([f32, f32]),
    ]
    for built in calls:
        _agree(built, calls)
    unhashable = _call([f32], template=[("T", [1])])
    assert guard_of(unhashable) is None


def test_a_guard_keeps_no_argument_alive() -> None:
    guard = guard_of(_call([np.ones(4, np.float32)]))
    assert guard is not None
    assert all(isinstance(t, type) for types in guard.types for t in types)
    flat = repr(guard)
    assert "array(" not in flat


def test_the_call_argument_order_is_named_once() -> None:
    params = [p for p in inspect.signature(Kernel.__call__).parameters if p not in ("self",)]
    params.remove("verbose")  # a slow-path switch, not part of what a plan's run takes
    params.remove("timeout")  # sets this thread's launch limit around the plan's run
    assert tuple(params) == CallArgs._fields
    assert ", ".join(CallArgs._fields) == CALL_ARGS
    assert {name for name, _ in KEY} <= set(CallArgs._fields)
    source = inspect.getsource(Kernel._call).split("\n")  # (``__call__``'s Python path)
    start = next(i for i, line in enumerate(source) if "args = (" in line)
    end = next(i for i in range(start, len(source)) if source[i].strip() == ")")
    assert [line.strip() for line in source[start + 1 : end]] == [f"{f}," for f in CallArgs._fields]
    # and the Front's keywords (``Kernel.__call__`` in C) in the same order
    text = native.SOURCE.read_text()
    start = text.index("kk_front_names[12] = {")
    names = text[start : text.index("};", start)]
    assert tuple(re.findall(r'"(\w+)"', names)) == CallArgs._fields
