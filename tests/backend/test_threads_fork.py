"""One kernel object called from 16 threads at once with different dtypes, frameworks and
shapes (right results, one compile per distinct binary), and a child forked after the parent
used the CPU backend (it keeps working there, with the parent's kernels and new ones)."""

from __future__ import annotations

import multiprocessing as mp
import threading
import uuid

import numpy as np
import pytest
from conftest import CPU_AVAILABLE

import kernelkit
from kernelkit._backends import registry as _registry

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

DTYPES = ("float32", "float64", "int32", "int64")


def _kernel(tag: str) -> kernelkit.Kernel:
    """A kernel whose source no cache has seen (a fresh comment): every binary is compiled."""
    body = (
        f"// {tag} {uuid.uuid4().hex}\n"
        "uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "if (i < x_shape[0]) y[i] = x[i] * (T)3 + (T)1;\n"
    )
    return kernelkit.kernel("threads_fork", ["x"], ["y"], body)


def _call(k, x, dtype):
    (y,) = k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(x.shape[0], 1, 1),
             threadgroup=(64, 1, 1), template=[("T", dtype)])  # fmt: skip
    return y


def test_sixteen_threads_one_kernel_object_one_compile_per_binary(monkeypatch):
    backend = _registry.get_backend("cpu")
    compiled: list[str] = []
    lock = threading.Lock()
    real_compile = backend.compile

    def counting_compile(request):
        with lock:
            compiled.append(request.kernel)
        return real_compile(request)

    monkeypatch.setattr(backend, "compile", counting_compile)
    k = _kernel("threads")
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            dtype = DTYPES[t % 4]
            use_torch = t % 8 >= 4  # each dtype from NumPy and from torch CPU tensors
            start.wait()
            for rep in range(10):
                n = 50 + 37 * t + rep
                a = (np.arange(n) % 97).astype(dtype)
                x = torch.from_numpy(a) if use_torch else a
                y = _call(k, x, dtype)
                got = y.numpy() if use_torch else y
                np.testing.assert_array_equal(got, a * 3 + 1)
                assert got.dtype == np.dtype(dtype)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    _run_threads(worker, errors)
    assert compiled.count("threads_fork") == len(DTYPES)  # NumPy and torch share each binary
    assert len(k._plans) == 2 * len(DTYPES)  # a plan per (framework, dtype)


def _child(queue, k, a):
    report = {}
    try:
        report["parent_kernel"] = _call(k, a, "float32").tolist()
        fresh = _kernel("child")
        report["new_kernel"] = _call(fresh, torch.from_numpy(a), "float32").tolist()
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        report["error"] = f"{type(e).__name__}: {e}"
    queue.put(report)


def test_a_forked_child_keeps_using_the_cpu_backend():
    k = _kernel("fork")
    a = np.arange(300, dtype=np.float32)
    np.testing.assert_array_equal(_call(k, a, "float32"), a * 3 + 1)  # blocks ran on the pool
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(queue, k, a))
    p.start()
    report = queue.get(timeout=300)
    p.join(60)
    assert p.exitcode == 0
    assert "error" not in report, report["error"]
    assert report["parent_kernel"] == (a * 3 + 1).tolist()
    assert report["new_kernel"] == (a * 3 + 1).tolist()
    np.testing.assert_array_equal(_call(k, a, "float32"), a * 3 + 1)  # the parent still works


def test_sixteen_threads_through_one_torch_op():
    k = _kernel("torch_op")
    op = k.as_torch_op(
        f"kk_threads::op_{uuid.uuid4().hex[:8]}",
        output_shapes="x",
        output_dtypes="x",
        grid="x",
        threadgroup=(64,),
        template=lambda x: [("T", x.dtype)],
    )
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            dtype = getattr(torch, DTYPES[t % 4])
            start.wait()
            for rep in range(10):
                x = torch.arange(20 + 11 * t + rep).to(dtype)
                out = torch.empty_like(x) if rep % 2 else None
                y = op(x) if out is None else op(x, out=out)
                torch.testing.assert_close(y, x * 3 + 1)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    _run_threads(worker, errors)
    assert len(k._plans) == 2 * len(DTYPES)  # allocating and out= per dtype


def _run_threads(worker, errors, n=16):
    """Start ``n`` threads running ``worker(t)``; fail with the first error any of them hit."""
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[0]
