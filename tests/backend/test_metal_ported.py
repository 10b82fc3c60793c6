"""Metal kernels shipped by MLX packages, each run through ``kernelkit.metal_kernel`` with its
own text unchanged (``metal_catalog``: the wheels mlx-lm 0.32.2, mlx-vlm 0.7.10, mlx-audio
0.6.2; MIT, the phonon kernel Apache-2.0), called as the package calls it, on MLX arrays (MLX's
CPU build), against float64 NumPy references written from each package's own non-kernel path.
``test_metal_public_kernels.py`` has the older mlx-lm kernels (gated delta, SSM, RWKV-7,
BitLinear, the losses); none is repeated here."""

from __future__ import annotations

import math

import metal_catalog as cat
import numpy as np
import pytest

import kernelkit

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install 'mlx[cpu]')")

RNG = np.random.default_rng(25)
TOL = {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}
DTYPES = ["float32", "float16", "bfloat16"]


def _kernel(var: str):
    args = dict(getattr(cat, var + "_ARGS"))
    header = getattr(cat, var + "_HEADER", "")
    return kernelkit.metal_kernel(source=getattr(cat, var), header=header, **args)


def _mx(a: np.ndarray, dtype: str = "float32"):
    """An MLX array of ``a`` in ``dtype`` (MLX rounds, as a model's weights are rounded)."""
    return mx.array(np.asarray(a, np.float32)).astype(getattr(mx, dtype))


def _np(a) -> np.ndarray:
    """An MLX result as float64 (bfloat16 through float32: NumPy has no bfloat16 buffers)."""
    if a.dtype == mx.bfloat16:
        a = a.astype(mx.float32)
    return np.array(a).astype(np.float64)


def _round(x: np.ndarray, dtype: str) -> np.ndarray:
    """``static_cast<T>`` of float64 values, back in float64."""
    return _np(_mx(np.asarray(x, np.float32), dtype))


def _scalar(value, dtype=None):
    return mx.array(value, dtype=dtype or mx.float32)  # mlx-lm's _common.scalar


