"""Warp shuffles with partial masks on the CPU backend: the lanes named in a mask meet only each
other (as PTX's shfl.sync defines it), so groups of a warp that shuffle under their own masks from
one call site leave every later full-warp shuffle correct. Each pattern is checked against a NumPy
model of CUDA's semantics, unchecked and in checked mode."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(7)
LANES = np.arange(32)

# After the sub-mask part (which sets `int d`), every lane takes part in a 32-lane inclusive scan
# and a 32-lane xor-butterfly sum: the full-warp shuffles that a mispaired rendezvous breaks.
TAIL = """
int s = d;
for (int o = 1; o < 32; o <<= 1) {
  const int u = __shfl_up_sync(0xffffffffu, s, o);
  if (lane >= (unsigned)o) s += u;
}
int t = d;
for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
scan[i] = s;
total[i] = t;
"""
HEAD = """
const unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31u;
int v = x[i];
"""


def _down(v, k, width):  # CUDA's __shfl_down_sync for every lane of each warp (rows)
    src = LANES + k
    src = np.where(src < (LANES & ~(width - 1)) + width, src, LANES)
    return v[:, src]


def _up(v, k, width):
    src = LANES - k
    return v[:, np.where(src >= (LANES & ~(width - 1)), src, LANES)]


def _xor(v, m, width):
    src = LANES ^ m
    return v[:, np.where(src < (LANES & ~(width - 1)) + width, src, LANES)]


def _idx(v, k, width):
    return v[:, (LANES & ~(width - 1)) + (k & (width - 1))]


def _halves(v):  # two half-warp groups, each a segmented sum of 16 lanes, top lanes keep theirs
    for o in (1, 2, 4, 8):
        v = v + _down(v, o, 16)
    return v


def _eighths(v):  # four 8-lane groups: a butterfly sum, then a read from the group's lane 3
    for o in (1, 2, 4):
        v = v + _xor(v, o, 8)
    return v * 3 + _idx(v, 3, 8)


def _interleaved(v):  # even and odd lanes: xor by 2 and 4 keeps parity; then lane (l + 6) % 32
    v = v + _xor(v, 2, 32)
    v = v - _xor(v, 4, 32)
    return v + v[:, (LANES + 6) % 32]


def _leader(v):  # each 8-lane group broadcasts its first lane, then its last lane's up-neighbour
    v = v + _idx(v, 0, 8)
    return v + _up(v, 1, 8)


def _width(width):
    def ref(v):
        v = v + _down(v, 1, width)
        v = v * 2 + _up(v, 2, width)
        v = v - _xor(v, width // 2 + 1, width)
        return v + _idx(v, width - 1, width)

    return ref


PATTERNS = {
    "halves": (
        """
const unsigned m = lane < 16 ? 0x0000ffffu : 0xffff0000u;
int d = v;
for (int o = 1; o < 16; o <<= 1) d += __shfl_down_sync(m, d, o, 16);
""",
        _halves,
    ),
    "eighths": (
        """
const unsigned m = 0xffu << (lane & ~7u);
int d = v;
for (int o = 1; o < 8; o <<= 1) d += __shfl_xor_sync(m, d, o, 8);
d = d * 3 + __shfl_sync(m, d, 3, 8);
""",
        _eighths,
    ),
    "interleaved": (
        """
const unsigned m = (lane & 1u) ? 0xaaaaaaaau : 0x55555555u;
int d = v;
d += __shfl_xor_sync(m, d, 2);
d -= __shfl_xor_sync(m, d, 4);
d += __shfl_sync(m, d, (int)((lane + 6) & 31u));
""",
        _interleaved,
    ),
    "leader": (
        """
const unsigned m = 0xffu << (lane & ~7u);
int d = v + __shfl_sync(m, v, (int)(lane & ~7u));
d += __shfl_up_sync(m, d, 1, 8);
""",
        _leader,
    ),
}
for _w in (8, 16):
    PATTERNS[f"width{_w}"] = (
        f"""
int d = v + __shfl_down_sync(0xffffffffu, v, 1, {_w});
d = d * 2 + __shfl_up_sync(0xffffffffu, d, 2, {_w});
d -= __shfl_xor_sync(0xffffffffu, d, {_w // 2 + 1}, {_w});
d += __shfl_sync(0xffffffffu, d, {_w - 1}, {_w});
""",
        _width(_w),
    )


@pytest.mark.parametrize("check", [False, True], ids=["default", "checked"])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_sub_mask_shuffles_then_full_warp(name, check):
    body, ref = PATTERNS[name]
    k = kernelkit.kernel(f"shfl_{name}", ["x"], ["scan", "total"], HEAD + body + TAIL)
    n = 256  # two blocks of 128 threads: four warps each
    x = RNG.integers(-50, 50, n).astype(np.int32)
    scan, total = k(
        [x],
        output_shapes=[(n,), (n,)],
        output_dtypes=[np.int32, np.int32],
        grid=(n, 1, 1),
        threadgroup=(128, 1, 1),
        backend="cpu",
        check=check,
    )
    d = ref(x.reshape(-1, 32).astype(np.int64))
    np.testing.assert_array_equal(scan.reshape(-1, 32), np.cumsum(d, axis=1))
    np.testing.assert_array_equal(total.reshape(-1, 32), np.repeat(d.sum(1, keepdims=True), 32, 1))


@pytest.mark.parametrize("check", [False, True], ids=["default", "checked"])
def test_overlapping_different_masks_meet_as_one(check):
    # Each lane names itself and its neighbours: masks that differ but overlap (undefined on a
    # GPU, where the lanes of one shfl.sync must name the same mask). No mask's lanes all meet
    # under it, so the emulation merges the overlapping rendezvous instead of reporting a deadlock.
    body = """
const unsigned m = (unsigned)((0x7ull << lane) >> 1);
int d = __shfl_down_sync(m, v, 1);
"""
    k = kernelkit.kernel("shfl_overlap", ["x"], ["scan", "total"], HEAD + body + TAIL)
    x = RNG.integers(-50, 50, 64).astype(np.int32)
    scan, total = k(
        [x],
        output_shapes=[(64,), (64,)],
        output_dtypes=[np.int32, np.int32],
        grid=(64, 1, 1),
        threadgroup=(64, 1, 1),
        backend="cpu",
        check=check,
    )
    d = _down(x.reshape(-1, 32).astype(np.int64), 1, 32)
    np.testing.assert_array_equal(scan.reshape(-1, 32), np.cumsum(d, axis=1))
    np.testing.assert_array_equal(total.reshape(-1, 32), np.repeat(d.sum(1, keepdims=True), 32, 1))
