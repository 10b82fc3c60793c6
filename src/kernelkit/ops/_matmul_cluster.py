"""``matmul``'s tensor-core decode kernel for sm_90 (``gemv_cluster``): M <= 16, float16/bfloat16,
weight [N, K]. The kernel source, its configs and the rules the selection stage asks (match,
fits, grid, heuristic).

At M = 8-16 each weight element feeds up to 16 multiply-adds: too many for the FMA pipes at the
memory's rate, so the tensor cores (mma.sync m16n8k16) do them, with 8 weight rows as the n side
and x's rows as the m side. That wants 8 weight rows at the same k at once, and x's fragments in
registers for every k a warp takes; x[16, K] is 256 KiB at K = 8192, more than one SM holds. So
a thread-block cluster of CL = K / KS blocks shares each band of ROWS weight rows, block r taking
k in [r KS, (r + 1) KS): its x fragments fit its registers, and its stages are 8 rows x KS moved
by the TMA unit's bulk copies (one copy per stage when KS = K, the rows being contiguous; else
one per row, KS * 2 bytes long). Block 0..CL-1's sums are added in rank order through distributed
shared memory at the end: deterministic, no atomics, no second kernel.

``gemv_tc`` (no copy engine, every lane loading) reads the larger weights at 74-83% of the copy
rate on an H100; ``gemv_slab`` (whole rows, CUDA cores) holds x's rows in registers only up to
M = 4.
"""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, TC_STEP
from ._matmul_slab import BULK_PTX, SLAB_RING, decode_match

__all__ = [
    "CLUSTER",
    "CLUSTER_BODY",
    "CLUSTER_CONFIGS",
    "CLUSTER_PTX",
    "CLUSTER_SIZES",
    "cluster_config",
    "cluster_fits",
    "cluster_grid",
    "cluster_heuristic",
    "cluster_match",
    "cluster_size",
    "cluster_template",
]

CLUSTER_PTX = r"""
// Distributed shared memory: a float (or two) of block `rank` of this cluster, and a
// cluster-wide barrier (release/acquire: what each block wrote to its shared memory before it
// is seen after it).
__device__ __forceinline__ unsigned kk_cluster_addr(const float* p, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
               : "=r"(remote) : "r"(kk_mma_smem_u32(p)), "r"(rank));
  return remote;
}
__device__ __forceinline__ float kk_cluster_load(const float* p, unsigned rank) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n"
               : "=f"(v) : "r"(kk_cluster_addr(p, rank)) : "memory");
  return v;
}
__device__ __forceinline__ float2 kk_cluster_load2(const float* p, unsigned rank) {  // 8-aligned
  float2 v;
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n"
               : "=f"(v.x), "=f"(v.y) : "r"(kk_cluster_addr(p, rank)) : "memory");
  return v;
}
__device__ __forceinline__ void kk_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
"""

