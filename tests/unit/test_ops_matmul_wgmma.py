"""``matmul/wgmma`` without a device: configs rendered and compiled by NVRTC for sm_90a (no
spills, no local memory, registers for the block, the cluster attribute and the arch-specific
target), and the selection stage: chosen for M > 16 on sm_90 (after the gemv kernels), refused
with a reason on other archs, for float32, [K, N] weights, K not a multiple of 8 and misaligned
views; configs that do not fit are refused; forcing it without a config takes its heuristic's."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import SM80_FEATURES, problem, target

import kernelkit
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_impls as I
from kernelkit.ops import _matmul_wgmma as W

SM90 = SM80_FEATURES | {"tma", "clusters", "arch_specific"}


def sm90(arch: str = "sm_90"):
    return target(arch, SM90)


@pytest.mark.parametrize("m", [1, 16, 17, 32, 64, 65, 128, 256, 1000, 8192])
@pytest.mark.parametrize("nk", [(4096, 4096), (8192, 8192), (14336, 4096), (1000, 72)])
def test_wgmma_is_chosen_above_m16_on_sm90(m, nk):
    p = problem(m, *nk)
    choice = select(MM.OP, p, sm90()).choice
    if m <= 16:
        assert choice.impl != "matmul/wgmma"
        return
    assert (choice.impl, choice.source) == ("matmul/wgmma", "heuristic")
    assert W.wgmma_fits(p, choice.config) is None
    v = choice.config.values
    tma = m > 64  # TMA copies (WS = 2), else a copying warpgroup (WS = 1)
    assert v["WS"] == (2 if tma else 1) and v["SPLIT"] in (1, 2)
    assert v["WG"] == 1 if m <= 64 else v["WG"] == 2 if m > 128 else v["WG"] in (1, 2)
    tiles = -(-m // (64 * v["WG"])) * -(-nk[0] // v["BN"])
    threads = 128 * v["WG"] + (32 if tma else 128)
    assert choice.grid == (tiles * v["SPLIT"] * threads, 1, 1)
    assert tiles * v["SPLIT"] <= 132 or v["SPLIT"] == 1  # about one block an SM, never more
    expected = {  # the sweeps' best tiles (WG, BN, KB, SPLIT) on an H100 and an H200
        (32, (4096, 4096)): (1, 64, 2, 2),
        (32, (8192, 8192)): (1, 64, 2, 1),
        (32, (14336, 4096)): (1, 128, 1, 1),
        (128, (4096, 4096)): (1, 64, 2, 1),  # TMA from here to M = 256 (an H200 sweep)
        (128, (8192, 8192)): (1, 128, 1, 1),
        (128, (14336, 4096)): (2, 128, 1, 1),
        (256, (4096, 4096)): (2, 64, 1, 1),
        (256, (8192, 8192)): (2, 128, 1, 1),
        (256, (14336, 4096)): (2, 256, 1, 1),
        (1000, (8192, 8192)): (2, 256, 1, 1),
        (8192, (8192, 8192)): (2, 256, 1, 1),
    }.get((m, nk))
    assert expected is None or (v["WG"], v["BN"], v["KB"], v["SPLIT"]) == expected


def test_jax_arrays_get_no_tensor_maps():
    """XLA owns JAX arrays' memory: above M = 64 they keep the copying warpgroup (WS = 1)."""
    for m in (128, 3500):
        p = problem(m, framework="jax")
        assert select(MM.OP, p, sm90()).choice.config.values["WS"] == 1
    assert "JAX" in W.wgmma_fits(p, W.wgmma_config(1, 64, 2, 6, 1, 2))


@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (problem(128), None),
        (problem(128, k=4100), "K = 4100 is not a multiple of 8"),
        (problem(128, dtype="float32"), "not float32"),
        (problem(128, transpose_b=False), "transpose_b=True"),
        (problem(128, aligned16=False), "16-byte boundary"),
    ],
    ids=["ok", "K", "float32", "KN", "misaligned"],
)
def test_wgmma_rules(p, reason):
    for arch in ("sm_80", "sm_100"):  # wgmma is sm_90a's alone
        assert "sm_90a" in W.wgmma_match(p, target(arch, SM90))
    without = select(MM.OP, p, target("sm_90", SM80_FEATURES | {"tma", "clusters"}))
    assert any("arch_specific" in c.verdict for c in without.considered if c.impl == "matmul/wgmma")
    if reason is None:
        assert W.wgmma_match(p, sm90()) is None
        return
    assert reason in W.wgmma_match(p, sm90())
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, sm90(), override=Override("wgmma"))


