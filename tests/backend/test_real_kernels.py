"""Kernels adapted from real projects (llm.c, cuda-samples, zpc, PyTorch): warp-aggregated
atomics, cooperative-groups partitions and tiles, early-return block reductions, cache-hinted
loads and stores, half2 arithmetic, pointer-advancing kernels.

Each runs on every backend against a float64 NumPy reference; on the CPU backend it runs again in
checked mode, and the two results must be equal (checked mode only adds faults).
"""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(20261123)
GID = "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"


def rand(n, dtype=np.float32):
    return RNG.standard_normal(n).astype(dtype)


def run(k, arrays, backend, inputs, outs, **kw):
    """NumPy results of ``k`` unchecked; on the CPU also checked, which must give the same."""
    results = []
    for check in (False, True) if backend == "cpu" else (False,):
        dev_in = [arrays.put(x) if isinstance(x, np.ndarray) else x for x in inputs]
        dev_out = [arrays.put(o.copy()) for o in outs]
        res = k(dev_in, out=dev_out, check=check, **kw)
        results.append([arrays.get(r) for r in res])
    for checked in results[1:]:
        for a, b in zip(results[0], checked):
            np.testing.assert_array_equal(a, b)
    return results[0]


def run_canonical(k, arrays, backend, inputs, outs, canon, **kw):
    """As ``run`` for kernels whose output order depends on scheduling: ``canon`` maps the
    outputs to a scheduling-independent value (compared across modes)."""
    results = []
    for check in (False, True) if backend == "cpu" else (False,):
        dev_in = [arrays.put(x) if isinstance(x, np.ndarray) else x for x in inputs]
        dev_out = [arrays.put(o.copy()) for o in outs]
        res = k(dev_in, out=dev_out, check=check, **kw)
        results.append(canon(*[arrays.get(r) for r in res]))
    for checked in results[1:]:
        for a, b in zip(results[0], checked):
            np.testing.assert_array_equal(a, b)
    return results[0]


# --- __activemask() and warp-aggregated atomics (item 11) -------------------------------------

POPC_ACTIVE = kernelkit.kernel(
    "rk_popc_active",
    ["x"],
    ["y"],
    GID + "if (i < x_shape[0]) {\n  y[i] = -1;\n  if (x[i] > 0) y[i] = __popc(__activemask());\n}",
)


def test_activemask_counts_the_lanes_in_the_branch(arrays, backend):
    n = 1000
    x = rand(n)
    (y,) = run(
        POPC_ACTIVE,
        arrays,
        backend,
        [x],
        [np.full(n, -7, np.int32)],
        grid=(n, 1, 1),
        threadgroup=(128, 1, 1),
    )
    pos = x > 0
    expect = np.full(n, -1, np.int32)
    for w in range(0, n, 32):
        expect[w : w + 32][pos[w : w + 32]] = pos[w : w + 32].sum()
    np.testing.assert_array_equal(y, expect)


# zpc's atomic_inc: the branch's lanes elect a leader, which adds for all of them.
AGG_HEADER = """
__device__ unsigned atomic_inc_agg(unsigned* counter) {
  const unsigned mask = __activemask();
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(mask) - 1;
  unsigned res = 0;
  if (lane == leader) res = atomicAdd(counter, (unsigned)__popc(mask));
  res = __shfl_sync(mask, res, leader);
  return res + __popc(mask & ((1u << lane) - 1));
}
"""
AGG_BODY = (
    GID
    + """
if (i < x_shape[0] && x[i] > 0.3f) {
  const unsigned slot = atomic_inc_agg((unsigned*)&count[0]);
  out[slot] = x[i];
}
"""
)
AGG = kernelkit.kernel("rk_agg_inc", ["x"], ["out", "count"], AGG_BODY, header=AGG_HEADER)

