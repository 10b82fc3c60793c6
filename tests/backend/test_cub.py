"""CUB's block and warp collectives on every backend (the CPU backend's own cub; CCCL's on CUDA)
against NumPy: tests/cub_cases.py holds the kernels."""

from __future__ import annotations

import cub_cases as cases
import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(11)
BLOCK = kernelkit.kernel(
    "cub_block",
    ["x"],
    ["excl", "copy", "sums", "maxes", "scanmax"],
    cases.BLOCK_BODY,
    header=cases.BLOCK_HEADER,
)
WARP = kernelkit.kernel(
    "cub_warp",
    ["x"],
    ["seg_sum", "seg_max5", "incl", "excl_max", "warp_total"],
    cases.WARP_BODY,
    header=cases.WARP_HEADER,
)


@pytest.mark.parametrize("n", [384, 1000, 1153])
def test_block_load_scan_reduce_store(arrays, backend, n):
    x = RNG.integers(-50, 200, n).astype(np.int32)
    tiles = -(-n // 384)
    z = [np.zeros(n, np.int32), np.zeros(n, np.int32)] + [np.zeros(tiles, np.int32)] * 3
    for check in (False, True) if backend == "cpu" else (False,):
        outs = BLOCK(
            [arrays.put(x)],
            out=[arrays.put(a.copy()) for a in z],
            grid=(128, 1, 1),
            threadgroup=(128, 1, 1),
            check=check,
        )
        excl, copy, sums, maxes, scanmax = (arrays.get(o) for o in outs)
        np.testing.assert_array_equal(excl, np.concatenate([[0], np.cumsum(x)[:-1]]))
        np.testing.assert_array_equal(copy, x)
        xp = np.concatenate([x, np.zeros(tiles * 384 - n, np.int32)]).reshape(tiles, 384)
        np.testing.assert_array_equal(sums, xp.sum(axis=1))
        # items[0] of thread t in a striped load is element t of the tile
        valid = np.minimum(128, n - 384 * np.arange(tiles))
        first = xp[:, :128]
        np.testing.assert_array_equal(maxes, [first[t, : valid[t]].max() for t in range(tiles)])
        np.testing.assert_array_equal(scanmax, first.max(axis=1))


def test_warp_reduce_and_scan(arrays, backend):
    n = 512
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    shapes = [n // 16, n // 16, n, n, n // 32]
    for check in (False, True) if backend == "cpu" else (False,):
        outs = WARP(
            [arrays.put(x)],
            out=[arrays.put(np.zeros(s, np.int32)) for s in shapes],
            grid=(n, 1, 1),
            threadgroup=(128, 1, 1),
            check=check,
        )
        seg_sum, seg_max5, incl, excl_max, warp_total = (arrays.get(o) for o in outs)
        np.testing.assert_array_equal(seg_sum, x.reshape(-1, 16).sum(axis=1))
        np.testing.assert_array_equal(seg_max5, x.reshape(-1, 16)[:, :5].max(axis=1))
        w = x.reshape(-1, 32)
        np.testing.assert_array_equal(incl, np.cumsum(w, axis=1).ravel())
        prev = np.maximum.accumulate(np.concatenate([np.full((n // 32, 1), 100), w[:, :-1]], 1), 1)
        np.testing.assert_array_equal(excl_max, prev.ravel())
        np.testing.assert_array_equal(warp_total, w.sum(axis=1))


def test_umbrella_header_and_cub2_functors(arrays, backend):
    k = kernelkit.kernel(
        "cub_umbrella", ["x"], ["y"], cases.UMBRELLA_BODY, header=cases.UMBRELLA_HEADER
    )
    x = RNG.integers(-100, 100, 128).astype(np.int32)
    (y,) = k(
        [arrays.put(x)],
        out=[arrays.put(np.zeros(128, np.int32))],
        grid=(128, 1, 1),
        threadgroup=(128, 1, 1),
    )
    w = x.reshape(4, 32)
    expect = (np.cumsum(w, axis=1) - w).ravel()
    expect[0] = x.sum() + x.max()
    np.testing.assert_array_equal(arrays.get(y), expect)
