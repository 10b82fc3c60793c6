"""``matmul``'s tensor-core implementation for sm_80+ (``mma``): the kernel source, its tile
configs and the rules the selection stage asks (match, fits, grid, heuristic).

A CUTLASS-style multistage GEMM written with inline PTX: each block computes a BM x BN tile of
``y``, its WM x WN warps each a (BM/WM) x (BN/WN) sub-tile with ``mma.sync`` m16n8k16 (fp16 or
bf16 in, fp32 accumulators); K advances BK at a time through STAGES shared-memory buffers
filled by 16-byte ``cp.async`` copies (zero-filled past M, N and K), read into fragments with
``ldmatrix``. Both layouts of ``b`` are served: [N, K] (a linear layer's weight) is already the
"col" operand mma wants; [K, N] is transposed on the way to registers (``ldmatrix.trans``).
The epilogue (bias, activation) is ``_matmul_kernels.EPILOGUE``, shared with the other kernels.
"""

from __future__ import annotations

from typing import Any

from .._arrays.lookup import adapter_for
from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, cuda_cc

__all__ = [
    "MMA",
    "MMA_BODY",
    "MMA_CONFIGS",
    "MMA_DTYPES",
    "MMA_KERNEL",
    "aligned16",
    "mma_fits",
    "mma_grid",
    "mma_heuristic",
    "mma_match",
    "shared_bytes",
]

# The thread/fragment mapping, pipeline and swizzle of the kernel below (read this first).
MMA_NOTES = r"""
// --- mma: y[M, N] = act(x[M, K] @ B + bias), sm_80+ tensor cores ------------------------------
// Block: BM x BN of y; WM x WN warps, each a WTM x WTN sub-tile = MT x NT mma tiles of 16 x 8.
// Per k16 step a warp issues MT x NT mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4; each
// 32-bit register holds two 16-bit elements, the lower-numbered column in the low half):
//   A 16x16 (row): a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]
//                  a3 = A[g+8][2t+8, 2t+9]
//   B 16x8 (col):  b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]          (B[k][n])
//   C 16x8 fp32:   c0, c1 = C[g][2t, 2t+1]   c2, c3 = C[g+8][2t, 2t+1]
// ldmatrix.m8n8.x4: lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes);
// register i of lane l receives matrix i's row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1.
// With .trans it receives the transposed matrix's: stored rows 2 (l % 4), +1, column l / 4.
//   A (x, smem [BM][BK]):  lane l -> row l % 16, k chunk l / 16: matrices give a0, a1, a2, a3.
//   B from w [N, K] (smem [BN][BK]), no .trans: lane l -> n row (l % 8) + 8 (l / 16), k chunk
//     (l / 8) % 2: registers give b0, b1 of n-tile j and b0, b1 of n-tile j + 1.
//   B from w [K, N] (smem [BK][BN]), .trans: lane l -> k row l % 16, n chunk l / 16: the same
//     four registers (k 0-7 / 8-15 of n-tile j, then of n-tile j + 1).
// Shared memory: rows of 16-byte chunks; chunk c of row r is stored at c ^ ((r >> S) & (C - 1))
// (C = min(chunks a row, 8), S = log2(8 / C)), so the 8 rows one ldmatrix matrix reads, and the
// 8 chunks a quarter-warp's cp.async writes, fall in 8 different 16-byte bank groups.
// Pipeline: STAGES - 1 tiles ahead are in flight (one cp.async group per tile) while tile kt is
// multiplied; one __syncthreads per BK, after which the stage of tile kt - 1 is refilled. In a
// tile, A's fragments of the next k16 step load while this step's mma run; B's are loaded two
// n-tiles at a time just before use (fewer live registers: 64x64 warp tiles stay near 220).

"""

