"""``matmul``'s whole-row decode kernel on the tensor cores, sm_90 (``gemv_slab_tc``): M <= 16,
float16/bfloat16, weight [N, K] with K a divisor of 32768. The kernel source, its configs and
the rules the selection stage asks (match, fits, grid, heuristic).

``gemv_slab`` streams whole weight rows (one bulk copy a stage, several blocks an SM) and reads
the larger weights at 96-98% of the copy rate at M = 1, but does its multiply-adds on the CUDA
cores: at M = 4 that is 4 FMAs and the conversions of every weight element, and x's rows as
floats take 159 registers a thread at K = 8192 (one block an SM). The tensor cores would take
that work, but an ``mma.m16n8k16`` wants 8 weight rows (its n side) at the same k, and a stage
of whole rows holds 1-4 of them at K = 8192.

So this kernel cuts K into SEG interleaved segments and gives each segment of a row its own
columns: n = R rows x SEG segments (R = 8 / SEG), and m = MX rows of x x SEG segments
(MX = 8 XH / SEG: x's rows fill XH halves of 8 mma rows, the first, both, or two mmas' on the
same w fragment). The product's entries where the segments agree are the partial dot products
wanted; the others are computed and dropped. At
M <= 4 the tensor cores then do 4-16x the useful work, a few percent of their rate at the
memory's pace, and each weight element costs a thread 1/8 of a 16-byte shared load and 1/4
of an ``mma``: the FMA pipes and the registers of x as floats are gone.
"""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, TC_STEP
from ._matmul_slab import BULK_PTX, SLAB_RING, decode_match

__all__ = [
    "SLAB_TC",
    "SLAB_TC_BODY",
    "SLAB_TC_CONFIGS",
    "slab_tc_config",
    "slab_tc_fits",
    "slab_tc_grid",
    "slab_tc_heuristic",
    "slab_tc_jw",
    "slab_tc_match",
    "slab_tc_static_bytes",
]

