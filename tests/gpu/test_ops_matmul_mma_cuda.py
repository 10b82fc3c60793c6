"""``matmul/mma`` (sm_80+ tensor cores) on a CUDA GPU, against a float64 reference with the output
poisoned with NaN (every element must be written): the M / N / K of LLM linear layers, odd sizes,
both layouts of ``b``, both dtypes, bias and activations, strided and offset views, every shipped
config. ``kernelkit.force`` makes the mma implementation itself run (a forced implementation that
cannot run a problem is an error, never a silent fallback); without it, torch tensors take cuBLAS.
"""

from __future__ import annotations

import pytest

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit._select.records import Config
from kernelkit.ops import _matmul_mma as MMA

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


def reference(a, b, bias, activation, transpose_b):
    y = a.double() @ (b.double().T if transpose_b else b.double())
    if bias is not None:
        y = y + bias.double()
    return ACT[activation](y)


def heuristic_config(m: int, n: int) -> Config | None:
    """The config mma's heuristic gives an (m, n) problem on this GPU (tables aside)."""
    from kernelkit._backends.registry import get_backend
    from kernelkit._records import Problem

    target = get_backend("cuda").targets()[torch.cuda.current_device()]
    return MMA.mma_heuristic(Problem("matmul", attrs=(("M", m), ("N", n))), target)


def run_mma(a, b, *, bias=None, activation=None, transpose_b=True, config=None, out=None):
    """``ops.matmul`` with mma forced (``config``: its default), into a NaN-poisoned output."""
    n = b.shape[0] if transpose_b else b.shape[1]
    if out is None:
        out = torch.full((*a.shape[:-1], n), float("nan"), device="cuda", dtype=a.dtype)
    with force("matmul", "mma", config):
        choice = ops.matmul.explain(a, b, bias=bias, activation=activation, transpose_b=transpose_b)
        assert choice.choice.impl == "matmul/mma"
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
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    shape = (n, k) if transpose_b else (k, n)
    return a, torch.randn(*shape, device="cuda", generator=g).to(dtype)


# LLM shapes: M in {17, 128, 3500, 8192} x (N, K) in {(4096, 4096), (14336, 4096)}; bfloat16 on a
# linear layer's weight for all, float16 and b as [K, N] for a few (the big ones cost time).
LLM = [(m, n, k, torch.bfloat16, True) for m in (17, 128, 3500, 8192)
       for n, k in ((4096, 4096), (14336, 4096))]  # fmt: skip
LLM += [(128, 4096, 4096, torch.float16, True), (3500, 4096, 4096, torch.float16, False),
        (17, 14336, 4096, torch.bfloat16, False)]  # fmt: skip


@pytest.mark.parametrize(("m", "n", "k", "dtype", "transpose_b"), LLM)
def test_llm_shapes_with_the_heuristics_config(m, n, k, dtype, transpose_b):
    a, b = operands(m, n, k, dtype, transpose_b)
    y = run_mma(a, b, transpose_b=transpose_b, config=heuristic_config(m, n))
    check(y, a, b, transpose_b=transpose_b)


@pytest.mark.parametrize("config", MMA.MMA_CONFIGS, ids=lambda c: c.describe())
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "b_KN"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_every_config_on_ragged_shapes(config, transpose_b, dtype):
    """Partial tiles in M, N and K (K not a multiple of BK), more tile rows than one group of 8,
    and one k-tile only (the pipeline's prologue and drain alone)."""
    for m, n, k in ((1100, 264, 136), (33, 72, 40), (300, 520, 8)):
        a, b = operands(m, n, k, dtype, transpose_b, seed=m)
        check(run_mma(a, b, transpose_b=transpose_b, config=config), a, b, transpose_b=transpose_b)


@pytest.mark.parametrize("activation", [None, "relu", "silu", "gelu"])
@pytest.mark.parametrize("bias_dtype", ["same", torch.float32])
@pytest.mark.parametrize("transpose_b", [True, False], ids=["w_NK", "b_KN"])
def test_bias_and_activation(activation, bias_dtype, transpose_b):
    for dtype in (torch.float16, torch.bfloat16):
        a, b = operands(333, 200, 96, dtype, transpose_b)
        bias = torch.randn(200, device="cuda").to(dtype if bias_dtype == "same" else bias_dtype)
        config = MMA.MMA_CONFIGS[3]  # 64 x 64: quick to compile, 32 specializations here
        y = run_mma(a, b, bias=bias, activation=activation, transpose_b=transpose_b, config=config)
        check(y, a, b, bias, activation, transpose_b)