MMA_KERNEL = r"""
// Byte offset of 16-byte chunk `c` of row `r` in a tile whose rows hold CH chunks (swizzled).
template <int CH>
__device__ __forceinline__ unsigned kk_mma_swz(int r, int c) {
  constexpr int C = CH < 8 ? CH : 8;
  constexpr int S = C == 8 ? 0 : C == 4 ? 1 : 2;
  return (unsigned)(r * CH + (c ^ ((r >> S) & (C - 1)))) * 16u;
}

template <class TY> struct alignas(4) kk_mma_pair { TY v[2]; };

// One thread's share of the copies of a ROWS x (CH 16-byte chunks) tile of a row-major matrix
// `src` (rows x cols, row stride ld; cols % 8 == 0, so a chunk is wholly in or out): rows
// r + i STEP (i < COPIES) of chunk c. The tile starts at (row0, col0) and moves BK columns
// (ALONG_ROWS false: x, w [N, K]) or BK rows (true: w [K, N]) per `next`; out-of-range chunks
// are zero-filled from a valid address. Set up once, so a tile costs a few adds per copy.
template <class T, int ROWS, int CH, int THREADS, int BK, bool ALONG_ROWS>
struct kk_mma_copies {
  static constexpr int STEP = THREADS / CH, COPIES = ROWS * CH / THREADS;
  static_assert((ROWS * CH) % THREADS == 0 && THREADS % CH == 0 && STEP % 8 == 0,
                "the tile does not split evenly into 16-byte copies");
  const T* src;
  const T* p;      // copy 0 of the current tile
  long long step;  // elements from copy i to copy i + 1 (STEP rows)
  long long at;    // the moving coordinate of this thread's copy 0 (column, or row)
  long long end;   // ... and its bound (cols, or rows)
  unsigned fixed;  // bit i: copy i is inside along the coordinate that does not move
  unsigned off;    // swizzled byte offset of copy 0; copy i is i * STEP rows further (STEP % 8
                   // == 0 keeps the swizzle's XOR term, so the offset grows by whole rows)
  __device__ __forceinline__ kk_mma_copies(const T* src_, long long ld, long long row0,
                                           long long rows, long long col0, long long cols,
                                           int tid) {
    const int r = tid / CH, c = tid % CH;
    src = src_;
    p = src_ + (row0 + r) * ld + col0 + c * 8;
    step = STEP * ld;
    at = ALONG_ROWS ? row0 + r : col0 + c * 8;
    end = ALONG_ROWS ? rows : cols;
    fixed = 0;
#pragma unroll
    for (int i = 0; i < COPIES; ++i)
      if (ALONG_ROWS ? col0 + c * 8 < cols : row0 + r + i * STEP < rows) fixed |= 1u << i;
    off = kk_mma_swz<CH>(r, c);
  }
  // Copies the current tile into `dst`, then moves to the next one.
  __device__ __forceinline__ void next(unsigned dst, long long ld) {
    const T* q = p;
#pragma unroll
    for (int i = 0; i < COPIES; ++i) {
      const bool ok = ((fixed >> i) & 1u) && (ALONG_ROWS ? at + i * STEP : at) < end;
      kk_mma_cp16(dst + off + i * STEP * CH * 16, ok ? q : src, ok);
      q += step;
    }
    p += ALONG_ROWS ? BK * ld : BK;
    at += BK;
  }
};

template <class T, class TB, class TY, int BM, int BN, int BK, int WM, int WN, int STAGES,
          int ACT, bool HAS_BIAS, bool W_KN>
__device__ __forceinline__ void kk_mma(const T* x, const T* w, const TB* bias, TY* y,
                                       long long M, long long N, long long K) {
#if KK_HAS_CP_ASYNC
  constexpr int THREADS = WM * WN * 32, WTM = BM / WM, WTN = BN / WN;
  constexpr int MT = WTM / 16, NT = WTN / 8, KSTEPS = BK / 16;
  constexpr int ACH = BK / 8, BCH = W_KN ? BN / 8 : BK / 8;  // 16-byte chunks per smem row
  constexpr unsigned A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static_assert(sizeof(T) == 2, "mma takes 16-bit inputs");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tile of 16 x 16 steps");
  static_assert(ACH == 2 || ACH == 4 || ACH == 8, "BK of 16, 32 or 64");
  static_assert((WTN & (WTN - 1)) == 0 && (!W_KN || BCH >= 8), "see the ldmatrix offsets");
  extern __shared__ __align__(128) unsigned char kk_mma_smem[];
  const unsigned smem = kk_mma_smem_u32(kk_mma_smem);
  const unsigned smem_b = smem + STAGES * A_BYTES;

  // Blocks in groups of 8 tile rows (column-major inside a group): a wave shares rows of x and
  // columns of B in L2 instead of streaming all of B once per tile row.
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int tiles_m = (int)((M + BM - 1) / BM), tiles_n = (int)((N + BN - 1) / BN);
  const int per_group = 8 * tiles_n, pid = blockIdx.x;
  const int first_m = pid / per_group * 8;
  const int group_m = tiles_m - first_m < 8 ? tiles_m - first_m : 8;
  const long long m0 = (long long)(first_m + pid % per_group % group_m) * BM;
  const long long n0 = (long long)(pid % per_group / group_m) * BN;
  const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;

  // Tiles are copied in order 0, 1, 2, ... (each `next` moves on by BK).
  kk_mma_copies<T, BM, ACH, THREADS, BK, false> copy_a(x, K, m0, M, 0, K, tid);
  kk_mma_copies<T, W_KN ? BK : BN, BCH, THREADS, BK, W_KN> copy_b(
      w, W_KN ? N : K, W_KN ? 0 : n0, W_KN ? K : N, W_KN ? n0 : 0, W_KN ? N : K, tid);
  auto load_tile = [&](int stage) {
    copy_a.next(smem + stage * A_BYTES, K);
    copy_b.next(smem_b + stage * B_BYTES, W_KN ? N : K);
  };
  // This lane's ldmatrix offsets for k16 step 0 of a stage. Moving 16 rows (A, B [N, K]) or
  // 8 k-rows (B [K, N]) keeps the swizzle's XOR term, so other tiles are whole rows further;
  // step ks's chunk 2 ks + h lands at phys(h) ^ 2 ks, i.e. the offset XOR 32 ks; B [K, N]'s
  // n-chunk j (< 8; WTN a power of two) likewise lands at offset XOR 16 j.
  const unsigned a_ld = kk_mma_swz<ACH>(wm0 + (lane & 15), lane >> 4);
  const unsigned b_ld = W_KN ? kk_mma_swz<BCH>(lane & 15, wn0 / 8 + (lane >> 4))
                             : kk_mma_swz<BCH>(wn0 + (lane & 7) + ((lane >> 4) << 3),
                                               (lane >> 3) & 1);
  // A fragments (all MT) of step ks; B fragments of n-tiles j, j + 1 of step ks.
  auto load_a = [&](unsigned (&af)[MT][4], unsigned sa, int ks) {
#pragma unroll
    for (int i = 0; i < MT; ++i) kk_mma_ldsm(af[i], sa + (a_ld ^ (ks * 32)) + i * 16 * ACH * 16);
  };
  auto load_b = [&](unsigned (&r)[4], unsigned sb, int ks, int j) {
    if constexpr (W_KN) {
      kk_mma_ldsm_t(r, sb + (b_ld ^ ((j & 7) * 16)) + (j >> 3) * 128 + ks * 16 * BCH * 16);
    } else {
      kk_mma_ldsm(r, sb + (b_ld ^ (ks * 32)) + j * 8 * BCH * 16);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int KT = (int)((K + BK - 1) / BK);
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_tile(s);
    kk_mma_commit();  // one group per tile, empty past the last: the wait counts stay exact
  }
  int read = 0, write = STAGES - 1;  // stages of tiles kt and kt + STAGES - 1
  for (int kt = 0; kt < KT; ++kt) {
    // Tile kt has landed (this thread's copies, then everyone's), and every warp is done with
    // tile kt - 1, whose stage the next copies refill.
    kk_mma_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load_tile(write);
    kk_mma_commit();
    write = write == STAGES - 1 ? 0 : write + 1;
    const unsigned sa = smem + read * A_BYTES, sb = smem_b + read * B_BYTES;
    read = read == STAGES - 1 ? 0 : read + 1;
    unsigned af[2][MT][4];
    load_a(af[0], sa, 0);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks + 1 < KSTEPS) load_a(af[(ks + 1) & 1], sa, ks + 1);  // in flight during this step
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        unsigned b[4];  // b0, b1 of n-tile j, then of n-tile j + 1
        load_b(b, sb, ks, j);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          kk_mma_op<T>::run(acc[i][j], af[ks & 1][i], b[0], b[1]);
          kk_mma_op<T>::run(acc[i][j + 1], af[ks & 1][i], b[2], b[3]);
        }
      }
    }
  }
  kk_mma_wait<0>();

  // Epilogue: c0, c1 (row g) and c2, c3 (row g + 8) are two adjacent columns: one 4-byte store
  // where y's rows allow it (N even, y 4-byte aligned), else two 2-byte stores.
  const bool pairs = (N & 1) == 0 && ((unsigned long long)y & 3ull) == 0;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const long long col = n0 + wn0 + j * 8 + 2 * t;
    float b0 = 0.0f, b1 = 0.0f;
    if (HAS_BIAS) {
      if (col < N) b0 = (float)bias[col];
      if (col + 1 < N) b1 = (float)bias[col + 1];
    }
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long row = m0 + wm0 + i * 16 + g + h * 8;
        if (row >= M || col >= N) continue;
        const float v0 = kk_mm_act<ACT>(acc[i][j][2 * h] + b0);
        const float v1 = kk_mm_act<ACT>(acc[i][j][2 * h + 1] + b1);
        TY* dst = y + row * N + col;
        if (pairs) {
          kk_mma_pair<TY> p;
          p.v[0] = TY(v0);
          p.v[1] = TY(v1);
          *reinterpret_cast<kk_mma_pair<TY>*>(dst) = p;
        } else {
          dst[0] = TY(v0);
          if (col + 1 < N) dst[1] = TY(v1);
        }
      }
  }
#else
  __trap();  // sm_80+ only (the match rule): no mma.sync m16n8k16 / cp.async below
#endif
}
"""