def test_configs_that_do_not_fit_are_refused():
    p = problem(128)
    good = W.wgmma_config(2, 128, 1, 6, 2, 1)
    assert W.wgmma_fits(p, good) is None
    assert "SPLIT = 3" in W.wgmma_fits(p, W.wgmma_config(2, 128, 1, 4, 3, 1))
    assert "outside" in W.wgmma_fits(p, W.wgmma_config(2, 96, 1, 4, 1, 1))
    assert "outside" in W.wgmma_fits(p, W.wgmma_config(2, 128, 1, 2, 1, 1))
    assert "spill" in W.wgmma_fits(p, W.wgmma_config(1, 256, 1, 3, 1, 1))
    assert "> 232448" in W.wgmma_fits(p, W.wgmma_config(2, 128, 1, 8, 1, 1))
    assert "shared memory" in W.wgmma_fits(p, dataclasses.replace(good, shared_memory=1024))
    assert "WS = 3" in W.wgmma_fits(p, W.wgmma_config(2, 128, 1, 6, 2, 3))
    assert "WS = 0" in W.wgmma_fits(p, W.wgmma_config(2, 128, 1, 6, 2, 0))  # retired
    tma = W.wgmma_config(1, 64, 2, 6, 1, 2)  # TMA: one copying warp, 160 threads
    assert W.wgmma_fits(p, tma) is None and tma.threadgroup == (160, 1, 1)
    assert "64 16-byte chunks" in W.wgmma_fits(p, W.wgmma_config(2, 256, 4, 3, 1, 1))  # 96
    ws = W.wgmma_config(2, 128, 1, 6, 2, 1)  # a copying warpgroup: 384 threads
    assert W.wgmma_fits(p, ws) is None and ws.threadgroup == (384, 1, 1)
    assert "threadgroup (384,)" in W.wgmma_fits(p, dataclasses.replace(ws, threadgroup=(256, 1, 1)))
    assert "lacks BN" in W.wgmma_fits(p, dataclasses.replace(good, template=(("WG", 2),)))
    assert all(W.wgmma_fits(p, c) is None for c in W.WGMMA_CONFIGS)


def test_forcing_without_a_config_takes_the_heuristics():
    p = problem(128)
    forced = select(MM.OP, p, sm90(), override=Override("wgmma")).choice
    assert forced.config == W.wgmma_heuristic(p, sm90()) != MM.OP.get("wgmma").default


def _variants() -> list:
    """Each (WG, BN, KB, S, WS) once, with a split of 2 (the cluster path)."""
    return [c for c in W.WGMMA_CONFIGS if c.values["SPLIT"] == 2]


@pytest.mark.parametrize("config", _variants(), ids=lambda c: c.describe().split(" thr")[0])
def test_every_config_compiles_without_spills(cuda, config):
    from kernelkit._pipeline.render import arg_types, render_request

    p = problem(128, 4096, 4096, bias="float32", activation="silu")
    ws = config.values["WS"]
    template = [*config.template, *I.common_template(p)]
    inputs, outputs = arg_types(p)
    if ws == 2:  # x, w, then their tensor maps
        inputs = [
            *inputs[:2],
            ("tensor_map", inputs[0][1]),
            ("tensor_map", inputs[1][1]),
            inputs[2],
        ]
    _, req = render_request(
        I.WGMMA_KERNELS[ws][2].spec,
        cuda,
        cuda.target_for_arch("sm_90"),
        inputs,
        outputs,
        template,
        False,
    )
    assert req.arch == "sm_90a"  # wgmma needs the arch-specific target
    name = ("ops_matmul_wgmma", "ops_matmul_wgmma_ws", "ops_matmul_wgmma_tma")[ws]
    assert f"__cluster_dims__(2, 1, 1) {name}2(" in req.source
    if ws == 2:
        assert "const __grid_constant__ kk_tensor_map x_map" in req.source
    req = dataclasses.replace(req, options=(*req.options, "--ptxas-options=-v"))
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.binary[:4] == b"\x7fELF"
    found = re.findall(r"(\d+) (registers|bytes stack frame|bytes spill stores)", art.log)
    report = {what: int(n) for n, what in found}
    assert report["bytes stack frame"] == report["bytes spill stores"] == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "warning" not in art.log.lower()  # ptxas says so when it serializes wgmma


def test_the_cuda_backend_has_the_features_wgmma_requires(cuda):
    impl = MM.OP.get("wgmma")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_80").features


def test_m_128_and_256_are_decided_apart():
    """Decisions are kept per key bucket, and the heuristic's tile shape changes at M = 128
    (one warpgroup's tiles up to there, two above): so M = 128 and 256 are separate buckets,
    while the shipped tables' rows for M = 65-256 still cover both."""

    def bucket(m):
        return next(v for f, v in MM.OP.key.of(problem(m)) if f.startswith("M:"))

    assert (bucket(65), bucket(128), bucket(129), bucket(256)) == ("[65,129)",) * 2 + (
        "[129,257)",
    ) * 2
    assert W.wgmma_heuristic(problem(65), sm90()) == W.wgmma_heuristic(problem(128), sm90())
    t = sm90()
    for n, k in ((4096, 4096), (8192, 8192), (14336, 4096)):
        assert W.wgmma_heuristic(problem(129, n, k), t) == W.wgmma_heuristic(problem(256, n, k), t)


def test_a_narrow_weight_gets_no_wider_tile_than_it_fills():
    """A wider tile is taken only where it makes fewer column tiles (a review's find: with
    N <= 64, 256-wide tiles did 4x the wgmma work for the same tiles)."""
    for m in (17, 100, 200, 3500, 8192):
        for n in (1, 40, 64):
            assert W.wgmma_heuristic(problem(m, n, 4096), sm90()).values["BN"] == 64, (m, n)
    for m in (128, 8192):
        assert W.wgmma_heuristic(problem(m, 100, 4096), sm90()).values["BN"] <= 128


def test_the_wave_is_the_targets_sm_count():
    """The heuristic fills one wave of the target's SMs: a cluster of two at M = 32 on 4096 x
    4096 where 132 SMs hold twice the tiles, none on a part with half the SMs."""
    p = problem(32, 4096, 4096)
    full = W.wgmma_heuristic(p, sm90())
    half = W.wgmma_heuristic(p, dataclasses.replace(sm90(), multiprocessor_count=66))
    assert (full.values["SPLIT"], half.values["SPLIT"]) == (2, 1)


def test_targets_say_their_sm_count(cuda):
    assert cuda.target_for_arch("sm_90").multiprocessor_count == 132
    assert cuda.target_for_arch("sm_80").multiprocessor_count == 108