SLAB_TC_KERNEL = r"""
// --- gemv_slab_tc: y = act(x @ w^T + bias), M <= MX, sm_90: whole rows, tensor cores ---------
// As gemv_slab: a block owns ROWS consecutive rows of w, streamed through S stages of SKB KiB,
// RS whole rows each (one cp.async.bulk, thread 0 issues it, an mbarrier counts the bytes).
// K is cut into 32-wide chunks dealt round-robin to SEG segments: chunk c is segment c % SEG.
// An mma's 8 columns are R = 8 / SEG rows of the stage x SEG segments (column r SEG + s); x's
// rows x the same segments (row m SEG + s) are XH halves of 8 rows (1: an mma's first half,
// 2: both, 4: two mmas, each on the same w fragment); lane (g, q) loads 16 bytes of row
// g / SEG (+ 8 h / SEG for half h) of both at the k of its segment g % SEG, and the two mma
// steps take them as kk_tc_step does (a dot product may sum k in any order both operands
// share).
// Entry (m SEG + s, r SEG + s') is x[m] . w[r] over segment s's chunks of the step when s = s',
// and a cross-segment sum, dropped, when not. Step j of warp w takes chunks (w JW + j) SEG ..
// (w JW + j + 1) SEG - 1 of every row: 32 SEG contiguous elements a row, read without bank
// conflicts for SEG >= 2 (with SEG = 1 a quarter-warp reads two rows at the same offset: two
// ways), and x's fragments for its JW steps stay in registers for the whole kernel.
// Per group of R rows each lane keeps its agreeing entries, the segments are added by
// butterfly shuffles, the warps' sums in a fixed order (deterministic), as in gemv_slab.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T, class TB, class TY, int WARPS, int ROWS, int SKB, int S, int SEG, int XH,
          int JW, int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_slab_tc(const T* x, const T* w, const TB* bias, TY* y,
                                                long long M, long long N, long long K) {
#if KK_HAS_TMA
  constexpr int R = 8 / SEG, MX = 8 * XH / SEG, MT = XH < 2 ? 1 : 2, AT = (XH + 1) / 2;
  constexpr int KC = 32 * SEG * WARPS * JW;  // K (the config rules)
  constexpr int RS = SKB * 512 / KC, G = RS / R;
  constexpr unsigned STAGE = SKB * 1024u;
  static_assert(SEG == 1 || SEG == 2 || SEG == 4 || SEG == 8, "segments: a power of two <= 8");
  static_assert(XH == 1 || XH == 2 || XH == 4, "x's halves: 1, 2 or 4");
  static_assert(RS * KC == SKB * 512 && RS % R == 0 && ROWS % RS == 0, "the config rules");
  extern __shared__ __align__(128) uint4 kk_slab_tc_ring[];
  __shared__ unsigned long long bars[S];  // 8-byte aligned, as mbarriers must be
  __shared__ float part[2][WARPS][RS * MX];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int seg = g % SEG;  // this lane's segment, for x (A row g) and w (B column g) alike
  const long long n0 = (long long)blockIdx.x * ROWS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + RS - 1) / RS;
  kk_slab_ring_init(bars);
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + RS i ..
    kk_slab_ring_fill<S, STAGE, RS>(kk_slab_tc_ring, bars, i, w + n0 * KC, rows, KC);
  };
  if (t == 0)
    for (int i = 0; i < S - 1 && i < tiles; ++i) fill(i);
  // this lane's 8 elements of step j: k = (warp JW + j) 32 SEG + 32 seg + 8 q
  const int k_lane = warp * JW * 32 * SEG + 32 * seg + 8 * q;
  uint4 xr[JW][XH];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int j = 0; j < JW; ++j)
#pragma unroll
    for (int h = 0; h < XH; ++h) {
      const int m = g / SEG + h * (8 / SEG);  // A row g of half h
      xr[j][h] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K + k_lane + 32 * SEG * j))
                       : zero;
    }
  for (int i = 0; i < tiles; ++i) {
    if (t == 0 && i + S - 1 < tiles) fill(i + S - 1);
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
#pragma unroll
    for (int grp = 0; grp < G; ++grp) {
      const uint4* mine = kk_slab_tc_ring + (i % S) * (STAGE / 16) +
                          ((grp * R + g / SEG) * KC + k_lane) / 8;
      float acc[AT][4];
#pragma unroll
      for (int u = 0; u < AT; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.0f;
#pragma unroll
      for (int j = 0; j < JW; ++j) {
        const uint4 wv = mine[4 * SEG * j];
#pragma unroll
        for (int u = 0; u < AT; ++u) kk_tc_step<T, MT, 1>(&acc[u], &wv, &xr[j][2 * u]);
      }
      float* out = part[i & 1][warp] + grp * R * MX;  // [row of the group][m]
#pragma unroll
      for (int u = 0; u < AT; ++u) {  // mma u: halves 2u (entries 0, 1) and 2u + 1 (2, 3)
        const bool up = 2 * u + 1 < XH;
        const int m_lo = 2 * u * (8 / SEG), m_hi = m_lo + 8 / SEG;  // x's rows at g = 0
        if (SEG == 1) {  // no segments: acc is y[g (+8)][2q (+1)] of the group's 8 rows
          out[(2 * q) * MX + g + m_lo] = acc[u][0];
          out[(2 * q + 1) * MX + g + m_lo] = acc[u][1];
          if (up) out[(2 * q) * MX + g + m_hi] = acc[u][2];
          if (up) out[(2 * q + 1) * MX + g + m_hi] = acc[u][3];
        } else {  // columns 2q, 2q + 1 are segments 2q % SEG, (2q + 1) % SEG of row 2q / SEG
          const bool even = seg == (2 * q) % SEG, odd = seg == (2 * q + 1) % SEG;
          float lo = even ? acc[u][0] : odd ? acc[u][1] : 0.0f;
          float hi = even ? acc[u][2] : odd ? acc[u][3] : 0.0f;
          // add over the lanes of the other segments: lane bits 2.. (g % SEG) and 0.. (q's part)
#pragma unroll
          for (int b = 4; b < 4 * SEG; b <<= 1) {
            lo += __shfl_xor_sync(0xffffffffu, lo, b);
            if (up) hi += __shfl_xor_sync(0xffffffffu, hi, b);
          }
#pragma unroll
          for (int b = 1; b < SEG / 2; b <<= 1) {
            lo += __shfl_xor_sync(0xffffffffu, lo, b);
            if (up) hi += __shfl_xor_sync(0xffffffffu, hi, b);
          }
          if (seg == 0 && q % (SEG > 1 ? SEG / 2 : 1) == 0) {  // (SEG = 1 compiles it: no % 0)
            const int r = 2 * q / SEG, m = g / SEG;
            out[r * MX + m + m_lo] = lo;
            if (up) out[r * MX + m + m_hi] = hi;
          }
        }
      }
    }
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    kk_slab_store<TB, TY, WARPS, RS, MX, ACT, HAS_BIAS>(&part[i & 1][0][0], t, M, rows - RS * i,
                                                         n0 + (long long)RS * i, bias, y, N);
  }
#else
  __trap();  // sm_90+ only (the match rule): no cp.async.bulk / mbarrier transactions below
#endif
}
"""