CLUSTER_KERNEL = r"""
// --- gemv_cluster: y = act(x @ w^T + bias) for M <= 8 MT <= 16, sm_90, tensor cores ----------
// Cluster c owns weight rows [c ROWS, (c + 1) ROWS); its block of rank r takes k in [r KS,
// (r + 1) KS) of each, through S stages of 8 rows x KS (thread 0 issues the bulk copies, an
// mbarrier per stage counts the bytes in; a stage is refilled as soon as every warp is done
// with it, so S stages are in flight but for the moments between). Warp w takes k [w KW,
// (w + 1) KW) of its block's slice, so its x fragments (STEPS 32-wide steps, MT 16-byte words
// each) stay in registers; per stage, each warp's 16 x 8 tile goes to `part` (two buffers: one
// barrier a stage) and is summed over warps in a fixed order into `sums`, which the cluster
// adds over ranks at the end.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T, class TB, class TY, int WARPS, int ROWS, int KS, int S, int CL, int MT,
          int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_cluster(const T* x, const T* w, const TB* bias, TY* y,
                                                long long M, long long N, long long K) {
#if KK_HAS_TMA && KK_HAS_CLUSTERS
  constexpr int KW = KS / WARPS, STEPS = KW / 32, SHARE = (ROWS + CL - 1) / CL;
  constexpr unsigned STAGE = 16u * KS;  // bytes: 8 rows x KS 16-bit elements
  static_assert(KW % 32 == 0 && ROWS % 8 == 0 && WARPS >= 2 * MT, "the config rules");
  extern __shared__ __align__(128) uint4 kk_cluster_ring[];
  __shared__ unsigned long long bars[S];  // 8-byte aligned, as mbarriers must be
  __shared__ float part[2][WARPS][32][4];
  __shared__ float sums[ROWS][8 * MT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  unsigned rank = 0, cluster = blockIdx.x;
  if (CL > 1) {
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(cluster));
  }
  const long long n0 = (long long)cluster * ROWS, k0 = (long long)rank * KS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + 7) / 8;
  kk_slab_ring_init(bars);
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + 8 i .., k in [k0, k0 + KS)
    const int n = rows - 8 * i < 8 ? rows - 8 * i : 8;
    const unsigned bar = kk_mma_smem_u32(&bars[i % S]);
    const unsigned dst = kk_mma_smem_u32(kk_cluster_ring) + (i % S) * STAGE;
    const T* src = w + (n0 + 8 * i) * K + k0;
    kk_bulk_expect(bar, (unsigned)n * KS * 2u);
    if (CL == 1) {
      kk_bulk_copy(dst, src, (unsigned)n * KS * 2u, bar);  // whole rows: one span
    } else {
      for (int r = 0; r < n; ++r) kk_bulk_copy(dst + r * KS * 2u, src + r * K, KS * 2u, bar);
    }
  };
  if (t == 0)
    for (int i = 0; i < S && i < tiles; ++i) fill(i);
  uint4 xr[STEPS][MT];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int s = 0; s < STEPS; ++s)
#pragma unroll
    for (int h = 0; h < MT; ++h) {
      const long long m = g + 8 * h, k = k0 + warp * KW + 32 * s + 8 * q;
      xr[s][h] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K + k)) : zero;
    }
  for (int i = 0; i < tiles; ++i) {
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
    const uint4* mine = kk_cluster_ring + (i % S) * (STAGE / 16) + (g * KS + warp * KW + 8 * q) / 8;
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
      const uint4 wv = mine[4 * s];
      kk_tc_step<T, MT, 1>(acc, &wv, xr[s]);
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) part[i & 1][warp][lane][v] = acc[0][v];
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    if (t == 0 && i + S < tiles) fill(i + S);  // first: the copy engine never waits for sums
    if (t < 64 * MT) {  // output (m, r) of this stage: accumulator v of lane l in every warp
      const int m = t >> 3, r = t & 7, l = (m & 7) * 4 + (r >> 1), v = (m >> 3) * 2 + (r & 1);
      float a = 0.0f;
      for (int p = 0; p < WARPS; ++p) a += part[i & 1][p][l][v];  // fixed order: deterministic
      sums[8 * i + r][m] = a;
    }
  }
  if (CL > 1) kk_cluster_sync();  // every block's sums are complete (and visible to the cluster)
  else __syncthreads();
  for (int idx = t; idx < SHARE * 8 * MT; idx += 32 * WARPS) {  // rank c stores rows share c
    const int m = idx / SHARE, r = (int)rank * SHARE + idx % SHARE;
    if (m >= M || r >= rows) continue;
    float a = sums[r][m];
    if (CL > 1) {
      a = 0.0f;
      for (int c = 0; c < CL; ++c) a += kk_cluster_load(&sums[r][m], c);  // in rank order
    }
    const long long n = n0 + r;
    if (HAS_BIAS) a += (float)bias[n];
    y[m * N + n] = TY(kk_mm_act<ACT>(a));
  }
  if (CL > 1) kk_cluster_sync();  // no block leaves while another may still read its sums
#else
  __trap();  // sm_90+ only (the match rule): no bulk copies, mbarriers or clusters below
#endif
}
"""

# The header: the shared epilogue, the mma PTX and step, the bulk copies and the ring set-up,
# the cluster helpers, the kernel.
CLUSTER = EPILOGUE + MMA_PTX + TC_STEP + BULK_PTX + SLAB_RING + CLUSTER_PTX + CLUSTER_KERNEL

