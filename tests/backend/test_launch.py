"""The load stage and launch geometry: a program is loaded once per (binary, device), however
many problem sizes, grids and shared-memory sizes call it; a kernel object keeps a bounded
number of specializations; dynamic shared memory can be sized per call."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import kernelkit
from kernelkit import _api
from kernelkit._backends import registry as _registry

COPY = (
    "uint i = blockIdx.x * blockDim.x + threadIdx.x;"
    " if (i < x_shape[0]) y[i] = x[i] * 2.0f + (float)i;"
)


def _count_loads(monkeypatch, backend):
    be = _registry.get_backend(backend)
    loads = []
    real = be.load

    def load(artifact, target):
        loads.append(artifact.entry)
        return real(artifact, target)

    monkeypatch.setattr(be, "load", load)
    return loads


def test_a_thousand_sizes_load_the_program_once(backend, arrays, monkeypatch):
    loads = _count_loads(monkeypatch, backend)
    k = kernelkit.kernel("ln_sizes", ["x"], ["y"], COPY)
    rng = np.random.default_rng(3)
    base = rng.standard_normal(1000).astype(np.float32)
    dx = arrays.put(base)
    for n in range(1, 1001):
        x = dx[:n]
        (y,) = k(
            [x],
            output_shapes=[(n,)],
            output_dtypes=[np.float32],
            grid=(n, 1, 1),
            threadgroup=(128 if n % 2 else 96, 1, 1),
        )
        if n in (1, 2, 77, 500, 999, 1000):
            want = base[:n].astype(np.float64) * 2 + np.arange(n)
            np.testing.assert_allclose(arrays.get(y), want, rtol=1e-6)
    assert len(loads) == 1
    assert len(k._plans) == 1


def test_programs_are_shared_between_kernel_objects_and_freed_with_them(backend, arrays):
    def make():
        return kernelkit.kernel("ln_shared", ["x"], ["y"], COPY)

    x = arrays.put(np.arange(50, dtype=np.float32))
    a, b = make(), make()
    for k in (a, b):
        k(
            [x],
            output_shapes=[(50,)],
            output_dtypes=[np.float32],
            grid=(50, 1, 1),
            threadgroup=(32, 1, 1),
        )
    (pa,), (pb,) = a._plans.values(), b._plans.values()
    assert pa.loaded is pb.loaded
    loaded = weakref.ref(pa.loaded)
    del a, b, k, pa, pb
    gc.collect()
    assert loaded() is None  # the program goes with the last specialization using it


def test_specializations_kept_per_kernel_are_bounded(monkeypatch):
    monkeypatch.setattr(_api, "MAX_PLANS", 3)
    k = kernelkit.kernel("ln_bounded", ["x"], ["y"], "y[threadIdx.x] = x[threadIdx.x] + C;")
    x = np.arange(4, dtype=np.float32)
    for c in range(6):
        (y,) = k(
            [x],
            output_shapes=[(4,)],
            output_dtypes=[np.float32],
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
            template=[("C", c)],
        )
        np.testing.assert_array_equal(y, x + c)
    assert len(k._plans) == 3


REVERSE = """
extern __shared__ float buf[];
uint t = threadIdx.x;
uint i = blockIdx.x * blockDim.x + t;
if (i < x_shape[0]) buf[t] = x[i];
__syncthreads();
uint j = blockIdx.x * blockDim.x + (blockDim.x - 1 - t);
if (i < x_shape[0] && j < x_shape[0]) y[i] = buf[blockDim.x - 1 - t];
"""


STATIC_AND_DYNAMIC = """
__shared__ float fixed[2048];  // 8 KB static
extern __shared__ float buf[];
uint t = threadIdx.x;
uint n = kk_extent_dyn / 4;
for (uint j = t; j < 2048; j += blockDim.x) fixed[j] = (float)j;
for (uint j = t; j < n; j += blockDim.x) buf[j] = x[j % x_shape[0]];
__syncthreads();
uint i = blockIdx.x * blockDim.x + t;
if (i < x_shape[0]) y[i] = buf[n - 1 - i] + fixed[i % 2048];
"""


def test_static_and_dynamic_shared_memory_together_past_48_kb(backend, arrays):
    """8 KB static + 44 KB dynamic: under 48 KB dynamic, but past the default limit together:
    the backend must raise the kernel's limit (the CUDA launch failed with INVALID_VALUE)."""
    dyn = 44 * 1024
    body = STATIC_AND_DYNAMIC.replace("kk_extent_dyn", str(dyn))
    k = kernelkit.kernel("ln_smem_both", ["x"], ["y"], body)
    x = np.random.default_rng(6).standard_normal(dyn // 4).astype(np.float32)
    (y,) = k(
        [arrays.put(x)],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(x.size, 1, 1),
        threadgroup=(256, 1, 1),
        shared_memory=dyn,
    )
    i = np.arange(x.size)
    np.testing.assert_array_equal(arrays.get(y), x[::-1] + (i % 2048).astype(np.float32))


def test_dynamic_shared_memory_per_call(backend, arrays):
    k = kernelkit.kernel("ln_smem", ["x"], ["y"], REVERSE, shared_memory=4)
    x = np.random.default_rng(5).standard_normal(256).astype(np.float32)
    dx = arrays.put(x)
    for block in (32, 64, 128):
        (y,) = k(
            [dx],
            output_shapes=[x.shape],
            output_dtypes=[np.float32],
            grid=(256, 1, 1),
            threadgroup=(block, 1, 1),
            shared_memory=4 * block,
        )
        want = x.reshape(-1, block)[:, ::-1].reshape(-1)
        np.testing.assert_array_equal(arrays.get(y), want)
    target = _registry.get_backend(backend).targets()[0]
    too_much = target.max_shared_memory_optin_bytes + 4
    for bad in (-1, 1.5, True, too_much):
        with pytest.raises(kernelkit.ArgumentError, match="shared_memory"):
            k(
                [dx],
                output_shapes=[x.shape],
                output_dtypes=[np.float32],
                grid=(256, 1, 1),
                threadgroup=(32, 1, 1),
                shared_memory=bad,
            )
    (y,) = k(
        [dx],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(256, 1, 1),
        threadgroup=(32, 1, 1),
        shared_memory=128,
    )  # and the next call still works
    np.testing.assert_array_equal(arrays.get(y), x.reshape(-1, 32)[:, ::-1].reshape(-1))


def test_bad_geometry_is_refused_and_the_next_call_works(backend, arrays):
    k = kernelkit.kernel("ln_badgeo", ["x"], ["y"], COPY)
    x = arrays.put(np.ones(10, np.float32))
    call = dict(output_shapes=[(10,)], output_dtypes=[np.float32])
    for grid, tg in (((0, 1, 1), (32, 1, 1)), ((4096, 1, 1), (2048, 1, 1)), ("abc", (1, 1, 1))):
        with pytest.raises(kernelkit.ArgumentError):
            k([x], grid=grid, threadgroup=tg, **call)
    (y,) = k([x], grid=[10], threadgroup=[32], **call)  # lists are fine
    np.testing.assert_array_equal(arrays.get(y), 2 + np.arange(10, dtype=np.float32))


def test_a_first_call_generates_one_run_and_the_unchecked_one_on_first_use(
    backend, arrays, monkeypatch
):
    # the unchecked run (``LaunchPlan.direct``, for the built-in ops) was generated and compiled
    # with every plan: ~0.25 ms of a kernel's cold first call that only the ops need
    from kernelkit._pipeline import plan as _plan

    made = []
    real = _plan.generate_run

    def counting(hot, guard, fixed=None):
        made.append(guard is not None)
        return real(hot, guard, fixed)

    monkeypatch.setattr(_plan, "generate_run", counting)
    k = kernelkit.kernel("ln_direct", ["x"], ["y"], COPY)
    x = np.arange(64, dtype=np.float32)
    args = ([arrays.put(x)], [(64,)], [np.float32], (64, 1, 1), (32, 1, 1))
    args += (None,) * 7  # template ... shared_memory, in CallArgs' order
    (y,) = k(*args[:5])
    assert made == [True]
    direct = k._direct_run(args)
    assert made == [True, False] and k._direct_run(args) is direct  # made once, then kept
    (again,) = direct(*args)
    want = x.astype(np.float64) * 2 + np.arange(64)
    np.testing.assert_allclose(arrays.get(y), want, rtol=1e-6)
    np.testing.assert_allclose(arrays.get(again), want, rtol=1e-6)


def test_a_run_fixed_for_one_signature_reads_its_geometry_and_layouts_once(backend, arrays):
    """``_direct_run(args, fixed=True)`` (the built-in ops' prepared calls): the geometry, the
    inputs' contiguity and the outputs' allocation are read from ``args`` once; a later call's
    own grid is not read (the caller promises the same), a non-contiguous input seen then is
    still copied per call, and each output is a new array of its input's shape."""
    k = kernelkit.kernel("ln_fixed", ["x"], ["y"], COPY)
    x = np.arange(64, dtype=np.float32)
    want = x.astype(np.float64) * 2 + np.arange(64)

    def args_of(a, grid):
        return ([a], [(64,)], [np.float32], grid, (32, 1, 1), *(None,) * 7)

    first = args_of(arrays.put(x), (64, 1, 1))
    k(*first[:5])
    run = k._direct_run(first, fixed=True)
    y1 = run(*args_of(arrays.put(x), (1, 1, 1)))[0]  # the fixed grid of 64 runs, not 1
    y2 = run(*first)[0]
    np.testing.assert_allclose(arrays.get(y1), want, rtol=1e-6)
    assert y2 is not y1  # a new output each call
    wide = arrays.put(np.repeat(x, 2))[::2]  # a strided view: not row-contiguous
    strided = args_of(wide, (64, 1, 1))
    k(*strided[:5])
    run = k._direct_run(strided, fixed=True)
    for _ in range(2):
        np.testing.assert_allclose(arrays.get(run(*strided)[0]), want, rtol=1e-6)


def test_a_fixed_run_tests_contiguity_per_call_where_signatures_hold_no_strides(
    backend, arrays, monkeypatch
):
    """Arrays whose signatures do not hold their strides (``Adapter.strides_in_signature``
    False: views through another framework) may share a signature across layouts, so a run
    fixed on a contiguous call still copies a strided array of the same shape."""
    from kernelkit._arrays.lookup import adapter_for

    k = kernelkit.kernel("ln_fixed_generic", ["x"], ["y"], COPY)
    x = np.arange(64, dtype=np.float32)
    first = arrays.put(x)
    monkeypatch.setattr(type(adapter_for(first, "x")), "strides_in_signature", False)
    args = ([first], [(64,)], [np.float32], (64, 1, 1), (32, 1, 1), *(None,) * 7)
    k(*args[:5])
    run = k._direct_run(args, fixed=True)
    strided = arrays.put(np.repeat(x, 2))[::2]
    y = run(*([strided], *args[1:]))[0]
    np.testing.assert_allclose(arrays.get(y), x.astype(np.float64) * 2 + np.arange(64), rtol=1e-6)


def test_a_fixed_run_writes_metadata_once_per_thread_and_keeps_only_a_whole_pack(backend, arrays):
    """A fixed run writes its arrays' shapes into a thread's pack once, when the pack is made:
    a first call that raises before its launch (here: an init_value that cannot fill y) keeps
    no half-written pack, and another thread gets a pack of its own."""
    import threading

    body = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < y_shape[0]) y[i] = x[i] + i;"
    k = kernelkit.kernel("ln_fixed_meta", ["x"], ["y"], body)
    x = np.arange(64, dtype=np.float32)
    want = 2 * np.arange(64, dtype=np.float64)
    args = ([arrays.put(x)], [(64,)], [np.float32], (64, 1, 1), (32, 1, 1), *(None,) * 7)
    k(*args[:5])
    run = k._direct_run(args, fixed=True)
    bad = list(args)
    bad[6] = "not a number"  # init_value: y's fill raises after x's shape was written
    with pytest.raises((TypeError, ValueError, RuntimeError, kernelkit.KernelkitError)):
        run(*bad)
    np.testing.assert_allclose(arrays.get(run(*args)[0]), want)
    np.testing.assert_allclose(arrays.get(run(*args)[0]), want)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(arrays.get(run(*args)[0])))
    thread.start()
    thread.join()
    np.testing.assert_allclose(seen[0], want)
