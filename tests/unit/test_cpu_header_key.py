"""Every file of the CPU backend's include directory is part of the cache key, whatever its
extension: CUB's .cuh headers and libcu++'s extensionless <cuda/std/X> included."""

from __future__ import annotations

from kernelkit._backends.cpu import _toolchain


def test_cub_and_cuda_std_headers_are_hashed():
    names = {name for name, _ in _toolchain.header_hashes()}
    assert "compat/cub/kk_cub_warp.cuh" in names
    assert "compat/cub/kk_cub_block.cuh" in names
    assert "compat/cuda/std/functional" in names
    assert "kk_cpu.h" in names
