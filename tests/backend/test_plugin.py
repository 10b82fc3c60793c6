"""An out-of-tree backend (tests/plugins/kk_sim_backend) found through its entry point.

Install it with ``pip install -e tests/plugins/kk_sim_backend``; without it these tests skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import kernelkit
from kernelkit._backends import registry as _registry

pytest.importorskip(
    "kk_sim_backend",
    reason="the sim plugin is not installed (pip install -e tests/plugins/kk_sim_backend)",
)

GLOBAL_ID = "uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
SCALED_EXP = kernelkit.kernel(
    "p_scaled_exp", ["x", "s"], ["y"], GLOBAL_ID + "if (i < x_shape[0]) y[i] = s * expf(x[i]);"
)


def run_sim(x, scale=2.0):
    return SCALED_EXP(
        [x, scale],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(x.size, 1, 1),
        threadgroup=(32, 1, 1),
        backend="sim",
    )[0]


def test_sim_is_registered_through_its_entry_point():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="kernelkit.backends")}
    assert eps.get("sim") == "kk_sim_backend:SimBackend"
    assert "sim" in _registry.registered()
    backend = _registry.get_backend("sim")
    assert backend.name == "sim" and backend.dlpack_devices == frozenset({1})


def test_sim_runs_a_kernel_on_numpy_arrays():
    x = np.random.default_rng(0).standard_normal(1001).astype(np.float32)
    y = run_sim(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32
    np.testing.assert_allclose(y, 2.0 * np.exp(x.astype(np.float64)), rtol=1e-6)


def test_sim_geometry_strides_templates_and_two_outputs():
    k = kernelkit.kernel(
        "p_many",
        ["x", "n"],
        ["y", "z"],
        """