# The header: the shared epilogue, the mma PTX and step, the bulk copies and the ring, the kernel.
SLAB_TC = EPILOGUE + MMA_PTX + TC_STEP + BULK_PTX + SLAB_RING + SLAB_TC_KERNEL

SLAB_TC_BODY = r"""
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_slab_tc<T, TB, TY, WARPS, ROWS, SKB, S, SEG, XH, JW, ACT, HAS_BIAS>(x, w, bias, y, M, N,
                                                                             K);
"""

MAX_M = 16
MAX_K = 32768  # whole rows in a stage of at most 64 KiB
MAX_X_REGISTERS = 64  # a thread's x fragments: 32-bit registers
SHARED_LIMIT = 227 * 1024  # sm_90's most shared memory per block (dynamic + static)
STATIC_LIMIT = 48 * 1024  # statically declared shared memory (the sums)


def slab_tc_config(warps: int, rows: int, skb: int, stages: int, seg: int, xh: int) -> Config:
    """A gemv_slab_tc config: ``rows`` weight rows a block, ``stages`` stages of ``skb`` KiB,
    K cut into ``seg`` segments, x's rows in ``xh`` halves of 8 mma rows (1: the first half of
    an mma, 2: both, 4: two mmas)."""
    values = {"WARPS": warps, "ROWS": rows, "SKB": skb, "S": stages, "SEG": seg, "XH": xh}
    return Config(values, (32 * warps,), stages * skb * 1024)


SLAB_TC_CONFIGS = tuple(
    slab_tc_config(warps, rows, skb, stages, seg, xh)
    for seg in (8, 4, 2, 1)
    for xh in (1, 2, 4)
    if 8 * xh // seg <= MAX_M  # x's rows an mma takes (MX)
    for warps in (4, 8, 16)
    for rows in (16, 32, 64, 112)  # 112: 14336 rows in one wave of 128 blocks
    for skb, stages in ((16, 3), (16, 4), (32, 3), (32, 4), (64, 2), (64, 3))
)


def slab_tc_jw(p: Problem, c: Config) -> int:
    """32-SEG-wide steps of each row a warp takes (the template value JW)."""
    k = int(p.attr("K"))
    return k // (32 * int(c.values["SEG"]) * int(c.values["WARPS"]))


def slab_tc_match(p: Problem, t: Target) -> str | None:
    """None when gemv_slab_tc can run ``p`` on ``t``, else why not."""
    k = int(p.attr("K"))
    k_why = None
    if k < 256 or MAX_K % k:
        k_why = f"K = {k} is not a divisor of {MAX_K} from 256 (stages of whole rows)"
    return decode_match(p, t, MAX_M, "x's rows are held in registers", k_why)


