"""A built-in op's warm call as one C call (``ops._prepared.Recent.calls``, issue 26): where the
op's kernel launches through the native module, a signature's calls without out= are taken
whole by a call repeated in C (``_common.decided_of``), which checks the arrays and scalars and
launches, with no Python frame of kernelkit's; every other call (another shape, dtype, stride,
scalar, a gradient, one tensor passed twice, another forced choice) gets its own right result.

Run in a fresh process each: the ops' kernels must be loaded while the stand-in driver
(``tests/native_driver.py``: ``kk_launch.Call`` on the CPU backend, a ctypes callback in the
driver's place) is open, and other tests of this process may have loaded them without it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parents[1]

PRELUDE = """
import sys
sys.path.insert(0, {tests!r})
import torch
import torch.nn.functional as F
import kernelkit
from kernelkit import ops
from native_driver import stand_in

F64 = torch.float64


def frames(fn):
    '''kernelkit's Python functions that one call of fn enters (not the CPU backend's launch,
    which the stand-in driver runs where CUDA's driver would launch).'''
    seen = []

    def profile(frame, event, arg):
        where = frame.f_code.co_filename
        if event == "call" and "kernelkit" in where and "_backends/cpu" not in where:
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        y = fn()
    finally:
        sys.setprofile(None)
    return y, seen


def warm(fn, ref, calls):
    '''fn's result checked three times (prepared, then served), then once more counted:
    (kernelkit frames of the last call, launches it made, the op's Calls' served counts).'''
    for _ in range(3):
        torch.testing.assert_close(fn(), ref())
    before = drv.launches
    y, seen = frames(fn)
    torch.testing.assert_close(y, ref())
    return seen, drv.launches - before, [c[0].served for c in calls.calls]