uint c = thread_position_in_grid.x, r = thread_position_in_grid.y;
if (r < x_shape[0] && c < x_shape[1]) {
    long long loc = elem_to_loc(r * x_shape[1] + c, x_shape, x_strides, x_ndim);
    y[r * x_shape[1] + c] = (T)x[loc] * K + n;
    z[r * x_shape[1] + c] = kk_linear_tid();
}
""",
        ensure_row_contiguous=False,
    )
    x = np.arange(35, dtype=np.int32).reshape(7, 5).T  # non-contiguous (5, 7)
    y, z = k(
        [x, 3],
        output_shapes=[x.shape, x.shape],
        output_dtypes=[np.float64, np.uint32],
        grid=(7, 5, 1),
        threadgroup=(4, 2, 1),
        template=[("T", np.float64), ("K", 2)],
        backend="sim",
    )
    np.testing.assert_array_equal(y, x * 2.0 + 3)
    r, c = np.meshgrid(np.arange(5), np.arange(7), indexing="ij")
    np.testing.assert_array_equal(z, c % 4 + 4 * (r % 2))


def test_sim_histogram_with_init_value():
    k = kernelkit.kernel(
        "p_hist", ["x"], ["h"], GLOBAL_ID + "if (i < x_shape[0]) atomicAdd(&h[x[i]], 1);"
    )
    x = np.random.default_rng(1).integers(0, 10, 500).astype(np.int32)
    (h,) = k(
        [x],
        output_shapes=[(10,)],
        output_dtypes=[np.int32],
        grid=(500, 1, 1),
        threadgroup=(64, 1, 1),
        init_value=0,
        backend="sim",
    )
    np.testing.assert_array_equal(h, np.bincount(x, minlength=10))


def test_sim_compile_error_is_a_compile_error():
    k = kernelkit.kernel("p_broken", ["x"], ["y"], "y[0] = x[0];\ny[1] = nonesuch;")
    with pytest.raises(kernelkit.CompileError) as info:
        k(
            [np.zeros(2, np.float32)],
            output_shapes=[(2,)],
            output_dtypes=[np.float32],
            grid=(2, 1, 1),
            threadgroup=(2, 1, 1),
            backend="sim",
        )
    assert "p_broken:2" in info.value.log and "nonesuch" in info.value.log


def test_sim_refuses_what_it_cannot_do():
    with pytest.raises(TypeError, match="float16"):
        SCALED_EXP(
            [np.zeros(4, np.float16), 1.0],
            output_shapes=[(4,)],
            output_dtypes=[np.float32],
            grid=(4, 1, 1),
            threadgroup=(4, 1, 1),
            backend="sim",
        )
    k = kernelkit.kernel("p_shared", ["x"], ["y"], "y[0] = x[0];", shared_memory=1024)
    with pytest.raises(ValueError, match="shared_memory"):
        k(
            [np.zeros(1, np.float32)],
            output_shapes=[(1,)],
            output_dtypes=[np.float32],
            grid=(1, 1, 1),
            threadgroup=(1, 1, 1),
            backend="sim",
        )
    assert run_sim(np.zeros(3, np.float32), 1.0).tolist() == [1.0, 1.0, 1.0]


def test_sim_is_listed_by_kernelkit_info():
    out = subprocess.run(
        [sys.executable, "-m", "kernelkit", "info", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report = json.loads(out.stdout)
    sim = report["backends"]["sim"]
    assert "error" not in sim
    assert sim["version"] == "0.1"
    assert sim["targets"][0]["name"] == "sequential simulator"
    text = subprocess.run(
        [sys.executable, "-m", "kernelkit", "info"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "backend sim" in text


def test_a_broken_plugin_does_not_break_sim(patch_entry_points):
    from importlib.metadata import entry_points as real_entry_points

    broken = [
        SimpleNamespace(
            name="broken_import",
            value="kk_no_such_plugin_module:Backend",
            group="kernelkit.backends",
        ),
        SimpleNamespace(
            name="broken_class", value="kk_sim_backend:NoSuchBackend", group="kernelkit.backends"
        ),
    ]

    def entry_points(group=None, **kw):
        return list(real_entry_points(group=group, **kw)) + broken

    patch_entry_points(entry_points)
    with pytest.warns(RuntimeWarning) as caught:
        loaded = _registry.backends()
    messages = " ".join(str(w.message) for w in caught)
    assert "'broken_import'" in messages and "'broken_class'" in messages
    assert "sim" in loaded and "broken_import" not in loaded
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    np.testing.assert_allclose(run_sim(x), 2 * np.exp(x.astype(np.float64)), rtol=1e-6)


def test_sim_can_be_the_only_backend(clean_state):
    clean_state.setenv("KERNELKIT_BACKENDS", "sim")
    from kernelkit import _config

    _config.reload()
    _registry.reset()
    assert list(_registry.registered()) == ["sim"]
    x = np.ones(8, np.float32)
    # host arrays go to the first backend that runs on host memory: sim, without naming it
    y = SCALED_EXP(
        [x, 1.0],
        output_shapes=[(8,)],
        output_dtypes=[np.float32],
        grid=(8, 1, 1),
        threadgroup=(8, 1, 1),
    )[0]
    np.testing.assert_allclose(y, np.e, rtol=1e-6)


def test_two_backends_in_one_process_each_get_their_own_source():
    """A kernel object used on one backend, then another, then the first again (issue 7,
    item 9): nothing rendered for one backend is reused by the other."""
    body = "uint i = blockIdx.x*blockDim.x+threadIdx.x; if (i < x_shape[0]) y[i] = x[i] + s;"
    k = kernelkit.kernel("mixed_backends", ["x", "s"], ["y"], body)
    x = np.random.default_rng(2).standard_normal(300).astype(np.float32)
    call = dict(
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(300, 1, 1),
        threadgroup=(64, 1, 1),
    )
    for backend in ("sim", "cpu", "sim", None):
        (y,) = k([x, 1.5], backend=backend, **call)
        np.testing.assert_allclose(y, x + np.float32(1.5), rtol=0, atol=0)
    sources = {p.request.backend: p.request.source for p in k._plans.values()}
    assert set(sources) == {"sim", "cpu"} and sources["sim"] != sources["cpu"]
    fresh = kernelkit.kernel("mixed_backends", ["x", "s"], ["y"], body)
    np.testing.assert_array_equal(fresh([x, 1.5], **call)[0], x + np.float32(1.5))
