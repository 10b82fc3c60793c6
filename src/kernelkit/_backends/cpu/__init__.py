"""kernelkit's CPU backend: CUDA-style kernel bodies compiled with the host C++ compiler.

Registered through the ``kernelkit.backends`` entry point as ``cpu``.
"""

from ._backend import CPUBackend

__all__ = ["CPUBackend"]
