"""Thread-block clusters through cooperative_groups (``cluster_dims=``): block ranks, the
cluster barrier, and another block's static and dynamic shared memory through
``map_shared_rank``, on every backend that runs them (the CPU backend emulates them: each
cluster's blocks are live at once, taking turns; CUDA needs sm_90)."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

# Each block writes its x into static and dynamic shared memory, then, after the cluster
# barrier, reads both of the block `shift` ranks further on; the second barrier keeps every
# block alive until the others have read.
ROTATE = r"""
extern __shared__ float dyn[];
__shared__ float word[2];
cg::cluster_group cl = cg::this_cluster();
const unsigned rank = cl.block_rank(), n = cl.num_blocks();
if (threadIdx.x == 0) { word[1] = x[blockIdx.x]; dyn[3] = 10.0f * x[blockIdx.x]; }
cl.sync();
const unsigned peer = (rank + SHIFT) % n;
if (threadIdx.x == 0) {
  y[2 * blockIdx.x] = cl.map_shared_rank(&word[1], peer)[0];
  y[2 * blockIdx.x + 1] = cl.map_shared_rank(dyn, peer)[3] + 1000.0f * (float)n;
}
cl.sync();
"""


def _want(x, cl, shift):
    blocks = len(x)
    peer = np.array([b - b % cl + (b % cl + shift) % cl for b in range(blocks)])
    return np.stack([x[peer], 10 * x[peer] + 1000 * cl], 1).reshape(-1)


def _skip_without_clusters(backend):
    if backend == "cuda":
        torch = pytest.importorskip("torch")
        if torch.cuda.get_device_capability() < (9, 0):
            pytest.skip("thread-block clusters need sm_90")


# 16: a non-portable cluster size (sm_90 allows it once the kernel opts in, which loading does)
@pytest.mark.parametrize(("cl", "shift"), [(2, 1), (4, 3), (8, 5), (16, 11)])
def test_blocks_read_each_others_shared_memory(arrays, backend, cl, shift):
    _skip_without_clusters(backend)
    k = kernelkit.kernel(f"t_cluster_rotate{cl}", ["x"], ["y"], ROTATE, cluster_dims=cl)
    x = np.arange(3 * cl, dtype=np.float32) + 1
    out = arrays.put(np.full(6 * cl, np.nan, np.float32))
    k([arrays.put(x)], out=[out], grid=(3 * cl * 64, 1, 1), threadgroup=(64, 1, 1),
      template=[("SHIFT", shift)], shared_memory=64)  # fmt: skip
    np.testing.assert_array_equal(arrays.get(out), _want(x, cl, shift))


def test_a_kernel_without_clusters_is_a_cluster_of_one_block(arrays, backend):
    k = kernelkit.kernel("t_cluster_rotate_one", ["x"], ["y"], ROTATE)
    x = np.arange(5, dtype=np.float32) + 1
    out = arrays.put(np.full(10, np.nan, np.float32))
    k([arrays.put(x)], out=[out], grid=(5 * 32, 1, 1), threadgroup=(32, 1, 1),
      template=[("SHIFT", 1)], shared_memory=64)  # fmt: skip
    np.testing.assert_array_equal(arrays.get(out), _want(x, 1, 1))


def test_reading_a_block_before_the_cluster_barrier_is_a_fault_on_the_cpu(arrays, backend):
    if backend != "cpu":
        pytest.skip("the CPU backend's check (a GPU reads whatever is there)")
    early = ROTATE.replace("cl.sync();\nconst unsigned peer", "const unsigned peer", 1)
    first = "if (threadIdx.x == 0) {\n  y"
    early = early.replace(first, "if (rank == 0 && threadIdx.x == 0) {\n  y")
    k = kernelkit.kernel("t_cluster_early", ["x"], ["y"], early, cluster_dims=2)
    x = np.arange(2, dtype=np.float32)
    out = arrays.put(np.full(4, np.nan, np.float32))
    with pytest.raises(kernelkit.KernelFault, match=r"before its first cluster\.sync"):
        k([arrays.put(x)], out=[out], grid=(64, 1, 1), threadgroup=(32, 1, 1),
          template=[("SHIFT", 1)], shared_memory=64)  # fmt: skip
