"""``rows_smem`` and ``rows_cluster`` (long rows read once) without a device: which rows they
take (those the register kernel would read twice), the cluster size and block each heuristic
gives, configs refused where the slice does not fit, the fallback before sm_90; and every kernel
compiled by NVRTC for sm_90 (clusters) and sm_80 (one block a row) without spills."""

from __future__ import annotations

import dataclasses

import pytest

from kernelkit._records import ArgFacts, Problem, Target
from kernelkit._select.select import select
from kernelkit.ops import _norms, _rows_long, _softmax
from kernelkit.ops._rows_long import config

FEATURES = frozenset({"fp16", "bf16", "cp_async", "mma_sync"})
H100 = Target("cuda", 0, "sm_90", "H100", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
              49152, 232448, 32, FEATURES | {"tma", "clusters"})  # fmt: skip
A100 = dataclasses.replace(H100, arch="sm_80", name="A100", features=FEATURES,
                           max_shared_memory_optin_bytes=166912)  # fmt: skip


def problem(rows: int, n: int, dtype: str = "bfloat16") -> Problem:
    args = (ArgFacts("x", "array", dtype, (rows, n), (n, 1)),)
    return Problem("softmax", args, (("N", n), ("rows", rows)))


@pytest.mark.parametrize(
    ("shape", "dtype", "impl", "cl"),
    [
        ((4096, 4096), "float32", "rows", None),  # in registers: read once already
        ((1024, 16384), "bfloat16", "rows", None),
        ((1024, 32000), "bfloat16", "rows_smem", 1),  # 62.5 KiB a row
        ((1024, 32000), "float32", "rows_cluster", 2),
        ((512, 65536), "bfloat16", "rows_cluster", 2),
        ((512, 65536), "float32", "rows_cluster", 4),
        ((4096, 128256), "bfloat16", "rows_cluster", 4),
        ((4096, 128256), "float32", "rows_cluster", 8),
        ((64, 262144), "float32", "rows_cluster", 8),  # 128 KiB slices: the largest cluster
        ((4, 1 << 21), "float32", "rows", None),  # 8 MiB rows: more than a cluster holds
        ((1, 128256), "bfloat16", "rows_cluster", 8),  # few rows: each over 8 SMs
        ((32, 32000), "float32", "rows_cluster", 8),
        ((33, 32000), "float32", "rows_cluster", 2),
    ],
    ids=str,
)
def test_long_rows_go_to_shared_memory_or_a_cluster(shape, dtype, impl, cl):
    choice = select(_softmax.OP, problem(*shape, dtype), H100).choice
    assert choice.impl == f"softmax/{impl}", choice
    if cl is not None:
        assert choice.config.values["CL"] == cl
        assert choice.grid == (shape[0] * cl * choice.config.values["BLOCK"], 1, 1)
        assert _rows_long.slice_bytes(shape[1], cl, dtype) <= 227 * 1024 - 1024


def test_before_sm_90_one_block_a_row_or_the_register_kernel():
    assert select(_softmax.OP, problem(1024, 32000), A100).choice.impl == "softmax/rows_smem"
    # 125 KiB of float32 fits an A100's 163 KiB
    assert select(_softmax.OP, problem(1024, 32000, "float32"), A100).choice.impl.endswith("smem")
    sel = select(_softmax.OP, problem(512, 65536, "float32"), A100)
    assert sel.choice.impl == "softmax/rows"
    assert any("needs clusters" in c.verdict for c in sel.considered)


def test_the_cpu_backend_runs_clusters_only_when_forced():
    cpu = dataclasses.replace(
        H100, backend="cpu", arch="x86_64", features=frozenset({"cpu", "clusters"})
    )
    assert select(_softmax.OP, problem(4, 32000, "float32"), cpu).choice.impl == "softmax/rows_smem"
    assert select(_softmax.OP, problem(4, 65536, "float32"), cpu).choice.impl == "softmax/rows"


def test_configs_whose_slice_does_not_fit_are_refused():
    fits = _rows_long.fits
    assert fits(problem(8, 65536, "float32"), config(512, 1)) is not None  # 256 KiB
    assert fits(problem(8, 65536, "float32"), config(512, 2)) is None
    assert "CL = 5" in fits(problem(8, 65536), config(512, 5))
    assert fits(problem(8, 262144, "float32"), config(512, 8)) is None
    assert fits(problem(8, 1 << 20, "float32"), config(512, 8)) is not None


