"""Long rows read from DRAM once (softmax, rms_norm, layer_norm): ``rows_smem`` keeps a whole
row in one block's shared memory (opt-in, up to 227 KiB on an H100: 58K float32 or 116K 16-bit
elements); ``rows_cluster`` splits a row over a thread-block cluster of CL = 2-16 blocks (sm_90),
each keeping its slice and combining the statistics through distributed shared memory. Kernel
source: ``rows/kernels/rows_smem.cuh``; configs are (BLOCK threads a block, CL blocks a row).

The register kernel (``rows``) reads a row once only while it fits its registers (at most 2048
16-byte vectors a row); beyond that it reads twice, and these take over (the heuristics below);
``rows`` stays in the configs the tuner weighs, where L2 holds the second read anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._api import kernel
from .._records import Problem, Target
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from ._common import empty, one_output_launch, run_prepared, vec_width
from ._kernel_files import source
from ._rowops import layouts, rows_apart

__all__ = [
    "CLUSTER_SIZES",
    "KERNELS",
    "REGISTER_VECTORS",
    "block_refusal",
    "register",
    "room",
    "slice_bytes",
]

HEADER = source("rows", "rows", "softmax", "rows_smem")  # the row helpers, softmax's, ours

REGISTER_VECTORS = 2048  # the longest row (in 16-byte vectors) ``rows`` keeps in registers
CLUSTER_SIZES = (2, 3, 4, 6, 8, 16)  # a kernel each (the cluster shape is a kernel attribute)
# the sizes the heuristic picks from: 16 (a non-portable size) is listed for the tuner and
# ``kernelkit.force``, and taken where a table row measured it ahead
HEURISTIC_SIZES = (2, 3, 4, 6, 8)
BLOCKS = (256, 512, 1024)
STATIC_SHARED = 1024  # bytes: the kernel's own arrays (268) and the runtime's reserve per block
SHARED_LIMIT = 227 * 1024  # the most any target offers a block (sm_90); match checks the target's
FEW_ROWS = 32  # a power of two: the op's key buckets rows to the next one
WANT_SLICE = 64 * 1024  # bytes a block: three blocks an SM on an H100 overlap loads and stores
KERNELS: dict[str, dict[int, Any]] = {}  # op name -> cluster size -> kernel (1: rows_smem)
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
_KIND = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}
_ARGS = {
    "softmax": "(xr, y, (const T*)0, (const T*)0, 0.0f, r, n)",
    "rms_norm": "(xr, y, w, w, eps, r, n)",
    "layer_norm": "(xr, y, w, b, eps, r, n)",
}

_BODY = source("rows", "long_row_body")  # ARGS, KIND, EXTRA_ALIGN filled per op


def config(block: int, cl: int) -> Config:
    """BLOCK threads a block, CL blocks a row."""
    return Config({"BLOCK": block, "CL": cl}, (block,))


SMEM_CONFIGS = tuple(config(b, 1) for b in BLOCKS)
# every (BLOCK, CL) but 1024 threads in clusters of 16: with layer_norm's old combine (three
# floats a rank a thread) no more than 640-768 of its threads launched on an H200, and the
# sweeps never found it best for the other ops; not re-timed since the lane combine
CLUSTER_CONFIGS = tuple(
    config(b, cl) for cl in CLUSTER_SIZES for b in BLOCKS if (b, cl) != (1024, 16)
)


def slice_bytes(n: int, cl: int, dtype: str) -> int:
    """Shared memory of one block holding its slice of a row of ``n`` (kk_long_slice)."""
    vec = vec_width(dtype)
    per = -(-n // cl)
    return -(-per // vec) * vec * _ITEMSIZE[dtype]


def _dims(p: Problem) -> tuple[int, int, str]:
    return int(p.attr("N")), int(p.attr("rows")), p.arg("x").dtype


def _cl(c: Config) -> int:
    return int(c.values.get("CL", 1))


def room(t: Target) -> int:
    """Dynamic shared memory a block may hold a slice in on ``t``."""
    return min(t.max_shared_memory_optin_bytes, SHARED_LIMIT) - STATIC_SHARED


def _match(clusters: bool) -> Callable[[Problem, Target], str | None]:
    def match(p: Problem, t: Target) -> str | None:
        n, rows, dtype = _dims(p)
        if dtype not in _ITEMSIZE:
            return f"dtype {dtype} is not one of float16, bfloat16, float32"
        cl = CLUSTER_SIZES[-1] if clusters else 1
        if slice_bytes(n, cl, dtype) > room(t):
            return f"a row of {n} {dtype} elements does not fit {cl} block(s) of shared memory"
        if rows * cl > 2**31 - 1:
            return f"{rows} rows x {cl} blocks is more blocks than a grid has"
        return None

    return match


def block_refusal(c: Config) -> str | None:
    """Why ``c``'s BLOCK (one dimension of threads, a whole number of warps) cannot run, or None."""
    block = int(c.values["BLOCK"])
    if block % 32 or not 32 <= block <= 1024 or tuple(c.threadgroup) != (block, 1, 1):
        return f"BLOCK = {block} with threadgroup {c.threadgroup}: a multiple of 32 up to 1024"
    return None


