"""``matmul``'s whole-row decode kernel on the tensor cores, sm_90 (``gemv_slab_tc``): M <= 16,
float16/bfloat16, weight [N, K] with K a divisor of 32768. Its configs and the rules the
selection stage asks (match, fits, grid, heuristic); the kernel is ``matmul/kernels/slab_tc.cuh``.

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
from ._matmul_slab import decode_match

__all__ = [
    "SLAB_TC_CONFIGS",
    "slab_tc_config",
    "slab_tc_fits",
    "slab_tc_grid",
    "slab_tc_heuristic",
    "slab_tc_jw",
    "slab_tc_match",
    "slab_tc_static_bytes",
]


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
    does (the next implementation serves). At M = 1 on sm_90 the rules run gemv instead
    (``_matmul_rules.gemv_first``)."""
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
