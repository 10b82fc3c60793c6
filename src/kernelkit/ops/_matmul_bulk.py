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
    "SLAB",
    "SLAB_BODY",
    "SLAB_CONFIGS",
    "slab_config",
    "slab_fits",
    "slab_grid",
    "slab_heuristic",
    "slab_jpr",
    "slab_match",
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

SLAB_KERNEL = r"""
// --- gemv_slab: y = act(x @ w^T + bias) for M <= MX <= 4, sm_90: whole rows, one copy each ----
// A block owns ROWS consecutive rows of w: one contiguous span, streamed through S stages of SKB
// KiB, RS whole rows (one cp.async.bulk, thread 0 issues it). Long copies are what the
// copy engine and the memory do best: the probe behind this kernel read 96-98% of the copy rate.
// Thread t takes 16-byte vectors t, t + THREADS, ... of each row (JPR of them: K = 8 THREADS
// JPR), so its k are the same in every row: x's for them stay in registers for the whole
// kernel. Per row, each warp sums by shuffles, then the warps' sums are added in a fixed order
// (deterministic); `part` alternates between two buffers, so one barrier per stage suffices.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T> struct kk_slab_words;
template <> struct kk_slab_words<__nv_bfloat16> {
  static __device__ __forceinline__ float2 get(unsigned v) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  }
};
template <> struct kk_slab_words<__half> {
  static __device__ __forceinline__ float2 get(unsigned v) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
};
template <class T>
__device__ __forceinline__ float kk_slab_dot(const uint4& a, const uint4& b, float acc) {
  const unsigned wa[4] = {a.x, a.y, a.z, a.w}, wb[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 p = kk_slab_words<T>::get(wa[i]), q = kk_slab_words<T>::get(wb[i]);
    acc = fmaf(p.x, q.x, acc);
    acc = fmaf(p.y, q.y, acc);
  }
  return acc;
}

template <class T, class TB, class TY, int THREADS, int ROWS, int SKB, int JPR, int S, int MX,
          int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_slab(const T* x, const T* w, const TB* bias, TY* y,
                                             long long M, long long N, long long K) {
#if KK_HAS_TMA
  // K == 8 THREADS JPR, and a stage of SKB KiB holds RS whole rows (the config rules)
  constexpr int WARPS = THREADS / 32, RS = SKB * 1024 / (16 * THREADS * JPR), VPT = RS * JPR;
  constexpr unsigned STAGE = SKB * 1024u;
  static_assert(RS >= 1 && RS * 16 * THREADS * JPR == SKB * 1024 && ROWS % RS == 0, "rules");
  extern __shared__ __align__(128) uint4 kk_slab_ring[];
  __shared__ __align__(8) unsigned long long bars[S];
  __shared__ float part[2][WARPS][RS * MX];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const long long n0 = (long long)blockIdx.x * ROWS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + RS - 1) / RS;
  if (t == 0) {
    for (int s = 0; s < S; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(kk_mma_smem_u32(&bars[s])));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + RS i ..
    const int n = rows - RS * i < RS ? rows - RS * i : RS;
    const unsigned bar = kk_mma_smem_u32(&bars[i % S]), bytes = (unsigned)(n * K * 2);
    kk_bulk_expect(bar, bytes);
    kk_bulk_copy(kk_mma_smem_u32(kk_slab_ring) + (i % S) * STAGE, w + (n0 + RS * i) * K, bytes,
                 bar);
  };
  if (t == 0)
    for (int i = 0; i < S - 1 && i < tiles; ++i) fill(i);
  uint4 xr[MX][JPR];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int m = 0; m < MX; ++m)
#pragma unroll
    for (int j = 0; j < JPR; ++j)
      xr[m][j] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K) + t + THREADS * j) : zero;
  for (int i = 0; i < tiles; ++i) {
    if (t == 0 && i + S - 1 < tiles) fill(i + S - 1);
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
    uint4 v[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) v[j] = kk_slab_ring[(i % S) * (STAGE / 16) + t + THREADS * j];
#pragma unroll
    for (int r = 0; r < RS; ++r)
#pragma unroll
      for (int m = 0; m < MX; ++m) {
        float a = 0.0f;
#pragma unroll
        for (int j = 0; j < JPR; ++j) a = kk_slab_dot<T>(v[r * JPR + j], xr[m][j], a);
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        if (lane == 0) part[i & 1][warp][r * MX + m] = a;
      }
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    if (t < RS * MX) {
      const int r = t / MX, m = t % MX;
      const long long n = n0 + (long long)RS * i + r;
      if (m < M && RS * i + r < rows) {
        float a = 0.0f;
        for (int q = 0; q < WARPS; ++q) a += part[i & 1][q][t];  // fixed order: deterministic
        if (HAS_BIAS) a += (float)bias[n];
        y[m * N + n] = TY(kk_mm_act<ACT>(a));
      }
    }
  }
#else
  __trap();  // sm_90+ only (the match rule): no cp.async.bulk / mbarrier transactions below
#endif
}
"""