def test_slices_cover_the_row_in_whole_vectors():
    for n in (1, 7, 1000, 32001, 65537, 131073):
        for cl in (1, *_rows_long.CLUSTER_SIZES):
            for dtype, vec, size in (("float32", 4, 4), ("bfloat16", 8, 2)):
                s = _rows_long.slice_bytes(n, cl, dtype) // size
                assert s % vec == 0 and s * cl >= n and (s - vec) * cl < n


def _ops():
    return [
        (_softmax.OP, _softmax._RUNNER.spec, ()),
        (_norms.RMS_OP, _norms._RMS.spec, ("w",)),
        (_norms.LAYER_OP, _norms._LAYER.spec, ("w", "b")),
    ]


def _row_problem(spec, dtype, n, wdtype):
    args = [ArgFacts("x", "array", dtype, (4, n), (n, 1))]
    for name in spec.input_names[1:]:
        if name == "eps":
            args.append(ArgFacts("eps", "scalar", "float32"))
        else:
            args.append(ArgFacts(name, "array", wdtype, (n,), (1,)))
    args.append(ArgFacts("y", "array", dtype, is_output=True))
    return Problem(spec.name, tuple(args), (("N", n), ("rows", 4)))


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_kernel_compiles_with_nvrtc_without_spills(cuda, arch, dtype):
    from test_ops_matmul_mma import ptxas_report

    # the norms with weights of x's type and, for 16-bit rows, float32 weights (as autocast
    # leaves a norm's): a vector of those is two 16-byte loads, which must not cost a spill
    cases = [
        (op, spec, wdtype)
        for op, spec, _ in _ops()
        for wdtype in sorted({dtype, "float32" if spec.name != "ops_softmax" else dtype})
    ]
    for op, spec, wdtype in cases:
        p = _row_problem(spec, dtype, 65536, wdtype)
        # clusters of 8 and 16 (layer_norm's combine held 3 CL floats a thread: 48-84 registers
        # on an H200's NVRTC, two blocks an SM; now the lanes of a warp combine them)
        # XS = 1: rows at strides, read in place (a 3-d x), on sm_90's clusters of 16
        both = [(cl, 0) for cl in ((8, 16) if arch == "sm_90" else (1,))]
        for cl, xs in both + ([(16, 1)] if arch == "sm_90" else []):
            k = _rows_long.KERNELS[op.name][cl][xs]
            # 1024 threads a block: 64 registers; 512: three blocks an SM (64 KiB slices) at 40,
            # but float32 layer_norm's two vectors of weight and bias ahead (two blocks: faster)
            wide = spec.name == "ops_layer_norm" and dtype == "float32"
            for block, most in ((1024, 64), (512, 64 if wide else 40)):
                if cl > 1 and _rows_long.config(block, cl) not in _rows_long.CLUSTER_CONFIGS:
                    continue
                template = [("BLOCK", block), ("CL", cl), ("ND", 2 + xs), ("T", dtype),
                            ("WT", wdtype), ("XS", xs)]  # fmt: skip
                _, report = ptxas_report(cuda, k, p, template, arch)
                assert report.get("bytes spill stores", 0) == 0, (spec.name, cl, block, report)
                assert report.get("bytes stack frame", 0) == 0, (spec.name, cl, block, report)
                assert report["registers"] <= most, (spec.name, cl, block, report)
            assert k.spec.cluster_dims == ((cl, 1, 1) if cl > 1 else ())


def test_without_clusters_few_rows_beyond_shared_memory_go_to_rows_split():
    """The rules, end to end: on an A100-like target a few rows too long for a block's shared
    memory run rows_split; many rows, or a row rows_smem holds, stay where they were; and on a
    target offering more than rows_smem ever takes (227 KiB), rows_split steps aside only for
    the rows rows_smem takes, never leaving a row to the register kernel's two reads."""
    a100 = dataclasses.replace(A100, multiprocessor_count=108)
    assert select(_softmax.OP, problem(64, 262144, "float32"), a100).choice.impl == (
        "softmax/rows_split"
    )
    assert select(_softmax.OP, problem(512, 262144, "float32"), a100).choice.impl == (
        "softmax/rows"
    )
    assert select(_softmax.OP, problem(64, 32000, "float32"), a100).choice.impl == (
        "softmax/rows_smem"
    )
    roomy = dataclasses.replace(a100, max_shared_memory_optin_bytes=256 * 1024)
    # 240000 bytes a row: more than rows_smem's 227 KiB, less than this target's opt-in
    assert select(_softmax.OP, problem(64, 60000, "float32"), roomy).choice.impl == (
        "softmax/rows_split"
    )
    assert select(_softmax.OP, problem(64, 32000, "float32"), roomy).choice.impl == (
        "softmax/rows_smem"
    )


