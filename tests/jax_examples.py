"""A JAX callable from a kernel, shared by the CPU-backend tests (tests/backend) and the GPU tests
(tests/gpu): a 2-D axpy with two outputs and a scalar, and its float64 NumPy reference. Imports
no jax (the tests check that kernelkit never does)."""

from __future__ import annotations

import numpy as np

import kernelkit

# y = alpha * x + b (b broadcast over rows), s = y * y
AXPY_2D = """
uint r = blockIdx.y * blockDim.y + threadIdx.y;
uint c = blockIdx.x * blockDim.x + threadIdx.x;
if (r < x_shape[0] && c < x_shape[1]) {
    float v = alpha * x[r * x_strides[0] + c] + b[c];
    y[r * x_shape[1] + c] = v;
    s[r * x_shape[1] + c] = v * v;
}
"""


def axpy_callable(name: str, threadgroup: tuple[int, int, int]) -> kernelkit.JaxCallable:
    """``AXPY_2D`` as a JAX callable ``(x, b, alpha) -> (y, s)``, one thread per element."""
    k = kernelkit.kernel(name, ["x", "b", "alpha"], ["y", "s"], AXPY_2D)
    return k.as_jax_callable(
        output_shapes=lambda x, b, alpha: [x.shape, x.shape],
        output_dtypes=[np.float32, np.float32],
        grid=lambda x, b, alpha: (x.shape[1], x.shape[0], 1),
        threadgroup=threadgroup,
    )


def axpy_reference(x: np.ndarray, b: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """``(y, s)`` of ``AXPY_2D`` in float64."""
    v = alpha * x.astype(np.float64) + b.astype(np.float64)
    return v, v * v
