"""Issue 24, items 9 and 10: Ctrl-C and ``timeout=`` stop a CPU launch; kernels created and
dropped in one process keep memory and mappings bounded (libraries are unloaded)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import kernelkit
from kernelkit._cache import memory
from kernelkit._records import Artifact

SPIN = "volatile int go = 1; while (go) {} y[0] = x[0];"  # no barrier, no back-edge check
SPIN_FIBERS = "volatile int go = 1; while (go) {} __syncthreads(); y[0] = x[0];"
GEO = {"grid": (64, 1, 1), "threadgroup": (32, 1, 1), "backend": "cpu"}


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("body", [SPIN, SPIN_FIBERS], ids=["loop", "fibers"])
def test_timeout_stops_a_spinning_kernel(body):
    k = kernelkit.kernel("stop_spin", ["x"], ["y"], body)
    x = np.ones(64, np.float32)
    t = time.perf_counter()
    with pytest.raises(kernelkit.KernelTimeout, match=r"\[stop_spin\] stopped by its time limit"):
        k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], timeout=0.3, **GEO)
    assert time.perf_counter() - t < 60  # (the first call also compiles)
    t = time.perf_counter()
    with pytest.raises(kernelkit.KernelTimeout):
        k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], timeout=0.3, **GEO)
    assert 0.25 < time.perf_counter() - t < 5
    copy = kernelkit.kernel(
        "stop_after", ["x"], ["y"], "uint i = blockIdx.x * blockDim.x + threadIdx.x; y[i] = x[i];"
    )
    (y,) = copy([x], output_shapes=[x.shape], output_dtypes=[x.dtype], timeout=30, **GEO)
    np.testing.assert_array_equal(y, x)  # the pool still works after a stop


def test_timeout_must_be_a_positive_number():
    k = kernelkit.kernel("stop_bad", ["x"], ["y"], "y[0] = x[0];")
    x = np.ones(4, np.float32)
    for bad in (0, -1.0, "1", True, float("inf")):
        with pytest.raises(kernelkit.ArgumentError, match=r"\[stop_bad\] timeout must be"):
            k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], timeout=bad, **GEO)


def _wait_until_spinning(pid: int, cpu_s: float = 0.2, within_s: float = 60.0) -> None:
    """Until the process has used ``cpu_s`` more CPU time (its spinning launch: it does nothing
    else), so that a signal lands inside the launch however loaded this machine is; a fixed
    sleep where /proc is not there."""
    stat = f"/proc/{pid}/stat"
    if not os.path.exists(stat):
        time.sleep(0.5)
        return

    def cpu() -> float:
        with open(stat) as f:  # utime and stime, fields 14 and 15 (after the command's ")")
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    start, deadline = cpu(), time.monotonic() + within_s
    while cpu() < start + cpu_s and time.monotonic() < deadline:
        time.sleep(0.02)


def _spin_and_signal(handler: str, launch: str) -> tuple[int, str, str]:
    """A child Python with SIGINT handled as ``handler`` says (``default_int_handler``, what an
    interactive Python has, or ``SIG_IGN``: a process started in the background by a
    non-interactive shell inherits that), which runs the spinning kernel with ``launch``'s
    extra arguments and then a copy kernel, sent SIGINT once it spins: (returncode, stdout,
    stderr)."""
    code = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.{handler})
        import numpy as np, kernelkit
        spin = kernelkit.kernel("stop_sigint", ["x"], ["y"], {SPIN!r})
        x = np.ones(64, np.float32)
        kw = dict(output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(64, 1, 1),
                  threadgroup=(32, 1, 1), backend="cpu")
        try:
            spin([x], timeout=0.1, **kw)  # compiles it
        except kernelkit.KernelTimeout:
            pass
        print("ready", flush=True)
        try:
            spin([x]{launch}, **kw)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        except kernelkit.KernelTimeout:
            print("timed out", flush=True)
        copy = kernelkit.kernel("stop_copy", ["x"], ["y"], "y[threadIdx.x] = 2 * x[0];")
        print(copy([x], **kw)[0][:2].tolist(), flush=True)
    """)
    src = os.path.dirname(os.path.dirname(kernelkit.__file__))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        _wait_until_spinning(proc.pid)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, out, err


def test_sigint_stops_a_spinning_kernel():
    """Ctrl-C (SIGINT to the process) ends the launch with KeyboardInterrupt; the process
    then runs kernels as before."""
    code, out, err = _spin_and_signal("default_int_handler", "")
    assert code == 0, err
    assert out.split("\n")[:2] == ["interrupted", "[2.0, 2.0]"], (out, err)


def test_an_ignored_sigint_leaves_the_launch_running():
    """Where SIGINT is ignored (a background job of a script inherits that), the launch does
    not take it up: it runs on until its time limit, and the process goes on."""
    code, out, err = _spin_and_signal("SIG_IGN", ", timeout=1.5")
    assert code == 0, err
    assert out.split("\n")[:2] == ["timed out", "[2.0, 2.0]"], (out, err)


def test_kernels_created_and_dropped_keep_memory_and_mappings_bounded():
    """Each new kernel object loads its library (from the in-memory artifact after the first
    two compiles); dropping it unloads it. Before: +5 mappings and ~31 KB per kernel, so
    vm.max_map_count ran out near 13,000 kernels. benchmarks/kernel_churn.py runs 100,000."""
    body = "uint i = threadIdx.x; if (i < x_shape[0]) y[i] = x[i] * K;"
    x = np.arange(64, dtype=np.float32)
    kw = dict(output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(64, 1, 1),
              threadgroup=(64, 1, 1), backend="cpu")  # fmt: skip
    samples = []
    for n in range(1, 801):
        k = kernelkit.kernel("churn_test", ["x"], ["y"], body)
        (y,) = k([x], template=[("K", n % 2 + 1)], **kw)
        assert y[1] == n % 2 + 1
        del k, y
        if n % 200 == 0:
            gc.collect()
            samples.append((_maps(), _rss_bytes()))
    (maps0, rss0), (maps1, rss1) = samples[0], samples[-1]
    assert maps1 - maps0 < 60, samples  # before: +3,000
    assert rss1 - rss0 < 8 * 2**20, samples  # before: +18 MB


def test_the_in_memory_artifacts_are_bounded(monkeypatch):
    monkeypatch.setattr(memory, "MAX_ARTIFACTS", 4)
    memory.clear_memory()
    try:
        arts = [Artifact(kind="so", binary=bytes(10), entry="e", arch="x") for _ in range(6)]
        for i, a in enumerate(arts[:4]):
            memory.put(f"d{i}", a)
        assert memory.get("d0") is arts[0]  # now the most recently used
        memory.put("d4", arts[4])
        memory.put("d5", arts[5])
        assert [memory.get(f"d{i}") is not None for i in range(6)] == [
            True, False, False, True, True, True,
        ]  # fmt: skip
    finally:
        memory.clear_memory()
