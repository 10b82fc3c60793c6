"""``matmul``'s decode kernel for sm_90 (``gemv_slab``): M <= 4, float16/bfloat16, weight [N, K]
with K of 2048, 4096 or 8192. Its configs and the rules the selection stage asks (match, fits,
grid, heuristic); the kernel is ``matmul/kernels/slab.cuh``.

Reading the weight once at the memory's rate is the whole cost of these shapes. ``gemv_tc``
loads it with 16-byte loads from every lane and stays at 74-83% of the copy rate on an H100
(8192 x 8192 and 14336 x 4096, M = 1). Here the copy engine of Hopper's TMA unit moves it:
``cp.async.bulk`` (no tensor map) copies whole rows, contiguous in memory, into a ring of
shared-memory stages, one copy per stage issued by one thread, and an mbarrier per stage counts
the bytes in. On an H100 this reads the 8192 x 8192 and 14336 x 4096 weights at 96-98% of the
copy rate at M = 1, where cuBLAS reads them at 92-95% (``benchmarks/ops.py --only matmul``,
``benchmarks/weight_stream.py``).

A variant that copied row pieces (16-64 rows x 512-2048 bytes a stage, for the tensor cores at
M <= 16) was measured and dropped: 0.94-1.00x cuBLAS at M = 1 and 0.66-0.76x at M = 16, never
ahead of both cuBLAS and ``gemv_tc``; it issued many short copies from rows 16 KiB apart.
"""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._matmul_rules import cuda_cc

__all__ = [
    "SLAB_CONFIGS",
    "SLAB_K",
    "SLAB_MAX_M",
    "decode_match",
    "slab_config",
    "slab_fits",
    "slab_grid",
    "slab_heuristic",
    "slab_jpr",
    "slab_match",
]

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
    return int(p.attr("K")) // (8 * int(c.values["THREADS"]))


def decode_match(
    p: Problem,
    t: Target,
    max_m: int,
    why_m: str,
    k_why: str | None,
    needs: str = "cp.async.bulk and mbarrier transactions",
) -> str | None:
    """The rules the sm_90 decode kernels share, in this order: the arch (what ``needs`` it),
    M <= ``max_m`` (``why_m`` says why), a weight [N, K], 16-bit inputs, the kernel's own rule
    for K (``k_why``: None when K suits it), operands on 16-byte boundaries."""
    cc = cuda_cc(t.arch)
    if cc is None or cc < 90:
        return f"{needs} need sm_90 or newer, not {t.arch}"
    if p.attr("M") > max_m:
        return f"M = {p.attr('M')} > {max_m} ({why_m})"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"takes float16/bfloat16, not {p.arg('x').dtype}"
    if k_why:
        return k_why
    if not p.attr("aligned16"):
        return "a or b does not start on a 16-byte boundary (bulk copies need it)"
    return None


def slab_match(p: Problem, t: Target) -> str | None:
    """None when gemv_slab can run ``p`` on ``t``, else why not."""
    k = p.attr("K")
    k_why = None if k in SLAB_K else f"K = {k} is not one of {SLAB_K} (stages of whole rows)"
    return decode_match(p, t, SLAB_MAX_M, "x's rows are held in registers", k_why)


def slab_fits(p: Problem, c: Config) -> str | None:
    """Why ``c`` is not a config gemv_slab runs correctly for ``p``, or None."""
    v = c.values
    try:
        threads, rows, skb, st, mx = (int(v[k]) for k in ("THREADS", "ROWS", "SKB", "S", "MX"))
    except KeyError as e:
        return f"config lacks {e.args[0]} (needs THREADS, ROWS, SKB, S, MX)"
    k, m = int(p.attr("K")), int(p.attr("M"))
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
    return (-(-p.attr("N") // c.values["ROWS"]) * c.threadgroup[0], 1, 1)


def slab_heuristic(p: Problem, t: Target) -> Config | None:
    """From the probe on an H100: 16 KiB stages, 3 in flight, 256 threads, 8 rows a block;
    None where the rows are too long for it (the next implementation serves)."""
    m = int(p.attr("M"))
    mx = 1 if m <= 1 else 2 if m <= 2 else 4
    for c in (slab_config(256, 8, 16, 4, mx), slab_config(256, 32, 32, 4, mx)):
        if slab_fits(p, c) is None and c.shared_memory <= t.max_shared_memory_optin_bytes:
            return c
    return None
