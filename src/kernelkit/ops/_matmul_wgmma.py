"""``matmul``'s Hopper tile kernel (``wgmma``): sm_90a warpgroup MMA for float16/bfloat16, weight
[N, K], any M > 16 (made for the skinny M of batched decode and short prefill, where reading
the weight is still most of the cost). Its configs and the rules the selection stage asks
(match, fits, grid, heuristic); the kernel source is in ``_matmul_wgmma_source``.

A block of WG warpgroups computes a BM x BN tile of y (BM = 64 WG: warpgroup g takes rows
[64 g, 64 g + 64) with ``wgmma.mma_async.m64nBNk16``, both operands read by the tensor cores
straight from shared memory). Its k tiles of 64 elements (128 bytes a row; KB of them a stage)
come through a ring of S stages in the 128-byte swizzled layout that the wgmma shared-memory
descriptors name (chunk c of row r at c ^ (r % 8)), filled one of three ways (WS):
0, every thread issues 16-byte ``cp.async`` copies and the block meets at a barrier a stage;
1, one more warpgroup only copies, and mbarriers pass the stages between it and the wgmma
warpgroups (``full`` when a stage's copies land, ``empty`` when its wgmmas are done); 2, one
thread of one more warp issues TMA tensor copies through maps of x and w that the op makes
per call (``kernelkit.tensor_map``), with the same two mbarriers. Rows past M or N and k past
K arrive as zeros (WS = 2 leaves A's rows past M rounded up to 8 unwritten where M is below
the tile: their rows of y are never stored). With SPLIT > 1 a thread-block cluster of SPLIT
blocks shares a tile, block r taking the r-th share of its stages; their fp32 tiles meet in
distributed shared memory and are added in rank order (deterministic, no atomics, no second
kernel): skinny problems have too few tiles to fill the GPU otherwise (4096 x 4096 at
M = 128: 32 tiles of 128 x 128).
"""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_kernels import cuda_cc
from ._matmul_wgmma_source import (
    BNS,
    WGMMA,
    WGMMA_BODY,
    WGMMA_COPIES,
    WGMMA_TMA_BODY,
)

__all__ = [
    "SPLITS",
    "WGMMA",
    "WGMMA_BODY",
    "WGMMA_CONFIGS",
    "WGMMA_COPIES",
    "WGMMA_TMA_BODY",
    "wgmma_config",
    "wgmma_fits",
    "wgmma_grid",
    "wgmma_heuristic",
    "wgmma_match",
]

KBS = (1, 2, 4)  # 64-wide k tiles a stage
SPLITS = (1, 2, 4, 8)  # cluster sizes: a kernel each (the cluster shape is its attribute)
SHARED_LIMIT = 227 * 1024  # sm_90's most shared memory per block


def shared_bytes(wg: int, bn: int, kb: int, stages: int) -> int:
    """Dynamic shared memory: the ring (or the fp32 tile that reuses it, if larger) and 1 KiB
    to align it to the swizzle's 1024 bytes."""
    bm = 64 * wg
    return max(stages * kb * (bm + bn) * 128, bm * (bn + 8) * 4) + 1024


def static_bytes(stages: int) -> int:
    """The kernel's statically declared shared memory: the two mbarrier arrays (``full``,
    ``empty``) of the warp-specialized variant, declared (unused) by WS = 0 too."""
    return 2 * 8 * stages


def threads(wg: int, ws: int) -> int:
    """A block's threads: the wgmma warpgroups, and the copying warpgroup (WS = 1) or the
    warp whose one thread issues the tensor copies (WS = 2)."""
    return 128 * wg + (32 if ws == 2 else 128 * ws)


def wgmma_config(wg: int, bn: int, kb: int, stages: int, split: int, ws: int = 0) -> Config:
    """A wgmma config: ``wg`` warpgroups of wgmmas (a 64 wg x ``bn`` tile), ``stages`` stages
    of ``kb`` 64-wide k tiles (128 kb contiguous bytes of each row) in flight or in use, the
    stages split over a cluster of ``split`` blocks; ``ws`` = 0 has every thread copy with
    cp.async, 1 adds a warpgroup that only copies (warp-specialized), 2 a warp that issues TMA
    tensor copies (one thread, through tensor maps)."""
    values = {"WG": wg, "BN": bn, "KB": kb, "S": stages, "SPLIT": split, "WS": ws}
    return Config(values, (threads(wg, ws),), shared_bytes(wg, bn, kb, stages))


WGMMA_CONFIGS = tuple(
    wgmma_config(wg, bn, kb, stages, split, ws)
    for ws in (0, 1, 2)
    for wg in (1, 2)
    for bn in BNS
    for kb in KBS
    for stages in (3, 4, 6, 8)
    for split in SPLITS
    if shared_bytes(wg, bn, kb, stages) + static_bytes(stages) <= SHARED_LIMIT
    and (wg, bn) != (1, 256)
    and (ws != 1 or (64 * wg + bn) * kb <= 64 * 16)
)


def wgmma_match(p: Problem, t: Target) -> str | None:
    """None when the wgmma kernel can run ``p`` on ``t``, else why not."""
    if cuda_cc(t.arch) != 90:
        return f"wgmma is an sm_90a instruction (not on other archs), not {t.arch}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"tensor cores take float16/bfloat16, not {p.arg('x').dtype}"
    if p.attr("K") % 8:
        return f"K = {p.attr('K')} is not a multiple of 8 (rows are copied in 16-byte chunks)"
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (cp.async copies 16 bytes)"
    return None


