"""``matmul``: ``a @ b`` (``b`` as [K, N]) or ``a @ b.T`` (``transpose_b=True``: a linear layer's
weight [N, K]), with bias and activation fused, through the selection stage.

Implementations (see ``_matmul_kernels``): ``gemv`` for decode shapes (M <= 16, weight [N, K]),
``gemv_tc`` for the same on the tensor cores (sm_80+, float16/bfloat16), ``gemv_slab``
(``_matmul_slab``): M <= 4 on sm_90, whole weight rows moved by the TMA unit's bulk copies,
``gemv_slab_tc`` (``_matmul_slab_tc``): M <= 16 on sm_90, the same rows on the tensor cores,
``gemv_cluster`` (``_matmul_cluster``): M <= 16 on sm_90, K split over a thread-block cluster and
reduced through distributed shared memory, ``tiled`` for everything (any backend, the CPU too),
``mma`` (``_matmul_mma``): tensor cores on sm_80+ for float16/bfloat16, ``wgmma``
(``_matmul_wgmma``): Hopper warpgroup MMA tiles (sm_90a), ``midm`` (``_matmul_midm``): M of
tens to hundreds on the tensor cores (sm_80+), the weight streamed once, K split over a cluster
(sm_90), and the library routes (``_matmul_library``): ``framework`` (torch's cuBLAS for torch
tensors) and ``vendor`` (cuBLASLt through nvmath-python for CuPy and other CUDA arrays,
``jnp.matmul`` for JAX arrays).

Selection (``_select.select``): the ``framework`` microkernel matches torch CUDA tensors and wins
there (microkernels come before heuristics); otherwise the generic implementations' heuristics
are asked by priority: ``gemv_slab_tc`` (M <= 16 on sm_90), ``gemv_slab`` (M <= 4),
``gemv_cluster`` (M <= 16 on sm_90), ``gemv_tc``
and ``gemv`` (M <= 16), ``wgmma`` (M > 16 on sm_90), ``mma`` (5: M > 16 on sm_80+), ``midm``
(3: never reached while mma matches; tables, tuning and force name it), then ``tiled``'s
default. A table, the tuning database or ``kernelkit.force`` can name any of them for
torch tensors too (the H100 and H200 tables pick ``gemv_slab``, ``gemv_slab_tc`` or
``gemv_cluster`` for the decode rows where they beat cuBLAS). ``vendor`` runs only where a
table, the tuning database or ``kernelkit.force`` names it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _config
from .._api import kernel
from .._arrays.lookup import adapter_for
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from .._select.select import Selection
from .._tensor_map import tensor_map
from . import _matmul_cluster as CLU
from . import _matmul_kernels as K
from . import _matmul_library as LIB
from . import _matmul_midm as MID
from . import _matmul_mma as MMA
from . import _matmul_slab as SLAB
from . import _matmul_slab_tc as STC
from . import _matmul_wgmma as WG
from ._common import OpRunner, empty, one_output_launch, run_prepared
from ._matmul_args import ACTIVATIONS, check_out
from ._matmul_args import prepare as _prepare
from ._prepared import FORCED, SIGNERS, routed, signature, store

__all__ = ["matmul"]

DTYPES = ("float16", "bfloat16", "float32")
GEMV_MAX_M = 16

_INPUTS = ["x", "w", "bias"]
# At most 64 registers a thread (4 blocks of 256 threads per SM): a profile of the 8192 x 8192,
# M = 1 case showed 96 registers capping occupancy at 25% and DRAM throughput at 78%.
_GEMV = kernel(
    "ops_matmul_gemv", _INPUTS, ["y"], K.GEMV_BODY, header=K.GEMV,
    optional_inputs={"bias": "float32"}, launch_bounds=(256, 4),
)  # fmt: skip
_GEMV_TC = kernel(
    "ops_matmul_gemv_tc", _INPUTS, ["y"], K.GEMV_TC_BODY, header=K.GEMV_TC,
    optional_inputs={"bias": "float32"}, launch_bounds=(256, 2),
)  # fmt: skip
_GEMV_SLAB = kernel(
    "ops_matmul_gemv_slab", _INPUTS, ["y"], SLAB.SLAB_BODY, header=SLAB.SLAB,
    optional_inputs={"bias": "float32"},
)  # fmt: skip
_GEMV_SLAB_TC = kernel(
    "ops_matmul_gemv_slab_tc", _INPUTS, ["y"], STC.SLAB_TC_BODY, header=STC.SLAB_TC,
    optional_inputs={"bias": "float32"},
)  # fmt: skip


def _per_cluster_size(
    name: str, body: str, header: str, sizes: tuple[int, ...], threads: int, **kw: Any
) -> dict[int, Any]:
    """One kernel per cluster size (the cluster shape is a kernel attribute), named
    ``name`` + size, with at most ``threads`` threads a block (one block an SM)."""
    return {
        n: kernel(
            f"{name}{n}", _INPUTS, ["y"], body, header=header,
            optional_inputs={"bias": "float32"}, launch_bounds=(threads, 1),
            cluster_dims=n if n > 1 else None, **kw,
        )
        for n in sizes
    }  # fmt: skip


# 512 threads may use 128 registers each; wgmma: at most two warpgroups (and one copying), sm_90a
_GEMV_CLUSTER = _per_cluster_size(
    "ops_matmul_gemv_cluster", CLU.CLUSTER_BODY, CLU.CLUSTER, CLU.CLUSTER_SIZES, 512
)
_WGMMA = {
    ws: _per_cluster_size(
        f"ops_matmul_wgmma{'_ws' * ws}", WG.WGMMA_BODY, WG.WGMMA, WG.SPLITS, 256 + 128 * ws,
        arch_specific=True,
    )
    for ws in (0, 1)
}  # fmt: skip
_WGMMA[2] = {  # WS = 2: x and w also as tensor maps (TMA)
    n: kernel(
        f"ops_matmul_wgmma_tma{n}", ["x", "w", "x_map", "w_map", "bias"], ["y"],
        WG.WGMMA_TMA_BODY, header=WG.WGMMA, optional_inputs={"bias": "float32"},
        launch_bounds=(WG.threads(2, 2), 1), cluster_dims=n if n > 1 else None,
        arch_specific=True,
    )
    for n in WG.SPLITS
}  # fmt: skip

# midm: one kernel per cluster size (SPLIT), at most 256 threads a block
_MIDM = _per_cluster_size("ops_matmul_midm", MID.MIDM_BODY, MID.MIDM, MID.SPLITS, 256)

_TILED = kernel(
    "ops_matmul_tiled", _INPUTS, ["y"], K.TILED_BODY, header=K.TILED,
    optional_inputs={"bias": "float32"},
)  # fmt: skip
_MMA = kernel(
    "ops_matmul_mma", _INPUTS, ["y"], MMA.MMA_BODY, header=MMA.MMA,
    optional_inputs={"bias": "float32"},
)  # fmt: skip


def _common_template(problem: Problem) -> list[tuple[str, Any]]:
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
            + tuple(_common_template(problem))
            + tuple(extra(problem, choice.config)),
            "shared_memory": choice.config.shared_memory or None,
        }
        kern = k if which is None else which(problem, choice.config)
        return one_output_launch(kern, kw, (problem.attr("M"), problem.attr("N")), output_dtype)

    return run_prepared(prepare), prepare


# --- gemv --------------------------------------------------------------------------------------

GEMV_CONFIGS = tuple(
    Config({"ROWS": r, "WARPS": w, "U": u}, (32 * w,))
    for r in (1, 2, 4, 8)
    for w in (2, 4, 8)
    for u in (1, 2, 4)
)


def _gemv_match(p: Problem, t: Target) -> str | None:
    if p.attr("M") > GEMV_MAX_M:
        return f"M = {p.attr('M')} > {GEMV_MAX_M}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    vec = 16 // {"float16": 2, "bfloat16": 2, "float32": 4}[p.arg("x").dtype]
    if p.attr("K") % vec:
        return f"K = {p.attr('K')} is not a multiple of {vec} (16-byte rows)"
    return None


def _gemv_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    blocks = -(-p.attr("N") // c.values["ROWS"])
    return (blocks * c.threadgroup[0], 1, 1)


def _gemv_heuristic(p: Problem, t: Target) -> Config:
    # from a sweep of the 36 configs on an H100 (benchmarks/ops.py --only matmul --sweep): M = 1
    # streams best with 8 warps on 4 rows; up to 8 rows of x, 8 rows per block reuse each x
    # vector; beyond, x's traffic from L2 dominates and one row per block is best
    m = p.attr("M")
    if m == 1:
        return Config({"ROWS": 4, "WARPS": 8, "U": 2}, (256,))
    if m <= 8:
        return Config({"ROWS": 8, "WARPS": 4, "U": 1}, (128,))
    return Config({"ROWS": 1, "WARPS": 4, "U": 2}, (128,))


_gemv_run, _gemv_prepare = _kernel_impl(_GEMV, lambda p, c: [("M", p.attr("M"))])


# --- gemv on the tensor cores -------------------------------------------------------------------


def _gemv_tc_config(nt: int, warps: int, u: int, stages: int) -> Config:
    ring = warps * stages * (nt + 2) * 512  # per warp and stage: NT weight + 2 x words per lane
    return Config({"NT": nt, "WARPS": warps, "U": u, "STAGES": stages}, (32 * warps,), ring)


GEMV_TC_CONFIGS = tuple(
    _gemv_tc_config(nt, w, u, 0) for nt in (1, 2, 4) for w in (4, 8) for u in (1, 2, 4)
) + tuple(_gemv_tc_config(nt, w, 1, st) for nt in (1, 2, 4) for w in (4, 8) for st in (4, 8))


def _gemv_tc_match(p: Problem, t: Target) -> str | None:
    if p.attr("M") > GEMV_MAX_M:
        return f"M = {p.attr('M')} > {GEMV_MAX_M}"
    if not p.attr("transpose_b"):
        return "needs the weight as [N, K] (transpose_b=True)"
    if p.arg("x").dtype not in ("float16", "bfloat16"):
        return f"tensor cores take float16/bfloat16, not {p.arg('x').dtype}"
    if p.attr("K") % 8:
        return f"K = {p.attr('K')} is not a multiple of 8 (16-byte rows)"
    return None


def _gemv_tc_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    blocks = -(-p.attr("N") // (8 * c.values["NT"]))
    return (blocks * c.threadgroup[0], 1, 1)


def _gemv_tc_heuristic(p: Problem, t: Target) -> Config:
    # from a sweep of the 30 configs on an H100 (benchmarks/ops.py --only matmul --sweep): with
    # N >= 8192, 4 n-tiles per warp, 8 warps and 2 steps of loads in flight were within 3% of
    # the best at M = 1-16; narrower tiles keep every SM busy when N is smaller
    n = p.attr("N")
    nt = 4 if n >= 8192 else 2 if n >= 2048 else 1
    return _gemv_tc_config(nt, 8, 2, 0)


_gemv_tc_run, _gemv_tc_prepare = _kernel_impl(
    _GEMV_TC, lambda p, c: [("MT", 1 if p.attr("M") <= 8 else 2)]
)


# --- gemv on whole rows moved by the TMA unit (sm_90; source and rules in _matmul_slab) -------

_gemv_slab_run, _gemv_slab_prepare = _kernel_impl(
    _GEMV_SLAB, lambda p, c: [("JPR", SLAB.slab_jpr(p, c))]
)
_gemv_slab_tc_run, _gemv_slab_tc_prepare = _kernel_impl(
    _GEMV_SLAB_TC, lambda p, c: [("JW", STC.slab_tc_jw(p, c))]
)


# --- gemv on the tensor cores, K split over a cluster (sm_90; source and rules in _matmul_cluster)

_gemv_cluster_run, _gemv_cluster_prepare = _kernel_impl(
    None, CLU.cluster_template, lambda p, c: _GEMV_CLUSTER[CLU.cluster_size(p, c)]
)


# --- Hopper warpgroup MMA tiles (sm_90a; source and rules in _matmul_wgmma) -------------------

_wgmma_copy_prepare = _kernel_impl(
    None, lambda p, c: [], lambda p, c: _WGMMA[int(c.values["WS"])][int(c.values["SPLIT"])]
)[1]


def _wgmma_prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
    """WS = 0, 1 launch on (x, w, bias); WS = 2 also on tensor maps of x and w (their boxes: a
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


# --- tiled -------------------------------------------------------------------------------------

TILED_CONFIGS = tuple(
    Config({"BM": bm, "BN": bn, "BK": 16, "TM": tm, "TN": tn}, ((bm // tm) * (bn // tn),))
    for bm, bn, tm, tn in ((64, 64, 4, 4), (32, 32, 2, 2), (128, 64, 8, 4), (16, 64, 1, 4))
)


def _tiled_grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """Every BM x BN tile on grid.x (the kernel splits the index; grid.y stops at 65535)."""
    v = c.values
    tiles = -(-p.attr("N") // v["BN"]) * -(-p.attr("M") // v["BM"])
    return (tiles * c.threadgroup[0], 1, 1)


_tiled_run, _tiled_prepare = _kernel_impl(
    _TILED, lambda p, c: [("W_KN", not p.attr("transpose_b"))]
)


# --- mma (tensor cores, sm_80+; rules and source in _matmul_mma) --------------------------------


_mma_run, _mma_prepare = _kernel_impl(_MMA, lambda p, c: [("W_KN", not p.attr("transpose_b"))])


# --- midm (tensor cores, M of tens to hundreds, K split over a cluster; rules in _matmul_midm)

_midm_run, _midm_prepare = _kernel_impl(
    None,
    lambda p, c: [("W_KN", not p.attr("transpose_b"))],
    lambda p, c: _MIDM[int(c.values["SPLIT"])],
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
        grid=_gemv_grid,
        configs=GEMV_CONFIGS,
        default=Config({"ROWS": 2, "WARPS": 4, "U": 2}, (128,)),
        heuristic=_gemv_heuristic,
        match=_gemv_match,
        priority=10,
    )
)
OP.register(
    Implementation(
        "gemv_tc",
        run=_gemv_tc_run,
        prepare=_gemv_tc_prepare,
        grid=_gemv_tc_grid,
        configs=GEMV_TC_CONFIGS,
        default=_gemv_tc_config(2, 8, 2, 0),
        heuristic=_gemv_tc_heuristic,
        requires={"mma_sync"},
        match=_gemv_tc_match,
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
        fits=STC.slab_tc_fits,
        priority=35,  # M <= 16 on sm_90, whole rows: first (tables pick gemv_slab at M = 1)
    )
)
OP.register(
    Implementation(
        "gemv_cluster",
        run=_gemv_cluster_run,
        prepare=_gemv_cluster_prepare,
        grid=CLU.cluster_grid,
        configs=CLU.CLUSTER_CONFIGS,
        default=CLU.cluster_config(16, 64, 2048, 3),
        heuristic=CLU.cluster_heuristic,
        requires={"tma", "clusters", "mma_sync"},
        match=CLU.cluster_match,
        fits=CLU.cluster_fits,
        priority=25,  # M <= 16 on sm_90: after gemv_slab (M <= 4), before gemv_tc
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
        grid=_tiled_grid,
        configs=TILED_CONFIGS,
        default=TILED_CONFIGS[0],
    )
)


def _attrs(problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
    x, w = problem.arg("x"), problem.arg("w")
    transpose_b = options["transpose_b"]
    n = w.shape[0] if transpose_b else w.shape[1]
    return {"M": x.shape[0], "K": x.shape[1], "N": n, **options}


# out= is never safely an input: other blocks still read the row it overwrites
_RUNNER = OpRunner(OP, _GEMV.spec, _attrs, in_place=False, names=("a", "b", "bias"))


def matmul(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    transpose_b: bool = False,
    out: Any = None,
) -> Any:
    """``activation(a @ b + bias)`` (``b`` [K, N]), or with ``transpose_b=True`` ``a @ b.T`` for
    a linear layer's weight ``b`` [N, K]; ``a`` [M, K] or batched [B, S, K]; float16, bfloat16
    (float32 accumulation) or float32; ``activation`` None, "relu", "silu" or "gelu".

    Example::

        >>> import numpy as np
        >>> from kernelkit import ops
        >>> a, w = np.ones((2, 8), np.float32), np.full((3, 8), 0.5, np.float32)
        >>> ops.matmul(a, w, transpose_b=True).tolist()
        [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]
    """
    sign = SIGNERS.get(a.__class__)
    if sign is not None:
        try:
            run = _TABLE[
                sign((a, b, bias, out)), activation, transpose_b, transpose_b.__class__,
                OP.generation, FORCED.get(), _config.config.select_force,
            ]  # fmt: skip
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            return run(a, b, bias, out)
    return _first(a, b, bias, activation, transpose_b, out, True)


# (signature, activation, transpose_b, its class, generation, forced) -> run(a, b, bias, out)
_TABLE: dict[Any, Any] = {}
# the same for the torch op's own calls: a signature kept there was never asked of the
# integrations (it may need autograd), so the public op never looks it up
_EAGER: dict[Any, Any] = {}


def eager_matmul(
    a: Any, b: Any, bias: Any, activation: str | None, transpose_b: bool, out: Any
) -> Any:
    """``matmul`` without the integrations (what the torch op runs): the same prepared call."""
    sign = SIGNERS.get(a.__class__)
    if sign is not None:
        try:
            run = _EAGER[
                sign((a, b, bias, out)), activation, transpose_b, transpose_b.__class__,
                OP.generation, FORCED.get(), _config.config.select_force,
            ]  # fmt: skip
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            return run(a, b, bias, out)
    return _first(a, b, bias, activation, transpose_b, out, False)


def _first(
    a: Any, b: Any, bias: Any, activation: Any, transpose_b: Any, out: Any, route: bool
) -> Any:
    """A call of a new signature: validate, ask the integrations (``route``), prepare, run."""
    x, lead, n, options = _prepare(a, b, bias, activation, transpose_b)
    if route:
        arrays = (a, b) if bias is None else (a, b, bias)
        result = routed("matmul", arrays, (a, b, bias, activation, transpose_b), out)
        if result is not NotImplemented:
            return result
    if out is not None:
        check_out(out, (*lead, n))
    run = _prepared_run(lead, n, x.shape[1], options, options["aligned16"] is not None, a, b)
    key = signature((a, b, bias, out))
    if key is not None and transpose_b.__class__ is bool:
        key = (key, activation, transpose_b, bool, OP.generation, FORCED.get(),
               _config.config.select_force)  # fmt: skip
        store(_TABLE if route else _EAGER, key, run)
    return run(a, b, bias, out)


def _prepared_run(
    lead: tuple, n: int, k: int, options: dict[str, Any], mma_dtype: bool, a: Any, b: Any
) -> Callable[[Any, Any, Any, Any], Any]:
    """``run(a, b, bias, out)`` for one signature: the flattening fixed, the 16-byte alignment
    of x and w (which selects among kernels, and no signature holds) read per call from the
    pointers, and a run per alignment prepared by the runner on first use."""
    three_d = len(lead) == 2
    rows = lead[0] * lead[1] if three_d else lead[0]
    if rows == 0 or n == 0:  # no elements: nothing to launch

        def run_empty(a: Any, b: Any, bias: Any, out: Any) -> Any:
            return out if out is not None else empty(a, (*lead, n))

        return run_empty
    ptr_x, ptr_w = adapter_for(a, "a").pointer, adapter_for(b, "b").pointer
    runs: dict[Any, Any] = {}

    def run(a: Any, b: Any, bias: Any, out: Any) -> Any:
        x = a.reshape(rows, k) if three_d else a
        flat_out = out.reshape(rows, n) if out is not None and three_d else out
        aligned = not ((ptr_x(x) | ptr_w(b)) & 15) if mma_dtype else None
        launch = runs.get(aligned)
        if launch is None:
            opts = {**options, "aligned16": aligned}
            y, runs[aligned] = _RUNNER.first([x, b, bias], x.dtype, flat_out, opts)
        else:
            y = launch([x, b, bias], flat_out)
        if out is not None:
            return out
        return y.reshape(*lead, n) if three_d else y

    return run


def _explain(
    a: Any, b: Any, *, bias: Any = None, activation: str | None = None, transpose_b: bool = False
) -> Selection:
    """The choice ``matmul`` makes for these arguments, and why."""
    x, _, _, options = _prepare(a, b, bias, activation, transpose_b)
    if options["aligned16"] is not None:
        options["aligned16"] = MMA.aligned16(x, b)
    return _RUNNER.explain([x, b, bias], x.dtype, None, options)


def routes(
    a: Any, b: Any, bias: Any = None, activation: str | None = None, transpose_b: bool = False
) -> frozenset[str]:
    """The implementations (``"framework"``, ``"gemv"``, ...) that ``matmul`` chooses for
    arguments like these over every 16-byte alignment of their pointers, which it reads per
    call (here none is read: for tracers, whose arrays have no data)."""
    x, _, _, options = _prepare(a, b, bias, activation, transpose_b)
    aligns = (None,) if options["aligned16"] is None else (False, True)
    return frozenset(
        _RUNNER.explain(
            [x, b, bias], x.dtype, None, {**options, "aligned16": al}
        ).choice.impl.split("/")[-1]
        for al in aligns
    )


matmul.explain = _explain  # type: ignore[attr-defined]
