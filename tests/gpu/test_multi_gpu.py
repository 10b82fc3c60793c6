"""Several GPUs: each specialization runs on the device its arrays live on, calls alternate
between devices without a stale context, and arrays on two devices are refused."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
    ),
]

K = kernelkit.kernel(
    "mg_axpb",
    ["x", "a"],
    ["y"],
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = a * x[i] + 1.0f;",
)


def _ref(x: torch.Tensor, a: float) -> np.ndarray:
    return a * x.double().cpu().numpy() + 1.0


def test_each_device_runs_its_own_arrays_alternating():
    xs = [torch.randn(10007, device=f"cuda:{d}") for d in (0, 1)]
    for rep in range(4):
        for d in (0, 1, 1, 0):
            (y,) = K(
                [xs[d], 2.0 + rep],
                output_shapes=[xs[d].shape],
                output_dtypes=[torch.float32],
                grid=(10007, 1, 1),
                threadgroup=(256, 1, 1),
            )
            assert y.device == xs[d].device
            np.testing.assert_allclose(y.cpu().numpy(), _ref(xs[d], 2.0 + rep), rtol=1e-6)


def test_device_one_work_leaves_device_zero_current():
    k = kernelkit.kernel(  # a new kernel: its first call compiles and loads for device 1
        "mg_fresh",
        ["x"],
        ["y"],
        "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = -x[i];",
    )
    x = torch.randn(4096, device="cuda:1")
    for _ in range(2):  # the slow path (compile, load) and the hot path
        y = torch.full_like(x, float("nan"))
        with torch.cuda.device(0):
            k([x], grid=(4096, 1, 1), threadgroup=(128, 1, 1), out=[y])
            assert torch.cuda.current_device() == 0
            assert torch.empty(1, device="cuda").device.index == 0
        torch.cuda.synchronize(1)
        np.testing.assert_array_equal(y.cpu().numpy(), -x.cpu().numpy())


def test_arrays_on_two_devices_are_refused():
    x = torch.randn(16, device="cuda:0")
    y = torch.empty(16, device="cuda:1")
    with pytest.raises(ValueError, match="different devices"):
        K([x, 1.0], grid=(16, 1, 1), threadgroup=(16, 1, 1), out=[y])
