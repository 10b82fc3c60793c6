"""Cooperative launches, struct parameters and template bodies on a CUDA GPU (issue 25, items 3,
5, 6): a grid reduction over one block per SM through ``cuLaunchCooperativeKernel``, a grid
larger than the device keeps resident refused by name before launching, ggml's
``soft_max_f32_parallelize_cols`` (by-value ``soft_max_params``, two grid syncs per row)
launched as ggml launches it (one block of 8 warps per SM) against float64."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
sys.path.insert(0, str(Path(__file__).parents[1] / "backend"))
from test_real_structs_coop import GRID_SUM, SOFTMAX_COLS, params  # noqa: E402


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


GRID_SUM_K = kernelkit.kernel(
    "grid_sum_cuda", ["x"], ["partial", "total"], GRID_SUM,
    header="#include <cooperative_groups.h>", cooperative=True,
)  # fmt: skip


def _grid_sum(x, blocks):
    return GRID_SUM_K(
        [x],
        output_shapes=[(blocks * 4,), (1,)],
        output_dtypes=[torch.float32, torch.float32],
        grid=(blocks * 128, 1, 1),
        threadgroup=(128, 1, 1),
    )


def test_grid_reduction_one_block_per_sm():
    x = torch.randn(1_000_003, device="cuda")
    _, total = _grid_sum(x, _sms())
    want = x.double().sum().item()
    assert abs(total.item() - want) <= 1e-4 * abs(want) + 1e-2


def test_grid_too_large_to_be_resident_is_refused():
    x = torch.randn(1000, device="cuda")
    blocks = 64 * _sms() + 1  # more than any SM keeps of 128-thread blocks
    with pytest.raises(kernelkit.LaunchError, match=rf"cooperative launch of {blocks} blocks"):
        _grid_sum(x, blocks)


@pytest.mark.parametrize(("ncols", "rows"), [(5000, 2), (200_011, 3)])
def test_ggml_softmax_parallelize_cols_on_the_gpu(ncols, rows):
    x = torch.randn(rows, ncols, device="cuda") * 3
    blocks = _sms()
    dst, _ = SOFTMAX_COLS(
        [x, params(ncols, rows)[()]],
        output_shapes=[tuple(x.shape), (blocks,)],
        output_dtypes=[torch.float32, torch.float32],
        grid=(blocks * 256, 1, 1),
        threadgroup=(256, 1, 1),
    )
    x64 = x.double().cpu().numpy()
    want = np.exp(x64 - x64.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    np.testing.assert_allclose(dst.cpu().numpy(), want, rtol=2e-5, atol=1e-9)
