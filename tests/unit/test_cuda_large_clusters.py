"""A kernel compiled for a cluster of more than 8 blocks opts in to the non-portable size when
it loads (``driver._allow_large_clusters``): run against a stand-in for cuda-bindings' driver
module that reports a compiled cluster shape and records what is set."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings")

from cuda.bindings import driver as real

from kernelkit._backends.cuda import driver
from kernelkit._errors import BackendError

ATTR = real.CUfunction_attribute


class FakeDriver:
    """cuFuncGetAttribute / cuFuncSetAttribute of one function with a compiled cluster shape."""

    CUfunction_attribute = ATTR

    def __init__(self, shape, read_error=0, set_error=0):
        self.shape = dict(zip(("WIDTH", "HEIGHT", "DEPTH"), shape))
        self.read_error, self.set_error = read_error, set_error
        self.set: list = []

    def cuFuncGetAttribute(self, attr, fn):  # noqa: N802 - the driver's name
        for dim, value in self.shape.items():
            if attr == getattr(ATTR, f"CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{dim}"):
                return (real.CUresult(self.read_error), value)
        raise AssertionError(f"unexpected attribute {attr}")

    def cuFuncSetAttribute(self, fn, attr, value):  # noqa: N802 - the driver's name
        self.set.append((attr, value))
        return (real.CUresult(self.set_error),)


@pytest.mark.parametrize(
    ("shape", "opts_in"),
    [
        ((16, 1, 1), True),
        ((4, 4, 1), True),
        ((2, 3, 2), True),
        ((8, 1, 1), False),
        ((0, 0, 0), False),
        ((2, 2, 2), False),
    ],
)
def test_more_than_8_blocks_opt_in_to_the_non_portable_size(shape, opts_in):
    fake = FakeDriver(shape)
    driver._allow_large_clusters(fake, object())
    want = [(ATTR.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)] if opts_in else []
    assert fake.set == want


def test_a_driver_that_cannot_say_is_taken_as_no_cluster_and_a_refusal_is_an_error(monkeypatch):
    monkeypatch.setattr(driver, "_error_name", lambda err: real.CUresult(int(err)).name)
    fake = FakeDriver((16, 1, 1), read_error=int(real.CUresult.CUDA_ERROR_INVALID_VALUE))
    driver._allow_large_clusters(fake, object())
    assert fake.set == []
    refusing = FakeDriver((16, 1, 1), set_error=int(real.CUresult.CUDA_ERROR_NOT_SUPPORTED))
    with pytest.raises(BackendError, match="cuFuncSetAttribute"):
        driver._allow_large_clusters(refusing, object())