# The header: the shared epilogue, the PTX helpers, the kernel.
MMA = EPILOGUE + MMA_NOTES + MMA_PTX + MMA_KERNEL

MMA_BODY = r"""
const long long M = x_shape[0];
const long long K = x_shape[1];
const long long N = W_KN ? w_shape[1] : w_shape[0];
kk_mma<T, TB, TY, BM, BN, BK, WM, WN, STAGES, ACT, HAS_BIAS, W_KN>(x, w, bias, y, M, N, K);
"""


def shared_bytes(bm: int, bn: int, bk: int, stages: int) -> int:
    """Dynamic shared memory of a config: STAGES buffers of an A and a B tile (16-bit)."""
    return stages * (bm + bn) * bk * 2


def _config(bm: int, bn: int, bk: int, wm: int, wn: int, stages: int) -> Config:
    values = {"BM": bm, "BN": bn, "BK": bk, "WM": wm, "WN": wn, "STAGES": stages}
    return Config(values, (32 * wm * wn,), shared_bytes(bm, bn, bk, stages))


# Largest tile first (the heuristic takes the first that fills the GPU). Warp tiles: 64x64
# (128 fp32 accumulators a thread), 32x64, 32x32, 16x32.
MMA_CONFIGS = (
    _config(128, 256, 32, 2, 4, 3),  # 256 threads, 72 KiB
    _config(128, 128, 32, 2, 2, 4),  # 128 threads, 64 KiB
    _config(64, 128, 32, 2, 2, 4),  # 128 threads, 48 KiB
    _config(64, 64, 32, 2, 2, 4),  # 128 threads, 32 KiB
    _config(32, 64, 32, 2, 2, 4),  # 128 threads, 24 KiB
)
MMA_DTYPES = ("float16", "bfloat16")
# About one wave of blocks on an A100 (108 SMs) or an H100 (132): a smaller tile below that.
_WAVE_BLOCKS = 128


