"""``matmul/gemv_slab_tc`` without a device: configs rendered and compiled by NVRTC for sm_90 (no
spills, no local memory, registers for the block), the config rules, and the selection stage:
chosen by heuristic for M = 2-16 on sm_90 where x's rows fit its registers (M = 1 is deferred to
gemv), refused with a reason before sm_90, above M = 16, for float32, [K, N]
weights, K that is not a divisor of 32768 and misaligned views. The kernel's arithmetic is
checked by the emulated test (tests/backend/test_ops_matmul_slab_tc_emulated.py) and on the
GPU."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import SM80_FEATURES, considered, problem, ptxas_report, target

import kernelkit
from kernelkit._select.records import Config
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_impls as I
from kernelkit.ops import _matmul_slab_tc as STC

WEIGHTS = [(4096, 4096), (8192, 8192), (14336, 4096)]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 9, 16])
@pytest.mark.parametrize("nk", WEIGHTS)
def test_chosen_for_m_up_to_16_on_the_table_weights(m, nk):
    p = problem(m, *nk)
    choice = select(MM.OP, p, target()).choice
    if m == 1:  # gemv runs M = 1 faster (gemv_first)
        assert choice.impl == "matmul/gemv"
        return
    if m > 8 and nk[1] == 8192:  # 8 rows of 16 KiB an mma: no stage holds them
        assert choice.impl == "matmul/gemv_tc"
        assert all(STC.slab_tc_fits(p, c) for c in STC.SLAB_TC_CONFIGS)
        return
    assert (choice.impl, choice.source) == ("matmul/gemv_slab_tc", "heuristic")
    c = choice.config
    assert c in STC.SLAB_TC_CONFIGS and STC.slab_tc_fits(p, c) is None
    mx = 8 * c.values["XH"] // c.values["SEG"]
    assert mx >= m > mx // 2  # the smallest shape that holds x's rows
    assert choice.grid == (-(-nk[0] // c.values["ROWS"]) * c.threadgroup[0], 1, 1)


def test_m_1_takes_one_row_of_x_in_eight_segments():
    p = problem(1, 1000, 1024)  # (the rules run gemv at M = 1: named, it takes its heuristic's)
    choice = select(MM.OP, p, target(), override=Override("gemv_slab_tc")).choice
    assert choice.impl == "matmul/gemv_slab_tc"
    assert (choice.config.values["SEG"], choice.config.values["XH"]) == (8, 1)


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (problem(4), None),
        (problem(16, 14336, 4096), None),
        (problem(17), "M = 17 > 16"),
        (problem(2, k=4104), "K = 4104 is not a divisor of 32768"),
        (problem(2, k=3072), "K = 3072 is not a divisor"),
        (problem(2, k=128), "from 256"),
        (problem(2, dtype="float32"), "not float32"),
        (problem(2, transpose_b=False), "transpose_b=True"),
        (problem(2, aligned16=False), "16-byte boundary"),
    ],
    ids=["ok", "ok16", "M", "K", "K3072", "K_small", "float32", "KN", "misaligned"],
)
def test_rules(p, reason):
    sm80 = considered(select(MM.OP, p, target("sm_80", SM80_FEATURES)), "matmul/gemv_slab_tc")
    assert "needs tma" in sm80[0]
    assert STC.slab_tc_match(p, target("sm_80", SM80_FEATURES | {"tma"})) is not None
    if reason is None:
        assert STC.slab_tc_match(p, target()) is None
        return
    assert reason in STC.slab_tc_match(p, target())
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, target(), override=Override("gemv_slab_tc"))


def test_configs_that_do_not_fit_are_refused():
    good = STC.slab_tc_config(16, 32, 64, 2, 2, 1)
    assert STC.slab_tc_fits(problem(4, 8192, 8192), good) is None
    assert STC.slab_tc_fits(problem(3, 8192, 8192), good) is None
    # M = 2 would leave half the mma's rows of x empty: the smaller shape serves it
    assert "smallest MX" in STC.slab_tc_fits(problem(2, 8192, 8192), good)
    assert "smallest MX" in STC.slab_tc_fits(problem(5, 8192, 8192), good)
    # 4 warps x 2 segments at K = 8192: 32 steps of 4 registers of x a thread
    assert "128 registers" in STC.slab_tc_fits(
        problem(4, 8192, 8192), STC.slab_tc_config(4, 32, 64, 2, 2, 1)
    )
    # SEG = 1 puts 8 rows in an mma: 8 rows of 16 KiB do not fit a 64 KiB stage
    assert "whole groups of 8 rows" in STC.slab_tc_fits(
        problem(16, 4096, 8192), STC.slab_tc_config(16, 32, 64, 2, 1, 2)
    )
    assert "dividing ROWS" in STC.slab_tc_fits(
        problem(4, 4096, 1024),
        STC.slab_tc_config(16, 16, 64, 2, 2, 1),  # 32 rows a stage
    )
    assert "48 KiB" in STC.slab_tc_fits(
        problem(16, 300, 512),
        STC.slab_tc_config(16, 64, 32, 3, 1, 2),  # 32 rows x 16 x 16
    )
    assert "227 KiB" in STC.slab_tc_fits(
        problem(4, 4096, 4096),
        STC.slab_tc_config(16, 64, 64, 4, 2, 1),  # 256 KiB of stages
    )
    assert "shared memory" in STC.slab_tc_fits(
        problem(4, 8192, 8192), dataclasses.replace(good, shared_memory=1024)
    )
    # x's rows in two mmas (XH = 4): M = 16 in 2 segments, stages of 4 whole rows
    two = STC.slab_tc_config(16, 112, 32, 4, 2, 4)
    assert STC.slab_tc_fits(problem(16, 14336, 4096), two) is None
    assert STC.slab_tc_fits(problem(9, 14336, 4096), two) is None
    assert "smallest MX" in STC.slab_tc_fits(problem(8, 14336, 4096), two)
    big = STC.slab_tc_config(16, 64, 64, 2, 2, 4)  # 4 rows of 16 KiB a stage
    assert "128 registers" in STC.slab_tc_fits(problem(16, 8192, 8192), big)
    assert "XH = 3" in STC.slab_tc_fits(problem(16), STC.slab_tc_config(16, 32, 32, 4, 2, 3))
    assert "lacks SKB" in STC.slab_tc_fits(problem(4), Config({"WARPS": 16, "ROWS": 32}, (512,)))


def test_every_table_weight_has_configs_at_each_m():
    for n, k in WEIGHTS:
        for m in (1, 2, 4, 8):
            p = problem(m, n, k)
            assert sum(STC.slab_tc_fits(p, c) is None for c in STC.SLAB_TC_CONFIGS) >= 4, p
    assert all(STC.slab_tc_fits(problem(16, 8192, 8192), c) for c in STC.SLAB_TC_CONFIGS)


def test_the_heuristic_fits_a_small_shared_memory_or_steps_aside():
    """The device's limit counts the static sums and barriers too (an sm_120 has 99 KiB)."""
    small = dataclasses.replace(target(), max_shared_memory_optin_bytes=99 * 1024)
    for m, n, k in ((4, 8192, 8192), (5, 4096, 4096), (8, 14336, 4096), (16, 4096, 1024)):
        p = problem(m, n, k)
        c = STC.slab_tc_heuristic(p, small)
        assert c is not None and c in STC.SLAB_TC_CONFIGS, (m, n, k)
        assert c.shared_memory + STC.slab_tc_static_bytes(p, c) <= 99 * 1024, c
    assert STC.slab_tc_heuristic(problem(16, 4096, 4096), small) is None  # 8 rows of 8 KiB x 2
    # every (M, N, K) the heuristic answers on an H100 fits it with the static part counted
    for m in (1, 2, 3, 4, 5, 8, 9, 16):
        for n, k in (*WEIGHTS, (1000, 256), (1000, 1024), (64, 16384)):
            p = problem(m, n, k)
            c = STC.slab_tc_heuristic(p, target())
            if c is not None:
                assert STC.slab_tc_fits(p, c) is None
                assert c.shared_memory + STC.slab_tc_static_bytes(p, c) <= 227 * 1024
    assert STC.slab_tc_heuristic(problem(3, 1000, 256), target()) is not None  # other ROWS
    tiny = dataclasses.replace(target(), max_shared_memory_optin_bytes=40 * 1024)
    assert STC.slab_tc_heuristic(problem(4), tiny) is None
    assert select(MM.OP, problem(4), tiny).choice.impl not in ("matmul/gemv_slab_tc",)


def _variants() -> list:
    """Each (SEG, XH, WARPS, SKB, S) once (32 rows a block), with the largest K it takes: the
    most registers of x and the longest unrolled loops."""
    out = []
    for c in STC.SLAB_TC_CONFIGS:
        v = c.values
        if v["ROWS"] != 32:
            continue
        m = 8 * v["XH"] // v["SEG"]
        for k in (32768, 16384, 8192, 4096, 2048, 1024, 512, 256):
            if STC.slab_tc_fits(problem(m, 4096, k), c) is None:
                out.append((c, m, k))
                break
    return out


@pytest.mark.parametrize(("config", "m", "k"), _variants())
def test_every_config_shape_compiles_without_spills(cuda, config, m, k):
    p = problem(m, 4096, k, bias="float32", activation="gelu")
    template = [*config.template, *I.common_template(p), ("JW", STC.slab_tc_jw(p, config))]
    art, report = ptxas_report(cuda, I.SLAB_TC_KERNEL, p, template)
    assert report["bytes stack frame"] == report["bytes spill stores"] == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "warning" not in art.log


def test_the_cuda_backend_has_the_features_gemv_slab_tc_requires(cuda):
    impl = MM.OP.get("gemv_slab_tc")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_80").features
