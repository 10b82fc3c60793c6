"""Kernel calls repeated in C (``_pipeline/repeat.py``, ``kk_launch.Call``), run on the CPU: the
CPU backend's launcher is given a ``native_call`` whose driver is a ctypes callback with
``cuLaunchKernel``'s signature that runs the CPU launch, so a Call's argument block, pointers,
outputs and checks run real kernels and are compared with float64 references."""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import weakref

import pytest

torch = pytest.importorskip("torch")

from native_driver import DRIVER  # noqa: E402
from profiled import entered  # noqa: E402

import kernelkit  # noqa: E402
from kernelkit._backends.cuda import native  # noqa: E402
from kernelkit._errors import ArgumentError  # noqa: E402
from kernelkit._pipeline.repeat import Repeats  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


# a marker in every body: these tests' programs are loaded (with the patched launcher) by them
BODY = """/* repeat tests */
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0] * x_shape[1]) y[i] = a * x[i] + (float)n;
"""


def _kernel(tag: str):
    return kernelkit.kernel(f"rep_{tag}", ["x", "a", "n"], ["y"], BODY + f"// {tag}\n")


def _call(k, x, a=2.0, n=3, **kw):
    kw.setdefault("grid", (x.numel(), 1, 1))
    kw.setdefault("threadgroup", (64, 1, 1))
    return k([x, a, n], **kw)


def _expect(x, a=2.0, n=3):
    return (a * x.double() + n).float()


def _repeats(k) -> Repeats:
    (plan,) = k._plans.values()
    assert plan.repeats is not None
    return plan.repeats


def _count_runs(rep: Repeats) -> list:
    """Counts the generated run's calls (the path a Call hands a call it does not take)."""
    counted: list = []
    run = rep.run

    def counting(*args):
        counted.append(1)
        return run(*args)

    counting.original = run  # type: ignore[attr-defined]
    rep.run = counting
    if rep.head is not None:  # the chain's last Call hands calls to the run in C
        rep._relink()
    return counted


def test_a_repeated_call_launches_from_c_with_its_argument_block(driver):
    k = _kernel("out")
    x = torch.randn(5, 7)
    y = torch.full_like(x, float("nan"))
    _call(k, x, out=[y])
    rep = _repeats(k)
    assert rep.head is None and k._last == rep.end  # a first call makes none
    _call(k, x, out=[y])  # the second makes one
    call = rep.head
    assert type(call).__name__ == "Call" and k._last is call
    runs, before = _count_runs(rep), driver.launches
    for a, n in ((2.0, 3),) * 5:
        y.fill_(float("nan"))
        assert _call(k, x, a, n, out=[y])[0] is y
        torch.testing.assert_close(y, _expect(x, a, n))
    assert driver.launches - before == 5 and call.served == 5 and not runs


def test_an_optional_input_left_out_is_repeated_as_none(driver):
    """A plan of calls that leave an optional input out (its pointer null in the block) is
    repeated in C; a call that passes an array there is another plan's, and gets its own
    result (the bias added)."""
    body = "/* repeat tests: optional */ uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    body += "if (i < x_shape[0]) y[i] = 2.0f * x[i] + (bias != NULL ? bias[i] : 0.0f);"
    k = kernelkit.kernel("rep_optional", ["x", "bias"], ["y"], body,
                         optional_inputs={"bias": "float32"})  # fmt: skip
    x, bias = torch.randn(70), torch.randn(70)
    y = torch.full_like(x, float("nan"))
    kw = {"grid": (70, 1, 1), "threadgroup": (32, 1, 1), "out": [y]}
    for _ in range(2):  # the second call makes the Call
        k([x, None], **kw)
    before = driver.launches
    for _ in range(3):
        y.fill_(float("nan"))
        k([x, None], **kw)
        torch.testing.assert_close(y, 2 * x)
    calls = [p.repeats.head for p in k._plans.values() if p.repeats is not None]
    assert len(calls) == 1 and calls[0].served == 3 and driver.launches - before == 3
    for _ in range(2):
        y.fill_(float("nan"))
        k([x, bias], **kw)
        torch.testing.assert_close(y, (2 * x.double() + bias.double()).float())
    assert calls[0].served == 3


def test_allocated_outputs_come_from_c_as_the_run_makes_them(driver):
    k = _kernel("alloc")
    x = torch.randn(3, 33)
    for shapes in ([x.shape], [(3, 33)], [[3, 33]]):  # empty_like, then the allocator
        kw = {"output_shapes": shapes, "output_dtypes": [torch.float32]}
        first = _call(k, x, **kw)[0]
        _call(k, x, **kw)  # (the second call makes the Call)
        rep = _repeats(k)
        runs = _count_runs(rep)
        outs = [_call(k, x, **kw)[0] for _ in range(3)]
        assert not runs and rep.head.served >= 3
        for y in (first, *outs):
            assert y.shape == (3, 33) and y.is_contiguous()
            torch.testing.assert_close(y, _expect(x))
        assert len({y.data_ptr() for y in outs}) == 3  # a new array each call
        rep.run = rep.run.original  # (undo _count_runs)
        rep._relink()


def test_an_output_made_like_an_input_has_standard_strides(driver):
    k = _kernel("strides")
    odd = torch.randn(33, 1).t()  # (1, 33), strides (1, 1): contiguous, not standard
    assert odd.is_contiguous() and odd.stride() == (1, 1)
    for x in (odd, torch.randn(1, 33)):
        for _ in range(3):
            (y,) = _call(k, x, output_shapes=[x.shape], output_dtypes=[torch.float32])
            assert y.stride() == (33, 1)
            torch.testing.assert_close(y, _expect(x))


