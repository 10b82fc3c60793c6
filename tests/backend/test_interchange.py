"""Objects that only speak an interchange protocol are accepted without a copy."""

from __future__ import annotations

import numpy as np

import kernelkit

K = kernelkit.kernel(
    "ic_twice",
    ["x"],
    ["y"],
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];",
)


class ArrayInterfaceOnly:
    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        self.__array_interface__ = a.__array_interface__


class DLPackOnly:
    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _run(x):
    return K(
        [x],
        output_shapes=[(257,)],
        output_dtypes=["float32"],
        grid=(257, 1, 1),
        threadgroup=(64, 1, 1),
    )[0]


def test_array_interface_object():
    a = np.random.default_rng(3).standard_normal(257).astype(np.float32)
    y = _run(ArrayInterfaceOnly(a))
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, 2 * a)


def test_dlpack_object():
    a = np.random.default_rng(4).standard_normal(257).astype(np.float32)
    y = _run(DLPackOnly(a))
    np.testing.assert_array_equal(y, 2 * a)
    a[:] = 1.0  # the kernel read the caller's memory, not a copy made at definition time
    np.testing.assert_array_equal(_run(DLPackOnly(a)), np.full(257, 2.0, np.float32))