def slab_tc_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_slab_tc runs correctly for ``p``, or None."""
    v = c.values
    try:
        warps, rows, skb, st, seg = (int(v[k]) for k in ("WARPS", "ROWS", "SKB", "S", "SEG"))
        xh = int(v["XH"])
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs WARPS, ROWS, SKB, S, SEG, XH)"
    k, m = int(p.attr("K")), int(p.attr("M"))
    if seg not in (1, 2, 4, 8) or xh not in (1, 2, 4):
        return f"SEG = {seg} (1, 2, 4 or 8), XH = {xh} (1, 2 or 4): outside"
    if not 1 <= warps <= 32 or st < 2 or rows < 1:
        return f"WARPS = {warps} (1-32), S = {st} (>= 2), ROWS = {rows} (>= 1): outside"
    mx, r = 8 * xh // seg, 8 // seg
    if not m <= mx < 2 * m:
        return f"M = {m} wants the smallest MX >= M; SEG = {seg}, XH = {xh} gives MX = {mx}"
    if k % (32 * seg * warps):
        return f"K = {k} is not {warps} warps x {seg} segments x 32-wide chunks x a whole number"
    if (skb * 512) % k or (skb * 512 // k) % r or rows % (skb * 512 // k):
        return f"a stage of {skb} KiB is not whole groups of {r} rows of K = {k} dividing ROWS"
    rs, jw = skb * 512 // k, k // (32 * seg * warps)
    if jw * 4 * xh > MAX_X_REGISTERS:
        return f"x's fragments take {jw * 4 * xh} registers a thread: too many"
    if rs * mx > 32 * warps:
        return f"{rs} rows x {mx} outputs a stage need more than {32 * warps} threads"
    static = slab_tc_static_bytes(p, c)
    if c.threadgroup != (32 * warps, 1, 1) or c.shared_memory != st * skb * 1024:
        return f"threadgroup ({32 * warps},) and {st * skb} KiB of shared memory, got {c}"
    if static > STATIC_LIMIT:
        return f"{rs} rows x {mx} outputs x {warps} warps: {static} bytes of sums exceed 48 KiB"
    if c.shared_memory + static > SHARED_LIMIT:
        return f"{st} stages of {skb} KiB and {static} bytes of sums exceed 227 KiB"
    return None


def slab_tc_static_bytes(p: Problem, c: Config) -> int:
    """The kernel's statically declared shared memory for ``p``: the warps' sums of a stage
    (two buffers) and the ring's barriers."""
    v = c.values
    rows = 512 * int(v["SKB"]) // int(p.attr("K"))
    mx = 8 * int(v["XH"]) // int(v["SEG"])
    return 2 * int(v["WARPS"]) * rows * mx * 4 + 8 * int(v["S"])


def slab_tc_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One block per ROWS weight rows."""
    return (-(-p.attr("N") // c.values["ROWS"]) * c.threadgroup[0], 1, 1)


def slab_tc_heuristic(p: Problem, t: Target) -> Config | None:
    """What won most tuned rows on the H100 and H200: x's rows in the first half of the mma up
    to M = 4 (the smallest SEG whose MX holds them: 8, 4 or 2), in both for M = 5-8 (SEG = 2),
    in two mmas from M = 9 (SEG = 2: 4-row groups, where SEG = 1 takes 8), 16 warps, ROWS for
    about 128 blocks (one an SM), 128 KiB of stages (less, fewer warps, other ROWS or another
    shape where that does not fit the rules or the device's shared memory); None where nothing
    does (the next implementation serves). At M = 1 the tables pick gemv_slab, 1-2% faster."""
    m, n = int(p.attr("M")), int(p.attr("N"))
    if m > MAX_M:
        return None
    by_blocks = sorted((16, 32, 64, 112), key=lambda r: abs(n / r - 128))  # ~one block an SM
    first = 4 if m > 8 else 2 if m > 4 else 1
    for xh in (first, *(h for h in (1, 2, 4) if h != first)):  # others if it fits nothing
        seg = next((s for s in (8, 4, 2, 1) if m <= 8 * xh // s), 0)
        for rows in by_blocks if seg else ():
            for warps in (16, 8, 4):
                for skb, st in ((32, 4), (64, 2), (16, 4), (32, 3)):
                    c = slab_tc_config(warps, rows, skb, st, seg, xh)
                    if slab_tc_fits(p, c) is not None:
                        continue
                    total = c.shared_memory + slab_tc_static_bytes(p, c)
                    if total <= t.max_shared_memory_optin_bytes:
                        return c
    return None