def fits(p: Problem, c: Config) -> str | None:
    """The slice must fit a block's shared memory (227 KiB at most; match checks the target)."""
    n, _, dtype = _dims(p)
    cl = _cl(c)
    refused = block_refusal(c)
    if refused:
        return refused
    if cl != 1 and cl not in CLUSTER_SIZES:
        return f"CL = {cl} is not one of {(1, *CLUSTER_SIZES)}"
    need = slice_bytes(n, cl, dtype)
    if need > SHARED_LIMIT - STATIC_SHARED:
        return f"a slice of {need} bytes (a row of {n} over {cl} block(s)) > {SHARED_LIMIT}"
    return None


def want_cluster(p: Problem, t: Target) -> int | None:
    """The blocks a row the heuristics give ``p`` (1: one block), or None where the register
    kernel keeps the row (it reads it once) or nothing fits. The smallest cluster whose slices
    are at most WANT_SLICE (several blocks an SM, so that one block's loads overlap another's
    stores), else the largest that fits; the largest for at most FEW_ROWS rows."""
    n, rows, dtype = _dims(p)
    if -(-n // vec_width(dtype)) <= REGISTER_VECTORS:
        return None
    # an emulated cluster's blocks take turns on one core (the CPU backend): slower there than
    # the register kernel's two reads, so clusters only where forced
    emulated = "cpu" in t.features
    sizes = (1, *HEURISTIC_SIZES) if "clusters" in t.features and not emulated else (1,)
    ok = [cl for cl in sizes if slice_bytes(n, cl, dtype) <= room(t)]
    if not ok:
        return None
    if rows <= FEW_ROWS:  # fewer blocks than SMs: each row over as many SMs as a cluster has
        return ok[-1]
    return next((cl for cl in ok if slice_bytes(n, cl, dtype) <= WANT_SLICE), ok[-1])


def _heuristic(clusters: bool) -> Callable[[Problem, Target], Config | None]:
    def heuristic(p: Problem, t: Target) -> Config | None:
        cl = want_cluster(p, t)
        if cl is None or (cl > 1) != clusters:
            return None
        n, _, dtype = _dims(p)
        # one block an SM (the largest slices): as many threads as a block has, for loads in flight
        return config(1024 if slice_bytes(n, cl, dtype) > 110 * 1024 else 512, cl)

    return heuristic


def grid(p: Problem, c: Config) -> tuple[int, int, int]:
    """CL blocks of BLOCK threads a row."""
    return (max(1, int(p.attr("rows"))) * _cl(c) * int(c.values["BLOCK"]), 1, 1)


def _kernels(name: str, inputs: Sequence[str], aligned: tuple[str, ...]) -> dict[int, Any]:
    extra = "".join(f" && kk_aligned16({a})" for a in aligned)
    body = (
        _BODY.replace(" EXTRA_ALIGN", extra)
        .replace("KIND", str(_KIND[name]))
        .replace("ARGS", _ARGS[name])
    )
    return {
        cl: layouts(kernel(
            f"ops_{name}_{'smem' if cl == 1 else f'cluster{cl}'}", list(inputs), ["y"], body,
            header=HEADER, cluster_dims=cl if cl > 1 else None,
        ))
        for cl in (1, *CLUSTER_SIZES)
    }  # fmt: skip


def register(
    op: Op,
    name: str,
    inputs: Sequence[str],
    template: Callable[[Problem], Any],
    aligned: tuple[str, ...] = (),
) -> None:
    """Register ``rows_smem`` and ``rows_cluster`` on the row op ``op`` (``name``: softmax,
    rms_norm or layer_norm; ``template(problem)``: its dtype template values)."""
    kernels = KERNELS[name] = _kernels(name, inputs, aligned)

    def prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
        """``launch(arrays, out)`` with the kernel, template, geometry and output fixed once."""
        shape, dtype = problem.arg("x").shape, problem.arg("x").dtype
        if problem.attr("rows") == 0 or problem.attr("N") == 0:  # nothing to launch
            return lambda arrays, out: out if out is not None else empty(arrays[0], shape)
        cl = _cl(choice.config)
        values = dict(template(problem))
        kw: dict[str, Any] = {
            "grid": choice.grid,
            "threadgroup": choice.config.threadgroup,
            "template": (
                ("BLOCK", choice.config.values["BLOCK"]),
                ("CL", cl),
                ("ND", len(shape)),
                ("T", dtype),
                ("WT", values.get("WT", dtype)),
                ("XS", xs := rows_apart(problem)),
            ),
            "shared_memory": slice_bytes(int(problem.attr("N")), cl, dtype),
        }
        return one_output_launch(kernels[cl][xs], kw, shape, output_dtype)

    run = run_prepared(prepare)
    for impl, configs, clusters in (
        ("rows_cluster", CLUSTER_CONFIGS, True),
        ("rows_smem", SMEM_CONFIGS, False),
    ):
        op.register(
            Implementation(
                impl,
                run=run,
                prepare=prepare,
                grid=grid,
                configs=configs,
                default=configs[1],
                heuristic=_heuristic(clusters),
                requires=frozenset({"clusters"}) if clusters else frozenset(),
                match=_match(clusters),
                fits=fits,
                priority=1,  # asked before ``rows``: their heuristics step aside for short rows
            )
        )
