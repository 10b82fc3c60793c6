"""Shared fixtures: the backends under test, array helpers for them, and state resets."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# The tests never write to the user's cache: unless the run names a cache directory, they use
# one of their own (kept between runs: compiled kernels are reused), and its tuning database
# starts empty every session (records stored by one session must not steer the next one's
# choices). Set before kernelkit reads its configuration; subprocesses inherit it.
if "KERNELKIT_CACHE_DIR" not in os.environ:
    _dir = Path(tempfile.gettempdir()) / f"kernelkit-tests-{os.getuid()}"
    os.environ["KERNELKIT_CACHE_DIR"] = str(_dir)
    shutil.rmtree(_dir / "tuning", ignore_errors=True)
# Child processes (python -c scripts, the CLI, the benchmarks) import this checkout's kernelkit,
# as the tests themselves do (pytest's pythonpath), not whichever one is installed.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")]
).rstrip(os.pathsep)

from kernelkit import _config
from kernelkit._backends import registry as _registry

# the ``driver`` fixture: a stand-in CUDA driver that runs calls repeated in C on the CPU
pytest_plugins = ["native_driver"]


def _loads(name: str) -> bool:
    """Whether backend ``name`` imports (quietly: a missing backend is not a test failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            backend = _registry.get_backend(name)
        except Exception:  # noqa: BLE001 - any failure means "not available here"
            return False
        if name == "cpu":
            return True
        try:
            return bool(backend.targets())
        except Exception:  # noqa: BLE001
            return False


def _backend_params() -> list[Any]:
    params = []
    if _loads("cpu"):
        params.append(pytest.param("cpu", id="cpu"))
    if _loads("cuda"):
        params.append(pytest.param("cuda", id="cuda", marks=pytest.mark.gpu))
    if not params:
        params.append(
            pytest.param(
                None,
                id="no-backend",
                marks=pytest.mark.skip(
                    reason="no kernelkit backend loads here (cpu failed to import, no CUDA device)"
                ),
            )
        )
    # Probing may have recorded failures (e.g. cpu not importable yet): start tests clean.
    _registry.reset()
    return params


BACKEND_PARAMS = _backend_params()
CUDA_AVAILABLE = any(p.values[0] == "cuda" for p in BACKEND_PARAMS)
CPU_AVAILABLE = any(p.values[0] == "cpu" for p in BACKEND_PARAMS)


class Arrays:
    """Makes arrays for one backend from NumPy arrays and brings results back to NumPy.

    cpu (and any host backend): NumPy arrays, or torch CPU tensors with ``framework="torch"``
    (CPU-only torch builds included); cuda: torch CUDA tensors.
    """

    def __init__(self, backend: str, framework: str = "numpy") -> None:
        self.backend = backend
        self.on_gpu = backend == "cuda"
        self.use_torch = self.on_gpu or framework == "torch"
        if self.use_torch:
            self.torch = pytest.importorskip("torch")

    def put(self, a: np.ndarray) -> Any:
        """A device array holding ``a`` (same shape, dtype, and strides when ``a`` is a view)."""
        if not self.use_torch:
            return a
        a = np.asarray(a)
        device = "cuda" if self.on_gpu else "cpu"
        if a.flags.c_contiguous:
            return self.torch.from_numpy(np.array(a)).to(device)
        # keep a non-contiguous view non-contiguous on the device: copy its base, re-view it
        base = a
        while isinstance(base.base, np.ndarray):
            base = base.base
        if not base.flags.c_contiguous:
            raise ValueError("put() needs a view of a contiguous NumPy array")
        offset = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        t = self.torch.from_numpy(base.reshape(-1).copy()).to(device)
        return t.as_strided(a.shape, [s // a.itemsize for s in a.strides], offset // a.itemsize)

    def get(self, x: Any) -> np.ndarray:
        """A NumPy copy of a result."""
        if hasattr(x, "detach"):
            return x.detach().cpu().numpy()
        return np.array(x)

    def full(self, shape: Any, value: Any, dtype: Any) -> Any:
        """A device array filled with ``value`` (a poison to catch unwritten elements)."""
        return self.put(np.full(shape, value, dtype=dtype))

    def synchronize(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of each backend that runs kernels here: "cpu" always, "cuda" with a GPU."""
    return request.param


@pytest.fixture(params=["numpy", "torch"])
def arrays(backend: str, request: pytest.FixtureRequest) -> Arrays:
    """Array helpers for ``backend``: on the CPU backend once with NumPy arrays and once with
    torch CPU tensors; on CUDA with torch CUDA tensors (once)."""
    if backend == "cuda" and request.param == "numpy":
        pytest.skip("the CUDA backend runs these tests on torch tensors (the 'torch' case)")
    return Arrays(backend, request.param)


@pytest.fixture(scope="session")
def cuda() -> Any:
    """A CUDA backend for compiling without a GPU (NVRTC from pip); skips where NVRTC is not
    usable."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")
    from kernelkit._backends.cuda import CUDABackend, nvrtc

    try:
        nvrtc.version()
        nvrtc.include_dirs()
    except Exception as e:  # noqa: BLE001 - no NVRTC library: nothing to test here
        pytest.skip(f"NVRTC is not usable here: {e}")
    return CUDABackend()


@pytest.fixture
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch for tests that change KERNELKIT_* variables or the registry; afterwards the
    environment, configuration and registry are as before. Backend selection starts unset;
    other variables (e.g. KERNELKIT_CACHE_DIR) stay as the run was given them."""
    for name in ("KERNELKIT_BACKENDS", "KERNELKIT_BACKENDS_STRICT"):
        monkeypatch.delenv(name, raising=False)
    _config.reload()
    _registry.reset()
    yield monkeypatch
    monkeypatch.undo()
    _config.reload()
    _registry.reset()


@pytest.fixture
def patch_entry_points(clean_state: pytest.MonkeyPatch) -> Any:
    """A function ``patch(fake)`` making the registry see ``fake`` as
    ``importlib.metadata.entry_points`` (wherever the registry looks it up: its own namespace or
    importlib.metadata at call time); undone, with registry and config reset, after the test."""
    import importlib.metadata

    def patch(fake: Any) -> None:
        clean_state.setattr(importlib.metadata, "entry_points", fake)
        clean_state.setattr(_registry, "entry_points", fake, raising=False)
        _registry.reset()

    return patch


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skipped without one)")


@pytest.fixture
def own_tuning_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A tuning database of this test's own (records it stores steer no other test)."""
    from kernelkit._select.tuning import db

    fresh = db.TuningDB(tmp_path / "tuning")
    monkeypatch.setattr(db, "_current", (_config.config, fresh))
    return fresh
