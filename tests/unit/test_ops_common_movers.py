"""``_common.movers`` and ``move_last``: a dimension moved last and back as views, for torch
(movedim) and NumPy-style arrays (one transpose each way), every dimension of 1-4-d arrays."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit import ArgumentError
from kernelkit.ops._common import move_last, movers


@pytest.mark.parametrize("shape", [(5,), (2, 3), (2, 3, 4), (2, 1, 3, 4)], ids=str)
def test_a_dimension_goes_last_and_back_as_views(shape):
    torch = pytest.importorskip("torch")
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for x in (
        a,
        a.transpose(),
        torch.from_numpy(a),
        torch.from_numpy(a).permute(*reversed(range(a.ndim))),
    ):
        n = len(x.shape)
        for dim in range(n):
            there, back = movers(x, dim)
            moved = there(x)
            want = np.moveaxis(np.asarray(x), dim, -1)
            assert tuple(moved.shape) == want.shape and np.array_equal(np.asarray(moved), want)
            assert np.shares_memory(np.asarray(moved), np.asarray(x))  # a view, not a copy
            restored = back(moved)
            assert tuple(restored.shape) == tuple(x.shape)
            assert np.array_equal(np.asarray(restored), np.asarray(x))


def test_move_last_leaves_the_last_dimension_and_refuses_bad_dims():
    x = np.zeros((2, 3, 4), np.float32)
    same, back = move_last(x, -1, "softmax")
    assert same is x and back is None
    moved, back = move_last(x, np.int64(0), "softmax")  # a NumPy integer is an int
    assert moved.shape == (3, 4, 2) and back is not None and back(moved).shape == (2, 3, 4)
    for bad in (3, -4, True, 1.0, None):
        with pytest.raises(ArgumentError, match="dim"):
            move_last(x, bad, "softmax")
