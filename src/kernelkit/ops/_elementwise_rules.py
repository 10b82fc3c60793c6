"""The rules of ``elementwise``'s two implementations (``flat``: every array contiguous with the
output's shape; ``strided``: any layout): configs, the flat path's match, the grid, and the
flat path's index type."""

from __future__ import annotations

from .._records import Problem, Target
from .._select.records import Config
from ._common import vec_width

__all__ = ["CONFIGS", "DEFAULT", "VEC_DTYPES", "flat_match", "grid", "index_type"]

VEC_DTYPES = ("float16", "bfloat16", "float32")  # the flat path's 16-byte vectors
CONFIGS = tuple(Config({"BLOCK": b}, (b,)) for b in (128, 256, 512, 1024))
DEFAULT = Config({"BLOCK": 256}, (256,))


def flat_match(p: Problem, t: Target) -> str | None:
    return None if p.attr("layout") == "flat" else "needs contiguous arrays of the output's shape"


def grid(problem: Problem, config: Config) -> tuple[int, int, int]:
    """One 16-byte vector a thread where the arrays share one dtype (the flat path; the strided
    path where its rows allow), else one element, capped: the body loops over the rest (a grid
    of idle threads costs more than the loop)."""
    block = config.values["BLOCK"]
    per_thread = 1
    dtypes = {a.dtype for a in problem.args if a.kind == "array"}
    if len(dtypes) == 1 and next(iter(dtypes)) in VEC_DTYPES:
        per_thread = vec_width(next(iter(dtypes)))
    work = -(-problem.attr("elements") // per_thread)
    blocks = min(max(1, -(-work // block)), 1 << 16)
    return (blocks * block, 1, 1)


def index_type(elements: int, grid_threads: int) -> str:
    """The flat path's index type: 32-bit only where the grid-stride loop's last step (an
    index below ``elements`` plus the grid's threads) cannot pass 2**31 - 1 either."""
    return "int32" if elements + grid_threads < 2**31 else "int64"
