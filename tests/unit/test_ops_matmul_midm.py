"""``matmul/midm`` without a device: configs rendered and compiled by NVRTC for sm_90 (every tile
shape and cluster size) and sm_80 (SPLIT = 1), with ptxas's report read back (no spills, a block
that launches); the config rules; and the selection stage: midm never changes what runs unless
named (a table, the tuning database, ``kernelkit.force``), is then chosen with the config named,
and is refused with a reason on the CPU, before sm_80, for float32, above M = 512, for K (or N
of a [K, N] ``b``) not a multiple of 8 and for misaligned views. The kernel's arithmetic is
checked by the emulated test (tests/backend/test_ops_matmul_midm_emulated.py) and on the GPU."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import CPU, SM80_FEATURES, problem, ptxas_report, target

import kernelkit
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_midm as MID

# --- selection ------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [17, 64, 128, 256])
@pytest.mark.parametrize("transpose_b", [True, False])
def test_midm_changes_nothing_unless_named(m, transpose_b):
    """Registered after mma: the heuristic choice stays mma (and cuBLAS for torch tensors)."""
    p = problem(m, 4096, 4096, transpose_b=transpose_b)
    assert select(MM.OP, p, target()).choice.impl == "matmul/mma"
    torch_p = problem(m, framework="torch")
    assert select(MM.OP, torch_p, target()).choice.impl == "matmul/framework"


@pytest.mark.parametrize("m", [17, 33, 100, 256])
@pytest.mark.parametrize("nk", [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)])
def test_forced_without_a_config_takes_the_heuristic(m, nk):
    p = problem(m, *nk, framework="torch")
    choice = select(MM.OP, p, target(), override=Override("midm")).choice
    assert choice.impl == "matmul/midm" and choice.config in MID.MIDM_CONFIGS
    v = choice.config.values
    assert v["BM"] >= min(m, 128) and MID.midm_fits(p, choice.config) is None
    tiles = -(-m // v["BM"]) * -(-nk[0] // v["BN"])
    assert choice.grid == (tiles * v["SPLIT"] * choice.config.threadgroup[0], 1, 1)
    assert tiles * v["SPLIT"] >= 66  # at least half a wave of blocks on 132 SMs


def test_no_clusters_no_split():
    t = target("sm_80", SM80_FEATURES)
    c = MID.midm_heuristic(problem(17), t)
    assert c is not None and c.values["SPLIT"] == 1
    assert MID.midm_heuristic(problem(17), target()).values["SPLIT"] > 1  # type: ignore[union-attr]


def test_a_named_config_is_served():
    p = problem(64, framework="torch")
    c = MID.midm_config(64, 128, 1, 4, 4, 4)
    assert c in MID.MIDM_CONFIGS
    choice = select(MM.OP, p, target(), override=Override("midm", c)).choice
    assert (choice.impl, choice.config) == ("matmul/midm", c)


@pytest.mark.parametrize(
    ("p", "t", "reason"),
    [
        (problem(64, k=4100), target(), "K = 4100 is not a multiple of 8"),
        (problem(64, n=4100, transpose_b=False), target(), "N = 4100 is not a multiple of 8"),
        (problem(64, dtype="float32"), target(), "takes float16 or bfloat16, not float32"),
        (problem(64, aligned16=False), target(), "16-byte boundary"),
        (problem(513), target(), "M = 513 > 512"),
        (problem(64), target("sm_75", {"fp16"}), "needs cp_async, mma_sync"),
        (problem(64), target("sm_75", SM80_FEATURES), "needs sm_80 or newer"),
        (problem(64, device_type=1, framework="numpy"), CPU, "needs cp_async, mma_sync"),
    ],
    ids=["K", "N_of_KN", "float32", "misaligned", "M", "sm75", "sm75_arch", "cpu"],
)
def test_refusals_name_the_reason(p, t, reason):
    s = select(MM.OP, p, t)
    assert s.choice.impl != "matmul/midm"
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, t, override=Override("midm"))


def test_odd_n_and_k_tails_are_served():
    """A linear layer's weight takes any N, and K only in 16-byte rows (tail tiles zero-fill)."""
    for m, n, k in ((17, 1001, 1000), (100, 67, 24), (256, 4095, 4104)):
        p = problem(m, n, k)
        assert MID.midm_match(p, target()) is None
        assert MID.midm_heuristic(p, target()) is not None


