"""Warp and SIMD-group collectives after data-dependent branches: the lanes a collective combines
must not depend on how the optimizer copies the call (the CPU backend once grouped
``__activemask()`` callers by return address, and g++ -O2 tail-duplicates a call after a branch
into both arms: lanes from the two arms were reduced as two groups).

Each kernel runs on every backend at the CPU backend's optimization levels (unchecked -O2,
checked -O1) against a NumPy reference. ``ROUTING`` is a minimal top-k expert router in the
shape of mlx-lm's ``expert_routing`` Metal kernel (scores per expert, one SIMD-group per token,
top-k by repeated ``simd_max``), written here: the reported failure was at E = 32..96.
"""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(25)


def both_modes(k, backend, inputs, **kw):
    """Results unchecked and, on the CPU backend, checked (-O1) too."""
    modes = (False, True) if backend == "cpu" else (False,)
    return [k(inputs, check=check, **kw) for check in modes]


MAX_AFTER_BRANCH = """
uint i = thread_position_in_grid.x;
uint lane = thread_index_in_simdgroup;
float v = x[i];
float w;
if (v > 0.0f) { w = v * 2.0f + float(lane); } else { w = -v; }
float m = simd_max(w);
out[i] = m;
"""


def test_simd_max_after_a_branch_combines_both_arms(arrays, backend):
    k = kernelkit.metal_kernel("cs_max_after_branch", ["x"], ["out"], MAX_AFTER_BRANCH)
    x = RNG.standard_normal(96).astype(np.float32)
    w = np.where(x > 0, x * 2 + np.arange(96) % 32, -x)
    want = w.reshape(3, 32).max(1).repeat(32)
    for (y,) in both_modes(
        k, backend, [arrays.put(x)], output_shapes=[x.shape], output_dtypes=[np.float32],
        grid=(96, 1, 1), threadgroup=(32, 1, 1),
    ):  # fmt: skip
        np.testing.assert_allclose(arrays.get(y), want, rtol=1e-6)


