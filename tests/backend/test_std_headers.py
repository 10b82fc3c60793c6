"""The standard headers' names mean the same on every backend: each statement of
tests/std_header_uses.py compiles and runs (the CPU backend's come from the system's C++ library,
CUDA's from libcu++ through kernelkit's headers)."""

from __future__ import annotations

import numpy as np
import pytest
from std_header_uses import USES

import kernelkit


@pytest.mark.parametrize("header", sorted(USES))
def test_standard_header_runs(arrays, backend, header):
    if arrays.use_torch and not arrays.on_gpu:
        pytest.skip("one array framework is enough on the CPU backend")
    body = "if (blockIdx.x == 0 && threadIdx.x == 0) { " + USES[header] + " }"
    k = kernelkit.kernel("stdh_" + header.replace(".", "_"), ["x"], ["y"], body,
                         header=f"#include <{header}>")  # fmt: skip
    x = np.array([4.0, 0.5, 0.25, 1.0], np.float32)
    (y,) = k([arrays.put(x)], output_shapes=[(4,)], output_dtypes=[np.float32],
             grid=(1, 1, 1), threadgroup=(1, 1, 1), backend=backend)  # fmt: skip
    assert np.isfinite(np.asarray(arrays.get(y))[0]) or header in ("limits", "cmath")