def test_every_config_fits_a_4096_weight_and_the_bad_ones_are_refused():
    for transpose_b in (True, False):
        p = problem(64, transpose_b=transpose_b)
        for c in MID.MIDM_CONFIGS:
            why = MID.midm_fits(p, c)
            # b as [K, N]: BN >= 64, and rows of BN / 8 chunks over the block's threads
            kn = ("BN >= 64", "16-byte copies")
            assert why is None or (not transpose_b and any(r in why for r in kn)), (c, why)
    p, good = problem(64), MID.midm_config(64, 64, 2, 2, 4, 2)
    bad = {
        "threadgroup": dataclasses.replace(good, threadgroup=(256, 1, 1)),
        "shared_memory": dataclasses.replace(good, shared_memory=1024),
        "missing": dataclasses.replace(good, template=(("BM", 64),)),
        "split": MID.midm_config(64, 64, 2, 2, 4, 3),
        "warp tiles": MID.midm_config(64, 96, 2, 2, 4, 1),
        "copies": MID.midm_config(32, 32, 4, 4, 4, 1),
        "too much shared memory": MID.midm_config(128, 128, 2, 4, 8, 1),
    }
    for name, config in bad.items():
        assert MID.midm_fits(p, config) is not None, name
        with pytest.raises(kernelkit.ArgumentError):
            select(MM.OP, p, target(), override=Override("midm", config))


def test_shared_memory_holds_the_fp32_tile():
    """The epilogue's fp32 tile reuses the stages' bytes: the config asks for the larger."""
    for c in MID.MIDM_CONFIGS:
        v = c.values
        assert c.shared_memory >= v["BM"] * (v["BN"] + 8) * 4
        assert c.shared_memory >= v["STAGES"] * (v["BM"] + v["BN"]) * 64 * 2


# --- NVRTC: the tile shapes compile, without spills -------------------------------------------


def _variants() -> list:
    """Per (BM, BN, warps): SPLIT 1, 2, 4 on sm_90 and SPLIT 1 on sm_80, each with one of the
    epilogues (dtype, layout of b, bias, activation)."""
    epilogues = [
        ("float16", True, None, None),
        ("bfloat16", False, "float32", "gelu"),
        ("bfloat16", True, "bfloat16", "silu"),
    ]
    shapes = {}
    for c in MID.MIDM_CONFIGS:
        v = c.values
        if v["STAGES"] == 4:
            shapes.setdefault((v["BM"], v["BN"], v["WM"], v["WN"], v["SPLIT"]), c)
    out = []
    for i, ((bm, bn, wm, wn, split), c) in enumerate(sorted(shapes.items())):
        for arch in ("sm_90", "sm_80") if split == 1 else ("sm_90",):
            rolled = epilogues[i % 3 :] + epilogues[: i % 3]  # the first the config serves
            e = next(e for e in rolled if MID.midm_fits(problem(64, transpose_b=e[1]), c) is None)
            out.append(pytest.param(arch, c, *e, id=f"{arch}-{bm}x{bn}-{wm}x{wn}-s{split}"))
    return out


@pytest.mark.parametrize(("arch", "config", "dtype", "transpose_b", "bias", "act"), _variants())
def test_tile_shapes_compile_without_spills(cuda, arch, config, dtype, transpose_b, bias, act):
    p = problem(64, dtype=dtype, transpose_b=transpose_b, bias=bias, activation=act)
    assert MID.midm_fits(p, config) is None
    template = [*config.template, *MM._common_template(p), ("W_KN", not transpose_b)]
    k = MM._MIDM[config.values["SPLIT"]]
    art, report = ptxas_report(cuda, k, p, template, arch)
    assert report.get("bytes spill stores") == report.get("bytes spill loads") == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "bytes smem" not in art.log  # no static shared memory: all of it is dynamic


def test_the_sources_are_package_data():
    """The kernel text is read from ops/matmul/kernels/*.cuh (installed by the package-data
    glob), and the CPU emulation's hooks are all in the cluster file."""
    assert "kk_midm(" in MID.MIDM_KERNEL and "kk_midm_map" in MID.MIDM_CLUSTER
    for hook in ("kk_midm_cluster_init", "kk_midm_rank", "kk_midm_map", "kk_midm_cluster_sync"):
        assert hook in MID.MIDM_KERNEL and f"{hook}(" in MID.MIDM_CLUSTER


def test_a_split_before_sm90_is_a_named_compile_error(cuda):
    """SPLIT > 1 is a cluster (a kernel attribute): the heuristic never gives it without the
    clusters feature, and a table, record or force that names one on sm_80 fails loudly."""
    c = MID.midm_config(64, 64, 2, 2, 4, 2)
    p = problem(64)
    template = [*c.template, *MM._common_template(p), ("W_KN", False)]
    with pytest.raises(kernelkit.CompileError, match="__cluster_dims__"):
        ptxas_report(cuda, MM._MIDM[2], p, template, "sm_80")
