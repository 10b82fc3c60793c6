"""CUDA-only behaviour: frameworks' arrays and streams, contexts on new threads, arch info."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

EXP = kernelkit.kernel(
    "interop_exp",
    ["x"],
    ["y"],
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = expf(x[i]);",
)
SPIN = kernelkit.kernel(
    "interop_spin_then_write",
    ["x"],
    ["y"],
    """
    // burn ~ms on one thread, then write: a reader on another stream would see the poison
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = x[i];
    for (int k = 0; k < iters; ++k) acc = acc * 0.999999f + 1e-7f;
    if (i < x_shape[0]) y[i] = acc;
    """,
)


def _ref(x: np.ndarray) -> np.ndarray:
    return np.exp(x.astype(np.float64))


def test_torch_tensor_result_is_torch_on_same_device():
    x = torch.randn(4099, device="cuda")
    (y,) = EXP(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(4099, 1, 1),
        threadgroup=(128, 1, 1),
    )
    assert isinstance(y, torch.Tensor) and y.device == x.device
    np.testing.assert_allclose(y.cpu().numpy(), _ref(x.cpu().numpy()), rtol=1e-6)


def test_cupy_array_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    x = cupy.random.standard_normal(3001, dtype=cupy.float32)
    (y,) = EXP(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(3001, 1, 1),
        threadgroup=(256, 1, 1),
    )
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), _ref(cupy.asnumpy(x)), rtol=1e-6)


def test_cupy_byte_strides_become_element_strides():
    cupy = pytest.importorskip("cupy")
    k = kernelkit.kernel(
        "interop_strided",
        ["x"],
        ["y"],
        "uint i = blockIdx.x * blockDim.x + threadIdx.x;"
        " if (i < y_shape[0]) y[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)];",
        ensure_row_contiguous=False,
    )
    base = cupy.random.standard_normal((64, 48), dtype=cupy.float32)
    x = base.T  # genuinely non-contiguous, strides in bytes on the CuPy side
    (y,) = k(
        [x],
        output_shapes=[(x.size,)],
        output_dtypes=[x.dtype],
        grid=(x.size, 1, 1),
        threadgroup=(256, 1, 1),
    )
    np.testing.assert_array_equal(cupy.asnumpy(y), cupy.asnumpy(x).reshape(-1))


def test_jax_array_in_jax_out():
    # JAX takes 75% of the GPU at start-up unless told not to; beside torch's caching allocator
    # in the same process its client aborts the interpreter (seen on an H100)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    x = jax.random.normal(jax.random.PRNGKey(0), (2049,), dtype=jnp.float32)
    (y,) = EXP(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(2049, 1, 1),
        threadgroup=(256, 1, 1),
    )
    assert isinstance(y, jax.Array)
    np.testing.assert_allclose(np.asarray(y), _ref(np.asarray(x)), rtol=1e-6)


def test_launches_on_torch_current_stream():
    n = 1 << 16
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        SPIN([x], grid=(n, 1, 1), threadgroup=(256, 1, 1), template=[("iters", 20000)], out=[y])
        z = y * 1  # same stream: ordered after the kernel
    s.synchronize()
    assert not torch.isnan(z).any()


def test_stream_argument_overrides_current_stream():
    n = 1 << 12
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    s = torch.cuda.Stream()
    EXP([x], grid=(n, 1, 1), threadgroup=(256, 1, 1), out=[y], stream=s)
    s.synchronize()
    np.testing.assert_allclose(y.cpu().numpy(), _ref(x.cpu().numpy()), rtol=1e-6)
    y2 = torch.full_like(x, float("nan"))
    EXP([x], grid=(n, 1, 1), threadgroup=(256, 1, 1), out=[y2], stream=s.cuda_stream)
    s.synchronize()
    assert not torch.isnan(y2).any()


def test_call_from_a_new_thread_without_a_current_context():
    x = torch.randn(1000, device="cuda")
    result = {}

    def worker():
        try:
            (y,) = EXP(
                [x],
                output_shapes=[x.shape],
                output_dtypes=[x.dtype],
                grid=(1000, 1, 1),
                threadgroup=(128, 1, 1),
            )
            torch.cuda.synchronize()
            result["y"] = y.cpu().numpy()
        except Exception as e:  # noqa: BLE001 - surfaced below
            result["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in result, result.get("error")
    np.testing.assert_allclose(result["y"], _ref(x.cpu().numpy()), rtol=1e-6)


def test_target_arch_is_the_device_arch():
    from kernelkit._backends.registry import get_backend

    major, minor = torch.cuda.get_device_capability()
    target = get_backend("cuda").targets()[0]
    assert target.arch in (f"sm_{major}{minor}", f"compute_{major}{minor}")
    assert target.name == torch.cuda.get_device_name()


def test_host_tensor_given_to_cuda_backend_is_refused():
    x = torch.randn(16)
    with pytest.raises(ValueError, match="input 'x'"):
        EXP(
            [x],
            output_shapes=[(16,)],
            output_dtypes=[torch.float32],
            grid=(16, 1, 1),
            threadgroup=(16, 1, 1),
            backend="cuda",
        )
    (y,) = EXP(
        [x.cuda()],
        output_shapes=[(16,)],
        output_dtypes=[torch.float32],
        grid=(16, 1, 1),
        threadgroup=(16, 1, 1),
    )
    assert torch.isfinite(y).all()


def test_mixed_devices_are_refused():
    x = torch.randn(16, device="cuda")
    y = torch.empty(16)
    with pytest.raises(ValueError, match="different devices"):
        EXP([x], grid=(16, 1, 1), threadgroup=(16, 1, 1), out=[y])
