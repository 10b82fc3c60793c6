"""``kk_launch.Guards`` (``native/kk_launch.c``): the check in C that CuPy's arrays get for the
ops' recent calls and the calls repeated in C (``_arrays.attribute_checker``). Built and run on
the CPU with NumPy arrays, whose ``dtype``, ``shape`` and ``strides`` are what CuPy's are."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkit import _arrays
from kernelkit._backends.cuda import native

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

FIELDS = (("dtype",), ("shape",), ("strides",))


@pytest.fixture(scope="module")
def guards():
    module, why = native._module()
    if module is None:
        pytest.skip(f"no native module here: {why}")
    return module.Guards


class Holder:
    """An object with a nested attribute path, like CuPy's ``x.data.device_id``."""

    def __init__(self, device_id):
        self.data = type("Data", (), {})()
        self.data.device_id = device_id


class Raising:
    def __init__(self, error):
        self.error = error

    @property
    def dtype(self):
        if self.error is not None:
            raise self.error
        return "float32"


def test_loading_the_module_provides_the_checkers_their_guards(guards):
    # (a test that rebuilds the module in another cache may have loaded another copy first)
    assert [g.__name__ for g in _arrays.GUARDS] == [guards.__name__]
    a = np.zeros((2, 3), np.float32)
    check = _arrays.attribute_checker(FIELDS)((a,))
    assert check(a) and check(np.ones((2, 3), np.float32)) and not check(a.T)


def test_arrays_like_the_ones_it_was_made_from_pass_and_others_fail(guards):
    a, b = np.zeros((3, 4), np.float32), np.zeros(7, np.int64)
    check = guards(FIELDS, (a, b)).check
    assert check(a, b) and check(np.empty((3, 4), np.float32), np.empty(7, np.int64))
    others = [
        (a.T.copy().T, b),  # the same shape, other strides
        (np.zeros((4, 3), np.float32), b),  # another shape
        (np.zeros((3, 4), np.float64), b),  # another dtype
        (np.zeros((3, 8), np.float32)[:, ::2], b),  # a strided view
        (np.zeros((3, 4), np.float32).view(np.matrix), b),  # a subclass: another class
        (a,),  # fewer arrays
        (a, b, b),  # more
        (b, a),  # swapped
    ]
    for args in others:
        assert check(*args) is False, args
    assert guards(FIELDS, (a, a)).check(a, a) is True  # one array passed twice passes


def test_nested_paths_and_values_compared_by_identity_past_ints_and_tuples(guards):
    check = guards((("data", "device_id"),), (Holder(0),)).check
    assert check(Holder(0)) and not check(Holder(1))
    dtype = np.dtype("float32")
    assert guards((("dtype",),), (np.zeros(1, dtype),)).check(np.zeros(1, np.float32))
    # an equal dtype that is another object: the check fails (the signature then serves it)
    odd = np.dtype([("a", "<f4")])
    same = np.dtype([("a", "<f4")])
    assert odd == same and odd is not same
    assert not guards((("dtype",),), (np.zeros(1, odd),)).check(np.zeros(1, same))


def test_an_attribute_that_cannot_be_read_fails_the_check_and_interrupts_propagate(guards):
    made = guards((("dtype",),), (Raising(None),))
    assert made.check(Raising(None)) is True
    assert made.check(Raising(ValueError("no dtype now"))) is False
    with pytest.raises(KeyboardInterrupt):
        made.check(Raising(KeyboardInterrupt()))


def test_bad_fields_and_unreadable_arrays_are_refused_at_construction(guards):
    a = np.zeros(2)
    for fields in ((), (("dtype", 1),), ("dtype",), ((),)):
        if fields == ():
            assert guards(fields, (a,)).check(np.ones(5))  # no fields: the class alone
            continue
        with pytest.raises(TypeError, match="Guards"):
            guards(fields, (a,))
    with pytest.raises(AttributeError):
        guards((("nothing",),), (a,))
    with pytest.raises(TypeError):
        guards(FIELDS, [a])


SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=3)
DTYPES = st.sampled_from([np.float32, np.float16, np.int32, np.float64])


def _array(shape, dtype, step, transpose):
    base = np.zeros([*shape[:-1], shape[-1] * step], dtype)[..., ::step]
    return base.T if transpose else base


@settings(max_examples=300, deadline=None)
@given(
    st.tuples(SHAPES, DTYPES, st.integers(1, 2), st.booleans()),
    st.tuples(SHAPES, DTYPES, st.integers(1, 2), st.booleans()),
)
def test_the_check_agrees_with_the_signature_it_stands_in_for(first, second):
    module, why = native._module()
    if module is None:
        pytest.skip(why)
    a, b = _array(*first), _array(*second)
    want = (a.__class__, a.dtype, a.shape, a.strides) == (b.__class__, b.dtype, b.shape, b.strides)
    assert module.Guards(FIELDS, (a,)).check(b) is want
