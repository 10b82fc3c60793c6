"""Issue 24: no call without a geometry, no overlapping outputs, faults that point at
``check=True``, interruptible and time-limited CPU launches, unloading of unused programs."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

COPY_BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i];"


@pytest.mark.parametrize(
    "given, missing",
    [({}, "grid and threadgroup"), ({"grid": (8, 1, 1)}, "threadgroup"),
     ({"threadgroup": (8, 1, 1)}, "grid")],
)  # fmt: skip
def test_a_call_without_a_geometry_is_refused(given, missing):
    k = kernelkit.kernel("ls_nogeo", ["x"], ["y"], COPY_BODY)
    x = np.ones(8, np.float32)
    with pytest.raises(kernelkit.ArgumentError, match=rf"\[ls_nogeo\] {missing} required"):
        k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], backend="cpu", **given)
    m = kernelkit.metal_kernel("ls_nogeo_metal", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(kernelkit.ArgumentError, match=rf"\[ls_nogeo_metal\] {missing} required"):
        m([x], output_shapes=[x.shape], output_dtypes=[x.dtype], backend="cpu", **given)
