"""One process, both backends, and forked children after CUDA use (on a GPU machine)."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BODY = "uint i = blockIdx.x*blockDim.x+threadIdx.x; if (i < x_shape[0]) y[i] = x[i] + 1;"


def _call(k, x):
    return k(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(x.shape[0], 1, 1),
        threadgroup=(128, 1, 1),
    )[0]


def test_cuda_then_cpu_in_one_process_reads_shapes_on_both():
    k = kernelkit.kernel("mixed_fk", ["x"], ["y"], BODY)
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    y_gpu = _call(k, torch.from_numpy(x).cuda()).cpu().numpy()
    y_cpu = _call(k, x)  # the CPU backend after a CUDA compile (issue 7, item 9)
    again = kernelkit.kernel("mixed_fk", ["x"], ["y"], BODY)
    np.testing.assert_allclose(y_gpu, x + 1, rtol=1e-6)
    np.testing.assert_array_equal(y_cpu, x + 1)
    np.testing.assert_array_equal(_call(again, x), x + 1)
    assert bytes([32]) == b" "


def _child(queue, cuda_x, host_x):
    k = kernelkit.kernel("mixed_fork", ["x"], ["y"], BODY)
    report = {}
    try:
        # out= given: kernelkit itself allocates nothing, so the error must be its own
        k([cuda_x], out=[cuda_x], grid=(cuda_x.shape[0], 1, 1), threadgroup=(128, 1, 1))
        report["cuda"] = "ran"
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        report["cuda"] = f"{type(e).__name__}: {e}"
    try:
        report["cpu"] = _call(k, host_x).tolist()
    except Exception as e:  # noqa: BLE001
        report["cpu"] = f"{type(e).__name__}: {e}"
    queue.put(report)


def test_forked_child_gets_a_clear_cuda_error_and_the_cpu_backend_works():
    k = kernelkit.kernel("mixed_fork", ["x"], ["y"], BODY)
    cuda_x = torch.ones(256, device="cuda")
    _call(k, cuda_x)  # CUDA initialized in the parent
    host_x = np.arange(5, dtype=np.float32)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(queue, cuda_x, host_x))
    p.start()
    report = queue.get(timeout=120)
    p.join(60)
    assert "spawn" in report["cuda"] and "forked" in report["cuda"], report
    assert report["cpu"] == (host_x + 1).tolist()
