"""kernelkit: write the body of a GPU kernel in CUDA C++, call it on the arrays you have.

>>> import kernelkit
>>> k = kernelkit.kernel("exp", ["x"], ["y"],
...     "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = expf(x[i]);")

Nothing here touches a GPU or loads a compiler at import (the CUDA backend's Python modules are
imported when installed: ``KERNELKIT_PRELOAD=0`` defers them to the first call).
"""

from . import _config, _integrations
from ._api import Kernel, cuda_kernel, kernel
from ._arrays import lookup as _adapters
from ._backends import registry as _registry
from ._cache import add_bundle, cache_stats
from ._choices import explain, force
from ._errors import (
    ArgumentError,
    ArgumentTypeError,
    BackendError,
    BundleError,
    CompileError,
    KernelFault,
    KernelkitError,
    KernelTimeout,
    LaunchError,
)
from ._integrations.jax_ffi import JaxCallable
from ._integrations.torch_op import TorchOp
from ._integrations.torch_vjp import custom_vjp
from ._metal_api import MetalKernel, metal_kernel
from ._pipeline.codegen import cxx, struct
from ._select.records import Config, KernelChoice
from ._tensor_map import TensorMap, tensor_map
from ._tune.autotune import AutotunedKernel, autotune
from ._version import __version__
from ._workflows.tune_op import tune_op
from ._workflows.tune_run import tune_spec

_integrations.install()  # integrations wrap the API, the ops and the adapters from above
_registry.preload()  # the CUDA backend's modules now, not at the first call (no device access)
if _config.config.preload:
    _adapters.preload()  # torch's array adapter now, when torch is already imported

__all__ = [
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

_SUBMODULES = ("backend", "ops")  # public modules, imported on first use


def __getattr__(name: str) -> object:
    """``kernelkit.ops`` and ``kernelkit.backend`` after a bare ``import kernelkit``."""
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
