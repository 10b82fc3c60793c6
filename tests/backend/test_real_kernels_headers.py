"""Real CUDA kernels that include standard headers and CUB (tests/real_kernels_headers.py holds
them, each citing its repository, path and commit), run on every backend against float64 NumPy
references. On the CPU backend each runs again in checked mode, which must give the same result.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import real_kernels_headers as rk

import kernelkit

RNG = np.random.default_rng(20261127)
DTYPES = {"float32": (np.float32, 1e-5), "float16": (np.float16, 2e-3), "bfloat16": (None, 1e-2)}


def make(k: rk.RealKernel):
    return kernelkit.kernel(k.name, list(k.inputs), list(k.outputs), k.body, header=k.header)


def put(arrays, a, dtype):
    """``a`` (float) as a device array of ``dtype`` (bfloat16 through torch only)."""
    if dtype != "bfloat16":
        return arrays.put(a.astype(DTYPES[dtype][0]))
    if not arrays.use_torch:
        pytest.skip("NumPy has no bfloat16")
    return arrays.put(a.astype(np.float32)).to(arrays.torch.bfloat16)


def get(arrays, x):
    if arrays.use_torch and x.dtype == arrays.torch.bfloat16:
        x = x.float()
    return arrays.get(x).astype(np.float64)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("tokens", "hidden"), [(3, 37), (5, 1000), (2, 2050)])
def test_vllm_rms_norm_cub_block_reduce(arrays, backend, dtype, tokens, hidden):
    x = RNG.standard_normal((tokens, hidden + 3))  # a row stride past the hidden size
    w = RNG.standard_normal(hidden)
    eps = 1e-6
    k = make(rk.RMS_NORM)
    block = min(hidden, 1024)
    outs = []
    for check in (False, True) if backend == "cpu" else (False,):
        xin = put(arrays, x, dtype)
        (y,) = k(
            [xin, np.int64(hidden + 3), put(arrays, w, dtype), eps, tokens, hidden],
            out=[put(arrays, np.zeros((tokens, hidden)), dtype)],
            grid=(tokens * block, 1, 1),
            threadgroup=(block, 1, 1),
            template=[("scalar_t", dtype)],
            check=check,
        )
        outs.append(get(arrays, y))
    xr = x[:, :hidden].astype(DTYPES[dtype][0] or np.float32).astype(np.float64)
    if dtype == "bfloat16":
        xr = get(arrays, put(arrays, x[:, :hidden], dtype))
    wr = get(arrays, put(arrays, w, dtype))
    ref = xr / np.sqrt((xr * xr).mean(axis=1, keepdims=True) + eps) * wr
    tol = DTYPES[dtype][1]
    np.testing.assert_allclose(outs[0], ref, rtol=4 * tol, atol=4 * tol)
    for other in outs[1:]:
        np.testing.assert_array_equal(outs[0], other)


def _moe_align_reference(counts, block_size, max_tokens):
    padded = -(-counts // block_size) * block_size
    cumsum = np.concatenate([[0], np.cumsum(padded)]).astype(np.int32)
    return padded, cumsum


@pytest.mark.parametrize(("batches", "max_tokens", "block_size"), [(5, 64, 16), (37, 40, 32)])
def test_vllm_batched_moe_align_block_scan(arrays, backend, batches, max_tokens, block_size):
    counts = RNG.integers(0, max_tokens + 1, batches).astype(np.int32)
    k = make(rk.BATCHED_MOE_ALIGN)
    size = batches * max(block_size, max_tokens)
    for check in (False, True) if backend == "cpu" else (False,):
        sorted_ids, block_ids, post_pad = k(
            [batches, max_tokens, block_size, arrays.put(counts)],
            out=[
                arrays.put(np.zeros(size, np.int32)),
                arrays.put(np.zeros(size // block_size, np.int32)),
                arrays.put(np.zeros(1, np.int32)),
            ],
            grid=(1024, 1, 1),
            threadgroup=(1024, 1, 1),
            check=check,
        )
        _, cumsum = _moe_align_reference(counts, block_size, max_tokens)
        exp_sorted = np.full(size, batches * max_tokens, np.int32)
        exp_blocks = np.full(size // block_size, -1, np.int32)
        for b in range(batches):
            exp_sorted[cumsum[b] : cumsum[b] + counts[b]] = b * max_tokens + np.arange(counts[b])
            exp_blocks[cumsum[b] // block_size : cumsum[b + 1] // block_size] = b
        np.testing.assert_array_equal(arrays.get(sorted_ids), exp_sorted)
        np.testing.assert_array_equal(arrays.get(block_ids), exp_blocks)
        assert int(arrays.get(post_pad)[0]) == cumsum[-1]


@pytest.mark.parametrize(("experts", "numel", "block_size"), [(8, 100, 16), (61, 3000, 64)])
def test_vllm_moe_align_block_scan(arrays, backend, experts, numel, block_size):
    topk = RNG.integers(0, experts + 2, numel).astype(np.int32)  # some ids past num_experts
    padded_experts = (experts + 31) // 32 * 32
    max_padded = numel + experts * (block_size - 1)
    k = make(rk.MOE_ALIGN)
    for check in (False, True) if backend == "cpu" else (False,):
        sorted_ids, expert_ids, total, cumsum = k(
            [arrays.put(topk), experts, padded_experts, 32, block_size, numel, max_padded],
            out=[
                arrays.put(np.zeros(max_padded, np.int32)),
                arrays.put(np.full(-(-max_padded // block_size), -7, np.int32)),
                arrays.put(np.zeros(1, np.int32)),
                arrays.put(np.zeros(experts + 1, np.int32)),
            ],
            grid=(1024, 1, 1),
            threadgroup=(1024, 1, 1),
            shared_memory=padded_experts * 4,
            template=[("scalar_t", "int32")],
            check=check,
        )
        counts = np.bincount(topk[topk < experts], minlength=experts)
        _, exp_cumsum = _moe_align_reference(counts, block_size, 0)
        exp_ids = np.zeros(-(-max_padded // block_size), np.int32)
        for e in range(experts):
            exp_ids[exp_cumsum[e] // block_size : exp_cumsum[e + 1] // block_size] = e
        np.testing.assert_array_equal(arrays.get(cumsum), exp_cumsum)
        assert int(arrays.get(total)[0]) == exp_cumsum[-1]
        np.testing.assert_array_equal(arrays.get(expert_ids), exp_ids)
        np.testing.assert_array_equal(arrays.get(sorted_ids), np.full(max_padded, numel))


# --- ggml-cuda ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("nrows", "ncols"), [(3, 17), (4, 1000), (2, 5000)])
def test_ggml_argmax(arrays, backend, nrows, ncols):
    x = RNG.integers(-20, 20, (nrows, ncols)).astype(np.float32)  # ties: first index wins
    threads = min(1024, (ncols + 31) // 32 * 32)
    k = make(rk.ARGMAX)
    for check in (False, True) if backend == "cpu" else (False,):
        (dst,) = k(
            [arrays.put(x), np.int64(ncols)],
            out=[arrays.put(np.full(nrows, -5, np.int32))],
            grid=(nrows * threads, 1, 1),
            threadgroup=(threads, 1, 1),
            check=check,
        )
        np.testing.assert_array_equal(arrays.get(dst), x.argmax(axis=1))


def _softmax_rows(nrows, nclasses):
    logits = RNG.standard_normal((nrows, nclasses)) * 3
    labels = np.exp(RNG.standard_normal((nrows, nclasses)))
    return logits.astype(np.float32), (labels / labels.sum(1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("use_shared", [True, False])
@pytest.mark.parametrize(("nrows", "nclasses"), [(5, 10), (3, 333)])
def test_ggml_cross_entropy_loss(arrays, backend, use_shared, nrows, nclasses):
    logits, labels = _softmax_rows(nrows, nclasses)
    k = make(rk.CROSS_ENTROPY)
    lg = logits.astype(np.float64)
    logsm = lg - lg.max(1, keepdims=True)
    logsm -= np.log(np.exp(logsm).sum(1, keepdims=True))
    ref = -(logsm * labels).sum(1) / nrows
    (dst,) = k(
        [arrays.put(logits), arrays.put(labels), nclasses, nrows],
        out=[arrays.put(np.zeros(nrows, np.float32))],
        grid=(nrows * 32, 1, 1),
        threadgroup=(32, 1, 1),
        shared_memory=nclasses * 4 if use_shared else 0,
        template=[("use_shared", use_shared)],
        check=backend == "cpu",
    )
    np.testing.assert_allclose(arrays.get(dst), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("use_shared", [True, False])
def test_ggml_cross_entropy_loss_back(arrays, backend, use_shared):
    nrows, nclasses = 4, 77
    logits, labels = _softmax_rows(nrows, nclasses)
    grad = np.array([0.75], np.float32)
    k = make(rk.CROSS_ENTROPY_BACK)
    lg = logits.astype(np.float64)
    sm = np.exp(lg - lg.max(1, keepdims=True))
    sm /= sm.sum(1, keepdims=True)
    ref = (sm - labels) * 0.75 / nrows
    (dst,) = k(
        [arrays.put(grad), arrays.put(logits), arrays.put(labels), nclasses],
        out=[arrays.put(np.zeros((nrows, nclasses), np.float32))],
        grid=(nrows * 32, 1, 1),
        threadgroup=(32, 1, 1),
        shared_memory=nclasses * 4 if use_shared else 0,
        template=[("use_shared", use_shared)],
        check=backend == "cpu",
    )
    np.testing.assert_allclose(arrays.get(dst), ref, rtol=1e-5, atol=1e-7)


# --- vLLM activations -----------------------------------------------------------------------------
ACTS = {
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "gelu_new": lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * (x + 0.044715 * x**3))),
    "gelu_fast": lambda x: 0.5 * x * (1 + np.tanh(0.79788456 * x * (1 + 0.044715 * x * x))),
    "gelu_quick": lambda x: x / (1 + np.exp(-1.702 * x)),
}
ACT_TOL = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 4e-2}


def _rounded(arrays, a, dtype):
    return get(arrays, put(arrays, a, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("act", "act_first"), [("silu", True), ("silu", False), ("gelu", True),
                                                ("gelu_tanh", True)])  # fmt: skip
def test_vllm_act_and_mul(arrays, backend, dtype, act, act_first):
    tokens, d = 3, 1100
    x = _rounded(arrays, RNG.standard_normal((tokens, 2 * d)) * 2, dtype)
    a, b = x[:, :d], x[:, d:]
    ref = ACTS[act](a) * b if act_first else a * ACTS[act](b)
    (out,) = make(rk.GATED[act])(
        [put(arrays, x, dtype), d],
        out=[put(arrays, np.zeros((tokens, d)), dtype)],
        grid=(tokens * 1024, 1, 1),
        threadgroup=(1024, 1, 1),
        template=[("scalar_t", dtype), ("act_first", act_first)],
        check=backend == "cpu",
    )
    tol = ACT_TOL[dtype]
    np.testing.assert_allclose(get(arrays, out), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("act", ["gelu_new", "gelu_fast", "gelu_quick"])
def test_vllm_activation(arrays, backend, dtype, act):
    tokens, d = 4, 333
    x = _rounded(arrays, RNG.standard_normal((tokens, d)) * 2, dtype)
    (out,) = make(rk.ELEMENTWISE[act])(
        [put(arrays, x, dtype), d],
        out=[put(arrays, np.zeros((tokens, d)), dtype)],
        grid=(tokens * d, 1, 1),
        threadgroup=(d, 1, 1),
        template=[("scalar_t", dtype)],
        check=backend == "cpu",
    )
    tol = ACT_TOL[dtype] * (2 if dtype != "float32" else 1)  # T-rounded intermediates
    np.testing.assert_allclose(get(arrays, out), ACTS[act](x), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_vllm_fatrelu_and_mul(arrays, backend, dtype):
    tokens, d, thr = 2, 513, 0.3
    x = _rounded(arrays, RNG.standard_normal((tokens, 2 * d)), dtype)
    a, b = x[:, :d], x[:, d:]
    (out,) = make(rk.FATRELU)(
        [put(arrays, x, dtype), d, thr],
        out=[put(arrays, np.zeros((tokens, d)), dtype)],
        grid=(tokens * 513, 1, 1),
        threadgroup=(513, 1, 1),
        template=[("scalar_t", dtype)],
        check=backend == "cpu",
    )
    tol = ACT_TOL[dtype]
    np.testing.assert_allclose(get(arrays, out), np.where(a > thr, a, 0) * b, rtol=tol, atol=tol)
