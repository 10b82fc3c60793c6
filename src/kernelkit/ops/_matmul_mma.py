"""``matmul``'s tensor-core implementation for sm_80+ (``mma``): its tile configs and the
rules the selection stage asks (match, fits, grid, heuristic); the kernel is ``mma.cuh``.

A CUTLASS-style multistage GEMM written with inline PTX: each block computes a BM x BN tile of
``y``, its WM x WN warps each a (BM/WM) x (BN/WN) sub-tile with ``mma.sync`` m16n8k16 (fp16 or
bf16 in, fp32 accumulators); K advances BK at a time through STAGES shared-memory buffers
filled by 16-byte ``cp.async`` copies (zero-filled past M, N and K), read into fragments with
``ldmatrix``. Both layouts of ``b`` are served: [N, K] (a linear layer's weight) is already the
"col" operand mma wants; [K, N] is transposed on the way to registers (``ldmatrix.trans``).
The epilogue (bias, activation) is ``matmul/kernels/epilogue.cuh``, shared with the other kernels.
"""

from __future__ import annotations

from typing import Any

from .._arrays.lookup import adapter_for
from .._records import Problem, Target
from .._select.records import Config
from ._matmul_rules import cuda_cc

__all__ = [
    "MMA_CONFIGS",
    "MMA_DTYPES",
    "aligned16",
    "mma_fits",
    "mma_grid",
    "mma_heuristic",
    "mma_match",
    "shared_bytes",
]


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