@pytest.mark.parametrize(
    "change",
    ["shape", "strides", "dtype", "scalar", "int as bool", "grid", "threadgroup",
     "tuple inputs", "stream", "init_value", "gradient"],
)  # fmt: skip
def test_any_difference_goes_to_the_run_and_gets_its_own_result(driver, change):
    """... except the stream (an int) and the geometry: a Call launches another grid or
    threadgroup with its own block (the block does not depend on them)."""
    k = _kernel(f"diff_{change.replace(' ', '_')}")
    x = torch.randn(4, 16)
    y = torch.empty_like(x)
    for _ in range(2):
        _call(k, x, out=[y])
    a, n, kw = 2.0, 3, {}
    other_x, other_y = x, torch.full_like(x, float("nan"))
    if change == "shape":
        other_x = torch.randn(2, 16)
        other_y = torch.full_like(other_x, float("nan"))
    elif change == "strides":  # the kernel reads x_shape and x[i]: a transposed x is copied
        other_x = torch.randn(16, 4).t()
    elif change == "dtype":
        other_x = x.double()
        other_y = torch.full_like(other_x, float("nan"))
    elif change == "scalar":
        a = 0.5
    elif change == "int as bool":
        n = True  # not the int 1 the Call was made with, though equal
    elif change == "grid":
        kw["grid"] = (32, 1, 1)
    elif change == "threadgroup":
        kw["threadgroup"] = (32, 1, 1)
    elif change == "stream":
        kw["stream"] = 0
    elif change == "init_value":
        kw["init_value"] = 7.0
    if change == "int as bool":
        n_first = 1
        for _ in range(2):
            _call(k, x, a, n_first, out=[y])
    rep = _repeats(k)
    runs = _count_runs(rep)
    inputs = [other_x, a, n]
    if change == "tuple inputs":
        inputs = (other_x, a, n)
    if change == "gradient":
        other_x = x.clone().requires_grad_()
        inputs = [other_x, a, n]
    kw.setdefault("grid", (other_x.numel(), 1, 1))
    kw.setdefault("threadgroup", (64, 1, 1))
    with torch.no_grad():
        k(inputs, out=[other_y], **kw)
    want = _expect(other_x.detach(), a, n)
    if change == "grid":
        torch.testing.assert_close(other_y.flatten()[:32], want.flatten()[:32])
    elif change != "init_value":
        torch.testing.assert_close(other_y, want.to(other_y.dtype))
    expect_run = change not in ("stream", "grid", "threadgroup")
    assert bool(runs) == expect_run, (change, runs)