# cuda-samples' warpAggregatedAtomicsCG: the same through cg::coalesced_threads().
AGG_CG_HEADER = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__device__ int atomicAggInc(int* counter) {
  cg::coalesced_group active = cg::coalesced_threads();
  int res = 0;
  if (active.thread_rank() == 0) res = atomicAdd(counter, (int)active.size());
  res = active.shfl(res, 0);
  return res + active.thread_rank();
}
"""
AGG_CG = kernelkit.kernel(
    "rk_agg_inc_cg",
    ["x"],
    ["out", "count"],
    GID + "if (i < x_shape[0] && x[i] > 0.3f) out[atomicAggInc(&count[0])] = x[i];",
    header=AGG_CG_HEADER,
)


@pytest.mark.parametrize(
    ("k", "count_dtype"), [(AGG, np.uint32), (AGG_CG, np.int32)], ids=["activemask", "coalesced"]
)
def test_warp_aggregated_atomic_increment_compacts(arrays, backend, k, count_dtype):
    n = 4099
    x = rand(n)

    def canon(out, count):
        c = int(count[0])
        return np.sort(out[:c]), out[c:], count

    kept, rest, count = run_canonical(
        k,
        arrays,
        backend,
        [x],
        [np.full(n, np.nan, np.float32), np.zeros(1, count_dtype)],
        canon,
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    want = np.sort(x[x > 0.3])
    assert int(count[0]) == want.size
    np.testing.assert_array_equal(kept, want)
    assert np.isnan(rest).all()


# --- cooperative groups (item 8) ------------------------------------------------------------

PARTITION = kernelkit.kernel(
    "rk_partition",
    ["x"],
    ["size", "rank", "pos"],
    """
namespace cg = cooperative_groups;
cg::thread_block block = cg::this_thread_block();
cg::thread_block_tile<32> tile = cg::tiled_partition<32>(block);
int i = blockIdx.x * blockDim.x + threadIdx.x;
int n = x_shape[0];
int label = i < n ? (int)floorf(x[i] * 2.0f + 8.0f) % 3 : 3;
cg::coalesced_group g = cg::labeled_partition(tile, label);
cg::coalesced_group b = cg::binary_partition(tile, i < n && x[i] > 0);
if (i < n) {
  size[i] = g.size();
  rank[i] = g.thread_rank();
  pos[i] = b.size() * (x[i] > 0 ? 1 : -1);
}
""",
)


def test_labeled_and_binary_partition(arrays, backend):
    n = 999
    x = rand(n)
    size, rank, pos = run(
        PARTITION,
        arrays,
        backend,
        [x],
        [np.full(n, -9, np.int32)] * 3,
        grid=(n, 1, 1),
        threadgroup=(96, 1, 1),
    )
    label = np.floor(x.astype(np.float64) * 2 + 8).astype(int) % 3
    e_size, e_rank, e_pos = (np.zeros(n, np.int32) for _ in range(3))
    for w in range(0, n, 32):
        lab, p = label[w : w + 32], x[w : w + 32] > 0
        lanes = np.arange(w, min(w + 32, n))
        full = np.concatenate([lab, np.full(32 - lab.size, 3)])  # lanes past n: label 3
        for j, lane in enumerate(lanes):
            same = full == lab[j]
            e_size[lane] = same.sum()
            e_rank[lane] = same[:j].sum()
            e_pos[lane] = (p == p[j]).sum() + (0 if p[j] else 32 - lab.size)
            e_pos[lane] *= 1 if p[j] else -1
    np.testing.assert_array_equal(size, e_size)
    np.testing.assert_array_equal(rank, e_rank)
    np.testing.assert_array_equal(pos, e_pos)


# cuda-samples' simpleCooperativeGroups: a reduction over a type-erased thread_group, for
# run-time tile sizes up to a warp (CUDA aborts the kernel above 32), and a static 128-thread
# tile.
TG_HEADER = """
#include <cooperative_groups.h>
using namespace cooperative_groups;
__device__ float sumReduction(thread_group g, float* work, float val) {
  const int lane = g.thread_rank();
  for (int s = g.size() / 2; s > 0; s /= 2) {
    work[lane] = val;
    g.sync();
    if (lane < s) val += work[lane + s];
    g.sync();
  }
  return val;
}
"""
TG = kernelkit.kernel(
    "rk_thread_group",
    ["x"],
    ["y"],
    """
