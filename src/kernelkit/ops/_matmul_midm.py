"""``matmul``'s weight-streaming tensor-core kernel for M of tens to hundreds of rows (``midm``):
float16/bfloat16, sm_80+, either layout of ``b``. The kernel source (``matmul/kernels/midm.cuh``
and ``midm_cluster.cuh``, package data), its configs and the rules the selection stage asks
(match, fits, grid, heuristic).

Between the decode kernels (M <= 16) and the large tiles (``mma``, ``wgmma``), reading the
weight once is still most of the cost: at M = 17-128 a 4096 x 4096 weight is 32 MiB, x 0.1-1
MiB. So a block's tile covers all of M (BM = 32, 64 or 128 rows; the M tiles of one column tile
run side by side past that) and a narrow column tile (BN = 32-128 weight rows), and where those
tiles are fewer than the GPU's SMs, SPLIT blocks of a thread-block cluster (sm_90) take slices
of K of one tile and add their fp32 tiles through distributed shared memory, in rank order
(deterministic). The main loop is ``_matmul_mma``'s (cp.async stages, swizzled shared memory,
ldmatrix, mma.sync m16n8k16) with BK = 64.

Selection: registered below ``mma`` (whose heuristic answers every problem both match), so it
runs only when a table, the tuning database or ``kernelkit.force`` names it.
"""

from __future__ import annotations

from importlib.resources import files

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import EPILOGUE, MMA_PTX, cuda_cc
from ._matmul_mma import MMA_DTYPES, MMA_KERNEL

__all__ = [
    "MIDM",
    "MIDM_BODY",
    "MIDM_CLUSTER",
    "MIDM_CONFIGS",
    "MIDM_KERNEL",
    "SPLITS",
    "midm_config",
    "midm_fits",
    "midm_grid",
    "midm_heuristic",
    "midm_match",
    "midm_shared_bytes",
]


def _source(name: str) -> str:
    return files("kernelkit.ops").joinpath(f"matmul/kernels/{name}").read_text(encoding="utf-8")


MIDM_CLUSTER = _source("midm_cluster.cuh")  # what the CPU emulation replaces (the tests)
MIDM_KERNEL = _source("midm.cuh")
# The header: the shared epilogue, the mma PTX, the mma kernel's copies and swizzle, ours.
MIDM = EPILOGUE + MMA_PTX + MMA_KERNEL + MIDM_CLUSTER + MIDM_KERNEL

MIDM_BODY = r"""
const long long M = x_shape[0];
const long long K = x_shape[1];
const long long N = W_KN ? w_shape[1] : w_shape[0];
kk_midm<T, TB, TY, BM, BN, WM, WN, STAGES, SPLIT, ACT, HAS_BIAS, W_KN>(x, w, bias, y, M, N, K);
"""

BK = 64
MAX_M = 512  # past it the large tiles (mma, wgmma) reuse the weight better
SPLITS = (1, 2, 4, 8)  # cluster sizes the configs use (1: no cluster, any arch)
SHARED_LIMIT = 227 * 1024  # sm_90's most dynamic shared memory a block
SMS = 132  # an H100's SMs: the heuristic's wave


def midm_shared_bytes(bm: int, bn: int, stages: int) -> int:
    """Dynamic shared memory: STAGES stages of x and w tiles, or the fp32 tile they become."""
    return max(stages * (bm + bn) * BK * 2, bm * (bn + 8) * 4)


def midm_config(bm: int, bn: int, wm: int, wn: int, stages: int, split: int) -> Config:
    """A midm config: BM x BN tiles, WM x WN warps, STAGES k tiles of 64 in the ring, K split
    over SPLIT blocks of a cluster."""
    values = (("BM", bm), ("BN", bn), ("WM", wm), ("WN", wn), ("STAGES", stages), ("SPLIT", split))
    return Config(values, (32 * wm * wn, 1, 1), midm_shared_bytes(bm, bn, stages))


def _warp_shapes(bm: int, bn: int) -> list[tuple[int, int]]:
    """One shape of 4 warps (1 x 4 or 2 x 2) and one of 8 (2 x 4 or 4 x 2): of those whose tiles
    are a multiple of 16 rows by a power of two >= 16 columns, at most 64 x 64 (128 accumulators
    a thread), the one whose ldmatrix reads (WTM / 16 + WTN / 16 per warp and k step) are
    fewest."""

    def ok(wm: int, wn: int) -> bool:
        wtm, wtn = bm // wm, bn // wn
        return wtm % 16 == 0 and wtn >= 16 and wtn & (wtn - 1) == 0 and wtm * wtn <= 64 * 64

    def reads(s: tuple[int, int]) -> int:
        return bm // s[0] + bn // s[1]

    out = []
    for shapes in (((1, 4), (2, 2)), ((2, 4), (4, 2))):
        valid = [s for s in shapes if ok(*s)]
        if valid:
            out.append(min(valid, key=reads))
    return out


