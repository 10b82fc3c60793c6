"""The autotuner on a GPU: CUDA events on a private stream, graph replays for a kernel of a few
microseconds, rotation past L2, in-place restore, and a stored decision replayed."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import _config
from kernelkit._backends import registry as _registry
from kernelkit._select.tuning import db as tuning
from kernelkit._tune import timing

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
for (; i < x_shape[0]; i += STEP) y[i] = 2.0f * x[i];
"""


@pytest.fixture
def db(tmp_path, monkeypatch):
    store = tuning.TuningDB(tmp_path / "tuning")
    monkeypatch.setattr(tuning, "_current", (_config.config, store))
    return store


def tuned_kernel(name: str):
    k = kernelkit.kernel(name, ["x"], ["y"], BODY)
    configs = [{"STEP": 32 * b, "threadgroup": (b,)} for b in (64, 128, 256, 512)]
    return kernelkit.autotune(
        k,
        configs=configs,
        key=["x.shape[0]:pow2"],
        grid=lambda p, c: (c.values["STEP"],),
        quiet=True,
    )


def test_cuda_timer_reports_l2_and_times_with_events():
    backend = _registry.get_backend("cuda")
    timer = backend.timer(backend.targets()[0])
    try:
        assert timer.cache_bytes > 1 << 20 and timer.stream != 0
        timer.start()
        assert 0 <= timer.stop() < 0.1
    finally:
        timer.close()


def test_small_kernel_is_timed_by_graph_replays_and_large_one_by_events(db):
    tuned = tuned_kernel("atg_small")
    x = torch.randn(4096, device="cuda")
    small = tuned.tune([x], [x.shape], [torch.float32], store=False)
    assert all(c.status == "ok" for c in small.candidates)
    assert any("graph" in c.detail for c in small.candidates), small.table()
    big = torch.randn(64 << 20, device="cuda")
    large = tuned.tune(
        [big],
        [big.shape],
        [torch.float32],
        store=False,
        configs=[{"STEP": 32 * 256, "threadgroup": (256,)}],
    )
    assert "runs over" in large.candidates[0].detail  # one launch per timing, sets rotated


def test_stored_decision_is_replayed_without_timing(db):
    tuned = tuned_kernel("atg_replay")
    x = torch.randn(100_000, device="cuda")
    (y,) = tuned([x], output_shapes=[x.shape], output_dtypes=[torch.float32])
    torch.testing.assert_close(y, 2 * x)
    before = timing.count()
    again = tuned_kernel("atg_replay")
    (y,) = again([x], output_shapes=[x.shape], output_dtypes=[torch.float32])
    torch.testing.assert_close(y, 2 * x)
    assert timing.count() == before and again.tunings == 0


def test_in_place_on_gpu_is_restored(db):
    body = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < a_shape[0]) x[i] = a[i] + 1;"
    k = kernelkit.kernel("atg_inplace", ["a"], ["x"], body)
    tuned = kernelkit.autotune(
        k, configs=[{"threadgroup": (128,)}, {"threadgroup": (256,)}], grid="a", quiet=True
    )
    a = torch.arange(10_000, device="cuda", dtype=torch.float32)
    original = a.clone()
    result = tuned.tune([a], out=[a], store=False)
    assert [c.status for c in result.candidates] == ["ok", "ok"]
    torch.testing.assert_close(a, original)
    np.testing.assert_array_equal(tuned([a], out=[a])[0].cpu().numpy(), original.cpu().numpy() + 1)
