"""``ops.matmul`` against a float64 reference: every implementation (forced), both weight
layouts, bias and activations, batched inputs, odd sizes, dtypes, out=, and bad arguments."""

from __future__ import annotations

import dataclasses
from math import erf

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _matmul_rules as R

RNG = np.random.default_rng(21)
ACT = {
    None: lambda v: v,
    "relu": lambda v: np.maximum(v, 0),
    "silu": lambda v: v / (1 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2))),
}


def reference(a, w, bias, activation, transpose_b):
    y = a.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64)
    if bias is not None:
        y = y + bias
    return ACT[activation](y)


@pytest.mark.parametrize(
    ("m", "n", "k"), [(1, 37, 64), (3, 64, 136), (16, 40, 256), (17, 33, 72), (70, 9, 40)]
)
@pytest.mark.parametrize("activation", [None, "silu"])
def test_linear_layer_shapes(arrays, m, n, k, activation):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    w = RNG.standard_normal((n, k)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    y = ops.matmul(
        arrays.put(a), arrays.put(w), bias=arrays.put(b), activation=activation, transpose_b=True
    )
    np.testing.assert_allclose(
        arrays.get(y), reference(a, w, b, activation, True), rtol=2e-5, atol=2e-4
    )
    choice = ops.matmul.explain(
        arrays.put(a), arrays.put(w), bias=arrays.put(b), activation=activation, transpose_b=True
    ).choice
    if not arrays.on_gpu:
        assert choice.impl == ("matmul/gemv" if m <= 16 else "matmul/tiled")


@pytest.mark.parametrize("impl", ["gemv", "tiled"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_every_implementation_forced(arrays, impl, activation):
    a = RNG.standard_normal((5, 48)).astype(np.float32)
    w = RNG.standard_normal((30, 48)).astype(np.float32)
    for config in R.GEMV_CONFIGS if impl == "gemv" else R.TILED_CONFIGS:
        forced = {**config.values, "threadgroup": config.threadgroup}
        with force("matmul", impl, forced):
            y = ops.matmul(arrays.put(a), arrays.put(w), activation=activation, transpose_b=True)
        np.testing.assert_allclose(
            arrays.get(y),
            reference(a, w, None, activation, True),
            rtol=2e-5,
            atol=2e-4,
            err_msg=str(forced),
        )


def test_kn_layout_batched_and_out(arrays):
    a = RNG.standard_normal((2, 3, 40)).astype(np.float32)
    b = RNG.standard_normal((40, 24)).astype(np.float32)
    out = arrays.put(np.full((2, 3, 24), np.nan, np.float32))
    y = ops.matmul(arrays.put(a), arrays.put(b), out=out)
    assert y is out
    np.testing.assert_allclose(arrays.get(out), a.astype(np.float64) @ b, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_accumulate_in_float(arrays, dtype):
    if not arrays.use_torch:
        pytest.skip("half dtypes through torch tensors")
    torch = arrays.torch
    tdt = getattr(torch, dtype)
    dev = "cuda" if arrays.on_gpu else "cpu"
    for m in (1, 4, 16, 33):
        a = torch.randn(m, 264, device=dev).to(tdt)
        w = torch.randn(72, 264, device=dev).to(tdt)
        y = ops.matmul(a, w, transpose_b=True)
        assert y.dtype == tdt
        ref = a.double() @ w.double().T
        tol = 0.05 if dtype == "bfloat16" else 0.01
        torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol * 4)


def test_misaligned_views_are_correct(arrays):
    a = RNG.standard_normal(3 * 64 + 1).astype(np.float32)
    w = RNG.standard_normal(20 * 64 + 1).astype(np.float32)
    av = arrays.put(a)[1:].reshape(3, 64)  # 4 bytes off 16-byte alignment
    wv = arrays.put(w)[1:].reshape(20, 64)
    y = ops.matmul(av, wv, transpose_b=True)
    ref = a[1:].reshape(3, 64).astype(np.float64) @ w[1:].reshape(20, 64).T
    np.testing.assert_allclose(arrays.get(y), ref, rtol=2e-5, atol=2e-4)


def test_bad_arguments_name_themselves(arrays):
    a, w = arrays.put(np.ones((2, 8), np.float32)), arrays.put(np.ones((3, 8), np.float32))
    cases = [
        (dict(b=w), "K = 8 but b"),  # [3, 8] as [K, N] has K = 3
        (dict(b=w, transpose_b=True, activation="tanh"), "activation"),
        (dict(b=w, transpose_b="yes"), "transpose_b"),
        (dict(b=w, transpose_b=True, bias=arrays.put(np.ones(2, np.float32))), "bias"),
        (dict(b=arrays.put(np.ones((3, 8), np.float16)), transpose_b=True), "one dtype"),
    ]
    for kwargs, match in cases:
        with pytest.raises(kernelkit.ArgumentError, match=match):
            ops.matmul(a, **kwargs)
    np.testing.assert_allclose(arrays.get(ops.matmul(a, w, transpose_b=True)), np.full((2, 3), 8))


def test_empty_shapes_and_zero_k(arrays):
    a0 = arrays.put(np.zeros((0, 8), np.float32))
    w = arrays.put(np.ones((3, 8), np.float32))
    assert tuple(ops.matmul(a0, w, transpose_b=True).shape) == (0, 3)
    a = arrays.put(np.ones((2, 8), np.float32))
    assert tuple(
        ops.matmul(a, arrays.put(np.ones((0, 8), np.float32)), transpose_b=True).shape
    ) == (2, 0)
    k0 = ops.matmul(
        arrays.put(np.ones((2, 0), np.float32)),
        arrays.put(np.ones((3, 0), np.float32)),
        transpose_b=True,
        bias=arrays.put(np.arange(3, dtype=np.float32)),
        activation="relu",
    )
    np.testing.assert_array_equal(arrays.get(k0), [[0, 1, 2], [0, 1, 2]])


def _decode_configs(impl, torch):
    """(configs, why not) of a decode kernel on this GPU: gemv_tc needs sm_80, gemv_slab and
    gemv_slab_tc sm_90."""
    if impl == "gemv_tc":
        return R.GEMV_TC_CONFIGS, None
    if torch.cuda.get_device_capability() < (9, 0):
        return (), "cp.async.bulk needs sm_90"
    if impl == "gemv_slab_tc":
        return ops._matmul_slab_tc.SLAB_TC_CONFIGS, None
    if impl.startswith("wgmma"):  # wgmma:WS, one copy scheme a case
        if torch.cuda.get_device_capability() != (9, 0):
            return (), "wgmma is an sm_90a instruction"
        ws = int(impl.split(":")[1])
        return tuple(c for c in ops._matmul_wgmma.WGMMA_CONFIGS if c.values["WS"] == ws), None
    return ops._matmul_slab.SLAB_CONFIGS, None


_FITS = {
    "gemv_slab": lambda p, c: ops._matmul_slab.slab_fits(p, c),
    "gemv_slab_tc": lambda p, c: ops._matmul_slab_tc.slab_tc_fits(p, c),
    "wgmma": lambda p, c: ops._matmul_wgmma.wgmma_fits(p, c),
}


@pytest.mark.parametrize(
    "impl",
    ["gemv_tc", "gemv_slab", "gemv_slab_tc", "wgmma:1", "wgmma:2"],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_decode_kernels_every_config_on_the_gpu(arrays, impl, dtype):
    """The tensor-core decode kernels (and wgmma's tiles), forced config by config: odd M, N and
    K (a K tail shorter than a 32-wide step or than a stage, N not a multiple of any n-tile,
    N = 1), bias and activation, outputs poisoned, relative error against float64."""
    if not arrays.on_gpu:
        pytest.skip("mma.sync runs on CUDA GPUs only")
    torch = arrays.torch
    configs, why = _decode_configs(impl, torch)
    if why:
        pytest.skip(why)
    assert configs, f"{impl} has no configs"
    tdt = getattr(torch, dtype)
    shapes = [(1, 4096, 4096), (3, 1000, 4104), (9, 72, 40), (16, 33, 264), (12, 8200, 96)]
    shapes += [(1, 1, 8), (8, 40, 1160)]
    if impl == "gemv_slab":  # M <= 4, K of 2048, 4096 or 8192; N not a multiple of ROWS
        shapes = [(1, 4096, 4096), (3, 1000, 2048), (4, 33, 8192), (1, 1, 4096), (2, 8200, 2048)]
    if impl == "gemv_slab_tc":  # K a divisor of 32768; every M range of the segment shapes
        shapes = [(1, 4096, 4096), (2, 1000, 2048), (4, 33, 8192), (7, 1, 1024), (16, 4100, 4096)]
        shapes += [(11, 300, 512), (3, 8200, 16384)]
    if impl.startswith("wgmma"):  # M past one and several tiles, a K tail inside a k tile, K <
        # SPLIT tiles; x column-major at M = 129 (TMA's maps are made of a contiguous copy)
        impl = "wgmma"
        shapes = [(128, 4096, 4096), (17, 1000, 4104), (100, 72, 40), (256, 33, 264)]
        shapes += [(1, 1, 8), (129, 8200, 96), (300, 130, 1160), (64, 4096, 8192)]
    for m, n, k in shapes:
        # x scaled by 1/4: with N = 1 a single silu(v) is the whole norm, and for v < -88 the
        # float epilogue's exp overflows to a true -0.0 where float64 keeps ~1e-37 (error 1.0);
        # and a tiny silu(v) is a float16 subnormal, good to 6e-8 absolute (the norm's floor)
        torch.manual_seed(m * 7919 + n * 31 + k)
        a = (torch.randn(m, k, device="cuda") / 4).to(tdt)
        if impl == "wgmma" and m == 129:
            a = a.t().contiguous().t()
        w = torch.randn(n, k, device="cuda").to(tdt)
        bias = torch.randn(n, device="cuda")
        ref = torch.nn.functional.silu(a.double() @ w.double().T + bias.double())
        problem = _problem_of(a, w, bias)
        for config in configs:
            if impl in _FITS and _FITS[impl](problem, config) is not None:
                continue  # refused by the config rules (tested without a GPU)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            with force("matmul", impl, config):
                ops.matmul(a, w, bias=bias, activation="silu", transpose_b=True, out=out)
            torch.cuda.synchronize()
            err = ((out.double() - ref).norm() / max(ref.norm().item(), 1e-4)).item()
            assert err <= 1e-2, (m, n, k, config.describe(), err)


def _problem_of(a, w, bias):
    return ops._matmul._RUNNER.problem(
        [a, w, bias], a.dtype, None, ops._matmul._prepare(a, w, bias, "silu", True)[3]
    )[0]


@pytest.mark.parametrize("impl", ["gemv_slab"])
def test_bulk_copy_kernels_take_strided_inputs_and_step_aside_for_misaligned_ones(arrays, impl):
    if not arrays.on_gpu:
        pytest.skip("cp.async.bulk runs on CUDA GPUs only")
    torch = arrays.torch
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("cp.async.bulk needs sm_90")
    flat = torch.randn(3 * 2048 + 8, device="cuda").to(torch.bfloat16)
    wide = torch.randn(300, 4096, device="cuda").to(torch.bfloat16)
    w = wide[:, ::2]  # not row-contiguous: copied by the op, then aligned
    a = flat[8:].reshape(3, 2048)  # 16 bytes in: aligned
    ref = a.double() @ w.double().T
    with force("matmul", impl):
        y = ops.matmul(a, w, transpose_b=True)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 1e-2
    off = flat[1 : 1 + 3 * 2048].reshape(3, 2048)  # 2 bytes off: refused, with the reason
    with pytest.raises(kernelkit.ArgumentError, match=r"16-byte boundary \(bulk copies need it\)"):
        with force("matmul", impl):
            ops.matmul(off, w.contiguous(), transpose_b=True)
    y = ops.matmul(a, w, transpose_b=True)  # the next call works
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 1e-2


def test_gemv_tc_misaligned_and_strided_inputs_on_the_gpu(arrays):
    if not arrays.on_gpu:
        pytest.skip("mma.sync runs on CUDA GPUs only")
    torch = arrays.torch
    flat = torch.randn(7 * 520 + 1, device="cuda").to(torch.bfloat16)
    a = flat[1:].reshape(7, 520)  # 2 bytes off 16-byte alignment: element loads
    wide = torch.randn(300, 1040, device="cuda").to(torch.bfloat16)
    w = wide[:, ::2]  # not row-contiguous: copied by the op
    ref = a.double() @ w.double().T
    for stages in (0, 4):  # a misaligned view takes the register path in both
        with force("matmul", "gemv_tc", R.gemv_tc_config(2, 4, 2, stages)):
            y = ops.matmul(a, w, transpose_b=True)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        assert err <= 1e-2, (stages, err)


def test_gemv_tc_is_refused_where_it_cannot_run(arrays):
    a = arrays.put(RNG.standard_normal((2, 64)).astype(np.float32))
    w = arrays.put(RNG.standard_normal((8, 64)).astype(np.float32))
    if arrays.on_gpu:
        pytest.skip("torch CUDA tensors take the framework microkernel before any heuristic")
    text = str(ops.matmul.explain(a, w, transpose_b=True))
    assert "gemv_tc" in text and "mma_sync" in text  # the CPU backend has no tensor cores


def test_framework_microkernel_writes_out_directly_or_through_a_copy():
    """The cuBLAS path (run here on CPU tensors, calling the implementation itself): into out=
    with torch.mm/addmm where nothing follows the product, else computed and copied."""
    torch = pytest.importorskip("torch")
    from kernelkit.ops import _matmul

    x, w = torch.randn(5, 24), torch.randn(7, 24)
    bias = torch.randn(7)
    for transpose_b, act, b in [(True, None, None), (True, None, bias), (False, None, bias),
                                (True, "relu", bias), (False, "silu", None)]:  # fmt: skip
        wt = w if transpose_b else w.t().contiguous()
        options = {"transpose_b": transpose_b, "activation": act,
                   "bias": None if b is None else "float32", "framework": "torch",
                   "aligned16": None}  # fmt: skip
        out = torch.full((5, 7), float("nan"))
        problem, _, _ = _matmul._RUNNER.problem([x, wt, b], x.dtype, out, options)
        got = _matmul.OP.get("framework").run(None, (problem, (x, wt, b), x.dtype, out))
        assert got is out
        want = x.double() @ w.double().t() + (0 if b is None else b.double())
        want = {None: want, "relu": torch.relu(want), "silu": torch.nn.functional.silu(want)}[act]
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def _misaligned_twin(x):
    """Two views shaped and strided as ``x`` (the same signature), one on a 16-byte boundary,
    one 2 bytes further (they overlap: fill each just before its use)."""
    flat = np.empty(x.size + 8, x.dtype)
    base = next(i for i in range(8) if (flat[i:].ctypes.data & 15) == 0)
    return (flat[base : base + x.size].reshape(x.shape),
            flat[base + 1 : base + 1 + x.size].reshape(x.shape))  # fmt: skip


@pytest.mark.parametrize("decided_by_alignment", [False, True])
def test_the_alignment_is_read_per_call_only_where_it_picks_the_kernel(
    backend, monkeypatch, decided_by_alignment
):
    """16-bit matmul: where both alignments give the same kernel (the CPU's tiled; torch's
    own matmul on CUDA), a warm call reads no pointer; where they do not, a call of the same
    signature on a view 2 bytes off takes the kernel chosen for it, and both are right."""
    if backend != "cpu":
        pytest.skip("the decision is patched on the CPU backend")
    from kernelkit.ops import _matmul as MM

    choose = MM._RUNNER.choose
    seen = []

    def patched(inputs, dtype, out, options):
        problem, choice = choose(inputs, dtype, out, options)
        seen.append(options.get("aligned16"))
        if decided_by_alignment and options.get("aligned16"):
            other = next(c for c in R.TILED_CONFIGS if c != choice.config)
            choice = dataclasses.replace(
                choice, impl="matmul/tiled", config=other, grid=R.tiled_grid(problem, other)
            )
        return problem, choice

    launcher = MM._RUNNER._launcher
    used = []

    def recording(choice, problem, output_dtype):  # no .direct: every call comes through here
        launch = launcher(choice, problem, output_dtype)

        def run(inputs, out):
            used.append(choice.impl)
            return launch(inputs, out)

        return run

    monkeypatch.setattr(MM._RUNNER, "choose", patched)
    monkeypatch.setattr(MM._RUNNER, "_launcher", recording)
    monkeypatch.setattr(MM, "_TABLE", {})
    x16 = RNG.standard_normal((3, 24)).astype(np.float16)
    w = RNG.standard_normal((10, 24)).astype(np.float16)
    aligned, shifted = _misaligned_twin(x16)
    want = reference(x16, w, None, None, True)
    for view in (aligned, shifted, aligned, shifted):
        view[...] = x16
        y = ops.matmul(view, w, transpose_b=True)
        np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2, atol=2e-2)
    (run,) = MM._TABLE.values()
    assert (run.__name__ == "run_aligned") is decided_by_alignment
    assert {False, True} <= set(seen)  # both alignments were asked at the first call
    if decided_by_alignment:  # each view ran the kernel chosen for its own alignment
        assert used == ["matmul/tiled", "matmul/gemv"] * 2
    else:
        assert len(set(used)) == 1 and len(used) == 4