__shared__ float work[256];
thread_block block = this_thread_block();
thread_group tile = tiled_partition(block, TILE);
int i = blockIdx.x * blockDim.x + threadIdx.x;
float v = i < x_shape[0] ? x[i] : 0.0f;
float s = sumReduction(tile, work + (threadIdx.x / TILE) * TILE, v);
if (tile.thread_rank() == 0) y[i / TILE] = s;
""",
    header=TG_HEADER,
)


@pytest.mark.parametrize("tile", [4, 16, 32])
def test_thread_group_reduction_over_tiles(arrays, backend, tile):
    n, threads = 1001, 1024
    x = rand(n)
    (y,) = run(
        TG,
        arrays,
        backend,
        [x],
        [np.full(threads // tile, np.nan, np.float32)],
        template=[("TILE", tile)],
        grid=(threads, 1, 1),
        threadgroup=(256, 1, 1),
    )
    ref = np.concatenate([x.astype(np.float64), np.zeros(threads - n)]).reshape(-1, tile).sum(1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_run_time_tile_wider_than_a_warp_faults_as_cuda_aborts():
    """CUDA's tiled_partition(parent, n) aborts the kernel for n > 32 (an unspecified launch
    failure that poisons the context): the CPU backend reports it instead of running it."""
    x = rand(256)
    with pytest.raises(kernelkit.KernelFault, match="tile size 64"):
        TG(
            [x],
            output_shapes=[(4,)],
            output_dtypes=[np.float32],
            template=[("TILE", 64)],
            grid=(256, 1, 1),
            threadgroup=(256, 1, 1),
            backend="cpu",
        )


WIDE_TILE = kernelkit.kernel(
    "rk_wide_tile",
    ["x"],
    ["y"],
    """
namespace cg = cooperative_groups;
__shared__ float work[256];
cg::thread_block_tile<128> t = cg::tiled_partition<128>(cg::this_thread_block());
int i = blockIdx.x * blockDim.x + threadIdx.x;
float* w = work + t.meta_group_rank() * t.size();
w[t.thread_rank()] = i < x_shape[0] ? x[i] : 0.0f;
t.sync();
// each thread reads a neighbour's value, written before the tile's barrier
float left = w[(t.thread_rank() + t.size() - 1) % t.size()];
if (i < x_shape[0]) y[i] = left + 1000.0f * t.meta_group_rank();
""",
)


def test_tile_wider_than_a_warp_synchronizes(arrays, backend):
    n = 777
    x = rand(n)
    (y,) = run(
        WIDE_TILE,
        arrays,
        backend,
        [x],
        [np.full(n, np.nan, np.float32)],
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    padded = np.concatenate([x, np.zeros(1024 - n, np.float32)]).reshape(-1, 128)
    left = np.roll(padded, 1, axis=1).reshape(-1)[:n]
    group = (np.arange(n) % 256) // 128
    np.testing.assert_array_equal(y, (left + 1000.0 * group).astype(np.float32))


# --- barriers after early returns (llm.c's layernorm_backward_kernel2 shape) ------------------

EARLY_RETURN = kernelkit.kernel(
    "rk_early_return_reduce",
    ["x"],
    ["y"],
    """
__shared__ float part[256];
int i = blockIdx.x * blockDim.x + threadIdx.x;
part[threadIdx.x] = 0.0f;
__syncthreads();
if (i >= x_shape[0]) return;          // threads past the end leave before the next barrier
part[threadIdx.x] = x[i] * x[i];
__syncthreads();                      // exited threads do not hold it back (as on the GPU)
if (threadIdx.x == 0) {
  float s = 0.0f;
  for (int t = 0; t < blockDim.x; ++t) s += part[t];
  y[blockIdx.x] = s;
}
""",
)


def test_barrier_after_some_threads_returned(arrays, backend):
    n = 1000  # the last block has 232 live threads of 256
    x = rand(n)
    (y,) = run(
        EARLY_RETURN,
        arrays,
        backend,
        [x],
        [np.full(4, np.nan, np.float32)],
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    ref = np.concatenate([x.astype(np.float64) ** 2, np.zeros(24)]).reshape(4, 256).sum(1)
    np.testing.assert_allclose(y, ref, rtol=1e-5)


# --- cache-hinted loads and stores (llm.c's layernorm_forward_kernel3) -------------------------

LAYERNORM = kernelkit.kernel(
    "rk_layernorm",
    ["inp", "weight", "bias", "N", "C"],
    ["out", "mean", "rstd"],
    """