def aligned16(*arrays: Any) -> bool:
    """Whether every array's data starts on a 16-byte boundary (cp.async copies 16 bytes)."""
    try:
        for a in arrays:
            if adapter_for(a, "[matmul]").pointer(a) & 15:
                return False
    except Exception:  # noqa: BLE001 - a pointer that cannot be read: not known to be aligned
        return False
    return True


def mma_match(p: Problem, t: Target) -> str | None:
    """None when the mma kernel can run ``p`` on ``t``, else why not."""
    cc = cuda_cc(t.arch)
    if cc is None:
        return f"mma.sync, ldmatrix and cp.async are PTX: needs a CUDA target, not {t.arch}"
    if cc < 80:
        return f"needs sm_80 or newer (mma.sync m16n8k16, cp.async), not {t.arch}"
    dtype = p.arg("x").dtype
    if dtype not in MMA_DTYPES:
        return f"takes float16 or bfloat16, not {dtype}"
    k, n = p.attr("K"), p.attr("N")
    if k % 8:
        return f"K = {k} is not a multiple of 8 (rows of a and b are copied in 16-byte chunks)"
    if not p.attr("transpose_b") and n % 8:
        return f"N = {n} is not a multiple of 8 (rows of b [K, N] are copied in 16-byte chunks)"
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (a view at an offset)"
    return None