CLUSTER_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_cluster<T, TB, TY, WARPS, ROWS, KS, S, CL, MT, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
"""


MAX_M = 16
CLUSTER_SIZES = (1, 2, 3, 4, 5, 6, 7, 8)  # a kernel each (the cluster shape is its attribute)
SHARED_LIMIT = 227 * 1024  # sm_90's most shared memory per block (dynamic + static)
MAX_X_REGISTERS = 64  # a thread's x fragments: 32-bit registers


def cluster_config(warps: int, rows: int, ks: int, stages: int) -> Config:
    """A gemv_cluster config: ``rows`` weight rows a cluster, each block ``ks`` of K, ``stages``
    stages of 8 rows x ``ks`` (16 ks bytes each), ``warps`` warps a block."""
    values = {"WARPS": warps, "ROWS": rows, "KS": ks, "S": stages}
    return Config(values, (32 * warps,), stages * 16 * ks)


CLUSTER_CONFIGS = tuple(
    cluster_config(warps, rows, ks, stages)
    for ks in (1024, 2048, 4096)
    for warps in (8, 16)
    for rows in (32, 64, 128, 256)
    for stages in (2, 3, 4)
    if stages * 16 * ks <= 192 * 1024
)


def _mt(p: Problem) -> int:
    return 1 if int(p.attr("M")) <= 8 else 2


def cluster_size(p: Problem, c: Config) -> int:
    """Blocks a cluster (K / KS): the template value CL, and which compiled kernel runs."""
    return int(p.attr("K")) // int(c.values["KS"])


def cluster_template(p: Problem, c: Config) -> list[tuple[str, int]]:
    """The template values a config leaves to the problem: CL and MT (x's 8-row halves)."""
    return [("CL", cluster_size(p, c)), ("MT", _mt(p))]


def static_shared(c: Config, mt: int) -> int:
    """Bytes of the kernel's static shared memory (part, sums, mbarriers) for ``c``."""
    v = c.values
    return 2 * int(v["WARPS"]) * 512 + int(v["ROWS"]) * 32 * mt + 8 * int(v["S"])


def cluster_match(p: Problem, t: Target) -> str | None:
    """None when gemv_cluster can run ``p`` on ``t``, else why not."""
    k = p.attr("K")
    k_why = f"K = {k} is not a multiple of 1024 (whole slices of K per block)" if k % 1024 else None
    needs = "bulk copies and thread-block clusters"
    return decode_match(p, t, MAX_M, "one m16 tile of x", k_why, needs)


def cluster_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_cluster runs correctly for ``p``, or None."""
    v = c.values
    try:
        warps, rows, ks, st = (int(v[k]) for k in ("WARPS", "ROWS", "KS", "S"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs WARPS, ROWS, KS, S)"
    k, mt = int(p.attr("K")), _mt(p)
    if not 2 * mt <= warps <= 32 or st < 2 or rows < 8 or ks < 32 * warps or ks % (32 * warps):
        return f"WARPS = {warps}, S = {st}, ROWS = {rows}, KS = {ks}: outside the kernel's rules"
    if k % ks or k // ks not in CLUSTER_SIZES:
        return f"K = {k} is not KS = {ks} times a cluster size in {CLUSTER_SIZES}"
    if rows % 8:
        return f"ROWS = {rows} is not whole 8-row stages"
    if (ks // (32 * warps)) * mt * 4 > MAX_X_REGISTERS:
        return f"x's fragments for KS = {ks} over {warps} warps: too many registers at M > 8"
    if c.threadgroup != (32 * warps, 1, 1) or c.shared_memory != st * 16 * ks:
        return f"threadgroup ({32 * warps},) and {st * 16 * ks} bytes of shared memory, got {c}"
    if c.shared_memory + static_shared(c, mt) > SHARED_LIMIT:
        return f"{c.shared_memory + static_shared(c, mt)} bytes of shared memory > {SHARED_LIMIT}"
    return None


def cluster_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One cluster of K / KS blocks per ROWS weight rows."""
    clusters = -(-int(p.attr("N")) // int(c.values["ROWS"]))
    return (clusters * cluster_size(p, c) * c.threadgroup[0], 1, 1)


def cluster_heuristic(p: Problem, t: Target) -> Config | None:
    """From a sweep on an H100 (8192 x 8192, 14336 x 4096 and 4096 x 4096, M = 1-16): the longest
    slice of K x's fragments allow (4096: 8 KiB copies), 16 warps, two stages, and ROWS making
    about 128 blocks; None where no config fits (the next implementation serves)."""
    n, k = int(p.attr("N")), int(p.attr("K"))
    for ks in (4096, 2048, 1024):
        if k % ks or k // ks not in CLUSTER_SIZES:
            continue
        want = -(-n * (k // ks) // 128)  # rows per cluster for ~128 blocks
        rows = next((r for r in (32, 64, 128, 256) if r >= want), 256)
        for stages in (2, 3):
            c = cluster_config(16, rows, ks, stages)
            room = t.max_shared_memory_optin_bytes - static_shared(c, _mt(p))
            if cluster_fits(p, c) is None and c.shared_memory <= room:
                return c
    return None
