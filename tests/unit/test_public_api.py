"""The public surface, declared in one place, and an import that touches no heavy framework."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import kernelkit
import kernelkit.backend


def test_kernelkit_all_snapshot():
    assert sorted(kernelkit.__all__) == [
        "ArgumentError",
        "ArgumentTypeError",
        "AutotunedKernel",
        "BackendError",
        "BundleError",
        "CompileError",
        "Config",
        "JaxCallable",
        "Kernel",
        "KernelChoice",
        "KernelFault",
        "KernelTimeout",
        "KernelkitError",
        "LaunchError",
        "MetalKernel",
        "TensorMap",
        "TorchOp",
        "__version__",
        "add_bundle",
        "autotune",
        "cache_stats",
        "cuda_kernel",
        "custom_vjp",
        "cxx",
        "explain",
        "force",
        "kernel",
        "metal_kernel",
        "struct",
        "tensor_map",
        "tune_op",
        "tune_spec",
    ]
    for name in kernelkit.__all__:
        assert hasattr(kernelkit, name)


def test_backend_all_snapshot():
    assert sorted(kernelkit.backend.__all__) == [
        "Artifact",
        "BACKEND_API_VERSION",
        "Backend",
        "CompileRequest",
        "Geometry",
        "KernelSource",
        "Launcher",
        "MAX_NDIM",
        "Param",
        "Target",
        "TensorMapRequest",
        "Timer",
        "c_type",
        "render_signature",
        "render_template_args",
        "render_template_head",
    ]
    for name in kernelkit.backend.__all__:
        assert hasattr(kernelkit.backend, name)
    assert kernelkit.backend.BACKEND_API_VERSION == 2


def test_errors_share_one_root():
    for name in ("BackendError", "BundleError", "CompileError", "KernelFault", "LaunchError"):
        assert issubclass(getattr(kernelkit, name), kernelkit.KernelkitError)
    assert kernelkit.cuda_kernel is kernelkit.kernel


def test_compile_error_carries_evidence():
    e = kernelkit.CompileError("k", "k(2): error: oops\n", "line one\nline two", ["-O3"])
    assert str(e) == "[k] compilation failed:\nk(2): error: oops"
    assert e.options == ("-O3",) and e.source == "line one\nline two"
    assert e.numbered_source().splitlines() == ["    1  line one", "    2  line two"]


HEAVY = [
    "torch",
    "cupy",
    "jax",
    "jaxlib",
    "cuda.bindings.driver",
    "cuda.bindings.nvrtc",
    "cuda.bindings",
    "ml_dtypes",
    "ray",  # kernelkit tune --ray imports it when asked for
    "numpy",  # ~45 ms: the JAX FFI route's attributes import it when a call is first lowered
]


def _imported_after(code: str, preload: str) -> dict:
    src = os.path.dirname(os.path.dirname(kernelkit.__file__))  # this checkout's, not main's
    env = {**os.environ, "PYTHONPATH": src, "KERNELKIT_PRELOAD": preload}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
        env=env,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_is_light():
    code = (
        "import json, sys, kernelkit, kernelkit.backend\n"
        "k = kernelkit.kernel('k', ['x'], ['y'], 'y[0] = x[0];')\n"
        f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    assert _imported_after(code, "0") == {"heavy": []}


def test_preload_imports_the_cuda_modules_but_touches_no_device():
    """Issue 26 (cold start): with cuda-bindings installed, ``import kernelkit`` imports the CUDA
    backend's modules (25 ms a first kernel call paid before), not NVRTC, and runs no cuInit."""
    pytest.importorskip("cuda.bindings.driver")
    code = (
        "import json, sys, kernelkit\n"
        "from kernelkit._backends import registry as _registry\n"
        "from kernelkit._backends.cuda import driver\n"
        "print(json.dumps({'driver': 'cuda.bindings.driver' in sys.modules,\n"
        "    'nvrtc': 'cuda.bindings.nvrtc' in sys.modules, 'torch': 'torch' in sys.modules,\n"
        "    'cuInit': driver.init.cache_info().currsize, 'loaded': sorted(_registry._loaded)}))\n"
    )
    assert _imported_after(code, "1") == {
        "driver": True, "nvrtc": False, "torch": False, "cuInit": 0, "loaded": []
    }  # fmt: skip
    deferred = "import json, sys, kernelkit\nprint(json.dumps('cuda.bindings' in sys.modules))\n"
    assert _imported_after(deferred, "0") is False


def test_preload_sets_up_torchs_adapter_when_torch_is_imported_first():
    """Issue 26 (cold start): a first call on a tensor imported torch's adapter (~0.3 ms, ~1 ms
    without bytecode caches); with torch imported before kernelkit that now happens at import."""
    pytest.importorskip("torch")
    code = (
        "import json, sys, torch, kernelkit\n"
        "from kernelkit._arrays import BY_TYPE\n"
        "print(json.dumps([torch.Tensor in BY_TYPE, 'kernelkit._arrays._torch' in sys.modules]))\n"
    )
    assert _imported_after(code, "1") == [True, True]
    assert _imported_after(code, "0") == [False, False]  # KERNELKIT_PRELOAD=0: at first use


def test_ops_after_a_bare_import():
    """``kernelkit.ops`` works after ``import kernelkit`` alone (issue 24, item 15)."""
    code = "import kernelkit\nprint(kernelkit.ops.__name__, callable(kernelkit.ops.matmul))\n"
    src = os.path.dirname(os.path.dirname(kernelkit.__file__))  # this checkout's, not main's
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=env,
    )
    assert out.stdout.split() == ["kernelkit.ops", "True"]
