"""``matmul``'s decode kernel for sm_90 (``gemv_bulk``): M <= 16, float16/bfloat16, weight [N, K].
The kernel source, its configs and the rules the selection stage asks (match, fits, grid,
heuristic).

Reading the weight once at the memory's rate is the whole cost of these shapes. ``gemv_tc``
loads it with 16-byte loads from every lane, and stays at 74-83% of the copy rate on an H100
(8192 x 8192 and 14336 x 4096, M = 1). Here the copy engine of Hopper's TMA unit moves it:
``cp.async.bulk`` (no tensor map) copies whole row pieces into a ring of shared-memory stages,
one thread issues them, and an mbarrier per stage counts the bytes in. A probe of this scheme
(``.gpu`` scripts are not shipped; see the closing note) read the 8192 x 8192 weight at 96-98%
of the copy rate, against cuBLAS's 95%, in the same run.
"""

from __future__ import annotations

import re

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, TC_STEP

__all__ = [
    "BULK",
    "BULK_BODY",
    "BULK_CONFIGS",
    "bulk_config",
    "bulk_fits",
    "bulk_grid",
    "bulk_heuristic",
    "bulk_match",
]

BULK_KERNEL = r"""
// --- gemv_bulk: y[M, N] = act(x[M, K] @ w[N, K]^T + bias), M <= MX <= 16, sm_90 -------------
// Group: R = 8 NT WARPS consecutive rows of w; warp i owns its rows 8 NT i .. (NT mma n-tiles)
// over all of K, so no partial sums cross warps. A block takes G consecutive groups (the last
// block fewer) and streams them through one pipeline without draining it between groups: item
// i is group i / steps, K chunk i % steps, KC elements wide.
// Items pass through S shared-memory stages. A stage holds the group's R rows' KC elements and
// x's M rows' (the A operand: rows past M are zeros in registers, never copied or read), each
// row PITCH = 2 KC + 64 bytes from the last; warp 0 fills it with one cp.async.bulk per row
// (lane l copies rows l, l + 32, ...), after lane 0 told the stage's mbarrier how many bytes to
// expect. Consumers wait on the mbarrier's phase, then read with 16-byte ld.shared in gemv_tc's
// lane mapping (lane g, q: row g, bytes 64 s + 16 q of 32-wide step s). Rows PITCH apart with
// PITCH % 128 == 64 put the two rows of an 8-lane phase in different banks.
// One __syncthreads per item: after it, every warp is done with the stage just read, and warp 0
// refills it with item i + S - 1 at the top of item i + 1.
// Ragged ends: past N, rows are not copied (stale words are computed, never stored); past K,
// a lane's words are zeroed in registers, both operands (stale bits could be NaN).
__device__ __forceinline__ void kk_bulk_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void kk_bulk_copy(unsigned dst, const void* src, unsigned bytes,
                                             unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void kk_bulk_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n KK_BULK_WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra.uni KK_BULK_WAIT;\n}\n"
      :: "r"(bar), "r"(parity) : "memory");
}

template <class T, class TB, class TY, int NT, int WARPS, int KC, int S, int MX, int G, int ACT,
          bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_bulk(const T* x, const T* w, const TB* bias, TY* y,
                                             long long M, long long N, long long K) {
#if KK_HAS_TMA
  constexpr int R = 8 * NT * WARPS, MT = MX / 8, PITCH = 2 * KC + 64;
  constexpr unsigned STAGE = (R + MX) * PITCH;
  static_assert(KC % 64 == 0 && (MX == 8 || MX == 16) && S >= 2, "see the config rules");
  extern __shared__ __align__(128) unsigned char kk_bulk_ring[];
  __shared__ __align__(8) unsigned long long bars[S];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const long long groups = (N + R - 1) / R, first = (long long)blockIdx.x * G;
  const long long mine = groups - first < G ? groups - first : G;
  const int steps = (int)((K + KC - 1) / KC);
  const long long items = mine > 0 ? mine * steps : 0;
  const unsigned ring = kk_mma_smem_u32(kk_bulk_ring);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(kk_mma_smem_u32(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  // Warp 0: item i's rows into stage i % S.
  auto fill = [&](long long i) {
    const long long n0 = (first + i / steps) * R, k0 = (i % steps) * KC;
    const int rows = N - n0 < R ? (int)(N - n0) : R;
    const unsigned bytes = (unsigned)((K - k0 < KC ? K - k0 : KC) * 2);
    const unsigned bar = kk_mma_smem_u32(&bars[i % S]), dst = ring + (i % S) * STAGE;
    if (lane == 0) kk_bulk_expect(bar, (unsigned)(rows + M) * bytes);
    __syncwarp();
    for (int r = lane; r < rows + M; r += 32) {
      const T* src = r < rows ? w + (n0 + r) * K + k0 : x + (r - rows) * K + k0;
      kk_bulk_copy(dst + (r < rows ? r : R + r - rows) * PITCH, src, bytes, bar);
    }
  };
  if (warp == 0)
    for (int i = 0; i < S - 1 && i < items; ++i) fill(i);

  float acc[NT][4];
  for (int j = 0; j < NT; ++j)
    for (int v = 0; v < 4; ++v) acc[j][v] = 0.0f;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  bool xlive[MT];
  for (int h = 0; h < MT; ++h) xlive[h] = g + 8 * h < M;
  int chunk = 0;  // i % steps
  for (long long i = 0; i < items; ++i) {
    if (warp == 0 && i + S - 1 < items) fill(i + S - 1);
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
    const unsigned char* stage = kk_bulk_ring + (i % S) * STAGE;
    const uint4* wrow = reinterpret_cast<const uint4*>(stage + (8 * NT * warp + g) * PITCH) + q;
    const uint4* xrow = reinterpret_cast<const uint4*>(stage + (R + g) * PITCH) + q;
    const long long k_left = K - (long long)chunk * KC;  // this lane's 8 k are live below it
#pragma unroll
    for (int s = 0; s < KC / 32; ++s) {
      const bool live = s * 32 + 8 * q < k_left;
      uint4 wv[NT], xv[MT];
      for (int j = 0; j < NT; ++j) wv[j] = live ? wrow[j * 8 * PITCH / 16 + 4 * s] : zero;
      for (int h = 0; h < MT; ++h)
        xv[h] = live && xlive[h] ? xrow[h * 8 * PITCH / 16 + 4 * s] : zero;
      kk_tc_step<T, MT, NT>(acc, wv, xv);
    }
    if (++chunk == steps) {  // the group is done: acc[j] holds c0, c1 = y[g][n + 2q, +1],
      chunk = 0;             // c2, c3 = y[g + 8][...] of n = n0 + 8 (NT warp + j)
      const long long n0 = (first + i / steps) * R;
      for (int j = 0; j < NT; ++j)
        for (int v = 0; v < 4; ++v) {
          const long long m = g + (v >= 2 ? 8 : 0);
          const long long n = n0 + 8 * (NT * warp + j) + 2 * q + (v & 1);
          if (m < M && n < N) {
            float r = acc[j][v];
            if (HAS_BIAS) r += (float)bias[n];
            y[m * N + n] = TY(kk_mm_act<ACT>(r));
          }
          acc[j][v] = 0.0f;
        }
    }
    __syncthreads();  // every warp is done with this stage: warp 0 may refill it
  }
#else
  __trap();  // sm_90+ only (the match rule): no cp.async.bulk / mbarrier transactions below
#endif
}
"""