def test_a_call_launches_another_geometry_and_the_run_refuses_a_bad_one(driver):
    k = _kernel("geometry")
    x = torch.randn(8, 40)
    y = torch.empty_like(x)
    for _ in range(2):
        _call(k, x, out=[y])
    head = _repeats(k).head
    runs = _count_runs(_repeats(k))
    for grid, group, shared in [((320, 1, 1), (32, 1, 1), None), ((100,), (64,), None),
                                ([320, 1, 1], [128, 1, 1], None), ((320, 1, 1), (64, 1, 1), 256),
                                ((1, 1, 1), (64, 1, 1), None)]:  # fmt: skip
        y.fill_(float("nan"))
        _call(k, x, out=[y], grid=grid, threadgroup=group, shared_memory=shared)
        b = min(group[0], grid[0])  # threads run: whole blocks of the threadgroup (as in MLX)
        n = -(-grid[0] // b) * b
        torch.testing.assert_close(y.flatten()[:n], _expect(x).flatten()[:n])
        assert y.flatten()[n:].isnan().all()  # (the grid launched is the one asked for)
    assert not runs and head.served == 5
    for bad, why in [({"threadgroup": (2048, 1, 1)}, "threads per block"),
                     ({"grid": (0, 1, 1)}, "positive ints"), ({"grid": None}, "grid")]:  # fmt: skip
        with pytest.raises(ArgumentError, match=why):
            _call(k, x, out=[y], **bad)
    assert len(runs) == 3 and head.served == 5  # refused by the run, which names it


def test_a_float_scalar_is_compared_by_its_bits(driver):
    k = kernelkit.kernel("rep_sign", ["x", "a"], ["y"], "/* repeat tests */ y[0] = a * x[0];")
    x, y = torch.ones(1), torch.empty(1)
    for a in (0.0, 0.0, -0.0, -0.0, 0.0):  # 0.0 == -0.0, but the kernel's product differs
        k([x, a], grid=(1, 1, 1), threadgroup=(1, 1, 1), out=[y])
        assert torch.signbit(y).item() == (str(a) == "-0.0")
    assert _repeats(k).head is not None


def test_numpy_scalars_are_compared_by_type_and_bytes(driver):
    import numpy as np

    k = kernelkit.kernel("rep_np", ["x", "a"], ["y"], "/* repeat tests */ y[0] = a * x[0];")
    x, y = torch.ones(1), torch.empty(1)
    calls = [np.float32(2.0), np.float32(2.0), np.float32(2.0), np.float32(-0.0),
             np.float32(0.0), np.float64(3.0), np.float32(3.0), np.float32(3.0)]  # fmt: skip
    for a in calls:
        y.fill_(float("nan"))
        k([x, a], grid=(1, 1, 1), threadgroup=(1, 1, 1), out=[y])
        assert y.item() == float(a) and torch.signbit(y).item() == bool(np.signbit(a))
    served = 0
    for plan in k._plans.values():  # (float64 is a specialization of its own)
        node = plan.repeats.head
        while type(node).__name__ == "Call":
            served, node = served + node.served, node.next
    assert served >= 2  # the repeated 2.0 and 3.0


def test_overlapping_outputs_get_the_run_s_error(driver):
    k = _kernel("overlap")
    buf = torch.randn(2, 65)
    x, y = buf[:, :32], torch.empty(2, 32)
    x = buf.flatten()[:64].view(2, 32)
    for _ in range(2):
        _call(k, x, out=[y])
    assert _repeats(k).head is not None
    clash = buf.flatten()[1:65].view(2, 32)  # a distinct tensor over x's memory, shifted
    with pytest.raises(ArgumentError, match="overlap"):
        _call(k, x, out=[clash])


def test_the_chain_keeps_the_newest_calls_and_tries_rarely_past_its_limit(driver):
    k = _kernel("chain")
    xs = [torch.randn(2, 8 * (i + 1)) for i in range(Repeats.LIMIT + 2)]
    for x in xs:
        y = torch.full_like(x, float("nan"))
        _call(k, x, out=[y])
        torch.testing.assert_close(y, _expect(x))
    rep = _repeats(k)
    chain, node = [], rep.head
    while type(node).__name__ == "Call":
        chain.append(node)
        node = node.next
    assert len(chain) == Repeats.LIMIT and k._last is rep.head
    tries = rep.tries
    for i in range(Repeats.EVERY):  # the same cycle of six: each one a miss past the limit
        x = xs[i % len(xs)]
        y = torch.full_like(x, float("nan"))
        _call(k, x, out=[y])
        torch.testing.assert_close(y, _expect(x))
    assert rep.tries - tries <= 2  # not one per call


def test_a_chain_that_serves_nothing_is_cut_to_one_call(driver, monkeypatch):
    """A new grid every call: the Calls made never serve; past the tries, the chain keeps one
    (one C check a call, not four); calls that repeat again get their chain back."""
    monkeypatch.setattr(Repeats, "EVERY", 4)
    k = _kernel("idle")
    x = torch.randn(2, 64)
    y = torch.full_like(x, float("nan"))
    for n in range(16, 16 + 40):  # a grid never seen before each call (threads past 128 idle)
        _call(k, x, grid=(n * 8, 1, 1), out=[y])
        torch.testing.assert_close(y, _expect(x))
    rep = _repeats(k)
    assert len(_chain(rep)) == 1 and rep.tries < 20
    sizes = [torch.randn(2, 8 * (i + 1)) for i in range(3)]
    for _ in range(12):  # three shapes that repeat: Calls serve again, the chain grows back
        for z in sizes:
            w = torch.full_like(z, float("nan"))
            _call(k, z, out=[w])
            torch.testing.assert_close(w, _expect(z))
    assert len(_chain(rep)) >= 3 and sum(c.served for c in _chain(rep)) > 0


def _chain(rep: Repeats) -> list:
    calls, node = [], rep.head
    while type(node).__name__ == "Call":
        calls.append(node)
        node = node.next
    return calls


def test_no_call_for_one_tensor_passed_twice_and_in_place_is_right(driver):
    k = _kernel("inplace")
    x = torch.randn(3, 8)
    want = _expect(x)
    for _ in range(3):
        x2 = x.clone()
        _call(k, x2, out=[x2])  # torch's check refuses one tensor twice: the run serves it
        torch.testing.assert_close(x2, want)
    assert _repeats(k).head is None


def _warm(tag: str, times: int = 2):
    """A new kernel called ``times`` times with ``out=`` on (2, 8) float32: (kernel, x, y)."""
    k = _kernel(tag)
    x = torch.randn(2, 8)
    y = torch.empty_like(x)
    for _ in range(times):
        _call(k, x, out=[y])
    return k, x, y


def test_a_driver_error_goes_to_the_fallback(driver):
    k, x, y = _warm("fallback")
    driver.error = 700
    try:
        y.fill_(float("nan"))
        _call(k, x, out=[y])  # the CPU launcher stands in for CUDA's retry under its context
    finally:
        driver.error = 0
    torch.testing.assert_close(y, _expect(x))


def test_calls_keep_neither_the_kernel_nor_the_arrays_alive(driver):
    k, x, y = _warm("alive", 3)
    assert _repeats(k).head.served >= 1
    refs = [weakref.ref(k), weakref.ref(x), weakref.ref(y)]
    del k, x, y
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_call_that_differs_in_a_scalar_holds_no_array(driver):
    """Every Call of the chain compares the scalars of a call whose scale changes each time;
    none may keep a reference to its arrays (a leak would keep them, and their memory, alive)."""
    k, x, y = _warm("scalar_leak", 3)
    for step in range(3):
        _call(k, x, 2.0, step, out=[y])  # (n differs each time: a Call made for 0 misses on 1)
    assert _repeats(k).head is not None
    before = sys.getrefcount(x)
    for step in range(50):
        _call(k, x, 2.0, 100 + step, out=[y])
    assert sys.getrefcount(x) == before
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)