# A warp max as real CUDA code writes it over __activemask() (a header helper, inlined).
WARP_MAX_HEADER = """
template <class T> __device__ __forceinline__ T warp_max(T v) {
  const unsigned m = __activemask();
  if (m == 0xffffffffu) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(m, v, o));
    return v;
  }
  T acc = __shfl_sync(m, v, __ffs(m) - 1);
  for (unsigned s = m & (m - 1); s; s &= s - 1) acc = fmaxf(acc, __shfl_sync(m, v, __ffs(s) - 1));
  return acc;
}
"""
ACTIVE_AFTER_BRANCH = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
unsigned lane = threadIdx.x & 31;
float v = x[i];
float w;
if (v > 0.0f) { w = v * 2.0f + float(lane); } else { w = -v; }
float m = warp_max(w);
z[i] = m;
"""


def test_activemask_after_a_branch_is_the_whole_warp(arrays, backend):
    k = kernelkit.kernel(
        "cs_active_after_branch", ["x"], ["z"], ACTIVE_AFTER_BRANCH, header=WARP_MAX_HEADER
    )
    x = RNG.standard_normal(64).astype(np.float32)
    w = np.where(x > 0, x * 2 + np.arange(64) % 32, -x).astype(np.float32)
    for (z,) in both_modes(
        k, backend, [arrays.put(x)], output_shapes=[x.shape], output_dtypes=[np.float32],
        grid=(64, 1, 1), threadgroup=(64, 1, 1),
    ):  # fmt: skip
        np.testing.assert_array_equal(arrays.get(z), w.reshape(2, 32).max(1).repeat(32))


COALESCED_AFTER_BRANCH = """
int i = blockIdx.x * blockDim.x + threadIdx.x;
float v = x[i], w;
if (v > 0.0f) { w = v * 3.0f; } else { w = v - 1.0f; }
cg::coalesced_group g = cg::coalesced_threads();
y[i] = g.size();
z[i] = cg::reduce(g, w, cg::plus<float>());
"""


def test_coalesced_threads_after_a_branch_is_the_whole_warp(arrays, backend):
    k = kernelkit.kernel(
        "cs_coalesced_after_branch", ["x"], ["y", "z"], COALESCED_AFTER_BRANCH,
        header="#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
        "namespace cg = cooperative_groups;",
    )  # fmt: skip
    x = RNG.standard_normal(64).astype(np.float32)
    w = np.where(x > 0, x * 3, x - 1).astype(np.float32)
    for y, z in both_modes(
        k, backend, [arrays.put(x)], output_shapes=[x.shape, x.shape],
        output_dtypes=[np.int32, np.float32], grid=(64, 1, 1), threadgroup=(32, 1, 1),
    ):  # fmt: skip
        np.testing.assert_array_equal(arrays.get(y), np.full(64, 32))
        np.testing.assert_allclose(
            arrays.get(z), w.reshape(2, 32).astype(np.float64).sum(1).repeat(32), rtol=1e-5
        )


SPLIT_SUMS = """
uint i = thread_position_in_grid.x;
float v = x[i];
if (v > 0.0f) {
  out[i] = simd_sum(1.0f);
} else {
  out[i] = -simd_sum(1.0f);
}
"""


def test_simd_sums_in_the_two_arms_of_a_branch_stay_apart(arrays, backend):
    k = kernelkit.metal_kernel("cs_split_sums", ["x"], ["out"], SPLIT_SUMS)
    x = RNG.standard_normal(64).astype(np.float32)
    pos = (x > 0).reshape(2, 32)
    want = np.where(pos, pos.sum(1, keepdims=True), -(~pos).sum(1, keepdims=True)).ravel()
    for (y,) in both_modes(
        k, backend, [arrays.put(x)], output_shapes=[x.shape], output_dtypes=[np.float32],
        grid=(64, 1, 1), threadgroup=(32, 1, 1),
    ):  # fmt: skip
        np.testing.assert_array_equal(arrays.get(y), want)


# One SIMD-group per token; lane l holds experts l, l + 32, ...; top-K by repeated simd_max, the
# lowest index among equal scores (simd_min), then the chosen weights normalized.
ROUTING = """
uint row = threadgroup_position_in_grid.x;
uint lane = thread_index_in_simdgroup;
const device float* s = scores + row * E;
float p[(E + 31) / 32];
for (uint j = 0; j < (E + 31) / 32; ++j) {
  uint e = lane + 32 * j;
  p[j] = e < E ? 1.0f / (1.0f + metal::exp(-s[e])) : -INFINITY;
}
uint taken = 0;
float total = 0.0f;
for (uint k = 0; k < K; ++k) {
  float v = -INFINITY;
  int vi = 0x7fffffff;
  for (uint j = 0; j < (E + 31) / 32; ++j) {
    if (!((taken >> j) & 1u) && p[j] > v) { v = p[j]; vi = int(lane + 32 * j); }
  }
  float m = simd_max(v);
  int win = simd_min(v == m ? vi : 0x7fffffff);
  if (win % 32 == int(lane)) taken |= 1u << (win / 32);
  total += m;
  if (lane == 0) { inds[row * K + k] = win; weights[row * K + k] = m; }
}
if (lane == 0) {
  for (uint k = 0; k < K; ++k) weights[row * K + k] /= total;
}
"""


@pytest.mark.parametrize("n_experts", [48, 96])
def test_top_k_routing_after_branches(arrays, backend, n_experts):
    k = kernelkit.metal_kernel("cs_routing", ["scores"], ["inds", "weights"], ROUTING)
    tokens, top = 16, 4
    s = RNG.standard_normal((tokens, n_experts)).astype(np.float32)
    p = 1 / (1 + np.exp(-s.astype(np.float64)))
    want_i = np.argsort(-p, axis=1, kind="stable")[:, :top]
    want_w = np.take_along_axis(p, want_i, 1)
    want_w /= want_w.sum(1, keepdims=True)
    for inds, weights in both_modes(
        k, backend, [arrays.put(s)], output_shapes=[(tokens, top)] * 2,
        output_dtypes=[np.int32, np.float32], grid=(32 * tokens, 1, 1),
        threadgroup=(32, 1, 1), template=[("E", n_experts), ("K", top)],
    ):  # fmt: skip
        np.testing.assert_array_equal(arrays.get(inds), want_i)
        np.testing.assert_allclose(arrays.get(weights), want_w, rtol=1e-5)
