"""``matmul``'s kernels and their registration: the C++ of each kernel (files of
``matmul/kernels``, joined in a fixed order), the kernel objects, how each implementation
launches its kernel (``prepare``), and the implementations registered on ``OP`` with the rules
of ``_matmul_rules`` and the per-kernel rules modules. The public op is ``_matmul.matmul``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._api import kernel
from .._arrays.lookup import adapter_for
from .._records import Problem
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from .._tensor_map import tensor_map
from . import _matmul_library as LIB
from . import _matmul_midm as MID
from . import _matmul_mma as MMA
from . import _matmul_rules as R
from . import _matmul_slab as SLAB
from . import _matmul_slab_tc as STC
from . import _matmul_wgmma as WG
from ._common import one_output_launch, run_prepared
from ._kernel_files import source
from ._matmul_args import ACTIVATIONS

__all__ = [
    "GEMV_KERNEL", "GEMV_TC_KERNEL", "MIDM_KERNELS", "MMA_KERNEL", "OP",
    "SLAB_KERNEL", "SLAB_TC_KERNEL", "TILED_KERNEL", "WGMMA_KERNELS", "common_template",
]  # fmt: skip

# --- the C++ (matmul/kernels/*.cuh) ------------------------------------------------------------
# Each header is its files in order: the epilogue (bias and activation, in float) first; then
# the PTX helpers a kernel uses (mma_ptx: mma.sync, cp.async and ldmatrix, sm_80+, what the CPU
# emulation tests replace; tc_step: one 32-wide step of K on the tensor cores, gemv_tc's and
# the whole-row kernels' inner step; bulk_ptx: cp.async.bulk completing on an mbarrier, sm_90;
# slab_ring: the whole-row kernels' ring; cluster_ptx: distributed shared memory); the kernel.

GEMV = source("matmul", "epilogue", "gemv")
GEMV_BODY = source("matmul", "gemv_body")
TILED = source("matmul", "epilogue", "tiled")
TILED_BODY = source("matmul", "tiled_body")
# gemv_tc: decode shapes (M <= 16) on the tensor cores, sm_80+, float16/bfloat16, weight
# [N, K]. Reading the weight once is still the whole cost; the tensor cores only take the
# arithmetic off the FMA pipes, which is what limits the FMA GEMV at M = 8-16 (each weight
# element feeds M multiply-adds). Each warp computes a 16 x 8*NT tile of y over its slice of K
# with mma.sync.m16n8k16 (rows of x past M are zeros), and loads both operands straight from
# global memory with 16-byte loads, no shared-memory staging:
#
#   Lane t (g = t / 4, q = t % 4) loads 8 consecutive k of each row it needs, at k0 + 8q of a
#   32-wide step of K: the weight row n0 + 8j + g (one per n-tile j), and x rows g and g + 8.
#   m16n8k16 wants lane t to hold k = 2q, 2q+1 (first register) and 2q+8, 2q+9 (second) of its
#   rows; a dot product does not care in which order k is summed as long as both operands use
#   the same order, so the 16 k of mma step s in {0, 1} are taken to be the loaded
#   k0 + 8q + 4s + {0, 1} (as 2q, 2q+1) and k0 + 8q + 4s + {2, 3} (as 2q+8, 2q+9): 32-bit words
#   2s and 2s+1 of each 16-byte load are the registers as they are, for A and B alike.
#   Accumulator c of n-tile j holds y[g][n0+8j+2q+{0,1}] (c0, c1), y[g+8][...] (c2, c3).
#
# With STAGES > 0 the loads go through a cp.async ring in shared memory (many more bytes in flight
# per SM than registers can hold), else straight into registers, U steps at a time.
# The block's WARPS warps split K, and their tiles are summed in shared memory in a fixed order:
# deterministic, no atomics. A tail of K (K % 32) is loaded as zeros (K % 8 == 0: match rule).
#
GEMV_TC = source("matmul", "epilogue", "mma_ptx", "tc_step", "gemv_tc")
GEMV_TC_BODY = source("matmul", "gemv_tc_body")
# mma_notes: the thread/fragment mapping, pipeline and swizzle of mma.cuh (read it first)
MMA_HEADER = source("matmul", "epilogue", "mma_notes", "mma_ptx", "mma")
MMA_BODY = source("matmul", "mma_body")
SLAB_HEADER = source("matmul", "epilogue", "mma_ptx", "bulk_ptx", "slab_ring", "slab")
SLAB_BODY = source("matmul", "slab_body")
SLAB_TC = source("matmul", "epilogue", "mma_ptx", "tc_step", "bulk_ptx", "slab_ring", "slab_tc")
SLAB_TC_BODY = source("matmul", "slab_tc_body")
# wgmma_copies: the stage copies (CPU-testable); the bodies: cp.async (WS = 1) and TMA (WS = 2:
# x and w also come as tensor maps, made by the op per call)
WGMMA_HEADER = source(
    "matmul", "epilogue", "mma_ptx", "bulk_ptx", "cluster_ptx", "wgmma_ptx", "wgmma_copies", "wgmma"
)
WGMMA_BODY = source("matmul", "wgmma_body")
# midm: mma.cuh's copies and swizzle, then midm_cluster.cuh (what the CPU emulation replaces)
MIDM_HEADER = source("matmul", "epilogue", "mma_ptx", "mma", "midm_cluster", "midm")
MIDM_BODY = source("matmul", "midm_body")
WGMMA_TMA_BODY = source("matmul", "wgmma_tma_body")


# --- the kernels -------------------------------------------------------------------------------

_INPUTS = ["x", "w", "bias"]


def _matmul_kernel(
    name: str, body: str, header: str, inputs: list[str] = _INPUTS, **kw: Any
) -> Any:
    """A matmul kernel: ``inputs`` (x, w and an optional float32 bias by default) to one ``y``."""
    return kernel(name, inputs, ["y"], body, header=header, optional_inputs={"bias": "float32"},
                  **kw)  # fmt: skip


# At most 64 registers a thread (4 blocks of 256 threads per SM): a profile of the 8192 x 8192,
# M = 1 case showed 96 registers capping occupancy at 25% and DRAM throughput at 78%.
GEMV_KERNEL = _matmul_kernel("ops_matmul_gemv", GEMV_BODY, GEMV, launch_bounds=(256, 4))
GEMV_TC_KERNEL = _matmul_kernel("ops_matmul_gemv_tc", GEMV_TC_BODY, GEMV_TC, launch_bounds=(256, 2))
SLAB_KERNEL = _matmul_kernel("ops_matmul_gemv_slab", SLAB_BODY, SLAB_HEADER)
SLAB_TC_KERNEL = _matmul_kernel("ops_matmul_gemv_slab_tc", SLAB_TC_BODY, SLAB_TC)


def _per_cluster_size(
    name: str, body: str, header: str, sizes: tuple[int, ...], threads: int, **kw: Any
) -> dict[int, Any]:
    """One kernel per cluster size (the cluster shape is a kernel attribute), named
    ``name`` + size, with at most ``threads`` threads a block (one block an SM)."""
    return {
        n: _matmul_kernel(
            f"{name}{n}", body, header, launch_bounds=(threads, 1),
            cluster_dims=n if n > 1 else None, **kw,
        )
        for n in sizes
    }  # fmt: skip


# wgmma: at most two warpgroups (and one copying), sm_90a
WGMMA_KERNELS = {
    1: _per_cluster_size(
        "ops_matmul_wgmma_ws", WGMMA_BODY, WGMMA_HEADER, WG.SPLITS, WG.threads(2, 1),
        arch_specific=True,
    ),
    2: _per_cluster_size(  # WS = 2: x and w also as tensor maps (TMA)
        "ops_matmul_wgmma_tma", WGMMA_TMA_BODY, WGMMA_HEADER, WG.SPLITS, WG.threads(2, 2),
        arch_specific=True, inputs=["x", "w", "x_map", "w_map", "bias"],
    ),
}  # fmt: skip

# midm: one kernel per cluster size (SPLIT), at most 256 threads a block
MIDM_KERNELS = _per_cluster_size("ops_matmul_midm", MIDM_BODY, MIDM_HEADER, MID.SPLITS, 256)

TILED_KERNEL = _matmul_kernel("ops_matmul_tiled", TILED_BODY, TILED)
MMA_KERNEL = _matmul_kernel("ops_matmul_mma", MMA_BODY, MMA_HEADER)


def common_template(problem: Problem) -> list[tuple[str, Any]]:
    bias = problem.attr("bias")
    return [
        ("T", problem.arg("x").dtype),
        ("TB", bias or "float32"),
        ("TY", problem.arg("x").dtype),
        ("ACT", ACTIVATIONS[problem.attr("activation")]),
        ("HAS_BIAS", bias is not None),
    ]


def _kernel_impl(
    k: Any,
    extra: Callable[[Problem, Config], list[tuple[str, Any]]],
    which: Callable[[Problem, Config], Any] | None = None,
) -> tuple[Callable[[KernelChoice, Any], Any], Callable[[KernelChoice, Problem, Any], Any]]:
    """``(run, prepare)`` of an implementation that launches kernel ``k`` (or the kernel
    ``which(problem, config)`` picks) with the common template values and ``extra(problem,
    config)``; ``prepare`` fixes all but the arrays once."""

    def prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
        kw: dict[str, Any] = {
            "grid": choice.grid,
            "threadgroup": choice.config.threadgroup,
            "template": tuple(choice.config.template)
            + tuple(common_template(problem))
            + tuple(extra(problem, choice.config)),
            "shared_memory": choice.config.shared_memory or None,
        }
        kern = k if which is None else which(problem, choice.config)
        return one_output_launch(kern, kw, (problem.attr("M"), problem.attr("N")), output_dtype)

    return run_prepared(prepare), prepare


# --- each implementation's launch --------------------------------------------------------------

_gemv_run, _gemv_prepare = _kernel_impl(GEMV_KERNEL, lambda p, c: [("M", p.attr("M"))])
_gemv_tc_run, _gemv_tc_prepare = _kernel_impl(
    GEMV_TC_KERNEL, lambda p, c: [("MT", 1 if p.attr("M") <= 8 else 2)]
)

# --- gemv on whole rows moved by the TMA unit (sm_90; source and rules in _matmul_slab) -------

_gemv_slab_run, _gemv_slab_prepare = _kernel_impl(
    SLAB_KERNEL, lambda p, c: [("JPR", SLAB.slab_jpr(p, c))]
)
_gemv_slab_tc_run, _gemv_slab_tc_prepare = _kernel_impl(
    SLAB_TC_KERNEL, lambda p, c: [("JW", STC.slab_tc_jw(p, c))]
)


# --- Hopper warpgroup MMA tiles (sm_90a; source and rules in _matmul_wgmma) -------------------

_wgmma_copy_prepare = _kernel_impl(
    None, lambda p, c: [], lambda p, c: WGMMA_KERNELS[int(c.values["WS"])][int(c.values["SPLIT"])]
)[1]


def _wgmma_prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
    """WS = 1 launches on (x, w, bias); WS = 2 also on tensor maps of x and w (their boxes: a
    k tile of 64 elements by the tile's rows of each, x's cut to M rounded up to 8 below them).
    This launch serves one signature (the arrays' shapes, strides, dtypes and device fixed), so
    the two addresses name the maps."""
    launch = _wgmma_copy_prepare(choice, problem, output_dtype)
    v = choice.config.values
    if int(v["WS"]) != 2:
        return launch
    bm, m = 64 * int(v["WG"]), int(problem.attr("M"))
    x_box, w_box = (bm if m >= bm else -(-m // 8) * 8, 64), (int(v["BN"]), 64)  # as the kernel
    maps: dict[tuple[int, int], tuple[Any, Any]] = {}

    def launch_maps(arrays: Any, out: Any) -> Any:
        x, w, bias = arrays
        ax, aw = adapter_for(x, "x"), adapter_for(w, "w")
        x = x if ax.is_contiguous(x) else ax.contiguous(x)  # the maps describe what runs
        w = w if aw.is_contiguous(w) else aw.contiguous(w)
        key = (ax.pointer(x), aw.pointer(w))
        pair = maps.get(key)
        if pair is None:
            if len(maps) >= 64:  # a decode loop's few activation buffers, not every address
                maps.clear()
            pair = maps[key] = (tensor_map(x, x_box), tensor_map(w, w_box))
        return launch((x, w, *pair, bias), out)

    return launch_maps


_wgmma_run = run_prepared(_wgmma_prepare)

_tiled_run, _tiled_prepare = _kernel_impl(
    TILED_KERNEL, lambda p, c: [("W_KN", not p.attr("transpose_b"))]
)


# --- mma (tensor cores, sm_80+; rules and source in _matmul_mma) --------------------------------


_mma_run, _mma_prepare = _kernel_impl(
    MMA_KERNEL, lambda p, c: [("W_KN", not p.attr("transpose_b"))]
)


# --- midm (tensor cores, M of tens to hundreds, K split over a cluster; rules in _matmul_midm)

_midm_run, _midm_prepare = _kernel_impl(
    None,
    lambda p, c: [("W_KN", not p.attr("transpose_b"))],
    lambda p, c: MIDM_KERNELS[int(c.values["SPLIT"])],
)


OP = Op("matmul", key=["x.dtype", "N", "K", "M:ranges(1,2,3,5,9,17,65,129,257,1025)", "transpose_b",
                       "bias", "activation", "framework", "aligned16"])  # fmt: skip
OP.register(
    Implementation(
        "framework",
        run=LIB.framework_run,
        prepare=LIB.framework_prepare,
        kind="microkernel",
        priority=10,
        match=LIB.framework_match,
        defers=R.gemv_first,  # M = 1 in 16 bits on sm_90: gemv, faster there
        pads="the framework's own kernel (cuBLAS for torch)",
    )
)
OP.register(
    Implementation(
        "vendor",
        run=LIB.vendor_run,
        prepare=LIB.vendor_prepare,
        kind="microkernel",
        match=LIB.vendor_match,
        pads=LIB.VENDOR_PADS,
        listed_only=True,  # where a table row measured it ahead of kernelkit's kernels
    )
)
OP.register(
    Implementation(
        "gemv",
        run=_gemv_run,
        prepare=_gemv_prepare,
        grid=R.gemv_grid,
        configs=R.GEMV_CONFIGS,
        default=Config({"ROWS": 2, "WARPS": 4, "U": 2}, (128,)),
        heuristic=R.gemv_heuristic,
        match=R.gemv_match,
        priority=10,
    )
)
OP.register(
    Implementation(
        "gemv_tc",
        run=_gemv_tc_run,
        prepare=_gemv_tc_prepare,
        grid=R.gemv_tc_grid,
        configs=R.GEMV_TC_CONFIGS,
        default=R.gemv_tc_config(2, 8, 2, 0),
        heuristic=R.gemv_tc_heuristic,
        requires={"mma_sync"},
        match=R.gemv_tc_match,
        defers=R.gemv_first,  # M = 1 on sm_90: gemv runs it faster
        priority=20,
    )
)
OP.register(
    Implementation(
        "gemv_slab",
        run=_gemv_slab_run,
        prepare=_gemv_slab_prepare,
        grid=SLAB.slab_grid,
        configs=SLAB.SLAB_CONFIGS,
        default=SLAB.slab_config(256, 32, 32, 3, 4),
        heuristic=SLAB.slab_heuristic,
        requires={"tma"},
        match=SLAB.slab_match,
        defers=R.gemv_first,  # M = 1 on sm_90: gemv runs it faster
        fits=SLAB.slab_fits,
        priority=30,  # M <= 4 and the K it takes: before gemv_tc
    )
)
OP.register(
    Implementation(
        "gemv_slab_tc",
        run=_gemv_slab_tc_run,
        prepare=_gemv_slab_tc_prepare,
        grid=STC.slab_tc_grid,
        configs=STC.SLAB_TC_CONFIGS,
        default=STC.slab_tc_config(16, 32, 32, 4, 2, 1),
        heuristic=STC.slab_tc_heuristic,
        requires={"tma", "mma_sync"},
        match=STC.slab_tc_match,
        defers=R.gemv_first,  # M = 1 on sm_90: gemv runs it faster
        fits=STC.slab_tc_fits,
        priority=35,  # M <= 16 on sm_90, whole rows: first (M = 1 deferred to gemv)
    )
)
OP.register(
    Implementation(
        "wgmma",
        run=_wgmma_run,
        prepare=_wgmma_prepare,
        grid=WG.wgmma_grid,
        configs=WG.WGMMA_CONFIGS,
        default=WG.wgmma_config(2, 128, 1, 6, 1, 1),
        heuristic=WG.wgmma_heuristic,
        requires={"arch_specific", "clusters", "cp_async"},
        match=WG.wgmma_match,
        fits=WG.wgmma_fits,
        priority=15,  # M > 16 on sm_90a: after the gemv kernels (M <= 16), before mma
    )
)
OP.register(
    Implementation(
        "mma",
        run=_mma_run,
        prepare=_mma_prepare,
        grid=MMA.mma_grid,
        configs=MMA.MMA_CONFIGS,
        default=MMA.MMA_CONFIGS[1],
        heuristic=MMA.mma_heuristic,
        requires={"mma_sync", "cp_async"},  # sm_80+ target features
        match=MMA.mma_match,
        fits=MMA.mma_fits,
        priority=5,  # after gemv (M <= 16), before tiled
    )
)
OP.register(
    Implementation(
        "midm",
        run=_midm_run,
        prepare=_midm_prepare,
        grid=MID.midm_grid,
        configs=MID.MIDM_CONFIGS,
        default=MID.midm_config(64, 64, 2, 2, 4, 1),
        heuristic=MID.midm_heuristic,
        requires={"mma_sync", "cp_async"},  # sm_80+; SPLIT > 1 also needs clusters (sm_90)
        match=MID.midm_match,
        fits=MID.midm_fits,
        priority=3,  # after mma, whose heuristic answers first: only tables, tuning, force
    )
)
OP.register(
    Implementation(
        "tiled",
        run=_tiled_run,
        prepare=_tiled_prepare,
        grid=R.tiled_grid,
        configs=R.TILED_CONFIGS,
        default=R.TILED_CONFIGS[0],
    )
)
