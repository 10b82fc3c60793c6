"""``matmul/gemv_cluster`` without a device: configs rendered and compiled by NVRTC for sm_90 (no
spills, no local memory, registers for the block, the cluster attribute in the source), and the
selection stage: chosen for 4 < M <= 16 on sm_90 where K splits into slices, refused with a reason
before sm_90, above M = 16, for float32, [K, N] weights, other K and misaligned views; configs that
do not fit are refused."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import SM80_FEATURES, considered, problem, ptxas_report, target

import kernelkit
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_cluster as C
from kernelkit.ops import _matmul_slab_tc as STC


@pytest.mark.parametrize("m", [1, 4, 5, 8, 9, 16, 17])
@pytest.mark.parametrize("nk", [(4096, 4096), (8192, 8192), (14336, 4096), (1000, 3072), (64, 264)])
def test_gemv_cluster_is_chosen_for_m_5_to_16_where_k_splits(m, nk):
    """Where gemv_slab_tc steps aside: K that is not a divisor of 32768 (3072), or x's 16 rows
    too many for its registers (M = 9-16 at K = 8192)."""
    choice = select(MM.OP, problem(m, *nk), target()).choice
    if STC.slab_tc_heuristic(problem(m, *nk), target()) is not None:  # whole rows come first
        assert choice.impl == "matmul/gemv_slab_tc"
        return
    if m > C.MAX_M or nk[1] % 1024:
        assert choice.impl in ("matmul/gemv_tc", "matmul/gemv", "matmul/mma")
        return
    assert (choice.impl, choice.source) == ("matmul/gemv_cluster", "heuristic")
    assert C.cluster_fits(problem(m, *nk), choice.config) is None
    v = choice.config.values
    cl = nk[1] // v["KS"]
    assert choice.grid == (-(-nk[0] // v["ROWS"]) * cl * 32 * v["WARPS"], 1, 1)
    assert 96 <= choice.grid[0] // (32 * v["WARPS"]) <= 160 or nk[0] < 4096  # ~one block an SM


def test_the_heuristic_takes_long_slices_of_k_in_two_stages():
    for (n, k), (ks, rows) in {
        (4096, 4096): (4096, 32),
        (8192, 8192): (4096, 128),
        (14336, 4096): (4096, 128),
        (4096, 3072): (1024, 128),
    }.items():
        c = C.cluster_heuristic(problem(16, n, k), target())
        assert c is not None and (c.values["KS"], c.values["ROWS"]) == (ks, rows), (n, k, c)
        assert (c.values["S"], c.values["WARPS"]) == (2, 16)


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (problem(16), None),
        (problem(17), "M = 17 > 16"),
        (problem(8, k=4104), "K = 4104 is not a multiple of 1024"),
        (problem(8, dtype="float32"), "not float32"),
        (problem(8, transpose_b=False), "transpose_b=True"),
        (problem(8, aligned16=False), "16-byte boundary"),
    ],
    ids=["ok", "M", "K", "float32", "KN", "misaligned"],
)
def test_gemv_cluster_rules(p, reason):
    assert (
        "needs"
        in considered(select(MM.OP, p, target("sm_80", SM80_FEATURES)), "matmul/gemv_cluster")[0]
    )
    assert C.cluster_match(p, target("sm_80", SM80_FEATURES | {"tma", "clusters"})) is not None
    if reason is None:
        assert C.cluster_match(p, target()) is None
        return
    assert reason in C.cluster_match(p, target())
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, target(), override=Override("gemv_cluster"))


def test_configs_that_do_not_fit_are_refused():
    good = C.cluster_config(16, 64, 2048, 3)
    assert C.cluster_fits(problem(16, 4096, 4096), good) is None
    assert C.cluster_fits(problem(16, 4096, 4096), MM.OP.get("gemv_cluster").default) is None
    assert "cluster size" in C.cluster_fits(problem(16, 4096, 3072), good)  # 1.5 blocks
    assert "cluster size" in C.cluster_fits(problem(16, 4096, 32768), good)  # 16 > 8 blocks
    assert "too many registers" in C.cluster_fits(
        problem(16, 4096, 8192), C.cluster_config(8, 64, 4096, 2)
    )
    assert C.cluster_fits(problem(8, 4096, 8192), C.cluster_config(8, 64, 4096, 2)) is None
    assert "8-row stages" in C.cluster_fits(
        problem(8, 4096, 8192), C.cluster_config(16, 36, 1024, 2)
    )
    assert "shared memory" in C.cluster_fits(
        problem(8, 4096, 4096), dataclasses.replace(good, shared_memory=1024)
    )
    assert "outside the kernel's rules" in C.cluster_fits(
        problem(8, 4096, 4096), C.cluster_config(16, 64, 256, 3)
    )
    # every shipped config fits some table weight, and each weight has many
    for n, k in ((4096, 4096), (8192, 8192), (14336, 4096)):
        fitting = [c for c in C.CLUSTER_CONFIGS if C.cluster_fits(problem(16, n, k), c) is None]
        assert len(fitting) >= 16


def _variants() -> list:
    """Each (KS, WARPS, S) once, with the K that makes the largest legal cluster of it."""
    out, seen = [], set()
    for c in C.CLUSTER_CONFIGS:
        v = c.values
        key = (v["KS"], v["WARPS"], v["S"])
        if key in seen:
            continue
        for cl in (7, 4, 2, 1):
            p = problem(16, 4096, v["KS"] * cl)
            if C.cluster_fits(p, c) is None:
                seen.add(key)
                out.append((c, v["KS"] * cl))
                break
    return out


@pytest.mark.parametrize(("config", "k"), _variants())
def test_every_config_compiles_without_spills(cuda, config, k):
    p = problem(16, 4096, k, bias="float32", activation="silu")
    template = [*config.template, *MM._common_template(p), *C.cluster_template(p, config)]
    kern = MM._GEMV_CLUSTER[C.cluster_size(p, config)]
    art, report = ptxas_report(cuda, kern, p, template)
    assert report["bytes stack frame"] == report["bytes spill stores"] == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "warning" not in art.log


def test_the_cluster_shape_is_in_the_compiled_source(cuda):
    from kernelkit._pipeline.render import arg_types, render_request

    p = problem(16, 4096, 8192)
    c = C.cluster_config(16, 128, 4096, 3)
    template = [*c.template, *MM._common_template(p), *C.cluster_template(p, c)]
    target = cuda.target_for_arch("sm_90")

    def source(cl: int) -> str:
        spec = MM._GEMV_CLUSTER[cl].spec
        return render_request(spec, cuda, target, *arg_types(p), template, False)[1].source

    assert "__cluster_dims__(2, 1, 1) ops_matmul_gemv_cluster2(" in source(2)
    assert "__cluster_dims__" not in source(1)


def test_the_cuda_backend_has_the_features_gemv_cluster_requires(cuda):
    impl = MM.OP.get("gemv_cluster")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_80").features