def test_threads_share_calls_and_each_gets_its_own_result(driver):
    """Each thread its own scale, the shapes (and with them n) common: a thread's calls repeat,
    and must never be taken by another thread's Call."""
    k = _kernel("threads")
    xs = [torch.randn(2, 8 * (i + 1)) for i in range(3)]
    wrong: list = []

    def work(offset: int) -> None:
        for i in range(60):
            j = (i + offset) % len(xs)
            x, a = xs[j], float(offset)
            y = torch.full_like(x, float("nan"))
            _call(k, x, a, j, out=[y])
            # (3 * x + n in float32 rounds where the two cancel: an absolute tolerance)
            if not torch.allclose(y, _expect(x, a, j), atol=1e-5):
                wrong.append((offset, i))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    rep, served = _repeats(k), 0
    node = rep.head
    while type(node).__name__ == "Call":
        served, node = served + node.served, node.next
    assert served > 0  # calls were repeated in C, among the threads' own


def test_a_call_refuses_entries_it_cannot_trust():
    module, why = native._module()
    if module is None:
        pytest.skip(why)
    good = dict(ins=((0, len, 0, 8),), outs=((len, 8, 8, None, -1),), blob=bytearray(16),
                offsets=(0, 8), expected=((3, (1, 1, 1)),))  # fmt: skip

    def make(**changes):
        a = {"last": [None], "has_out": True, **good, **changes}
        return module.Call(1, 1, a["last"], "k", print, print, list, a["ins"], a["outs"],
                           a["has_out"], True, print, a["expected"], int, (1, 1, 1, 1, 1, 1, 0),
                           a["blob"], a["offsets"])  # fmt: skip

    make()
    for bad in ({"ins": ((0, len, 12, 8),)}, {"ins": ((0, len, 16, 8),)},
                {"offsets": (0, 16)}, {"expected": ((8, None),)}, {"blob": bytearray(8192)},
                {"outs": ((len, 8, 8, len, -1),)}, {"ins": ((1, 2.0),), "outs": ()},
                {"last": []}):  # fmt: skip
        with pytest.raises((ValueError, TypeError)):
            make(**bad)
    # an output made by shape needs the shapes it was made with, one an output
    alloc = {"outs": ((len, 8, 0, len, -1),), "has_out": False}
    make(**alloc, expected=((1, ((2, 3),)),))
    for shapes in (None, ((2, 3), (4,)), [(2, 3)]):
        with pytest.raises(ValueError, match="output shapes"):
            make(**alloc, expected=((1, shapes),))
    # an output of a fixed layout (-2): (make, fallback, *conditions), no shapes needed
    make(outs=((len, 8, 0, (list, list, bool), -2),), has_out=False)
    for spec, source in (((list,), -2), (list, -2), ((list, list), -3)):
        with pytest.raises(ValueError, match="output entry"):
            make(outs=((len, 8, 0, spec, source),), has_out=False)