"""


def _run(body: str) -> str:
    script = PRELUDE.format(tests=str(TESTS)) + "\nwith stand_in() as drv:\n"
    script += textwrap.indent(textwrap.dedent(body), "    ")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_row_ops_and_elementwise_launch_warm_calls_from_c_alone():
    out = _run("""
        from kernelkit.ops import _matmul, _norms, _softmax
        g = torch.Generator().manual_seed(0)
        x, b = torch.randn(5, 70, generator=g), torch.randn(5, 70, generator=g)
        w, bias = torch.rand(70, generator=g) + 0.5, torch.randn(70, generator=g)
        wt = torch.randn(40, 70, generator=g)  # a weight [N, K]: x's first row, M = 1
        swiglu = ops.elementwise("y = a * b / (1 + exp(-b))")
        cases = {
            "softmax": (lambda: ops.softmax(x),
                        lambda: torch.softmax(x.to(F64), -1).float(), _softmax._RECENT),
            "rms_norm": (lambda: ops.rms_norm(x, w, 1e-6),
                         lambda: F.rms_norm(x.to(F64), (70,), w.to(F64), 1e-6).float(),
                         _norms._RMS_RECENT),
            "layer_norm": (lambda: ops.layer_norm(x, w, bias, 1e-5),
                           lambda: F.layer_norm(x.to(F64), (70,), w.to(F64), bias.to(F64),
                                                1e-5).float(), _norms._LAYER_RECENT),
            "elementwise": (lambda: swiglu(x, b),
                            lambda: (x.to(F64) * F.silu(b.to(F64))).float(), swiglu._recent),
            "matmul": (lambda: ops.matmul(x[:1], wt, transpose_b=True),
                       lambda: (x[:1].to(F64) @ wt.to(F64).T).float(), _matmul._RECENT[True]),
            "matmul bias": (lambda: ops.matmul(x[:1], wt, bias=bias[:40], transpose_b=True),
                            lambda: (x[:1].to(F64) @ wt.to(F64).T + bias[:40].to(F64)).float(),
                            _matmul._RECENT[False]),
        }
        own = {"softmax": ["softmax"], "rms_norm": ["rms_norm"], "layer_norm": ["layer_norm"],
               "elementwise": ["__call__", "call"], "matmul": ["matmul"],
               "matmul bias": ["matmul"]}  # the op's own function, nothing below it
        for name, (fn, ref, recent) in cases.items():
            seen, launches, served = warm(fn, ref, recent)
            assert seen == own[name] and launches == 1, (name, seen, launches)
            assert served == [3] and recent.entries == (), (name, served)
            y1, y2 = fn(), fn()
            assert y1.data_ptr() != y2.data_ptr()  # a new output each call
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_a_compiled_graph_run_first_launches_its_op_calls_from_c():
    """A compiled graph's first run calls the ops' eager twins under torch's custom-op analysis
    mode, where no check passes: the kernel's prepared run and its call repeated in C are made
    by a later call, not given up (before: the Python hot path for good, three kernelkit
    frames an op). The graph is the process's first use of the ops."""
    out = _run("""
        from kernelkit.ops import _matmul, _norms, _softmax
        g = torch.Generator().manual_seed(3)
        x = torch.randn(1, 64, generator=g)
        w, b = torch.rand(64, generator=g) + 0.5, torch.randn(64, generator=g)
        wt = torch.randn(48, 64, generator=g)

        def block(t):
            h = ops.layer_norm(ops.rms_norm(t, w, 1e-6), w, b, 1e-5)
            return ops.softmax(ops.matmul(h, wt, transpose_b=True))

        def ref(t):
            t = t.to(F64)
            h = F.rms_norm(t, (64,), w.to(F64), 1e-6)
            h = F.layer_norm(h, (64,), w.to(F64), b.to(F64), 1e-5)
            return torch.softmax(h @ wt.to(F64).T, -1).float()

        f = torch.compile(block, fullgraph=True)
        recents = (_norms._RMS_RECENT_EAGER, _norms._LAYER_RECENT_EAGER,
                   _matmul._RECENT_EAGER[True], _softmax._RECENT_EAGER)
        for _ in range(4):
            torch.testing.assert_close(f(x), ref(x))
        before = drv.launches
        y, seen = frames(lambda: f(x))
        torch.testing.assert_close(y, ref(x))
        assert seen == ["eager_rms_norm", "eager_layer_norm", "eager_matmul",
                        "eager_softmax"], seen
        assert drv.launches - before == 4
        assert all(len(r.calls) == 1 and r.entries == () for r in recents)
        served = [r.calls[0][0].served for r in recents]
        f(x)
        assert [r.calls[0][0].served for r in recents] == [s + 1 for s in served]
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_calls_a_decided_call_does_not_take_get_their_own_results():
    out = _run("""
        from kernelkit.ops import _norms, _softmax
        g = torch.Generator().manual_seed(1)
        x = torch.randn(4, 48, generator=g)
        w = torch.rand(48, generator=g) + 0.5

        def sm(t):
            return torch.softmax(t.to(F64), -1).to(t.dtype)

        def rms(t, eps):
            return F.rms_norm(t.to(F64), (48,), w.to(F64), eps).to(t.dtype)

        for _ in range(3):
            ops.softmax(x), ops.rms_norm(x, w, 1e-6)
        made = _softmax._RECENT.calls[0][0]
        others = [
            torch.randn(5, 48, generator=g),              # another shape
            torch.randn(48, 4, generator=g).t(),          # another stride
            torch.randn(4, 96, generator=g)[:, ::2],      # another stride, same shape
            torch.randn(4, 48, generator=g).double(),     # another dtype (float64: refused)
        ]
        for t in others:
            for _ in range(2):
                if t.dtype == F64:
                    try:
                        ops.softmax(t)
                    except (kernelkit.ArgumentError, TypeError):
                        pass
                    else:
                        raise AssertionError("float64 ran")
                    continue
                torch.testing.assert_close(ops.softmax(t), sm(t))
        half = torch.randn(4, 48, generator=g).half()
        for _ in range(3):
            torch.testing.assert_close(ops.softmax(half), sm(half), atol=2e-3, rtol=2e-3)
        # a gradient: through the torch op, with its backward
        xg = x.clone().requires_grad_(True)
        y = ops.softmax(xg)
        y.backward(torch.ones_like(y))
        assert y.grad_fn is not None and xg.grad is not None
        # other eps values: each its own result (a Call compares its scalars' bits), and a
        # recent entry that checks the arrays alone serves them (not the signature each time)
        for eps in (1e-6, 0.25, 1e-6, 0.25, 0.0):
            torch.testing.assert_close(ops.rms_norm(x, w, eps), rms(x, eps))
        assert len(_norms._RMS_RECENT.calls) == 1 and len(_norms._RMS_RECENT.entries) == 1
        _, seen = frames(lambda: ops.rms_norm(x, w, 0.5))
        assert seen[:3] == ["rms_norm", "_declined", "run_new"], seen  # the Call, the entry
        # a forced choice: the key's extras differ, the Call is not asked
        before = made.served
        with kernelkit.force("softmax", "rows"):
            for _ in range(2):
                torch.testing.assert_close(ops.softmax(x), sm(x))
        torch.testing.assert_close(ops.softmax(x), sm(x))
        assert made.served == before + 1
        # matmul: other rows, a bias, none again: each its own result
        wt = torch.randn(24, 48, generator=g)
        bias = torch.randn(24, generator=g)
        for rows, bb in ((1, None), (1, None), (1, None), (2, None), (1, bias), (3, None),
                         (1, None), (2, bias), (1, bias)):
            want = x[:rows].to(F64) @ wt.to(F64).T + (0 if bb is None else bb.to(F64))
            got = ops.matmul(x[:rows], wt, bias=bb, transpose_b=True)
            torch.testing.assert_close(got, want.float())
        # one tensor passed twice (torch's check refuses it): the signature serves it
        swiglu = ops.elementwise("y = a * b / (1 + exp(-b))")
        for _ in range(3):
            torch.testing.assert_close(swiglu(x, x), (x.to(F64) * F.silu(x.to(F64))).float())
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_arrays_checked_through_their_attributes_launch_warm_calls_from_c():
    """CuPy's arrays are checked by ``kk_launch.Guards`` (their class, dtype, shape, strides
    and device, read as attributes): NumPy arrays stand in for them here, with the same check
    (``_arrays.attribute_checker``), so a warm op call is the op's frame and one C call, and
    calls of another shape, stride or dtype get their own results."""
    out = _run("""
        import numpy as np
        from kernelkit import _arrays
        from kernelkit.ops import _norms, _softmax
        _arrays.CHECKERS[np.ndarray] = _arrays.attribute_checker(
            (("dtype",), ("shape",), ("strides",)))
        rng = np.random.default_rng(2)
        x = rng.standard_normal((5, 70)).astype(np.float32)
        w = (rng.random(70) + 0.5).astype(np.float32)
        b = rng.standard_normal((5, 70)).astype(np.float32)

        def sm(t):
            e = np.exp(t.astype(np.float64) - t.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)

        def rms(t):
            t = t.astype(np.float64)
            return t / np.sqrt((t * t).mean(-1, keepdims=True) + 1e-6) * w

        swiglu = ops.elementwise("y = a * b / (1 + exp(-b))")
        cases = {
            "softmax": (lambda: ops.softmax(x), lambda: sm(x), _softmax._RECENT, ["softmax"]),
            "rms_norm": (lambda: ops.rms_norm(x, w, 1e-6), lambda: rms(x), _norms._RMS_RECENT,
                         ["rms_norm"]),
            "elementwise": (lambda: swiglu(x, b),
                            lambda: x * b / (1 + np.exp(-b.astype(np.float64))),
                            swiglu._recent, ["__call__", "call"]),
        }
        for name, (fn, ref, recent, own) in cases.items():
            for _ in range(3):
                np.testing.assert_allclose(fn(), ref(), rtol=2e-6, atol=1e-6)
            before = drv.launches
            y, seen = frames(fn)
            np.testing.assert_allclose(y, ref(), rtol=2e-6, atol=1e-6)
            # (NumPy's address is read by a Python function; CuPy's by operator.attrgetter)
            assert [f for f in seen if f != "pointer"] == own, (name, seen)
            assert drv.launches - before == 1, name
            assert [c[0].served for c in recent.calls] == [3], name
            assert fn() is not fn()  # a new output each call
        made = _softmax._RECENT.calls[0][0]
        served = made.served
        others = [rng.standard_normal((6, 70)).astype(np.float32),   # another shape
                  rng.standard_normal((70, 5)).astype(np.float32).T,  # another stride
                  rng.standard_normal((5, 140)).astype(np.float32)[:, ::2],
                  rng.standard_normal((5, 70)).astype(np.float16)]    # another dtype
        for t in others:
            for _ in range(2):
                got = ops.softmax(t)
                assert got.dtype == t.dtype and got.shape == t.shape
                np.testing.assert_allclose(got, sm(t), rtol=2e-3 if t.dtype == np.float16
                                           else 2e-6, atol=1e-3 if t.dtype == np.float16
                                           else 1e-6)
        assert made.served == served
        print("ok")
    """)
    assert out.strip().endswith("ok")


def test_elementwise_calls_with_a_number_launch_from_c_and_other_numbers_get_theirs():
    """A call with a Python float (a scale, a decode loop's constant) is taken by a call
    repeated in C, which compares the number's bits: the same float launches with no Python
    frame below the op's own; another float, an int, a bool, a NumPy scalar, a number in
    another place each get their own result, through the prepared signature."""
    out = _run("""
        import numpy as np
        g = torch.Generator().manual_seed(5)
        x, z = torch.randn(5, 70, generator=g), torch.randn(70, generator=g)
        f = ops.elementwise("y = a * b + c")
        fn = lambda: f(x, 0.5, z)
        ref = lambda: (x.to(F64) * 0.5 + z.to(F64)).float()
        seen, launches, served = warm(fn, ref, f._recent)
        assert seen == ["__call__", "call"] and launches == 1, (seen, launches)
        assert served == [3] and f._recent.entries == (), served
        mine = f._recent.calls[0][0]
        for b in (0.25, 2, True, np.float32(1.5), -3.0, 0.5, 0.25, 2, 0.5, -0.0, 1e30):
            for _ in range(2):
                got = f(x, b, z)
                torch.testing.assert_close(got, (x.to(F64) * float(b) + z.to(F64)).float())
        assert len(f._recent.calls) == 1, f._recent.calls  # ints and bools make no Call
        for _ in range(4):  # a number first: prepared (signed by x's class), then from C
            torch.testing.assert_close(f(0.5, x, z), (x.to(F64) * 0.5 + z.to(F64)).float())
        first = f._recent.calls[0][0]
        assert first is not mine and first.served >= 2, (first.served, f._recent.calls)
        served = mine.served
        fn()
        assert mine.served == served + 1
        print("ok")
    """)
    assert out.strip().endswith("ok")