def _copies_split(rows: int, chunks: int, threads: int) -> bool:
    """Whether a rows x chunks tile splits into 16-byte copies as ``kk_mma_copies`` asserts."""
    return (rows * chunks) % threads == 0 and threads % chunks == 0 and threads // chunks % 8 == 0


def mma_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config the kernel compiles and runs correctly (one from a table, the
    database or ``force``), or None: the kernel's static_asserts, threads and shared memory."""
    v = c.values
    try:
        bm, bn, bk, wm, wn, st = (int(v[k]) for k in ("BM", "BN", "BK", "WM", "WN", "STAGES"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs BM, BN, BK, WM, WN, STAGES)"
    if bk not in (16, 32, 64) or not 2 <= st <= 8 or wm < 1 or wn < 1:
        return f"BK = {bk} (16, 32 or 64) and STAGES = {st} (2 to 8) do not make a pipeline"
    wtm, wtn = bm // wm, bn // wn
    if bm % wm or bn % wn or wtm % 16 or wtn % 16 or wtn & (wtn - 1):
        return f"{bm}x{bn} does not split into {wm}x{wn} warp tiles of 16 x (16 * 2^i)"
    threads = 32 * wm * wn
    if c.threadgroup != (threads, 1, 1):
        return f"{wm}x{wn} warps need threadgroup ({threads},), got {c.threadgroup}"
    b_kn = not p.attr("transpose_b")
    b_rows, b_chunks = (bk, bn // 8) if b_kn else (bn, bk // 8)
    if b_kn and bn < 64:
        return f"b as [K, N] needs BN >= 64 (a whole 128-byte swizzle row), got {bn}"
    if not (_copies_split(bm, bk // 8, threads) and _copies_split(b_rows, b_chunks, threads)):
        return f"a {bm}x{bn}x{bk} tile does not split into 16-byte copies for {threads} threads"
    need = shared_bytes(bm, bn, bk, st)
    if c.shared_memory != need:
        return f"{st} stages of {bm}x{bn}x{bk} need shared_memory {need}, got {c.shared_memory}"
    tiles = -(-p.attr("M") // bm) * -(-p.attr("N") // bn)
    if tiles * threads >= 2**31:
        return f"{tiles} tiles of {bm}x{bn} are more blocks than one launch holds"
    return None


def mma_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """One block per BM x BN tile of y (the kernel orders them in groups of tile rows)."""
    v = c.values
    tiles = -(-p.attr("M") // v["BM"]) * -(-p.attr("N") // v["BN"])
    return (tiles * c.threadgroup[0], 1, 1)


def mma_heuristic(p: Problem, t: Target) -> Config | None:
    """The largest tile that still gives about a wave of blocks (small problems: smaller tiles,
    so every SM has work), else the smallest."""
    m, n = p.attr("M"), p.attr("N")
    fit = [c for c in MMA_CONFIGS if c.shared_memory <= t.max_shared_memory_optin_bytes]
    for c in fit:
        v = c.values
        if -(-m // v["BM"]) * -(-n // v["BN"]) >= _WAVE_BLOCKS:
            return c
    return fit[-1] if fit else None
