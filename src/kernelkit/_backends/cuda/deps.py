"""The CUDA backend's Python packages, imported on first use; missing, the error names them.

They come with the ``cuda`` extra (``pip install "kernelkit[cuda]"``), so a CPU-only install pulls
no NVIDIA wheels; without them the CUDA backend reports no devices and names what is missing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..._errors import BackendError

INSTALL_HINT = 'install the CUDA extra: pip install "kernelkit[cuda]"'

# module -> the pip package that provides it
PACKAGES = {
    "cuda.bindings.driver": "cuda-bindings",
    "cuda.bindings.nvrtc": "cuda-bindings",
    "cuda.pathfinder": "cuda-pathfinder",
}


def require(module: str) -> ModuleType:
    """``module`` imported, or BackendError naming its package and the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        package = PACKAGES.get(module, module)
        raise BackendError(
            f"[backend cuda] {package} is not installed ({module}: {e}); {INSTALL_HINT}"
        ) from None