# The header: the shared epilogue, the PTX helpers, gemv_tc's mma step, the kernel.
BULK = EPILOGUE + MMA_PTX + TC_STEP + BULK_KERNEL
SLAB = BULK + SLAB_KERNEL

BULK_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_bulk<T, TB, TY, NT, WARPS, KC, S, MX, G, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
"""

SLAB_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_slab<T, TB, TY, THREADS, ROWS, SKB, JPR, S, MX, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
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


# --- gemv_slab -----------------------------------------------------------------------------------

SLAB_MAX_M = 4
SLAB_K = (2048, 4096, 8192)  # whole rows fill 16 or 32 KiB stages; x's vectors fit registers


def slab_config(threads: int, rows: int, skb: int, stages: int, mx: int) -> Config:
    """A gemv_slab config: ``rows`` weight rows a block, ``stages`` stages of ``skb`` KiB."""
    values = {"THREADS": threads, "ROWS": rows, "SKB": skb, "S": stages, "MX": mx}
    return Config(values, (threads,), stages * skb * 1024)


SLAB_CONFIGS = tuple(
    slab_config(threads, rows, skb, stages, mx)
    for mx in (1, 2, 4)
    for threads in (128, 256)
    for rows in (8, 32)
    for skb in (16, 32)
    for stages in (3, 4)
)


def slab_jpr(p: Problem, c: Config) -> int:
    """16-byte vectors of a row each thread takes (the template value JPR)."""
    return int(p.attr("K")) // (8 * int(c.values["THREADS"]))  # type: ignore[call-overload]


def slab_match(p: Problem, t: Target) -> str | None:
    """None when gemv_slab can run ``p`` on ``t``, else why not."""
    arch = _ARCH.fullmatch(t.arch)
    if arch is None or int(arch[1]) < 90:
        return f"cp.async.bulk and mbarrier transactions need sm_90 or newer, not {t.arch}"
    if p.attr("M") > SLAB_MAX_M:
        return f"M = {p.attr('M')} > {SLAB_MAX_M} (x's rows are held in registers)"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"takes float16/bfloat16, not {p.arg('x').dtype}"
    if p.attr("K") not in SLAB_K:
        return f"K = {p.attr('K')} is not one of {SLAB_K} (stages of whole rows)"
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (bulk copies need it)"
    return None


def slab_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_slab runs correctly for ``p``, or None."""
    v = c.values
    try:
        threads, rows, skb, st, mx = (int(v[k]) for k in ("THREADS", "ROWS", "SKB", "S", "MX"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs THREADS, ROWS, SKB, S, MX)"
    k, m = int(p.attr("K")), int(p.attr("M"))  # type: ignore[call-overload]
    if threads % 32 or not 32 <= threads <= 1024 or st < 2 or rows < 1:
        return f"THREADS = {threads} (whole warps), S = {st} (>= 2), ROWS = {rows}"
    if m > mx:
        return f"M = {m} rows of x do not fit MX = {mx}"
    if k % (8 * threads):
        return f"K = {k} is not {threads} threads x 16-byte vectors x a whole number"
    if (skb * 1024) % (2 * k) or rows % ((skb * 1024) // (2 * k)):
        return f"a stage of {skb} KiB is not whole rows of K = {k} dividing ROWS = {rows}"
    jpr, rs = k // (8 * threads), skb * 1024 // (2 * k)
    if mx * jpr > 16 or rs * jpr > 16:
        return f"x's {mx} x {jpr} and a stage's {rs} x {jpr} vectors a thread: too many registers"
    if c.threadgroup != (threads, 1, 1) or c.shared_memory != st * skb * 1024:
        return f"threadgroup ({threads},) and {st * skb} KiB of shared memory, got {c}"
    return None


def slab_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One block per ROWS weight rows."""
    return (-(-p.attr("N") // c.values["ROWS"]) * c.threadgroup[0], 1, 1)  # type: ignore[operator]


def slab_heuristic(p: Problem, t: Target) -> Config | None:
    """From the probe on an H100: 16 KiB stages, 3 in flight, 256 threads, 8 rows a block;
    None where the rows are too long for it (the next implementation serves)."""
    m = int(p.attr("M"))  # type: ignore[call-overload]
    mx = 1 if m <= 1 else 2 if m <= 2 else 4
    for c in (slab_config(256, 8, 16, 4, mx), slab_config(256, 32, 32, 4, mx)):
        if slab_fits(p, c) is None and c.shared_memory <= t.max_shared_memory_optin_bytes:
            return c
    return None