def test_a_call_copies_its_block_and_keeps_no_caller_buffer(driver):
    """The block is the Call's own copy: its maker's bytearray resized after (past the stack
    block's size) changes nothing that is launched."""
    module, _ = native._module()
    seen: list = []

    def record(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        p = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        seen.append((ctypes.c_uint64.from_address(p[0]).value,
                     ctypes.c_uint32.from_address(p[1]).value))  # fmt: skip
        return 0

    callback = DRIVER(record)
    address = ctypes.cast(callback, ctypes.c_void_p).value
    blob = bytearray(16)
    blob[8:12] = (77).to_bytes(4, "little")  # parameter 1: a value the block holds
    x = torch.zeros(4)
    ins = ((0, torch.Tensor.data_ptr, 0, 16),)
    call = module.Call(address, 1, [None], "k", print, print, list, ins, (), False, True,
                       lambda *a: True, (), int, (1, 1, 1, 1, 1, 1, 0), blob, (0, 8))  # fmt: skip
    blob.extend(bytearray(1 << 16))
    blob[8:12] = (5).to_bytes(4, "little")
    args = ([x], None, None, None, None, None, None, None, None, None, None, None)
    assert call(*args) == [] and call.served == 1
    assert seen == [(x.data_ptr(), 77)]


@pytest.mark.parametrize("has_out", [False, True])
def test_a_built_in_op_s_prepared_launch_is_a_call_made_without_launching(driver, has_out):
    from kernelkit.ops._common import kernel_caller

    k = _kernel(f"op_{has_out}")
    x = torch.randn(3, 40)
    kw = {"grid": (x.numel(), 1, 1), "threadgroup": (64, 1, 1)}
    call = kernel_caller(k, kw)
    shapes, dtypes = [x.shape], [torch.float32]
    out = [torch.empty_like(x)] if has_out else None
    arrays = [x, 2.0, 3]
    for step in range(4):
        x.normal_()
        if has_out:
            out[0].fill_(float("nan"))
        before = driver.launches
        got = call(arrays, None if has_out else shapes, None if has_out else dtypes, out)
        torch.testing.assert_close(got[0], _expect(x))
        if step:  # the first call made it; each one after launches through it, once
            direct = call.direct[not has_out]
            assert type(direct).__name__ == "Call" and driver.launches == before + 1
    assert call.direct[not has_out].served == 3


def test_two_outputs_overlapping_each_other_get_the_run_s_error(driver):
    body = "/* repeat tests */ uint i = threadIdx.x;\n"
    body += "if (i < x_shape[0]) { y[i] = x[i]; z[i] = -x[i]; }"
    k = kernelkit.kernel("rep_two", ["x"], ["y", "z"], body)
    x = torch.randn(8)
    y, z = torch.empty(8), torch.empty(8)
    for _ in range(3):  # out= as a tuple: as a list, a call repeated in C
        assert k([x], grid=(8, 1, 1), threadgroup=(8, 1, 1), out=(y, z)) == [y, z]
        torch.testing.assert_close(z, -x)
    assert _repeats(k).head.served >= 1
    buf = torch.empty(12)
    with pytest.raises(ArgumentError, match="share memory"):
        k([x], grid=(8, 1, 1), threadgroup=(8, 1, 1), out=[buf[:8], buf[4:]])


def test_a_parameter_is_a_tensor_to_the_call(driver):
    k = _kernel("param")
    x = torch.nn.Parameter(torch.randn(2, 8), requires_grad=False)
    y = torch.empty(2, 8)
    for _ in range(3):
        y.fill_(float("nan"))
        _call(k, x, out=[y])
        torch.testing.assert_close(y, _expect(x.detach()))
    assert _repeats(k).head.served >= 1


def test_a_failed_launch_raises_and_leaves_the_last_kernel_unnamed(driver):
    module, _ = native._module()
    last = ["before"]

    def fail(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return 700

    callback = DRIVER(fail)
    address = ctypes.cast(callback, ctypes.c_void_p).value

    def fallback(params, stream, geometry):
        raise RuntimeError("launch failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    x = torch.zeros(4)
    alloc = ((torch.Tensor.data_ptr, 8, 0, torch.empty_like, 0),)
    call = module.Call(address, 1, last, "k", fallback, print, list,
                       ((0, torch.Tensor.data_ptr, 0, 16),), alloc, False, True,
                       lambda *a: True, (), int, (1, 1, 1, 1, 1, 1, 0), bytearray(16),
                       (0, 8))  # fmt: skip
    args = ([x], None, None, None, None, None, None, None, None, None, None, None)
    before = sys.getrefcount(x)
    with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
        call(*args)
    assert last == ["before"] and call.served == 0 and sys.getrefcount(x) == before
    with pytest.raises(TypeError):  # not a call's 12 positional arguments: the next one's
        call(*args, out=None)


def test_an_op_s_call_hands_other_calls_to_the_run_and_retries(driver, monkeypatch):
    """A Call made by ``call_for`` (outside the chain) retries through ``miss`` even where the
    plan has no chain yet."""
    monkeypatch.setattr(Repeats, "EVERY", 2)
    k = _kernel("standalone")
    x = torch.randn(2, 16)
    y = torch.empty_like(x)
    args = ([x, 2.0, 3], None, None, (32, 1, 1), (64, 1, 1), None, None, None, [y], None, None,
            None)  # fmt: skip
    _call(k, x, out=[y])
    rep = _repeats(k)
    rep.head, rep.tries = None, Repeats.LIMIT  # (as if no call had been kept yet)
    call = rep.call_for(args)
    assert call is not None and call.trial is not None

    def refuse(*a):
        raise ValueError("no Call this time")

    rep.make = refuse  # misses make no Call: the chain stays empty
    for a in (0.5, 1.5, 2.5, 3.5):  # other scalars: to the run, every second one through miss
        y.fill_(float("nan"))
        call([x, a, 3], None, None, (32, 1, 1), (64, 1, 1), None, None, None, [y], None, None,
             None)  # fmt: skip
        torch.testing.assert_close(y, _expect(x, a, 3))


def _recording_driver() -> tuple[int, list, object]:
    """A driver that launches nothing and records each geometry: (its address, the geometries,
    the callback to keep alive)."""
    seen: list = []

    def run(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        seen.append((gx, gy, gz, bx, by, bz, shared))
        return 0

    callback = DRIVER(run)
    return ctypes.cast(callback, ctypes.c_void_p).value, seen, callback


def test_a_call_asks_for_another_geometry_before_it_reads_the_caller_s_lists(driver):
    """``geometries`` runs Python code (another thread may run meanwhile): a call whose
    inputs list changes under it is handed on, never read stale; an interrupt raised there
    is not swallowed; its geometry is the one launched."""
    module, _ = native._module()
    address, seen, _keep = _recording_driver()
    x, y = torch.zeros(4), torch.zeros(4)
    handed: list = []
    asked: list = []

    def geometries(grid, group, shared):
        asked.append(grid)
        if grid == (64, 1, 1):
            inputs.clear()  # as another thread could, while this Python code runs
        if grid == (128, 1, 1):
            raise KeyboardInterrupt
        return (grid[0] // 32, 1, 1, 32, 1, 1, 0)

    call = module.Call(address, 1, [None], "k", None, lambda *a: handed.append(a) or "run",
                       list, ((0, torch.Tensor.data_ptr, 0, 16),),
                       ((torch.Tensor.data_ptr, 8, 16, None, -1),), True, True,
                       lambda *a: True, ((3, (32, 1, 1)),), int, (1, 1, 1, 32, 1, 1, 0),
                       bytearray(16), (0, 8), geometries)  # fmt: skip

    def args(grid):
        return (inputs, None, None, grid, None, None, None, None, [y], None, None, None)

    inputs = [x]
    assert call(*args((32, 1, 1))) == [y] and not asked  # its own geometry: nothing asked
    assert call(*args((96, 1, 1))) == [y] and asked == [(96, 1, 1)]
    assert seen == [(1, 1, 1, 32, 1, 1, 0), (3, 1, 1, 32, 1, 1, 0)]
    launched = len(seen)
    assert call(*args((64, 1, 1))) == "run" and len(handed) == 1 and len(seen) == launched
    inputs = [x]
    with pytest.raises(KeyboardInterrupt):
        call(*args((128, 1, 1)))
    with pytest.raises(TypeError, match="callable"):
        module.Call(address, 1, [None], "k", None, print, list,
                    ((0, torch.Tensor.data_ptr, 0, 16),),
                    ((torch.Tensor.data_ptr, 8, 16, None, -1),), True, True, lambda *a: True,
                    (), int, (1, 1, 1, 32, 1, 1, 0), bytearray(16), (0, 8), 5)  # fmt: skip


def test_a_call_computes_a_new_geometry_as_the_full_check_does():
    """Property test of a Call's new geometries (``kk_quick`` in C, with ``Geometries.bounds``;
    else ``Geometries.of``): on any grid, threadgroup and shared size, it launches exactly the
    geometry ``load.geometry`` gives, or hands the call on where that refuses; int tuples within
    the limits, and a shared size that needs no raised limit, never reach Python."""
    from hypothesis import example, given, settings
    from hypothesis import strategies as st

    from kernelkit._pipeline.load import Geometries, geometry
    from kernelkit._records import Target

    target = Target(
        backend="test", device=0, arch="sm_90", name="a device", max_threads_per_block=1024,
        max_block_dims=(1024, 1024, 64), max_grid_dims=(2**31 - 1, 65535, 65535),
        max_shared_memory_bytes=48 * 1024, max_shared_memory_optin_bytes=227 * 1024,
    )  # fmt: skip
    module, _ = native._module()
    address, seen, _keep = _recording_driver()
    x, y = torch.zeros(4), torch.zeros(4)
    limits_of = [{}, {"cluster_y": 4, "static_shared_bytes": 1024}, {"max_threads_per_block": 256}]
    calls = []
    for limits in limits_of:
        geos = Geometries("k", target, limits, 512, lambda n: None)
        asked: list = []

        def of(grid, group, shared, geos=geos, asked=asked):
            asked.append(1)
            return geos.of(grid, group, shared)

        call = module.Call(address, 1, [None], "k", None, lambda *a: "handed on", list,
                           ((0, torch.Tensor.data_ptr, 0, 16),),
                           ((torch.Tensor.data_ptr, 8, 16, None, -1),), True, True,
                           lambda *a: True, ((3, (4, 4, 1)), (4, (1, 1, 1)), (11, None)), int,
                           (4, 4, 1, 1, 1, 1, 512), bytearray(16), (0, 8), of,
                           geos.bounds())  # fmt: skip
        assert geos.of((4, 4, 1), (1, 1, 1), None) == (4, 4, 1, 1, 1, 1, 512)  # (its own)
        calls.append((call, limits, asked))

    dim = st.one_of(st.integers(1, 300), st.sampled_from([1, 2, 4, 64, 128, 1024, 65535, 65536]),
                    st.integers(-1, 0), st.booleans())  # fmt: skip
    dims = st.one_of(st.tuples(dim), st.tuples(dim, dim), st.tuples(dim, dim, dim),
                     st.lists(dim, min_size=1, max_size=3),
                     st.tuples(dim, dim, dim, dim))  # fmt: skip
    shared = st.one_of(st.none(), st.integers(-1, 230 * 1024), st.sampled_from([48 * 1024]))

    @settings(max_examples=1500, deadline=None)
    @given(dims, dims, shared, st.sampled_from(range(len(calls))))
    @example((64, 8), (64, 4), None, 1)  # 2 blocks in y: not whole clusters of 4
    @example((1, 1, 128), (1, 1, 65), None, 0)
    @example((300,), (300,), None, 2)
    @example((2**62, 1, 1), (2**40, 2**40, 2**40), None, 0)  # (no overflow in C)
    @example((2**63 - 1,), (1024,), None, 0)
    @example((64,), (64,), 47 * 1024, 1)  # + 1 KiB static: the default limit exactly
    @example((64,), (64,), 47 * 1024 + 1, 1)
    def check(grid, group, nbytes, which):
        call, limits, asked = calls[which]
        try:
            want = geometry("k", grid, group, 512 if nbytes is None else nbytes, target, limits)
        except ArgumentError:
            want = None
        seen.clear()
        asked.clear()
        got = call([x], None, None, grid, group, None, None, None, [y], None, None, nbytes)
        if want is None:
            assert got == "handed on" and not seen
            return
        assert got == [y] and seen == [tuple(want)]
        plain = all(d.__class__ is tuple and all(v.__class__ is int for v in d)
                    for d in (grid, group))  # fmt: skip
        free = nbytes is None or nbytes + limits.get("static_shared_bytes", 0) <= 48 * 1024
        if plain and free:
            assert not asked  # computed in C
        if not free:
            assert asked  # past the default limit: Python raises the kernel's limit first

    check()


def test_arrays_checked_through_their_attributes_are_repeated_in_c(driver, monkeypatch):
    """CuPy arrays get their check from ``kk_launch.Guards`` (class, dtype, shape, strides,
    device, read as attributes); NumPy arrays registered the same way stand in for them: a
    kernel's repeated call launches from C, outputs it allocates are new arrays each call,
    one array passed as input and output is right, and any other shape, stride, dtype or a
    read-only ``out=`` goes to the run (its own result, or its error)."""
    import numpy as np

    from kernelkit import _arrays

    fields = (("dtype",), ("shape",), ("strides",))
    monkeypatch.setitem(_arrays.CHECKERS, np.ndarray, _arrays.attribute_checker(fields))
    rng = np.random.default_rng(5)
    k = _kernel("numpy_attrs")
    x = rng.standard_normal((4, 9)).astype(np.float32)
    y = np.full_like(x, np.nan)

    def call(x, **kw):
        kw.setdefault("grid", (x.size, 1, 1))
        kw.setdefault("threadgroup", (64, 1, 1))
        return k([x, 2.0, 3], **kw)

    def want(x):
        return (2.0 * x.astype(np.float64) + 3).astype(x.dtype)

    for _ in range(2):
        call(x, out=[y])
    rep = _repeats(k)
    head = rep.head
    assert type(head).__name__ == "Call"
    runs, before = _count_runs(rep), driver.launches
    for _ in range(4):
        y.fill(np.nan)
        assert call(x, out=[y])[0] is y
        np.testing.assert_allclose(y, want(x), rtol=1e-6)
    assert head.served == 4 and driver.launches - before == 4 and not runs
    z = x.copy()
    call(z, out=[z])  # one array as input and output (the run allows it exactly aliased)
    np.testing.assert_allclose(z, want(x), rtol=1e-6)
    served = head.served
    others = [
        (rng.standard_normal((5, 9)).astype(np.float32), None),  # another shape
        (rng.standard_normal((9, 4)).astype(np.float32).T, None),  # another stride
        (rng.standard_normal((4, 9)), None),  # float64
    ]
    for other, _ in others:
        out = np.full(other.shape, np.nan, other.dtype)
        call(other, out=[out])
        np.testing.assert_allclose(out, want(other), rtol=1e-6)
    assert head.served == served
    frozen = np.full_like(x, np.nan)
    frozen.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        call(x, out=[frozen])
    assert np.isnan(frozen).all()
    made = [call(x, output_shapes=[x.shape], output_dtypes=[np.float32])[0] for _ in range(4)]
    for m in made:
        np.testing.assert_allclose(m, want(x), rtol=1e-6)
    assert len({m.__array_interface__["data"][0] for m in made}) == 4


# ---- the Front: ``Kernel.__call__`` in C (``kk_launch.Front``) ----


def test_a_kernel_whose_calls_repeat_in_c_is_called_through_its_front(driver):
    k, x, y = _warm("front", 1)
    front = k._front
    assert type(front).__name__ == "Front" and k._entry is front and front.last is k._last
    runs, before = _count_runs(_repeats(k)), driver.launches
    # the documented layouts: positional up to init_value, keywords in any order, a tuple
    y.fill_(float("nan"))
    assert k([x, 2.0, 3], None, None, (16, 1, 1), (64, 1, 1), out=[y])[0] is y
    torch.testing.assert_close(y, _expect(x))
    call = _repeats(k).head  # the second call made it; the Front tries it first from now on
    assert k._last is call and front.last is call
    for kwargs in (
        {"grid": (16, 1, 1), "threadgroup": (64, 1, 1), "out": [y]},
        {"out": (y,), "threadgroup": (64, 1, 1), "grid": (16, 1, 1), "stream": None},
        {"grid": (16, 1, 1), "threadgroup": (64, 1, 1), "out": [y], "check": None},
        {"".join(["gr", "id"]): (16, 1, 1), "threadgroup": (64, 1, 1), "out": [y]},  # not interned
    ):
        y.fill_(float("nan"))
        ys, names = entered(lambda kwargs=kwargs: k([x, 2.0, 3], **kwargs))
        assert ys[0] is y
        assert "_call" not in names, (kwargs, names)  # laid out by the Front itself
        torch.testing.assert_close(y, _expect(x))
    (z,) = k(inputs=[x, 2.0, 3], grid=(16, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(2, 8)],
             output_dtypes=[torch.float32])  # fmt: skip
    torch.testing.assert_close(z, _expect(x))
    # the Call served the four; the run the call that made it and the allocating one
    assert call.served == 4 and driver.launches - before == 4 and len(runs) == 2


def test_the_front_hands_other_calls_to_the_kernel_s_python_path(driver):
    k, x, y = _warm("front_other", 2)
    front = k._front
    # another specialization: ``last`` misses, ``_call_other`` runs it and it is tried first
    x3 = torch.randn(3, 5, dtype=torch.float64)
    y3 = torch.empty_like(x3)
    _call(k, x3, out=[y3])
    torch.testing.assert_close(y3, (2.0 * x3 + 3).double())
    assert k._entry is front and front.last is k._last and len(k._plans) == 2
    _call(k, x, out=[y])  # and back
    torch.testing.assert_close(y, _expect(x))
    # what the Front does not lay out goes whole to ``_call``, which checks it
    assert _call(k, x, out=[y], verbose=False)[0] is y
    assert _call(k, x, out=[y], timeout=30.0)[0] is y
    assert k([x, 2.0, 3], None, None, (16, 1, 1), (64, 1, 1), None, None, False, out=[y])[0] is y
    with pytest.raises(TypeError, match=r"Kernel.__call__\(\) missing 1 required positional"):
        k(grid=(16, 1, 1))
    with pytest.raises(TypeError, match="unexpected keyword argument 'grdi'"):
        k([x, 2.0, 3], grdi=(16, 1, 1), threadgroup=(64, 1, 1), out=[y])
    with pytest.raises(TypeError, match="multiple values for argument 'grid'"):
        k([x, 2.0, 3], None, None, (16, 1, 1), grid=(16, 1, 1), threadgroup=(64, 1, 1))
    with pytest.raises(ArgumentError, match="threadgroup"):  # a checked call's error, unchanged
        k([x, 2.0, 3], grid=(16, 1, 1), out=[y])
    torch.testing.assert_close(y, _expect(x))


def test_a_kernel_and_its_front_make_no_cycle(driver):
    """A kernel is freed when its last reference goes (its programs with it), not at the next
    collection: the Front holds it weakly."""
    k, _, _ = _warm("front_alive", 3)
    front = k._front
    assert front is not None
    ref = weakref.ref(k)
    gc.disable()
    try:
        del k
        assert ref() is None
    finally:
        gc.enable()
    with pytest.raises(ReferenceError, match="no longer exists"):
        front(grid=(16, 1, 1))  # (only a Front kept past its kernel can be called so)


def test_the_call_keeps_its_signature_and_its_unbound_form():
    import inspect

    k = _kernel("front_signature")
    params = list(inspect.signature(k).parameters)
    assert params[:3] == ["inputs", "output_shapes", "output_dtypes"] and params[-1] == "timeout"
    assert list(inspect.signature(kernelkit.Kernel).parameters) == ["spec"]
    x = torch.randn(2, 8)
    (y,) = kernelkit.Kernel.__call__(k, [x, 2.0, 3], [(2, 8)], [torch.float32], grid=(16, 1, 1),
                                     threadgroup=(64, 1, 1))  # fmt: skip
    torch.testing.assert_close(y, _expect(x))
    assert "Run the kernel" in (kernelkit.Kernel.__call__.__doc__ or "")


def test_an_allocating_call_repeated_in_c_makes_its_outputs_of_its_fixed_layout(
    driver, monkeypatch
):
    """A Call's outputs have one layout (the shapes it compares): it makes them with torch's
    allocator by size and stride (``TorchAdapter.fixed_empty``), not from a shape or an input,
    a new tensor every call, right."""
    from kernelkit._arrays import DLPACK_CPU, DLPACK_CUDA
    from kernelkit._arrays import _torch as adapter

    real = adapter._fixed_empties().get(DLPACK_CPU)
    if real is None:
        pytest.skip("this torch has no empty_strided_cpu that passes the probe")
    made: list = []

    def counting(*args):
        made.append(args)
        return real(*args)

    monkeypatch.setitem(adapter._fixed_empties(), DLPACK_CPU, counting)
    k, x = _kernel("fixed_alloc"), torch.randn(3, 5)
    ys = [_call(k, x, output_shapes=[(3, 5)], output_dtypes=[torch.float32])[0] for _ in range(5)]
    assert _repeats(k).head is not None and _repeats(k).head.served == 3
    assert made == [((3, 5), (5, 1), torch.float32)] * 3  # the three calls the Call served
    assert len({id(y) for y in ys}) == 5
    for y in ys:
        assert y.shape == (3, 5) and y.stride() == (5, 1) and y.dtype == torch.float32
        torch.testing.assert_close(y, _expect(x))
    # under deterministic algorithms torch's allocators fill new memory with NaN: so do these
    from kernelkit._dtypes import DTYPES

    tensor_adapter = adapter.TorchAdapter()
    _, fallback, *conditions = tensor_adapter.fixed_empty(DTYPES["float32"], DLPACK_CPU, 0, (3, 5))
    assert not all(c() for c in conditions)
    torch.use_deterministic_algorithms(True)
    try:
        assert all(c() for c in conditions) and fallback().isnan().all()
        before = len(made)
        y = _call(k, x, output_shapes=[(3, 5)], output_dtypes=[torch.float32])[0]
        assert _repeats(k).head.served == 4 and len(made) == before  # torch's, in C
        torch.testing.assert_close(y, _expect(x))
    finally:
        torch.use_deterministic_algorithms(False)
    # CUDA's allocates on the current device: only device 0 of a one-device process
    monkeypatch.setitem(adapter._fixed_empties(), DLPACK_CUDA, counting)
    assert tensor_adapter.fixed_empty(DTYPES["float32"], DLPACK_CUDA, 1, (3, 5)) is None
    assert tensor_adapter.fixed_empty(DTYPES["float32"], DLPACK_CUDA, 0, (3, 5)) is not None


def test_a_copied_kernel_runs_after_the_original_is_gone(driver):
    """A copy does not share the original's Front (which holds the original, weakly)."""
    import copy

    k, x, y = _warm("front_copy", 3)
    k2 = copy.copy(k)
    assert k2._front is None and k._front is not None
    del k
    gc.collect()
    y.fill_(float("nan"))
    assert _call(k2, x, out=[y])[0] is y
    torch.testing.assert_close(y, _expect(x))
    x3 = torch.randn(3, 4)  # another specialization
    (y3,) = _call(k2, x3, output_shapes=[(3, 4)], output_dtypes=[torch.float32])
    torch.testing.assert_close(y3, _expect(x3))