# The header: the shared epilogue, the PTX helpers, gemv_tc's mma step, the kernel.
BULK = EPILOGUE + MMA_PTX + TC_STEP + BULK_KERNEL

BULK_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_bulk<T, TB, TY, NT, WARPS, KC, S, MX, G, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
"""

_ARCH = re.compile(r"(?:sm|compute)_(\d+)[af]?")
_MAX_M = 16


def stage_bytes(nt: int, warps: int, kc: int, mx: int) -> int:
    """Shared memory of one stage: the block's 8 NT WARPS weight rows and MX rows of x, each
    2 KC + 64 bytes apart."""
    return (8 * nt * warps + mx) * (2 * kc + 64)


def bulk_config(nt: int, warps: int, kc: int, stages: int, mx: int, groups: int = 1) -> Config:
    """A config; ``groups``: row groups (8 NT WARPS rows each) a block streams, about."""
    values = {"NT": nt, "WARPS": warps, "KC": kc, "S": stages, "MX": mx, "G": groups}
    return Config(values, (32 * warps,), stages * stage_bytes(nt, warps, kc, mx))


# 16 or 32 weight rows a group (8 NT WARPS); row pieces of 512 bytes to 2 KiB (KC: small
# pieces cost the copy engine more per byte); 3 or 4 stages, at most 200 KiB a block; 1 to 8
# groups a block (G: several let a block's pipeline run on without draining, and fewer blocks
# fit in one wave).
BULK_CONFIGS = tuple(
    c
    for mx in (8, 16)
    for nt, warps in ((1, 2), (1, 4), (2, 2))
    for kc in (256, 512, 1024)
    for stages in (3, 4)
    for groups in (1, 2, 4, 8)
    if (c := bulk_config(nt, warps, kc, stages, mx, groups)).shared_memory <= 200 * 1024
)


def bulk_match(p: Problem, t: Target) -> str | None:
    """None when gemv_bulk can run ``p`` on ``t``, else why not."""
    arch = _ARCH.fullmatch(t.arch)
    if arch is None or int(arch[1]) < 90:
        return f"cp.async.bulk and mbarrier transactions need sm_90 or newer, not {t.arch}"
    if p.attr("M") > _MAX_M:
        return f"M = {p.attr('M')} > {_MAX_M}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"tensor cores take float16/bfloat16, not {p.arg('x').dtype}"
    if p.attr("K") % 8:
        return f"K = {p.attr('K')} is not a multiple of 8 (bulk copies move 16-byte multiples)"
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (bulk copies need it)"
    return None


def bulk_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_bulk runs correctly for ``p``, or None."""
    v = c.values
    try:
        nt, warps, kc, st, mx, gr = (int(v[k]) for k in ("NT", "WARPS", "KC", "S", "MX", "G"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs NT, WARPS, KC, S, MX, G)"
    if kc % 64 or kc <= 0 or mx not in (8, 16) or st < 2 or nt < 1 or warps < 1 or gr < 1:
        return f"KC = {kc} (a multiple of 64), MX = {mx} (8 or 16), S = {st} (>= 2), G = {gr}"
    if p.attr("M") > mx:
        return f"M = {p.attr('M')} rows of x do not fit MX = {mx}"
    if c.threadgroup != (32 * warps, 1, 1):
        return f"{warps} warps need threadgroup ({32 * warps},), got {c.threadgroup}"
    need = st * stage_bytes(nt, warps, kc, mx)
    if c.shared_memory != need:
        return f"{st} stages of NT={nt} WARPS={warps} KC={kc} MX={mx} need {need} bytes"
    return None


def bulk_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One block per G groups of 8 NT WARPS weight rows."""
    v = c.values
    groups = -(-p.attr("N") // (8 * v["NT"] * v["WARPS"]))  # type: ignore[operator]
    return (-(-groups // v["G"]) * c.threadgroup[0], 1, 1)  # type: ignore[operator]


def bulk_heuristic(p: Problem, t: Target) -> Config | None:
    """1 KiB row pieces, 4 stages, two groups of 16 rows a block; smaller where shared memory
    is short (sm_120: 99 KiB); x's rows as M needs."""
    mx = 8 if p.attr("M") <= 8 else 16
    for c in (bulk_config(1, 2, 512, 4, mx, 2), bulk_config(1, 2, 256, 3, mx, 2)):
        if c.shared_memory <= t.max_shared_memory_optin_bytes:
            return c
    return None
