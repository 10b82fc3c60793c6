"""Without the ``cuda`` extra the CUDA backend names what to install; the CPU backend still runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

# Run in a child: the modules are imported once per process (functools.cache), and the import
# hook below must be in place before kernelkit touches cuda.*.
CHILD = textwrap.dedent(
    """
    import sys, importlib.abc

    class NoCuda(importlib.abc.MetaPathFinder):  # as if the cuda extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "cuda" or name.startswith("cuda."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    for name in [m for m in sys.modules if m == "cuda" or m.startswith("cuda.")]:
        del sys.modules[name]
    sys.meta_path.insert(0, NoCuda())

    import numpy as np
    import kernelkit
    from kernelkit._backends.cuda import CUDABackend, driver, nvrtc

    def message(fn):
        try:
            fn()
        except kernelkit.BackendError as e:
            return str(e)
        raise AssertionError(f"{fn} did not raise BackendError")

    for fn in (driver.drv, nvrtc.nvrtc, nvrtc.include_dirs, nvrtc.version):
        print("ERR", message(fn))
    backend = CUDABackend()
    print("TARGETS", backend.targets())
    print("INFO", backend.info())
    k = kernelkit.kernel("cpu_still_runs", ["x"], ["y"],
        "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];")
    x = np.arange(8, dtype=np.float32)
    (y,) = k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(8, 1, 1),
             threadgroup=(8, 1, 1))
    assert np.array_equal(y, 2 * x)
    print("CPU OK")
    """
)


def test_cuda_backend_without_the_cuda_extra_names_what_to_install(tmp_path):
    env = {"PYTHONPATH": SRC, "KERNELKIT_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    errors = [line for line in out.stdout.splitlines() if line.startswith("ERR ")]
    assert len(errors) == 4, out.stdout
    for line in errors:
        assert line.startswith("ERR [backend cuda] cuda-"), line
        assert 'pip install "kernelkit[cuda]"' in line, line
    assert "cuda-bindings is not installed" in errors[0]
    assert "cuda-pathfinder is not installed" in errors[2]
    assert "TARGETS []" in out.stdout
    info = next(line for line in out.stdout.splitlines() if line.startswith("INFO "))
    assert "kernelkit[cuda]" in info
    assert "CPU OK" in out.stdout