def wgmma_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config the kernel runs correctly for ``p``, or None."""
    v = c.values
    try:
        wg, bn, kb, st, split, ws = (int(v[k]) for k in ("WG", "BN", "KB", "S", "SPLIT", "WS"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs WG, BN, KB, S, SPLIT, WS)"
    if wg not in (1, 2) or bn not in BNS or kb not in KBS or not 3 <= st <= 8:
        return f"WG = {wg} (1, 2), BN = {bn} {BNS}, KB = {kb} {KBS}, S = {st} (3 to 8): outside"
    if (wg, bn) == (1, 256):
        return "WG = 1 with BN = 256: 128 accumulators and the copies' addresses spill"
    if split not in SPLITS:
        return f"SPLIT = {split} is not a cluster size in {SPLITS}"
    if ws not in (0, 1, 2):
        return f"WS = {ws} is not 0 (every thread copies), 1 (a copying warpgroup) or 2 (TMA)"
    if ws == 1 and (64 * wg + bn) * kb > 64 * 16:
        chunks = (64 * wg + bn) * kb // 16
        return f"WS = 1 copies at most 64 16-byte chunks a thread a stage, not {chunks}"
    need, count = shared_bytes(wg, bn, kb, st), threads(wg, ws)
    if c.threadgroup != (count, 1, 1) or c.shared_memory != need:
        return f"threadgroup ({count},) and {need} bytes of shared memory, got {c}"
    if need + static_bytes(st) > SHARED_LIMIT:
        return f"{need} + {static_bytes(st)} bytes of shared memory > {SHARED_LIMIT}"
    if wgmma_grid(p, c)[0] >= 2**31:
        return "more blocks than one launch holds"
    if ws == 2 and max(int(p.attr(a)) for a in ("M", "N", "K")) >= 2**31:
        return "WS = 2: tensor copies take 32-bit coordinates (M, N and K below 2**31)"
    if ws == 2 and not _maps_allowed(p):
        return "WS = 2: JAX arrays' addresses belong to XLA, so no tensor map is made of them"
    return None


def wgmma_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """SPLIT blocks (one cluster) per BM x BN tile of y."""
    v = c.values
    m, n = int(p.attr("M")), int(p.attr("N"))
    tiles = -(-m // (64 * int(v["WG"]))) * -(-n // int(v["BN"]))
    return (tiles * int(v["SPLIT"]) * c.threadgroup[0], 1, 1)


def _maps_allowed(p: Problem) -> bool:
    """Whether the op may make tensor maps of the problem's arrays (not of JAX's: XLA launches
    their kernels, on buffers it owns, and a map made outside would name a stale address)."""
    return p.attr("framework") not in ("jax", "jaxlib")


_WAVE = 132  # blocks: one per SM of an H100 or H200 (the heuristic does not go over)


def wgmma_heuristic(p: Problem, t: Target) -> Config | None:
    """None for M <= 16 (the gemv kernels). For M = 17-64 (from sweeps of every config on an
    H100 at M = 32 and of the WS = 1 configs on an H200 at M = 32): one warpgroup, 128-wide
    tiles where they make about a wave of blocks, else 64-wide ones with two k tiles a stage, a
    cluster of two where that still fits in one wave, the copying warpgroup (WS = 1). For
    M = 65-256, TMA copies (WS = 2; an H200 sweep at M = 128 and 256 on the three anchor
    weights): the tile shape (one warpgroup up to M = 128, else two) with the most tiles that
    still fit one wave of blocks, ties to the wider tile; a cluster of two only where that
    leaves half a wave idle. Above M = 256, two warpgroups and 256-wide tiles where they make
    48 tiles or more, through TMA too (H100 sweep at M = 3500: 0.81-0.97x cuBLAS against
    0.72-0.89x with WS = 1). JAX arrays keep the copying warpgroup (WS = 1) wherever M > 64.
    Each with the most stages that fit."""
    m, n, k = (int(p.attr(a)) for a in ("M", "N", "K"))
    if m <= 16:
        return None
    ws, wg = (1, 1) if m <= 64 else (2 if _maps_allowed(p) else 1, 2)
    tiles_m = -(-m // (64 * wg))
    if ws == 2 and m <= 256:
        shapes = [
            (-(-m // (64 * g)) * -(-n // bn), bn, g)
            for g in ((1, 2) if m <= 128 else (2,))
            for bn in BNS
            if (g, bn) != (1, 256) and (bn == 64 or -(-n // bn) < -(-n // (bn // 2)))
        ]  # a wider tile only where it makes fewer column tiles (N <= 64: 64 wide)
        fitting = [s for s in shapes if s[0] <= _WAVE]
        tiles, bn, wg = max(fitting) if fitting else min(shapes)
        kb = 2 if (wg, bn) == (1, 64) else 1
    else:
        if wg == 2 and tiles_m * -(-n // 256) >= 48 and n > 128:
            bn, kb = 256, 1
        else:
            bn, kb = (128, 1) if tiles_m * -(-n // 128) >= 100 and n > 64 else (64, 2)
        tiles = tiles_m * -(-n // bn)
    split = 2 if tiles * 2 <= _WAVE and -(-k // (64 * kb)) >= 4 else 1
    for stages in (8, 6, 4, 3):
        c = wgmma_config(wg, bn, kb, stages, split, ws)
        total = c.shared_memory + static_bytes(stages)
        if total <= t.max_shared_memory_optin_bytes and wgmma_fits(p, c) is None:
            return c
    return None