def test_odd_sizes():
    a, b = operands(33, 72, 40, torch.bfloat16, True)
    check(run_mma(a, b), a, b)
    # 1000 is a multiple of 8: mma takes it (N odd too: element-wise stores)
    for m, n, k in ((1000, 1000, 1000), (1000, 1001, 1000)):
        a, b = operands(m, n, k, torch.float16, True)
        check(run_mma(a, b), a, b)
    a, b = operands(1000, 1000, 1000, torch.bfloat16, False)
    check(run_mma(a, b, transpose_b=False), a, b, transpose_b=False)


@pytest.mark.parametrize(("m", "n", "k", "transpose_b", "reason"), [
    (1000, 1000, 1004, True, "K = 1004 is not a multiple of 8"),
    (64, 1001, 1000, False, "N = 1001 is not a multiple of 8"),
])  # fmt: skip
def test_shapes_mma_refuses_fall_back_and_stay_correct(m, n, k, transpose_b, reason):
    a, b = operands(m, n, k, torch.bfloat16, transpose_b)
    with pytest.raises(kernelkit.ArgumentError, match=reason):
        run_mma(a, b, transpose_b=transpose_b)
    text = ops.matmul.explain(a, b, transpose_b=transpose_b).explain()
    y = ops.matmul(a, b, transpose_b=transpose_b)  # cuBLAS (torch), tiled otherwise
    check(y, a, b, transpose_b=transpose_b)
    with force("matmul", "tiled"):
        check(ops.matmul(a, b, transpose_b=transpose_b), a, b, transpose_b=transpose_b)
    assert "matmul/framework" in text


def test_strided_views_are_copied_then_run():
    base = torch.randn(256, 2 * 264, device="cuda").to(torch.bfloat16)
    a = base[:, :264]  # rows 2 x 264 apart: not contiguous, copied by the op
    w = torch.randn(520, 264, device="cuda").to(torch.bfloat16)
    check(run_mma(a, w), a, w)
    a = base[::2, 264:]  # every other row, from the middle
    check(run_mma(a, w), a, w)
    wt = torch.randn(520, 264, device="cuda").to(torch.bfloat16).T  # [K, N] view of [N, K]
    check(run_mma(base[:, :264], wt, transpose_b=False), base[:, :264], wt, transpose_b=False)


def test_offset_views():
    flat = torch.randn(300 * 264 + 16, device="cuda").to(torch.float16)
    w = torch.randn(264, 264, device="cuda").to(torch.float16)
    aligned = flat[8 : 8 + 300 * 264].view(300, 264)  # 16 bytes in: still aligned
    check(run_mma(aligned, w), aligned, w)
    odd = flat[1 : 1 + 300 * 264].view(300, 264)  # 2 bytes off: cp.async cannot copy it
    with pytest.raises(kernelkit.ArgumentError, match="16-byte boundary"):
        run_mma(odd, w)
    check(ops.matmul(odd, w, transpose_b=True), odd, w)  # the fallback is correct
    with force("matmul", "tiled"):
        check(ops.matmul(odd, w, transpose_b=True), odd, w)


def test_batched_input_and_an_output_view():
    a = torch.randn(3, 100, 192, device="cuda").to(torch.bfloat16)
    w = torch.randn(136, 192, device="cuda").to(torch.bfloat16)
    bias = torch.randn(136, device="cuda")
    y = run_mma(a, w, bias=bias, activation="silu")
    check(y, a, w, bias, "silu")
    # out= a view 2 bytes into its storage: element-wise stores (the kernel checks y's alignment)
    flat = torch.full((300 * 136 + 1,), float("nan"), device="cuda").to(torch.bfloat16)
    out = flat[1:].view(300, 136)
    run_mma(a.reshape(300, 192), w, out=out)
    check(out, a.reshape(300, 192), w)


def test_no_local_memory_in_the_loaded_kernels():
    """What the driver reports for every mma kernel this process loaded: registers within the
    block's share of the register file, no local memory (no spills)."""
    from kernelkit._pipeline import load as _launch

    for config in MMA.MMA_CONFIGS:
        a, b = operands(256, 256, 64, torch.bfloat16, True)
        run_mma(a, b, config=config)
    loaded = [
        p.limits for key, p in list(_launch._loaded.items()) if key[-1].kernel == "ops_matmul_mma"
    ]
    assert len(loaded) >= len(MMA.MMA_CONFIGS)
    for limits in loaded:
        assert limits["local_bytes"] == 0, limits
        assert limits["registers"] <= 255, limits
