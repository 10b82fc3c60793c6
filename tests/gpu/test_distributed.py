"""Two ranks of ``torch.distributed`` (NCCL), one GPU each, sharing one disk cache: both call the
same user kernel and built-in ops, all-reduce their outputs, and every specialization is compiled
once across the ranks (the other rank finds it on disk: the cache's per-key file lock)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
    ),
]

WORLD = 2
ROWS, COLS = 37, 1000  # odd sizes: no multiple of a block or a vector
BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = a * x[i] + 1.0f;"


def _inputs(rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank ``rank``'s inputs, reproducible in any process."""
    g = np.random.default_rng(1234 + rank)
    x = g.standard_normal(ROWS * COLS).astype(np.float32)
    m = (g.standard_normal((ROWS, COLS)) * 3).astype(np.float32)
    w = g.standard_normal(COLS).astype(np.float32)
    return x, m, w


def _rank(rank: int, init_file: str, results: str, tag: str) -> None:
    """One rank: its kernels on its own GPU, then an all-reduce of each output."""
    import torch.distributed as dist

    import kernelkit
    from kernelkit import ops

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        k = kernelkit.kernel("dist_axpb", ["x", "a"], ["y"], f"// {tag}\n{BODY}")
        x, m, w = (torch.from_numpy(a).cuda() for a in _inputs(rank))
        (y,) = k(
            [x, 2.0],
            output_shapes=[x.shape],
            output_dtypes=[torch.float32],
            grid=(x.numel(), 1, 1),
            threadgroup=(256, 1, 1),
        )
        s = ops.softmax(ops.rms_norm(m, w, 1e-6))
        for t in (y, s):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        assert torch.cuda.current_device() == rank
        out = {
            "y": y.cpu().numpy().tolist(),
            "s": s.cpu().numpy().tolist(),
            "device": [y.device.index, s.device.index],
            "stats": kernelkit.cache_stats(),
        }
        Path(results, f"{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


def _softmax_rms(m: np.ndarray, w: np.ndarray) -> np.ndarray:
    m64 = m.astype(np.float64)
    h = m64 / np.sqrt((m64 * m64).mean(-1, keepdims=True) + 1e-6) * w
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_two_nccl_ranks_share_kernels_and_the_disk_cache(tmp_path, monkeypatch):
    import uuid

    import torch.multiprocessing as mp

    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(cache))  # the ranks inherit it
    monkeypatch.setenv("KERNELKIT_CACHE", "1")
    results = tmp_path / "results"
    results.mkdir()
    tag = uuid.uuid4().hex
    mp.spawn(_rank, args=(str(tmp_path / "init"), str(results), tag), nprocs=WORLD, join=True)

    done = [json.loads((results / f"{r}.json").read_text()) for r in range(WORLD)]
    ins = [_inputs(r) for r in range(WORLD)]
    want_y = sum(2.0 * x.astype(np.float64) + 1.0 for x, _, _ in ins)
    want_s = sum(_softmax_rms(m, w) for _, m, w in ins)
    for r, d in enumerate(done):
        assert d["device"] == [r, r]
        np.testing.assert_allclose(np.array(d["y"]), want_y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.array(d["s"]), want_s, rtol=1e-5, atol=1e-6)
    # Both ranks need the same specializations: each was compiled by one rank and read from
    # disk by the other.
    stats = [d["stats"] for d in done]
    needed = [s["compiles"] + s["disk_hits"] for s in stats]
    assert needed[0] == needed[1] and needed[0] >= 3, stats
    assert sum(s["compiles"] for s in stats) == needed[0], stats
    assert os.listdir(cache)
