"""``matmul/gemv_bulk`` and ``matmul/gemv_slab`` without a device: every shipped config rendered
and compiled by NVRTC for sm_90 (no spills, no local memory, a block that launches), and the
selection stage: chosen for decode shapes on sm_90 (gemv_slab for M <= 4 and K it takes), refused
with a reason before sm_90, for float32, for [K, N] weights, for K either cannot take, for
misaligned views and for M above a config's rows of x."""

from __future__ import annotations

import dataclasses
import re

import pytest
from test_ops_matmul_mma import SM80_FEATURES, considered, problem, target

import kernelkit
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_bulk as B


@pytest.mark.parametrize("m", [1, 4, 9, 16])
@pytest.mark.parametrize("nk", [(4096, 4096), (8192, 8192), (14336, 4096), (1000, 264)])
def test_gemv_slab_then_gemv_bulk_are_chosen_for_decode_shapes_on_sm90(m, nk):
    choice = select(MM.OP, problem(m, *nk), target()).choice
    if m <= B.SLAB_MAX_M and nk[1] in B.SLAB_K:
        assert (choice.impl, choice.source) == ("matmul/gemv_slab", "heuristic")
        assert (
            choice.config in B.SLAB_CONFIGS and B.slab_fits(problem(m, *nk), choice.config) is None
        )
        rows = choice.config.values["ROWS"]
        assert choice.grid == (-(-nk[0] // rows) * choice.config.threadgroup[0], 1, 1)
        return
    assert (choice.impl, choice.source) == ("matmul/gemv_bulk", "heuristic")
    assert choice.config in B.BULK_CONFIGS
    assert B.bulk_fits(problem(m, *nk), choice.config) is None
    v = choice.config.values
    groups = -(-nk[0] // (8 * v["NT"] * v["WARPS"]))
    assert choice.grid == (-(-groups // v["G"]) * choice.config.threadgroup[0], 1, 1)


@pytest.mark.parametrize(
    ("p", "t", "reason"),
    [
        (problem(4), target("sm_80", SM80_FEATURES), "needs tma"),
        (problem(4), target("sm_80", SM80_FEATURES | {"tma"}), "need sm_90 or newer, not sm_80"),
        (problem(17), target(), "M = 17 > 16"),
        (problem(4, dtype="float32"), target(), "not float32"),
        (problem(4, transpose_b=False), target(), "transpose_b=True"),
        (problem(4, k=4100), target(), "K = 4100 is not a multiple of 8"),
        (problem(4, aligned16=False), target(), "16-byte boundary"),
    ],
    ids=["sm80", "sm80_arch", "M", "float32", "KN", "K", "misaligned"],
)
def test_refusals_name_the_reason(p, t, reason):
    s = select(MM.OP, p, t)
    assert s.choice.impl != "matmul/gemv_bulk"
    assert any(reason in v for v in considered(s, "matmul/gemv_bulk")), considered(
        s, "matmul/gemv_bulk"
    )
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, t, override=Override("gemv_bulk"))


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


def test_a_config_that_does_not_match_the_kernel_is_refused():
    good = B.bulk_config(1, 4, 256, 4, 8)
    assert good in B.BULK_CONFIGS
    assert all(B.bulk_fits(problem(16), c) is None for c in B.BULK_CONFIGS if c.values["MX"] == 16)
    bad = {
        "M above MX": (problem(9), good),
        "threadgroup": (problem(4), dataclasses.replace(good, threadgroup=(256, 1, 1))),
        "shared_memory": (problem(4), dataclasses.replace(good, shared_memory=1024)),
        "missing": (problem(4), dataclasses.replace(good, template=(("NT", 1),))),
        "KC": (problem(4), B.bulk_config(1, 4, 96, 4, 8)),
        "G": (problem(4), B.bulk_config(1, 4, 256, 4, 8, 0)),
        "MX": (problem(4), B.bulk_config(1, 4, 256, 4, 4)),
    }
    for name, (p, config) in bad.items():
        assert B.bulk_fits(p, config) is not None, name
        with pytest.raises(kernelkit.ArgumentError):
            select(MM.OP, p, target(), override=Override("gemv_bulk", config))


def test_the_heuristic_fits_a_small_shared_memory_or_steps_aside():
    small = dataclasses.replace(target(), max_shared_memory_optin_bytes=99 * 1024)
    for m in (1, 16):
        c = B.bulk_heuristic(problem(m), small)
        assert c is not None and c.shared_memory <= 99 * 1024 and c in B.BULK_CONFIGS
    tiny = dataclasses.replace(target(), max_shared_memory_optin_bytes=40 * 1024)
    assert B.bulk_heuristic(problem(1), tiny) is None
    assert select(MM.OP, problem(1), tiny).choice.impl == "matmul/gemv_tc"


def test_the_cuda_backend_has_the_features_gemv_bulk_requires(cuda):
    impl = MM.OP.get("gemv_bulk")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_80").features


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
    template = [*config.template, *MM._common_template(p), ("JPR", B.slab_jpr(p, config))]
    _compiles_clean(cuda, MM._GEMV_SLAB, p, config, template)


def _compiles_clean(cuda, k, p, config, template) -> None:
    from kernelkit._render import arg_types, render_request

    inputs, outputs = arg_types(p)
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), inputs, outputs, template, False
    )
    req = dataclasses.replace(req, options=(*req.options, "--ptxas-options=-v"))
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.binary[:4] == b"\x7fELF"
    report = dict(
        (what, int(n))
        for n, what in re.findall(
            r"(\d+) (registers|bytes stack frame|bytes spill stores|bytes spill loads)", art.log
        )
    )
    assert report["bytes stack frame"] == report["bytes spill stores"] == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log
    assert "warning" not in art.log


def _variants() -> list:
    """Every config with one epilogue; with G = 1 (the others differ only in where a block
    starts), also float16 with a bias and an activation."""
    epilogues = [("bfloat16", None, None), ("float16", "float32", "silu")]
    return [(c, *e) for c in B.BULK_CONFIGS for e in epilogues if c.values["G"] == 1 or not e[1]]


@pytest.mark.parametrize(("config", "dtype", "bias", "act"), _variants())
def test_every_config_compiles_without_spills(cuda, config, dtype, bias, act):
    p = problem(config.values["MX"], dtype=dtype, bias=bias, activation=act)
    assert B.bulk_fits(p, config) is None
    _compiles_clean(cuda, MM._GEMV_BULK, p, config, [*config.template, *MM._common_template(p)])
