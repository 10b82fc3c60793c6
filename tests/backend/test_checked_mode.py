"""Checked mode through the public API (CPU backend): planted out-of-bounds reads and writes and a
divergent barrier are reported with kernel, array, index, block, thread and source line."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import _config

GID = "uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"


def _run(k, x, **kw):
    return k(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(x.size, 1, 1),
        threadgroup=(32, 1, 1),
        backend="cpu",
        **kw,
    )[0]


def test_out_of_bounds_read_is_reported_then_next_call_works():
    k = kernelkit.kernel(
        "ck_read",
        ["x"],
        ["y"],
        GID + "if (i >= x_shape[0]) return;\nfloat v = x[i];\n"
        "if (i == 40) v = x[i + 1000];\ny[i] = v;",
    )
    x = np.random.default_rng(0).standard_normal(96).astype(np.float32)
    with pytest.raises(kernelkit.KernelFault) as e:
        _run(k, x, check=True)
    msg = str(e.value)
    for part in (
        "[ck_read]",
        "read",
        "'x'",
        "index 1040",
        "extent 96",
        "block (1,0,0)",
        "thread (8,0,0)",
        "ck_read:4",
    ):
        assert part in msg, (part, msg)
    x2 = x[:40].copy()
    np.testing.assert_array_equal(_run(k, x2, check=True), x2)  # i == 40 returns early


def test_out_of_bounds_write_is_reported():
    k = kernelkit.kernel("ck_write", ["x"], ["y"], GID + "y[i * 2] = x[i];")
    x = np.ones(64, np.float32)
    with pytest.raises(kernelkit.KernelFault, match=r"write to 'y' at index 64 \(extent 64\)"):
        _run(k, x, check=True)


def test_environment_switch_turns_checking_on(monkeypatch):
    k = kernelkit.kernel("ck_env", ["x"], ["y"], GID + "y[i] = x[i + 1];")
    x = np.ones(32, np.float32)
    monkeypatch.setenv("KERNELKIT_CPU_CHECK", "1")
    _config.reload()
    try:
        with pytest.raises(kernelkit.KernelFault, match="'x' at index 32"):
            _run(k, x)
    finally:
        monkeypatch.delenv("KERNELKIT_CPU_CHECK")
        _config.reload()


def test_divergent_barrier_is_reported_not_hung():
    # the other 16 threads still run: they wait at a warp operation that needs the first 16
    k = kernelkit.kernel(
        "ck_diverge",
        ["x"],
        ["y"],
        GID + "if (threadIdx.x < 16) {\n  __syncthreads();\n}\n"
        "y[i] = __shfl_sync(0xffffffffu, x[i], 0);",
    )
    x = np.ones(64, np.float32)
    with pytest.raises(kernelkit.KernelFault, match=r"ck_diverge:3.*16 of 32 threads"):
        _run(k, x)


def test_threads_that_returned_do_not_make_a_barrier_divergent():
    k = kernelkit.kernel(
        "ck_exited",
        ["x"],
        ["y"],
        GID + "if (threadIdx.x >= 16) return;\n__syncthreads();\ny[i] = x[i] + 1;",
    )
    x = np.arange(64, dtype=np.float32)
    y = _run(k, x, check=True)
    np.testing.assert_array_equal(y.reshape(2, 32)[:, :16], (x + 1).reshape(2, 32)[:, :16])


def test_cuda_backend_refuses_checked_mode_clearly():
    from kernelkit._backends.registry import get_backend

    cuda = get_backend("cuda")
    with pytest.raises(NotImplementedError, match="no checked mode"):
        cuda.resolve_check(True)
    assert cuda.resolve_check(None) is False