namespace cg = cooperative_groups;
cg::thread_block block = cg::this_thread_block();
cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
if (idx >= N) return;
const float* x = inp + idx * C;
float sum = 0.0f;
for (int i = warp.thread_rank(); i < C; i += warp.size()) sum += __ldcs(x + i);
sum = cg::reduce(warp, sum, cg::plus<float>{});
float m = sum / C;
if (warp.thread_rank() == 0 && mean != nullptr) __stcs(mean + idx, m);
sum = 0.0f;
for (int i = warp.thread_rank(); i < C; i += warp.size()) {
  float diff = __ldcg(x + i) - m;
  sum += diff * diff;
}
sum = cg::reduce(warp, sum, cg::plus<float>{});
float s = rsqrtf(sum / C + 1e-5f);
if (warp.thread_rank() == 0 && rstd != nullptr) __stwt(rstd + idx, s);
float* o = out + idx * C;
for (int c = warp.thread_rank(); c < C; c += warp.size()) {
  float n = s * (__ldcs(x + c) - m);
  __stcs(o + c, n * __ldca(weight + c) + __ldlu(bias + c));
}
""",
)


def test_layernorm_with_cache_hinted_loads_and_stores(arrays, backend):
    N, C = 37, 77
    x, w, b = rand(N * C), rand(C), rand(C)
    out, mean, rstd = run(
        LAYERNORM,
        arrays,
        backend,
        [x, w, b, N, C],
        [np.full(N * C, np.nan, np.float32), np.full(N, np.nan, np.float32)] * 1
        + [np.full(N, np.nan, np.float32)],
        grid=(-(-N // 4) * 128, 1, 1),
        threadgroup=(128, 1, 1),
    )
    x64 = x.astype(np.float64).reshape(N, C)
    m = x64.mean(1)
    r = 1 / np.sqrt(x64.var(1) + 1e-5)
    ref = (x64 - m[:, None]) * r[:, None] * w + b
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rstd, r, rtol=1e-4)
    np.testing.assert_allclose(out.reshape(N, C), ref, rtol=1e-4, atol=1e-4)


HINTS = kernelkit.kernel(
    "rk_hints",
    ["x"],
    ["y"],
    """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= x_shape[0] / 4) return;
const float4* x4 = reinterpret_cast<const float4*>(x);
float4* y4 = reinterpret_cast<float4*>(y);
float4 a = __ldcv(x4 + i), b = __ldg(x4 + i);
__stwb(y4 + i, make_float4(a.x + b.x, a.y * 2.0f, a.z - 1.0f, __ldcs(&x[4 * i + 3])));
__stcg(&y[4 * i + 1], __ldlu(&x[4 * i + 1]) * 3.0f);
""",
)


def test_cache_hinted_vector_loads_and_stores(arrays, backend):
    n = 4 * 251
    x = rand(n)
    (y,) = run(
        HINTS,
        arrays,
        backend,
        [x],
        [np.full(n, np.nan, np.float32)],
        grid=(251, 1, 1),
        threadgroup=(64, 1, 1),
    )
    x4 = x.reshape(-1, 4)
    ref = np.stack([2 * x4[:, 0], 3 * x4[:, 1], x4[:, 2] - 1, x4[:, 3]], 1).reshape(-1)
    np.testing.assert_allclose(y, ref, rtol=1e-6)


# --- half2 (cuda-samples' fp16ScalarProduct) -----------------------------------------------

HALF2_DOT = kernelkit.kernel(
    "rk_half2_dot",
    ["a", "b"],
    ["out"],
    """
