"""Warp intrinsics on the CPU backend against per-warp references (shuffles in and out of range
and of every width, votes, match, reductions), and, with a GPU, every result of
``warp_intrinsics.py`` bit for bit against the GPU's own."""

from __future__ import annotations

import numpy as np
import pytest
from parity import results
from warp_intrinsics import WIDTHS, inputs, kernel, outputs

torch = pytest.importorskip("torch")


def run(device: str) -> dict[str, np.ndarray]:
    arrays = [torch.from_numpy(x).to(device) for x in inputs()]
    return results(kernel(), arrays, [n for n, _ in outputs()], device, threadgroup=128)


@pytest.fixture(scope="module")
def cpu():
    return run("cpu")


def _source_lanes(mode: str, lane: np.ndarray, b: np.ndarray, w: int) -> np.ndarray:
    """PTX's shfl.sync: the lane each lane reads (its own where the source is out of range), for
    CUDA's segment mask 32 - width and clamp (0 for up, 31 otherwise); b is used mod 32."""
    segmask, b = 32 - w, b & 31
    first, last = lane & segmask, (lane & segmask) | (31 & ~segmask)
    if mode == "shfl":
        return first | (b & ~segmask)
    j = {"shfl_up": lane - b, "shfl_down": lane + b, "shfl_xor": lane ^ b}[mode]
    ok = j >= first if mode == "shfl_up" else j <= last
    return np.where(ok, j, lane)


def test_shuffles_of_every_width(cpu):
    v, s = inputs()
    lane = np.arange(v.size) % 32
    base = np.arange(v.size) - lane
    for w in WIDTHS:
        for mode in ("shfl", "shfl_up", "shfl_down", "shfl_xor"):
            b = s if mode == "shfl" else s & 63
            src = _source_lanes(mode, lane, b, w)
            got = cpu[f"{mode}_w{w}"]
            np.testing.assert_array_equal(got, v[base + src], err_msg=f"{mode} width {w}")


def test_votes_and_reductions(cpu):
    v, _ = inputs()
    warps = v.reshape(-1, 32).astype(np.int64)
    p = (warps & 3) == 0
    ballot = (p * (1 << np.arange(32))).sum(axis=1)
    np.testing.assert_array_equal(cpu["ballot"].reshape(-1, 32)[:, 0], ballot)
    np.testing.assert_array_equal(cpu["any"].reshape(-1, 32)[:, 0], p.any(axis=1))
    np.testing.assert_array_equal(cpu["all"].reshape(-1, 32)[:, 0], p.all(axis=1))
    u = warps & 0xFFFFFFFF
    np.testing.assert_array_equal(cpu["reduce_add"].reshape(-1, 32)[:, 0], u.sum(axis=1) % 2**32)
    np.testing.assert_array_equal(cpu["reduce_min_u"].reshape(-1, 32)[:, 0], u.min(axis=1))
    np.testing.assert_array_equal(cpu["reduce_max_i"].reshape(-1, 32)[:, 0], warps.max(axis=1))
    xor = np.bitwise_xor.reduce(u, axis=1)
    np.testing.assert_array_equal(cpu["reduce_xor"].reshape(-1, 32)[:, 0], xor)
    lane_sum = ((warps.sum(axis=1) + 2**31) % 2**32) - 2**31  # int wraps
    np.testing.assert_array_equal(cpu["lane_sum_xor"].reshape(-1, 32)[:, 0], lane_sum)


def test_match(cpu):
    v, _ = inputs()
    q = v.reshape(-1, 32) & 3
    bits = 1 << np.arange(32)
    want = np.array([[(bits * (row == x)).sum() for x in row] for row in q])
    np.testing.assert_array_equal(cpu["match_any"].reshape(-1, 32), want)
    top = v.reshape(-1, 32).view(np.uint32) >> 30
    same = (top == top[:, :1]).all(axis=1)
    np.testing.assert_array_equal(cpu["match_all_pred"].reshape(-1, 32)[:, 0], same.astype(int))
    assert same.any() and not same.all()


def test_cpu_and_gpu_agree_bit_for_bit(cpu):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    gpu = run("cuda")
    bad = []
    for name, _ in outputs():
        where = np.nonzero(cpu[name] != gpu[name])[0]
        if where.size:
            t = where[0]
            bad.append(f"{name}: {where.size} differ, e.g. thread {t}: cpu {cpu[name][t]:#x} "
                       f"gpu {gpu[name][t]:#x}")  # fmt: skip
    assert not bad, "\n".join(bad)
