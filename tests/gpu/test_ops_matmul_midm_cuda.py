"""``matmul/midm`` (weight-streaming tensor-core tiles, K split over a cluster) on a CUDA GPU,
against a float64 reference with the output poisoned with NaN (every element must be written):
M = 17-256 on the weights of LLM linear layers, odd M / N / K, both layouts of ``b``, both
dtypes, bias and activations, every tile shape and warp layout, SPLIT 1-8 (clusters: sm_90),
and split results identical from run to run (the cluster adds in rank order). ``kernelkit.force``
makes midm itself run (tables name it only for some weights at M = 9-16, on the H200;
``test_tables_matmul_rows_cuda.py`` runs those rows)."""

from __future__ import annotations

import pytest

from kernelkit import ops
from kernelkit._choices import force
from kernelkit._records import Problem
from kernelkit.ops import _matmul_midm as MID

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0),
        reason="mma.sync m16n8k16 and cp.async need sm_80+",
    ),
]
F = torch.nn.functional
ACT = {None: lambda v: v, "relu": F.relu, "silu": F.silu, "gelu": F.gelu}
CLUSTERS = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


def reference(a, b, bias, activation, transpose_b):
    y = a.double() @ (b.double().T if transpose_b else b.double())
    if bias is not None:
        y = y + bias.double()
    return ACT[activation](y)


def run_midm(a, b, config=None, *, bias=None, activation=None, transpose_b=True):
    """``ops.matmul`` with midm forced (``config``: its heuristic's), into a NaN-poisoned out."""
    n = b.shape[0] if transpose_b else b.shape[1]
    out = torch.full((a.shape[0], n), float("nan"), device="cuda", dtype=a.dtype)
    with force("matmul", "midm", config):
        s = ops.matmul.explain(a, b, bias=bias, activation=activation, transpose_b=transpose_b)
        assert s.choice.impl == "matmul/midm", s.explain()
        y = ops.matmul(a, b, bias=bias, activation=activation, transpose_b=transpose_b, out=out)
    assert y is out
    return out


def check(y, a, b, bias=None, activation=None, transpose_b=True, tol=1e-2):
    ref = reference(a, b, bias, activation, transpose_b)
    torch.cuda.synchronize()
    assert not y.isnan().any(), "an output element was not written"
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err <= tol, err


def operands(m, n, k, dtype, transpose_b, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) / 4).to(dtype)
    shape = (n, k) if transpose_b else (k, n)
    return a, torch.randn(*shape, device="cuda", generator=g).to(dtype)


def usable(config) -> bool:
    return config.values["SPLIT"] == 1 or CLUSTERS


WEIGHTS = [(4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096)]


@pytest.mark.parametrize("m", [17, 64, 128, 256])
@pytest.mark.parametrize("nk", WEIGHTS, ids=lambda nk: f"{nk[0]}x{nk[1]}")
def test_llm_weights_with_the_heuristic_config(m, nk):
    a, b = operands(m, *nk, torch.bfloat16, True)
    check(run_midm(a, b), a, b)


# (BM, BN, WM, WN, STAGES, SPLIT) x (M, N, K): a shape and a split each, odd sizes
SHAPES = [
    ((32, 64, 1, 4, 4, 2), (17, 1000, 4104)),
    ((32, 128, 2, 4, 6, 4), (33, 4095, 4096)),
    ((64, 64, 2, 2, 3, 8), (100, 520, 11008)),
    ((64, 256, 2, 4, 4, 8), (64, 4096, 4096)),
    ((128, 128, 2, 2, 4, 1), (256, 136, 1032)),
    ((128, 256, 2, 4, 3, 2), (129, 11008, 4096)),
    ((128, 64, 4, 2, 6, 4), (100, 67, 264)),
    ((64, 32, 2, 2, 6, 2), (17, 40, 8)),  # one k tile: ranks with none add zeros
]


@pytest.mark.parametrize(("values", "mnk"), SHAPES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "b_KN"])
def test_shapes_splits_and_layouts(values, mnk, dtype, transpose_b):
    config = MID.midm_config(*values)
    m, n, k = mnk
    if not transpose_b:
        n = -(-n // 8) * 8  # b [K, N]: N % 8 == 0 (the match rule)
    if not usable(config):
        pytest.skip("SPLIT > 1 needs thread-block clusters (sm_90)")
    a, b = operands(m, n, k, dtype, transpose_b)
    p = Problem("matmul", attrs=(("M", m), ("N", n), ("transpose_b", transpose_b)))
    if MID.midm_fits(p, config) is not None:
        pytest.skip(MID.midm_fits(p, config))
    check(run_midm(a, b, config, transpose_b=transpose_b), a, b, transpose_b=transpose_b)


@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu"])
def test_bias_and_activation(activation):
    a, b = operands(40, 4097, 4096, torch.bfloat16, True)  # odd N: element stores
    bias = torch.randn(4097, device="cuda").to(torch.bfloat16)
    y = run_midm(a, b, bias=bias, activation=activation)
    check(y, a, b, bias, activation)


def test_every_tile_shape_once():
    """Each (BM, BN, warps) of the config list at STAGES 4 and the largest SPLIT usable."""
    seen = {}
    for c in MID.MIDM_CONFIGS:
        v = c.values
        if v["STAGES"] == 4 and usable(c):
            seen[(v["BM"], v["BN"], v["WM"], v["WN"])] = c  # the last: largest SPLIT
    a, b = operands(100, 1100, 2056, torch.bfloat16, True)
    for c in seen.values():
        check(run_midm(a, b, c), a, b)


@pytest.mark.skipif(not CLUSTERS, reason="SPLIT > 1 needs thread-block clusters (sm_90)")
def test_split_results_are_the_same_every_run():
    a, b = operands(64, 4096, 4096, torch.bfloat16, True)
    config = MID.midm_config(64, 128, 1, 4, 4, 4)
    first = run_midm(a, b, config)
    check(first, a, b)
    for _ in range(5):
        assert torch.equal(run_midm(a, b, config), first)


def test_not_selected_unless_named():
    a, b = operands(64, 4096, 4096, torch.bfloat16, True)
    assert ops.matmul.explain(a, b, transpose_b=True).choice.impl != "matmul/midm"
