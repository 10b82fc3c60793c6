"""kernelkit's built-in ops: each goes through the public kernel API, the selection stage and
the caches, exactly as a user's kernel does. They take torch, CuPy, JAX or NumPy arrays (NumPy
runs on the CPU backend) and return arrays of the same framework.

>>> import numpy as np
>>> from kernelkit import ops
>>> y = ops.softmax(np.zeros((2, 4), np.float32))
>>> y.tolist()
[[0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]]
"""

from ._elementwise import elementwise
from ._matmul import matmul
from ._norms import layer_norm, rms_norm
from ._softmax import softmax

__all__ = ["elementwise", "layer_norm", "matmul", "rms_norm", "softmax"]