def _row_threads(dim: int) -> int:
    return min(1024, max(32, dim // 8 // 32 * 32))  # mlx-lm's _common.row_threads


def _close(got, want, dtype, scale=1.0):
    tol = TOL[dtype] * scale
    np.testing.assert_allclose(_np(got), want, rtol=tol, atol=tol)


def _rms(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


# --- mlx-lm 0.32.2 ---------------------------------------------------------------------------


def _routing_ref(logits, bias, k, mult, eps, scale):
    score = 1 / (1 + np.exp(-logits * mult))  # the kernel's branch-free sigmoid
    biased = score + bias
    inds = np.argsort(-biased, axis=-1, kind="stable")[:, :k]  # ties: the lower expert
    w = np.take_along_axis(score, inds, -1)
    return inds, w / (w.sum(-1, keepdims=True) + eps) * scale


# Experts up to 96 put a SIMD-group max after a data-dependent branch: the CPU backend once
# grouped lanes by the collective's return address, and g++ -O2 duplicated the inlined call, so
# E = 64 and 96 gave wrong experts (issue 25 item 7); lanes now meet by source site.


@pytest.mark.parametrize(
    ("experts", "dtype"),
    [
        (32, "float32"),
        (64, "float32"),
        (96, "bfloat16"),
        (128, "float32"),
        (160, "bfloat16"),
    ],
)
def test_expert_routing(experts, dtype):
    tokens, k = 6, 4
    logits = RNG.standard_normal((tokens, experts)) * 2
    bias = RNG.standard_normal(experts) * 0.1
    kern = _kernel("EXPERT_ROUTING")
    lg = _mx(logits, dtype)
    inds, weights = kern(
        inputs=[lg, _mx(bias), _scalar(1.5), _scalar(1e-20), _scalar(2.5)],
        template=[("E", experts), ("K", k)],
        grid=(lg.size // experts * 32, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[(*lg.shape[:-1], k)] * 2,
        output_dtypes=[mx.uint32, mx.float32],
    )
    want_i, want_w = _routing_ref(_np(lg), _np(_mx(bias)), k, 1.5, 1e-20, 2.5)
    np.testing.assert_array_equal(np.array(inds), want_i)
    np.testing.assert_allclose(np.array(weights), want_w, rtol=1e-5, atol=1e-6)


def _qk_inputs(dtype, n, hq, hk, d):
    qkvg = _mx(RNG.standard_normal((n, 2 * (hq + hk) * d)) * 3, dtype)
    x = _np(qkvg)[:, : (hq + hk) * d].reshape(n, hq + hk, d)
    return qkvg, x


def _qk_ref(x, hq, dtype, eps, scale):
    y = _round(_rms(x, eps), dtype)
    return _round(y[:, :hq] * scale, dtype), y[:, hq:]


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm(dtype):
    n, hq, hk, d, eps, scale = 3, 4, 2, 80, 1e-6, 0.125  # D = 80: a partial last lane pass
    qkvg, x = _qk_inputs(dtype, n, hq, hk, d)
    rows = qkvg.size // qkvg.shape[-1] * (hq + hk)
    q, k = _kernel("QK_NORM")(
        inputs=[qkvg, _scalar(scale), _scalar(eps)],
        template=[("T", qkvg.dtype), ("D", d), ("HQ", hq), ("HK", hk)],
        grid=(rows * 32, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[(n, hq, d), (n, hk, d)],
        output_dtypes=[qkvg.dtype, qkvg.dtype],
    )
    want_q, want_k = _qk_ref(x, hq, dtype, eps, scale)
    assert q.dtype == qkvg.dtype
    _close(q, want_q, dtype)
    _close(k, want_k, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope(dtype):
    batch, seq, hq, hk, d, eps, scale, base = 2, 3, 2, 2, 64, 1e-6, 0.5, 10000.0
    n = batch * seq
    qkvg, x = _qk_inputs(dtype, n, hq, hk, d)
    offset = mx.array([5, 9], dtype=mx.int32)
    rows = n * (hq + hk)
    q, k = _kernel("QK_NORM_ROPE")(
        inputs=[qkvg.reshape(batch, seq, -1), _scalar(scale), _scalar(eps), offset,
                _scalar(seq, mx.int32), _scalar(math.log2(base))],
        template=[("T", qkvg.dtype), ("D", d), ("HQ", hq), ("HK", hk), ("OFFSET_STRIDE", 1)],
        grid=(rows * 32, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[(batch, seq, hq, d), (batch, seq, hk, d)],
        output_dtypes=[qkvg.dtype, qkvg.dtype],
    )  # fmt: skip
    yq, yk = _qk_ref(x, hq, dtype, eps, scale)
    pos = (np.arange(n) % seq + np.array([5, 9])[np.arange(n) // seq])[:, None, None]
    theta = pos * base ** (-(np.arange(d) // 2) / (d / 2))
    c, s = np.cos(theta), np.sin(theta)

    def rope(y):  # mx.fast.rope(traditional=True): pairs (2i, 2i + 1)
        other = y.reshape(*y.shape[:-1], d // 2, 2)[..., ::-1].reshape(y.shape)
        even = np.arange(d) % 2 == 0
        return np.where(even, y * c - other * s, other * s + y * c)

    _close(q, rope(yq).reshape(batch, seq, hq, d), dtype, 2)
    _close(k, rope(yk).reshape(batch, seq, hk, d), dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_post_expert_norm_combine(dtype):
    rows, k, d, eps = 3, 4, 300, 1e-5
    experts = _mx(RNG.standard_normal((rows, k, d)), dtype)
    weights = _mx(RNG.random((rows, k)), dtype)
    norm_w = _mx(RNG.random(d) + 0.5, dtype)
    tg = min(1024, 2 * _row_threads(d))
    (out,) = _kernel("EXPERT_COMBINE")(
        inputs=[experts, weights, norm_w, _scalar(eps)],
        template=[("T", experts.dtype), ("D", d), ("K", k), ("TG", tg)],
        grid=(experts.size // (k * d) * tg, 1, 1),
        threadgroup=(tg, 1, 1),
        output_shapes=[(*experts.shape[:-2], d)],
        output_dtypes=[experts.dtype],
    )
    v = _np(experts) * _np(norm_w)
    ew = _np(weights)[..., None]
    want = (_rms(v, eps) * ew).sum(1)  # the kernel rounds its running sum to T after each expert
    _close(out, want, dtype, 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_sigmoid_gate_on_a_transposed_view(dtype):
    b, h, seq, d, eps = 2, 3, 5, 72, 1e-6
    x = _mx(RNG.standard_normal((b, seq, h, d)), dtype).transpose(0, 2, 1, 3)  # strided (B,H,L,D)
    g = _mx(RNG.standard_normal((b, seq, h * d)), dtype)
    (out,) = _kernel("NORM_GATE")(
        inputs=[x, g, _scalar(eps)],
        template=[("T", x.dtype), ("D", d)],
        grid=(b * seq * h * 32, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[(b, seq, h * d)],
        output_dtypes=[x.dtype],
    )
    xs = _rms(_np(x), eps).transpose(0, 2, 1, 3).reshape(b, seq, h * d)
    _close(out, xs / (1 + np.exp(-_np(g))), dtype)


def _norm_add_inputs(dtype, rows, d, post_scale):
    branch = _mx(RNG.standard_normal((rows, d)) * 2, dtype)
    stream = _mx(RNG.standard_normal((rows, d)))
    alpha, beta = _mx(RNG.random(d) + 0.5), _mx(RNG.random(d))
    post_w = _mx(RNG.random(d) + 0.5, dtype) if post_scale else alpha
    return [branch, stream, alpha, beta, post_w]


def _norm_add_ref(ins, dtype, post_scale, post_eps):
    branch, stream, alpha, beta, post_w = (_np(a) for a in ins)
    v = _round(post_w * branch, dtype) if post_scale else branch
    n = _round(_rms(v, post_eps), dtype)
    return alpha * stream + beta * n


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("post_scale", [True, False])
def test_norm_add_norm_and_norm_add(dtype, post_scale):
    rows, d, post_eps, pre_eps = 3, 520, 1e-6, 1e-5
    ins = _norm_add_inputs(dtype, rows, d, post_scale)
    pre_w = _mx(RNG.random(d) + 0.5, dtype)
    tg = _row_threads(d)
    kw = dict(
        template=[("T", ins[0].dtype), ("D", d), ("TG", tg), ("POST_SCALE", post_scale)],
        grid=(ins[0].size // d * tg, 1, 1),
        threadgroup=(tg, 1, 1),
    )
    new_stream, normed = _kernel("NORM_ADD_NORM")(
        inputs=[*ins, _scalar(post_eps), pre_w, _scalar(pre_eps)],
        output_shapes=[ins[1].shape, ins[0].shape],
        output_dtypes=[mx.float32, ins[0].dtype],
        **kw,
    )
    (alone,) = _kernel("NORM_ADD")(inputs=[*ins, _scalar(post_eps)],
                                   output_shapes=[ins[1].shape], output_dtypes=[mx.float32],
                                   **kw)  # fmt: skip
    want = _norm_add_ref(ins, dtype, post_scale, post_eps)
    _close(new_stream, want, dtype, 4)
    np.testing.assert_array_equal(np.array(alone), np.array(new_stream))
    _close(normed, _rms(_np(new_stream), pre_eps) * _np(pre_w), dtype, 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pre_norm(dtype):
    rows, d, eps = 4, 200, 1e-6
    stream = _mx(RNG.standard_normal((rows, d)) * 3)
    pre_w = _mx(RNG.random(d) + 0.5, dtype)
    tg = _row_threads(d)
    (normed,) = _kernel("PRE_NORM")(
        inputs=[stream, pre_w, _scalar(eps)],
        template=[("T", getattr(mx, dtype)), ("D", d), ("TG", tg)],
        grid=(stream.size // d * tg, 1, 1),
        threadgroup=(tg, 1, 1),
        output_shapes=[stream.shape],
        output_dtypes=[getattr(mx, dtype)],
    )
    _close(normed, _rms(_np(stream), eps) * _np(pre_w), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kimi_k3_attnres_mix(dtype):
    k, n, d, eps, threads = 3, 4, 700, 1e-6, 512
    raw = _mx(RNG.standard_normal((k, n, d)), dtype)
    inv_rms = _mx(RNG.random((k, n)) + 0.5)
    partial = _mx(RNG.standard_normal((n, d)), dtype)
    w_eff = _mx(RNG.standard_normal(d) * 0.05, dtype)
    (out,) = _kernel("ATTN_RES")(
        inputs=[raw, inv_rms, partial, w_eff, mx.array([eps], dtype=mx.float32), n],
        template=[("InT", partial.dtype), ("K", k), ("D", d), ("THREADS", threads)],
        grid=(threads, n, 1),
        threadgroup=(threads, 1, 1),
        output_shapes=[partial.shape],
        output_dtypes=[partial.dtype],
    )
    # kimi_k3's _attn_res_combine (the package's path without the kernel), in float64
    r, pf, w = _np(raw), _np(partial), _np(w_eff)
    p_logit = (pf @ w) / np.sqrt((pf * pf).mean(-1) + eps)
    logits = np.concatenate([(r @ w) * _np(inv_rms), p_logit[None]])
    p = np.exp(logits - logits.max(0))
    p /= p.sum(0)
    want = (p[:-1, :, None] * r).sum(0) + p[-1, :, None] * pf
    _close(out, want, dtype, 2)


@pytest.mark.parametrize("iters", [1, 3, 20])
def test_deepseek_v41_sinkhorn(iters):
    count, hc = 37, 4
    comb = _mx(RNG.random((count, hc, hc)) + 0.1)
    eps = mx.array([1e-6], dtype=mx.float32)
    (out,) = _kernel("SINKHORN")(
        inputs=[comb, eps],
        template=[("HC", hc), ("ITERS", iters)],
        grid=(count, 1, 1),
        threadgroup=(min(count, 256), 1, 1),
        output_shapes=[comb.shape],
        output_dtypes=[mx.float32],
    )
    c = _np(comb)  # deepseek_v41's _sinkhorn without the kernel
    c = c / (c.sum(-2, keepdims=True) + 1e-6)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdims=True) + 1e-6)
        c = c / (c.sum(-2, keepdims=True) + 1e-6)
    _close(out, c, "float32", 5)


# --- mlx-audio 0.6.2 -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])  # the package's fast path takes these
def test_mossformer2_depthwise_conv1d(dtype):
    b, length, c, ksize = 2, 29, 12, 7
    pad = (ksize - 1) // 2
    x = _mx(RNG.standard_normal((b, length, c)), dtype)
    w = _mx(RNG.standard_normal((c, ksize, 1)) * 0.3, dtype)
    out_len = length + 2 * pad - ksize + 1
    params = mx.array([b, length, c, ksize, pad, out_len], dtype=mx.int32)
    (out,) = _kernel("DEPTHWISE_CONV1D")(
        inputs=[x, w, params],
        template=[("T", x.dtype)],
        grid=(c, out_len, b),
        threadgroup=(1, 1, 1),
        output_shapes=[[b, out_len, c]],
        output_dtypes=[x.dtype],
    )
    xp = np.pad(_np(x), ((0, 0), (pad, pad), (0, 0)))
    wk = _np(w)[:, :, 0]
    want = sum(xp[:, j : j + out_len, :] * wk[:, j] for j in range(ksize))
    _close(out, want, dtype, 3)


def test_phonon_unpack_base5():
    out_features, in_features = 5, 48
    symbols = RNG.integers(0, 5, (out_features, in_features + 2))  # + padding symbols
    groups = symbols.reshape(out_features, -1, 10)
    payload = (groups * 5 ** np.arange(10)).sum(-1)
    packed = np.stack([payload & 255, (payload >> 8) & 255, payload >> 16], -1)
    q = mx.array(packed.reshape(out_features, -1).astype(np.uint8))
    shape = (out_features, in_features // 16)
    count = out_features * shape[1]
    base, residual = _kernel("PHONON_UNPACK")(
        inputs=(q, mx.array(in_features, dtype=mx.uint32)),
        grid=(count, 1, 1),
        threadgroup=(min(256, count), 1, 1),
        output_shapes=(shape, shape),
        output_dtypes=(mx.uint32, mx.uint32),
    )
    # packed.py's _unpack_base5_codes_fallback
    sym = symbols[:, :in_features].reshape(out_features, -1, 16)
    shifts = 2 * np.arange(16)
    want_b = (np.array([0, 0, 1, 2, 2])[sym] << shifts).sum(-1)
    want_r = (np.array([0, 2, 1, 0, 2])[sym] << shifts).sum(-1)
    np.testing.assert_array_equal(np.array(base), want_b)
    np.testing.assert_array_equal(np.array(residual), want_r)


# --- mlx-vlm 0.7.10 --------------------------------------------------------------------------


def test_nearest_interpolation():
    b, c, in_h, in_w, out_h, out_w = 2, 3, 5, 7, 11, 4
    x = _mx(RNG.standard_normal((b, c, in_h, in_w)))
    dims = mx.array([b, c, in_h, in_w, out_h, out_w], dtype=mx.int32)
    (out,) = _kernel("NEAREST_INTERP")(
        inputs=[x.reshape(-1), dims],
        grid=(out_w, out_h, b * c),
        threadgroup=(8, 8, 1),  # the package's get_optimal_threadgroup(4, 11)
        output_shapes=[(b * c * out_h * out_w,)],
        output_dtypes=[mx.float32],
    )
    yi = np.minimum(np.floor(np.arange(out_h) * (in_h / out_h)).astype(int), in_h - 1)
    xi = np.minimum(np.floor(np.arange(out_w) * (in_w / out_w)).astype(int), in_w - 1)
    want = _np(x)[:, :, yi][:, :, :, xi]
    np.testing.assert_array_equal(_np(out).reshape(want.shape), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vlm_grid_sample(dtype):
    b, h, w, c, gn, gm = 2, 6, 9, 5, 4, 3
    x = _mx(RNG.standard_normal((b, h, w, c)), dtype)
    # inside the image: the kernel reads all four corners before it masks them (MLX's documented
    # grid_sample does too), so a corner off the image would read outside x
    lim = np.array([1 - 1.5 / w, 1 - 1.5 / h])
    grid = _mx(RNG.uniform(-lim, lim, (b, gn, gm, 2)), dtype)
    out_shape = (b, gn, gm, c)
    (out,) = _kernel("VLM_GRID_SAMPLE")(
        inputs=[x, grid],
        template=[("T", x.dtype)],
        output_shapes=[out_shape],
        output_dtypes=[x.dtype],
        grid=(math.prod(out_shape), 1, 1),
        threadgroup=(256, 1, 1),
    )
    xs, g = _np(x), _np(grid)
    ix, iy = ((g[..., 0] + 1) * w - 1) / 2, ((g[..., 1] + 1) * h - 1) / 2
    x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
    fx, fy = (ix - x0)[..., None], (iy - y0)[..., None]
    bi = np.arange(b)[:, None, None]
    want = (xs[bi, y0, x0] * (1 - fx) * (1 - fy) + xs[bi, y0, x0 + 1] * fx * (1 - fy)
            + xs[bi, y0 + 1, x0] * (1 - fx) * fy + xs[bi, y0 + 1, x0 + 1] * fx * fy)  # fmt: skip
    _close(out, want, dtype, 2)


def test_separable_interpolate():
    b, h, w, c, out_h, out_w, ty, tx = 2, 6, 5, 3, 4, 7, 3, 2
    x = _mx(RNG.standard_normal((b, h, w, c)))
    iy = mx.array(RNG.integers(0, h, (out_h, ty)).astype(np.int32))
    ix = mx.array(RNG.integers(0, w, (out_w, tx)).astype(np.int32))
    wy, wx = _mx(RNG.random((out_h, ty))), _mx(RNG.random((out_w, tx)))
    (out,) = _kernel("SEPARABLE_INTERP")(
        inputs=[x.astype(mx.float32), iy, wy, ix, wx],
        grid=(out_w * c, out_h, b),
        threadgroup=(min(256, out_w * c), 1, 1),
        output_shapes=[(b, out_h, out_w, c)],
        output_dtypes=[mx.float32],
    )
    xs = _np(x)
    rows = np.zeros((b, out_h, w, c))
    for a in range(ty):
        rows += xs[:, np.array(iy)[:, a]] * _np(wy)[:, a][None, :, None, None]
    want = np.zeros((b, out_h, out_w, c))
    for t in range(tx):
        want += rows[:, :, np.array(ix)[:, t]] * _np(wx)[:, t][None, None, :, None]
    _close(out, want, "float32", 5)


# --- the same texts under NVRTC (no GPU needed): what the GPU runs compiles, in bf16 too -------

S32, SI32, A = ("scalar_array", "float32"), ("scalar_array", "int32"), "float32"
NVRTC = {  # var: (input kinds, output dtypes, template); "H" is the 16-bit type under test
    "EXPERT_ROUTING": (["H", A, S32, S32, S32], ["uint32", A], [("E", 64), ("K", 4)]),
    "QK_NORM": (["H", S32, S32], ["H", "H"], [("T", "H"), ("D", 80), ("HQ", 4), ("HK", 2)]),
    "QK_NORM_ROPE": (
        ["H", S32, S32, "int32", SI32, S32],
        ["H", "H"],
        [("T", "H"), ("D", 64), ("HQ", 2), ("HK", 2), ("OFFSET_STRIDE", 1)],
    ),
    "EXPERT_COMBINE": (["H", "H", "H", S32], ["H"], [("T", "H"), ("D", 300), ("K", 4), ("TG", 64)]),
    "NORM_GATE": (["H", "H", S32], ["H"], [("T", "H"), ("D", 72)]),
    "NORM_ADD_NORM": (
        ["H", A, A, A, "H", S32, "H", S32],
        [A, "H"],
        [("T", "H"), ("D", 520), ("TG", 64), ("POST_SCALE", True)],
    ),
    "PRE_NORM": ([A, "H", S32], ["H"], [("T", "H"), ("D", 200), ("TG", 32)]),
    "ATTN_RES": (
        ["H", A, "H", "H", A, ("scalar", "int32")],
        ["H"],
        [("InT", "H"), ("K", 3), ("D", 700), ("THREADS", 512)],
    ),
    "DEPTHWISE_CONV1D": (["H", "H", "int32"], ["H"], [("T", "H")]),
    "VLM_GRID_SAMPLE": (["H", "H"], ["H"], [("T", "H")]),
}


@pytest.mark.parametrize("h", ["float16", "bfloat16"])
@pytest.mark.parametrize("var", sorted(NVRTC))
def test_ported_kernel_compiles_with_nvrtc(cuda, var, h):
    from kernelkit._dtypes import DTYPES as KK_DTYPES
    from kernelkit._pipeline.render import render_request

    in_kinds, out_types, template = NVRTC[var]
    sub = lambda t: h if t == "H" else t
    args = getattr(cat, var + "_ARGS")
    mk = kernelkit.metal_kernel(source=getattr(cat, var), header=getattr(cat, var + "_HEADER", ""),
                                **{**args, "name": "nv_" + args["name"]})  # fmt: skip
    ins, outs = tuple(args["input_names"]), tuple(args["output_names"])
    zero_d = tuple(n for n, t in zip(ins, in_kinds) if isinstance(t, tuple) and t[0] != "scalar")
    k = mk._kernel(ins, outs, zero_d, args.get("ensure_row_contiguous", True))
    kinds = [t if isinstance(t, tuple) else ("array", sub(t)) for t in in_kinds]
    kinds += [("scalar", "int32")] * 3  # the grid
    _, req = render_request(
        k.spec,
        cuda,
        cuda.target_for_arch("sm_90"),
        [(kind, KK_DTYPES[d]) for kind, d in kinds],
        [KK_DTYPES[sub(d)] for d in out_types],
        [(n, KK_DTYPES[sub(v)] if isinstance(v, str) else v) for n, v in template],
        False,
    )
    assert cuda.compile(req).binary