const half2* a2 = reinterpret_cast<const half2*>(a);
const half2* b2 = reinterpret_cast<const half2*>(b);
__shared__ float partial[128];
const int pairs = a_shape[0] / 2;
const half2 one = half2(1.0f, 1.0f);
float acc = 0.0f;
for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < pairs; k += blockDim.x * gridDim.x) {
  half2 p = a2[k] * b2[k] * one;
  half2 q = __hfma2(a2[k], b2[k], __float2half2_rn(0.0f)) - p + p;
  p += __floats2half2_rn(0.0f, 0.0f);
  acc += __low2float(p) + __high2float(q);
}
partial[threadIdx.x] = acc;
__syncthreads();
for (int s = blockDim.x / 2; s > 0; s >>= 1) {
  if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
  __syncthreads();
}
if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
""",
)


def test_half2_dot_product(arrays, backend):
    n = 2 * 1001
    a, b = rand(n, np.float16), rand(n, np.float16)
    (out,) = run(
        HALF2_DOT,
        arrays,
        backend,
        [a, b],
        [np.full(3, np.nan, np.float32)],
        grid=(3 * 128, 1, 1),
        threadgroup=(128, 1, 1),
    )
    prod = (a.astype(np.float64) * b.astype(np.float64)).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(out.sum(), prod.sum(), rtol=1e-4, atol=1e-3 * np.abs(prod).sum())


# --- array parameters as pointers (item 13) ------------------------------------------------

ADVANCE = kernelkit.kernel(
    "rk_advance",
    ["inp", "bias", "C"],
    ["out"],
    """
// llm.c's matmul_forward_kernel4 moves its parameters to the block's rows first
inp += blockIdx.x * C;
out += blockIdx.x * C;
++bias;
bias = bias - 1;
for (int c = threadIdx.x; c < C; c += blockDim.x) out[c] = 2.0f * inp[c] + bias[c];
""",
)


def test_advancing_array_parameters(arrays, backend):
    rows, C = 13, 45
    x, b = rand(rows * C), rand(C)
    (y,) = run(
        ADVANCE,
        arrays,
        backend,
        [x, b, C],
        [np.full(rows * C, np.nan, np.float32)],
        grid=(rows * 32, 1, 1),
        threadgroup=(32, 1, 1),
    )
    ref = 2.0 * x.reshape(rows, C).astype(np.float64) + b
    np.testing.assert_allclose(y.reshape(rows, C), ref, rtol=1e-6)


POINTER_HELPERS = kernelkit.kernel(
    "rk_pointer_helpers",
    ["x", "mean"],
    ["y"],
    """
int i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= mean_shape[0]) return;
float2 v = load_pair(x + 2 * i);          // an offset array pointer to a template taking T*
float m = first(mean + i);
float h = (float)x[2 * i] + static_cast<float>(x[2 * i + 1]);
const __half* base = x;
if (base != nullptr && x != NULL) store_pair(y + 2 * i, make_float2(v.x - m, h + v.y));
""",
    header="""
template <class T>
__device__ float2 load_pair(const T* p) { return make_float2((float)p[0], (float)p[1]); }
template <class T>
__device__ T first(const T* p) { return p[0]; }
template <class T>
__device__ void store_pair(T* p, float2 v) { p[0] = (T)v.x; p[1] = (T)v.y; }
""",
)


def test_array_parameters_passed_to_templates_taking_pointers(arrays, backend):
    n = 333
    x, mean = rand(2 * n, np.float16), rand(n)
    (y,) = run(
        POINTER_HELPERS,
        arrays,
        backend,
        [x, mean],
        [np.full(2 * n, np.nan, np.float32)],
        grid=(n, 1, 1),
        threadgroup=(64, 1, 1),
    )
    x2 = x.astype(np.float32).reshape(n, 2)
    ref = np.stack([x2[:, 0] - mean, x2.sum(1) + x2[:, 1]], 1).reshape(-1)
    np.testing.assert_allclose(y, ref, rtol=1e-6)


# --- constants nvcc code takes from the host headers (item 8) -------------------------------

CONSTANTS = kernelkit.kernel(
    "rk_constants",
    ["x"],
    ["y"],
    GID
    + """
if (i >= x_shape[0]) return;
const float* none = NULL;
float lo = INFINITY;
lo = fminf(lo, x[i]);
y[i] = none == nullptr ? (float)(lo * M_PI) + (isinf(-INFINITY) ? 1.0f : 0.0f) : 0.0f;
""",
)


def test_infinity_pi_and_null(arrays, backend):
    x = rand(101)
    (y,) = run(
        CONSTANTS,
        arrays,
        backend,
        [x],
        [np.full(101, np.nan, np.float32)],
        grid=(101, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_allclose(y, x.astype(np.float64) * np.pi + 1, rtol=1e-6, atol=1e-6)
