"""``Geometries.quick`` (the check of a new grid made of plain int tuples, its limits read once)
against ``geometry`` (the full check, which names what is wrong): on any arguments, ``quick``
gives ``geometry``'s result or None, and None only where ``geometry`` refuses or the arguments
are not int tuples of 1 to 3 dims (property test)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kernelkit._errors import ArgumentError
from kernelkit._pipeline.load import Geometries, geometry
from kernelkit._records import Target

TARGET = Target(
    backend="test", device=0, arch="sm_90", name="a device", max_threads_per_block=1024,
    max_block_dims=(1024, 1024, 64), max_grid_dims=(2**31 - 1, 65535, 65535),
    max_shared_memory_bytes=48 * 1024, max_shared_memory_optin_bytes=227 * 1024,
)  # fmt: skip
LIMITS = [
    {},
    {"max_threads_per_block": 256},
    {"static_shared_bytes": 1024},
    {"cluster_x": 2, "cluster_y": 1, "cluster_z": 1},
    {"cluster_y": 4},
    {"cluster_z": 2, "max_threads_per_block": 512},
]

dim = st.one_of(st.integers(-2, 70000), st.integers(2**31 - 8, 2**31 + 8), st.booleans(),
                st.floats(1, 8), st.none())  # fmt: skip
dims = st.one_of(
    st.tuples(dim), st.tuples(dim, dim), st.tuples(dim, dim, dim),
    st.lists(dim, min_size=0, max_size=4), st.tuples(dim, dim, dim, dim), st.none(),
)  # fmt: skip
shared = st.one_of(st.integers(-4, 240 * 1024), st.booleans(), st.floats(0, 4), st.none())
# mostly within the limits: where a check left out of ``quick`` would show
near = st.one_of(st.integers(1, 40), st.integers(1, 1100), st.integers(60000, 70000),
                st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]))  # fmt: skip
near_dims = st.one_of(st.tuples(near), st.tuples(near, near), st.tuples(near, near, near))


def _full(grid, group, nbytes, limits):
    try:
        return geometry("k", grid, group, nbytes, TARGET, limits)
    except ArgumentError:
        return None


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(dims, near_dims), st.one_of(dims, near_dims), shared,
    st.sampled_from(range(len(LIMITS))),
)  # fmt: skip
# each limit at its edge, one past it
@example((1, 1, 128), (1, 1, 64), 0, 0)
@example((1, 1, 128), (1, 1, 65), 0, 0)
@example((64,), (64,), 227 * 1024 - 1024, 2)
@example((64,), (64,), 227 * 1024 - 1023, 2)
@example((64, 65535 * 4), (64, 4), 0, 0)
@example((64, 65536 * 4), (64, 4), 0, 0)
@example((64, 8, 8), (64, 8, 8), 0, 1)  # 4096 threads
@example((8, 8, 8), (8, 8, 8), 0, 5)
@example((8, 8, 16), (8, 8, 16), 0, 5)
@example((8, 8, 16), (8, 8, 8), 0, 5)
@example((8, 8, 24), (8, 8, 8), 0, 5)
@example((8, 12), (8, 4), 0, 4)
@example((8, 16), (8, 4), 0, 4)
@example((24,), (8,), 0, 3)
def test_quick_gives_the_full_check_s_result_or_none(grid, group, nbytes, which):
    limits = LIMITS[which]
    geos = Geometries("k", TARGET, limits, 0, lambda n: None)
    quick = geos.quick(grid, group, nbytes)
    full = _full(grid, group, nbytes, limits)
    if quick is not None:
        assert quick == full
    plain = (
        all(
            d.__class__ is tuple and 0 < len(d) <= 3 and all(v.__class__ is int for v in d)
            for d in (grid, group)
        )
        and nbytes.__class__ is int
    )
    if plain and full is not None:
        assert quick == full  # the fast path takes every plain geometry the full check takes


def test_a_new_geometry_is_checked_once_and_named_when_refused():
    calls: list = []
    geos = Geometries("k", TARGET, {}, 128, calls.append)
    assert geos.of((1000,), (256,), None) == (4, 1, 1, 256, 1, 1, 128)
    assert geos.table[(1000,), (256,), None] == (4, 1, 1, 256, 1, 1, 128)
    assert geos.of((5, 6), [8, 8], 64 * 1024) == (1, 1, 1, 5, 6, 1, 64 * 1024)
    assert calls == [64 * 1024]  # over the default limit: the kernel's limit raised once
    with pytest.raises(ArgumentError, match="threads per block"):
        geos.of((4096,), (2048,), None)
    with pytest.raises(ArgumentError, match="positive ints"):
        geos.of((0,), (32,), None)
