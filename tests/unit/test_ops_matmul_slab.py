"""``matmul/gemv_slab`` without a device: every shipped config rendered and compiled by NVRTC for
sm_90 for each K it takes (no spills, no local memory, a block that launches), and the selection
stage: chosen for M <= 4 and those K on sm_90, refused with a reason before sm_90, for M > 4,
float32, [K, N] weights, other K and misaligned views; configs that do not fit are refused."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import CPU, SM80_FEATURES, considered, problem, ptxas_report, target

import kernelkit
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_impls as I
from kernelkit.ops import _matmul_rules as R
from kernelkit.ops import _matmul_slab as B
from kernelkit.ops import _matmul_slab_tc as STC


@pytest.mark.parametrize("m", [1, 4, 5, 16])
@pytest.mark.parametrize("nk", [(4096, 4096), (8192, 8192), (14336, 4096), (1000, 2048), (64, 264)])
def test_gemv_slab_serves_m_up_to_4_and_the_k_it_takes(m, nk):
    """gemv_slab_tc comes first by heuristic from M = 2 (gemv runs M = 1); gemv_slab, named by a
    table or an override, runs its heuristic's config."""
    p = problem(m, *nk)
    if m > 1 and STC.slab_tc_heuristic(p, target()) is not None:
        assert select(MM.OP, p, target()).choice.impl == "matmul/gemv_slab_tc"
    if m > B.SLAB_MAX_M or nk[1] not in B.SLAB_K:
        assert B.slab_match(p, target()) is not None
        return
    choice = select(MM.OP, p, target(), override=Override("gemv_slab")).choice
    assert choice.impl == "matmul/gemv_slab"
    assert choice.config in B.SLAB_CONFIGS
    assert B.slab_fits(problem(m, *nk), choice.config) is None
    rows = choice.config.values["ROWS"]
    assert choice.grid == (-(-nk[0] // rows) * choice.config.threadgroup[0], 1, 1)


@pytest.mark.parametrize("framework", ["torch", "cupy"])
@pytest.mark.parametrize("nk", [(4096, 4096), (10240, 8192), (8192, 28672), (4608, 3584)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_at_m_1_gemv_runs_ahead_of_cublas_and_the_other_decode_kernels(framework, nk, dtype):
    """With no table row, M = 1 in 16 bits on sm_90 goes to gemv (2 rows, 4 warps, U = 1) for
    torch tensors too (cuBLAS passed over, saying why; the other decode kernels step aside); M = 2,
    float32, a misaligned view and sm_80 keep the earlier rules."""
    sel = select(MM.OP, problem(1, *nk, dtype, framework=framework), target())
    assert (sel.choice.impl, sel.choice.source) == ("matmul/gemv", "heuristic")
    assert sel.choice.config.values == {"ROWS": 2, "WARPS": 4, "U": 1}
    text = sel.explain()
    if framework == "torch":
        assert "matmul/framework: passed over: M = 1: gemv reads the weight faster" in text
    for other in ("gemv_tc", "gemv_slab_tc", "gemv_slab"):  # those that could run it step aside
        if MM.OP.get(other).check(sel.problem, target()) is None:
            verdicts = considered(sel, f"matmul/{other}")
            assert verdicts[0].startswith("passed over: M = 1: gemv"), verdicts
    at2 = select(MM.OP, problem(2, *nk, dtype, framework=framework), target()).choice.impl
    assert at2 != "matmul/gemv"
    if framework == "torch":
        assert at2 == "matmul/framework"
    # where it was not measured, nothing is deferred: float32, misaligned views, other archs
    for other, arch in (
        (problem(1, *nk, "float32", framework=framework), "sm_90"),
        (problem(1, *nk, dtype, framework=framework, aligned16=False), "sm_90"),
        (problem(1, *nk, dtype, framework=framework), "sm_80"),
        (problem(1, *nk, dtype, framework=framework), "sm_100a"),
        (problem(1, *nk, dtype, framework=framework), "sm_120"),
    ):
        t = target(arch)
        assert R.gemv_first(other, t) is None, (arch, other)
        assert "passed over" not in select(MM.OP, other, t).explain()
    assert R.gemv_first(problem(1, *nk, dtype, framework=framework), CPU) is None
    if framework == "torch":
        # a table row (or record) naming cuBLAS at M = 1 is still served
        table = lambda p, t, key: ("matmul/framework", None, "a test row")
        c = select(MM.OP, problem(1, *nk, dtype, framework=framework), target(), table=table)
        assert (c.choice.impl, c.choice.source) == ("matmul/framework", "table")


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (problem(4), None),
        (problem(5), "M = 5 > 4"),
        (problem(1, k=4104), "K = 4104 is not one of (2048, 4096, 8192)"),
        (problem(1, k=1024), "K = 1024 is not one of"),
        (problem(1, dtype="float32"), "not float32"),
        (problem(1, transpose_b=False), "transpose_b=True"),
        (problem(1, aligned16=False), "16-byte boundary"),
    ],
    ids=["ok", "M", "K", "K_small", "float32", "KN", "misaligned"],
)
def test_gemv_slab_rules(p, reason):
    assert (
        "needs tma"
        in considered(select(MM.OP, p, target("sm_80", SM80_FEATURES)), "matmul/gemv_slab")[0]
    )
    assert B.slab_match(p, target("sm_80", SM80_FEATURES | {"tma"})) is not None
    if reason is None:
        assert B.slab_match(p, target()) is None
        return
    assert reason in B.slab_match(p, target())
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, target(), override=Override("gemv_slab"))


def test_gemv_slab_configs_and_default_fit_the_k_it_takes():
    impl = MM.OP.get("gemv_slab")
    for k in B.SLAB_K:
        for m in (1, 4):
            assert B.slab_fits(problem(m, 4096, k), impl.default) is None
            assert sum(B.slab_fits(problem(m, 4096, k), c) is None for c in B.SLAB_CONFIGS) >= 8
    good = B.slab_config(256, 8, 16, 4, 1)
    assert B.slab_fits(problem(1, 64, 8192), good) is None
    assert "MX = 1" in B.slab_fits(problem(2, 64, 8192), good)
    assert "too many registers" in B.slab_fits(
        problem(4, 64, 8192), B.slab_config(128, 8, 16, 3, 4)
    )
    assert "whole rows" in B.slab_fits(problem(1, 64, 8192), B.slab_config(256, 8, 8, 3, 1))
    assert "shared memory" in B.slab_fits(
        problem(1, 64, 8192), dataclasses.replace(good, shared_memory=1024)
    )


def _slab_variants() -> list:
    """Every slab config, for each K it fits (K is a template value through JPR)."""
    out = []
    for c in B.SLAB_CONFIGS:
        for k in B.SLAB_K:
            p = problem(c.values["MX"], k=k, dtype="bfloat16")
            if B.slab_fits(p, c) is None:
                out.append((c, k))
    return out


@pytest.mark.parametrize(("config", "k"), _slab_variants())
def test_every_slab_config_compiles_without_spills(cuda, config, k):
    p = problem(config.values["MX"], k=k, bias="float32", activation="gelu")
    template = [*config.template, *I.common_template(p), ("JPR", B.slab_jpr(p, config))]
    _compiles_clean(cuda, I.SLAB_KERNEL, p, config, template)


def _compiles_clean(cuda, k, p, config, template) -> None:
    art, report = ptxas_report(cuda, k, p, template)
    assert report["bytes stack frame"] == report["bytes spill stores"] == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "warning" not in art.log


def test_the_heuristic_fits_a_small_shared_memory_or_steps_aside():
    small = dataclasses.replace(target(), max_shared_memory_optin_bytes=99 * 1024)
    for m in (1, 4):
        c = B.slab_heuristic(problem(m, 8192, 8192), small)
        assert c is not None and c.shared_memory <= 99 * 1024 and c in B.SLAB_CONFIGS
    tiny = dataclasses.replace(target(), max_shared_memory_optin_bytes=40 * 1024)
    assert B.slab_heuristic(problem(2), tiny) is None
    assert select(MM.OP, problem(2), tiny).choice.impl == "matmul/gemv_tc"


def test_the_cuda_backend_has_the_features_gemv_slab_requires(cuda):
    impl = MM.OP.get("gemv_slab")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_80").features
