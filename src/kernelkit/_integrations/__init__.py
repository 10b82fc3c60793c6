"""Framework integrations above the public API: kernels as framework ops (``torch_op``),
gradients (``torch_vjp``), kernelkit's built-in ops as torch ops (``torch_ops``). Nothing here
imports a framework at import time: torch is imported when an op is registered."""
