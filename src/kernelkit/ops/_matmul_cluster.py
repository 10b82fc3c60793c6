"""``matmul``'s tensor-core decode kernel for sm_90 (``gemv_cluster``): M <= 16, float16/bfloat16,
weight [N, K]. Its configs and the rules the selection stage asks (match, fits, grid,
heuristic); the kernel is ``matmul/kernels/cluster.cuh``.

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
from ._matmul_slab import decode_match

__all__ = [
    "CLUSTER_CONFIGS",
    "CLUSTER_SIZES",
    "cluster_config",
    "cluster_fits",
    "cluster_grid",
    "cluster_heuristic",
    "cluster_match",
    "cluster_size",
    "cluster_template",
]

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