def test_tuned_rows_take_over_from_the_heuristic_where_they_measured_ahead():
    """Shipped rows (``kernelkit tune`` on each GPU): float32 layer_norm on 4096x128256 runs
    rows_cluster CL = 6 on an H100 and an H200 (1.055x and 1.089x the heuristic's CL = 8), and
    64 rows of 262144 on an H200 rows_split; the heuristic alone keeps CL = 8."""
    from kernelkit._select.decide import _table

    h100 = dataclasses.replace(H100, name="NVIDIA H100 80GB HBM3")
    h200 = dataclasses.replace(H100, name="NVIDIA H200")

    def layer_norm(rows: int, n: int) -> Problem:
        p = _row_problem(_norms._LAYER.spec, "float32", n, "float32")
        return dataclasses.replace(p, name="layer_norm", attrs=(("N", n), ("rows", rows)))

    vocab = layer_norm(4096, 128256)
    for target in (h100, h200):
        choice = select(_norms.LAYER_OP, vocab, target, table=_table()).choice
        assert (choice.impl, choice.config.values["CL"], choice.source) == (
            "layer_norm/rows_cluster",
            6,
            "table",
        ), choice
    assert select(_norms.LAYER_OP, vocab, h100).choice.config.values["CL"] == 8
    few = select(_norms.LAYER_OP, layer_norm(64, 262144), h200, table=_table()).choice
    assert few.impl == "layer_norm/rows_split", few
    assert select(_norms.LAYER_OP, layer_norm(64, 262144), h100, table=_table()).choice.impl == (
        "layer_norm/rows_cluster"
    )


def test_clusters_of_16_run_where_a_table_row_measured_them_ahead():
    """CL = 16 (a non-portable cluster size) is listed for the tuner and force, never the
    heuristic's pick; shipped H100 and H200 rows take it for 64 rows of 262144 (float32
    softmax and rms_norm, bfloat16 softmax), where ``kernelkit tune`` timed it ahead of the
    heuristic's CL = 8 (float32: 11-12% on the H100, 3.5-8.6% on the H200)."""
    from kernelkit._select.decide import _table

    h100 = dataclasses.replace(H100, name="NVIDIA H100 80GB HBM3")
    h200 = dataclasses.replace(H100, name="NVIDIA H200")
    assert 16 in _rows_long.CLUSTER_SIZES and 16 not in _rows_long.HEURISTIC_SIZES
    # not 1024 threads at CL = 16: layer_norm's kernel launches at most 640-768 there (H200)
    listed = {(c.values["BLOCK"], c.values["CL"]) for c in _rows_long.CLUSTER_CONFIGS}
    assert (1024, 16) not in listed and {(256, 16), (512, 16), (1024, 8)} <= listed
    cases = [
        (_softmax.OP, _softmax._RUNNER.spec, "float32", 16),
        (_softmax.OP, _softmax._RUNNER.spec, "bfloat16", 16),
        (_norms.RMS_OP, _norms._RMS.spec, "float32", 16),
        (_norms.RMS_OP, _norms._RMS.spec, "bfloat16", 8),
    ]
    for op, spec, dtype, want in cases:
        p = _row_problem(spec, dtype, 262144, dtype)
        p = dataclasses.replace(p, name=op.name, attrs=(("N", 262144), ("rows", 64)))
        for target in (h100, h200):
            tuned = select(op, p, target, table=_table()).choice
            assert (tuned.impl.split("/")[1], tuned.config.values["CL"], tuned.source) == (
                "rows_cluster",
                want,
                "table",
            ), (spec.name, dtype, target.name, tuned)
        for target in (h200, H100):  # the heuristic alone: at most 8
            alone = select(op, p, target).choice
            assert alone.config.values.get("CL", 1) <= 8, alone