# BN = 32 only for BM <= 64 (a 4 KiB stage of w under an 8-16 KiB one of x streams poorly);
# BN = 256 halves x's re-reads from L2 again where M is large; SPLIT brings the tiles of a
# narrow weight to a wave (4096 / 256 = 16 tiles x 8)
MIDM_CONFIGS = tuple(
    midm_config(bm, bn, wm, wn, stages, split)
    for bm in (32, 64, 128)
    for bn in (32, 64, 128, 256)
    if bn > 32 or bm < 128
    for wm, wn in _warp_shapes(bm, bn)
    for stages in (3, 4, 6)
    if midm_shared_bytes(bm, bn, stages) <= 200 * 1024
    for split in SPLITS
)


def midm_match(p: Problem, t: Target) -> str | None:
    """None when midm can run ``p`` on ``t``, else why not."""
    cc = cuda_cc(t.arch)
    if cc is None:
        return f"mma.sync, ldmatrix and cp.async are PTX: needs a CUDA target, not {t.arch}"
    if cc < 80:
        return f"needs sm_80 or newer (mma.sync m16n8k16, cp.async), not {t.arch}"
    dtype = p.arg("x").dtype
    if dtype not in MMA_DTYPES:
        return f"takes float16 or bfloat16, not {dtype}"
    m, n, k = p.attr("M"), p.attr("N"), p.attr("K")
    if m > MAX_M:
        return f"M = {m} > {MAX_M}: the large tiles (mma, wgmma) serve it"
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


def midm_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config midm compiles and runs correctly for ``p``, or None: the
    kernel's static_asserts, threads and shared memory. (SPLIT > 1 also needs clusters, a
    target feature this rule cannot see: before sm_90 it is a CompileError naming
    ``__cluster_dims__``; the heuristic never gives it there.)"""
    v = c.values
    try:
        bm, bn, wm, wn, st, split = (
            int(v[k])
            for k in ("BM", "BN", "WM", "WN", "STAGES", "SPLIT")
        )
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs BM, BN, WM, WN, STAGES, SPLIT)"
    if split not in (1, 2, 4, 8) or not 2 <= st <= 8 or wm < 1 or wn < 1:
        return f"SPLIT = {split} (1, 2, 4 or 8) and STAGES = {st} (2 to 8): outside"
    wtm, wtn = bm // wm, bn // wn
    if bm % wm or bn % wn or wtm % 16 or wtn % 16 or wtn & (wtn - 1):
        return f"{bm}x{bn} does not split into {wm}x{wn} warp tiles of 16 x (16 * 2^i)"
    threads = 32 * wm * wn
    if c.threadgroup != (threads, 1, 1):
        return f"{wm}x{wn} warps need threadgroup ({threads},), got {c.threadgroup}"
    b_kn = not p.attr("transpose_b")
    b_rows, b_chunks = (BK, bn // 8) if b_kn else (bn, BK // 8)
    if b_kn and bn < 64:
        return f"b as [K, N] needs BN >= 64 (a whole 128-byte swizzle row), got {bn}"
    if not (_copies_split(bm, BK // 8, threads) and _copies_split(b_rows, b_chunks, threads)):
        return f"a {bm}x{bn}x{BK} tile does not split into 16-byte copies for {threads} threads"
    need = midm_shared_bytes(bm, bn, st)
    if c.shared_memory != need:
        return f"{st} stages of {bm}x{bn}x{BK} need shared_memory {need}, got {c.shared_memory}"
    if need > SHARED_LIMIT:
        return f"{need} bytes of shared memory exceed {SHARED_LIMIT}"
    blocks = -(-p.attr("M") // bm) * -(-p.attr("N") // bn) * split
    if blocks * threads >= 2**31:
        return f"{blocks} blocks of {threads} threads are more than one launch holds"
    return None


def midm_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """SPLIT blocks (one cluster) per BM x BN tile of y, the M tiles of a column tile adjacent."""
    v = c.values
    tiles = -(-p.attr("M") // v["BM"]) * -(-p.attr("N") // v["BN"])
    return (tiles * int(v["SPLIT"]) * c.threadgroup[0], 1, 1)


def midm_heuristic(p: Problem, t: Target) -> Config | None:
    """A first guess for ``kernelkit.force`` without a config (the tuner sweeps the rest): the
    smallest BM of 32, 64, 128 holding M, BN wider as M or N grow (x's re-reads from L2 fall
    as BN grows), 4 stages, and the SPLIT (clusters only) that brings the blocks closest to one
    wave of 132 SMs."""
    m, n = int(p.attr("M")), int(p.attr("N"))
    bm = next((b for b in (32, 64, 128) if m <= b), 128)
    bn = 256 if m > 64 and n >= 8192 else 128 if m > 32 or n >= 8192 else 64
    tiles = -(-m // bm) * -(-n // bn)
    splits = SPLITS if "clusters" in t.features else (1,)
    split = min(splits, key=lambda s: (abs(tiles * s - SMS) if tiles * s >= SMS // 2 else SMS, s))
    for c in MIDM_CONFIGS:
        v = c.values
        if (
            (v["BM"], v["BN"], v["STAGES"], v["SPLIT"]) == (bm, bn, 4, split)
            and midm_fits(p, c) is None
            and c.shared_memory <= t.max_shared_memory_optin_bytes
        ):
            return c
    return None
