"""Built-in row ops (softmax, rms_norm, layer_norm) against a float64 reference: dtypes, odd
and long rows, 3-D and non-contiguous inputs, other dims, out=, every kind of config (forced),
on the CPU backend with NumPy and torch CPU tensors, and on CUDA when present."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._choices import force

RNG = np.random.default_rng(11)
TOL = {"float32": 2e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rms(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def _layer(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


@pytest.fixture(params=["float32", "float16", "bfloat16"])
def dtype(request, arrays):
    if request.param == "bfloat16" and not arrays.use_torch:
        pytest.skip("NumPy has no bfloat16 without ml_dtypes; covered with torch tensors")
    return request.param


def put(arrays, a, dtype):
    """A device array of ``dtype`` holding ``a`` (bfloat16 through torch)."""
    if dtype == "bfloat16":
        t = arrays.torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(arrays.torch.bfloat16)
        return t.cuda() if arrays.on_gpu else t
    return arrays.put(np.asarray(a, dtype))


def get(arrays, y):
    if hasattr(y, "float"):
        y = y.float()
    return arrays.get(y).astype(np.float64)


def exact(arrays, a, dtype):
    """The values the device array holds, in float64 (inputs rounded to dtype first)."""
    return get(arrays, put(arrays, a, dtype))


SHAPES = [(1, 1), (3, 7), (4, 33), (2, 1000), (5, 1024), (2, 3, 130), (1, 5000)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_softmax(arrays, dtype, shape):
    a = RNG.standard_normal(shape) * 4
    y = ops.softmax(put(arrays, a, dtype))
    np.testing.assert_allclose(get(arrays, y), _softmax(exact(arrays, a, dtype)), atol=TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_rms_norm(arrays, dtype, shape):
    a, w = RNG.standard_normal(shape), RNG.standard_normal(shape[-1])
    x, wx = put(arrays, a, dtype), put(arrays, w, dtype)
    ref = _rms(exact(arrays, a, dtype), exact(arrays, w, dtype), 1e-5)
    y = ops.rms_norm(x, wx, eps=1e-5)
    tol = TOL[dtype] * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(get(arrays, y), ref, atol=tol, rtol=TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm(arrays, dtype, shape):
    a = RNG.standard_normal(shape) * 3 + 5  # a mean far from zero: the two-pass variance matters
    w, b = RNG.standard_normal(shape[-1]), RNG.standard_normal(shape[-1])
    ref = _layer(exact(arrays, a, dtype), exact(arrays, w, dtype), exact(arrays, b, dtype), 1e-5)
    y = ops.layer_norm(put(arrays, a, dtype), put(arrays, w, dtype), put(arrays, b, dtype))
    tol = TOL[dtype] * max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(get(arrays, y), ref, atol=tol, rtol=TOL[dtype])


@pytest.mark.parametrize(
    "config",
    [
        {"BLOCK": 32, "ITEMS": 0},
        {"BLOCK": 256, "ITEMS": 0},
        {"BLOCK": 1024, "ITEMS": 1},
        {"BLOCK": 64, "ITEMS": 8},
    ],
    ids=str,
)
def test_every_kind_of_config_gives_the_same_answer(arrays, config):
    a, w = RNG.standard_normal((3, 1021)), RNG.standard_normal(1021)  # odd: the scalar path
    a2 = RNG.standard_normal((3, 1024))  # aligned: the vector path
    forced = {**config, "threadgroup": (config["BLOCK"],)}
    for data in (a, a2):
        x = arrays.put(data.astype(np.float32))
        with force("softmax", "rows", forced):
            y = ops.softmax(x)
        np.testing.assert_allclose(arrays.get(y), _softmax(data.astype(np.float32)), atol=2e-6)
        wx = (
            arrays.put(w[: data.shape[1]].astype(np.float32))
            if data is a
            else arrays.put(RNG.standard_normal(1024).astype(np.float32))
        )
        with force("rms_norm", "rows", forced):
            y = ops.rms_norm(x, wx)
        ref = _rms(
            data.astype(np.float32).astype(np.float64), arrays.get(wx).astype(np.float64), 1e-6
        )
        np.testing.assert_allclose(arrays.get(y), ref, atol=2e-5, rtol=2e-5)


def test_a_config_too_small_for_the_row_cannot_be_forced(arrays):
    x = arrays.put(np.ones((2, 5000), np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="does not fit"):
        with force("softmax", "rows", {"BLOCK": 32, "ITEMS": 1, "threadgroup": (32,)}):
            ops.softmax(x)
    short = arrays.put(np.ones((4, 16), np.float32))  # fewer than 32 threads a row: whole warps
    for bad in ({"BLOCK": 8, "ITEMS": 2, "ROWS": 1}, {"BLOCK": 16, "ITEMS": 0, "ROWS": 2}):
        with pytest.raises(kernelkit.ArgumentError, match="multiple of 32"):
            with force("softmax", "rows", {**bad, "threadgroup": (bad["BLOCK"] * bad["ROWS"],)}):
                ops.softmax(short)
    # the reductions halve: BLOCK a power of two, BLOCK * ROWS threads a block (else rows mix)
    for bad in ({"BLOCK": 12, "ITEMS": 1, "ROWS": 8, "threadgroup": (96,)},
                {"BLOCK": 8, "ITEMS": 1, "ROWS": 4, "threadgroup": (16,)},
                {"BLOCK": 32, "ITEMS": 2, "threadgroup": (64,)}):  # fmt: skip
        with pytest.raises(kernelkit.ArgumentError, match="power of two and the threadgroup"):
            with force("softmax", "rows", bad):
                ops.softmax(short)


def test_other_dims_non_contiguous_inputs_and_out(arrays):
    a = RNG.standard_normal((6, 5, 9)).astype(np.float32)
    x = arrays.put(a)
    np.testing.assert_allclose(
        arrays.get(ops.softmax(x, dim=1)),
        np.moveaxis(_softmax(np.moveaxis(a, 1, -1)), -1, 1),
        atol=2e-6,
    )
    strided = arrays.put(a[:, ::2, :])  # a non-contiguous view
    np.testing.assert_allclose(arrays.get(ops.softmax(strided)), _softmax(a[:, ::2, :]), atol=2e-6)
    out = arrays.put(np.full(a.shape, np.nan, np.float32))
    y = ops.softmax(x, out=out)
    assert y is out
    np.testing.assert_allclose(arrays.get(out), _softmax(a), atol=2e-6)


def test_softmax_over_other_dims_is_prepared_per_dim(arrays):
    """Warm calls over a dimension other than the last (prepared: moved last, run, moved back)
    give each call's own result: every dim of a 3-d array and of a transposed view, in turn and
    again, new inputs each call (a run kept for another dim or layout would mix them up)."""
    shape = (3, 5, 4)
    for round_ in range(3):
        for transposed in (False, True):
            for dim in (0, 1, -2, -1, 2, -3):
                a = RNG.standard_normal((4, 5, 3) if transposed else shape).astype(np.float32)
                x = arrays.put(a)
                if transposed:  # the same logical shape, other strides
                    x, a = x.permute(2, 1, 0) if arrays.use_torch else x.T, a.T
                got = arrays.get(ops.softmax(x, dim))
                want = np.moveaxis(_softmax(np.moveaxis(a.astype(np.float64), dim, -1)), -1, dim)
                np.testing.assert_allclose(got, want, atol=2e-6, err_msg=f"{round_} {dim}")


def test_bad_arguments_name_themselves(arrays):
    x = arrays.put(np.ones((2, 8), np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="dim"):
        ops.softmax(x, dim=2)
    with pytest.raises(kernelkit.ArgumentError, match=r"weight must have shape \(8,\)"):
        ops.rms_norm(x, arrays.put(np.ones(7, np.float32)))
    with pytest.raises(kernelkit.ArgumentError, match="eps"):
        ops.rms_norm(x, arrays.put(np.ones(8, np.float32)), eps=-1.0)
    # a dtype error is a TypeError, as for the norms and matmul
    with pytest.raises(kernelkit.ArgumentTypeError, match="x must be float16, bfloat16 or float32"):
        ops.softmax(arrays.put(np.ones((2, 8), np.int32)))
    np.testing.assert_allclose(arrays.get(ops.softmax(x)), np.full((2, 8), 0.125), atol=1e-7)


def test_explain_reports_the_choice(arrays):
    x = arrays.put(np.ones((4, 2048), np.float32))
    text = ops.softmax.explain(x).explain()
    assert "softmax/rows" in text and "N=2048" in text and "heuristic" in text


def test_norm_weights_of_another_dtype_or_misaligned(arrays):
    a = RNG.standard_normal((3, 1024)).astype(np.float32)
    w_full = RNG.standard_normal(1025).astype(np.float32)
    x = arrays.put(a.astype(np.float16))
    xd = arrays.get(x).astype(np.float64)
    for w in (w_full[1:], w_full[:1024]):  # a weight view 4 bytes off alignment, and aligned
        wx = arrays.put(w)  # float32 weight for a float16 x: the scalar weight path
        y = ops.rms_norm(x, wx, eps=1e-5)
        ref = _rms(xd, w.astype(np.float64), 1e-5)
        np.testing.assert_allclose(arrays.get(y).astype(np.float64), ref, atol=4e-3, rtol=4e-3)
    xf = arrays.put(a)
    offset = arrays.put(w_full)[1:]  # same dtype, misaligned: vector x, scalar weight
    bias = arrays.put(w_full)[:1024]
    y = ops.layer_norm(xf, offset, bias)
    ref = _layer(a.astype(np.float64), w_full[1:].astype(np.float64), w_full[:1024], 1e-5)
    np.testing.assert_allclose(arrays.get(y), ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("shape", [(0, 8), (3, 0), (2, 0, 5)], ids=str)
def test_empty_inputs_launch_nothing(arrays, shape):
    """A launch for zero rows read and wrote memory the arrays do not have (heap corruption)."""
    x = arrays.put(np.zeros(shape, np.float32))
    w = arrays.put(np.ones(shape[-1], np.float32))
    for y in (ops.softmax(x), ops.rms_norm(x, w), ops.layer_norm(x, w, w)):
        assert tuple(y.shape) == shape


def _row_lengths(config, vec):
    """Row lengths a config holds: aligned (whole vectors, the last thread's vectors partly
    missing) and unaligned (the scalar path); a loop config gets several chunks and a tail."""
    block, items = config.values["BLOCK"], config.values["ITEMS"]
    aligned = block * items * vec - vec if items else 3 * block * vec + vec
    return [max(vec, aligned), max(1, aligned - 1)]


def _cpu_configs():
    """On the CPU backend a few configs with several rows per block (each config is a g++ build);
    on CUDA, every config."""
    from kernelkit.ops._rowops import config

    return [config(32, 1, 4), config(32, 8, 2), config(64, 2, 4), config(128, 4, 2),
            config(8, 2, 4), config(16, 1, 8), config(1, 2, 32), config(4, 1, 16)]  # fmt: skip
    # (1-16: a warp's lanes a row)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_every_config_against_float64_with_poisoned_outputs(arrays, dtype_name):
    """Each config (rows sharing a block, row counts that leave the last block part empty, the
    vector and the scalar path) writes every element of every row, and nothing else is read."""
    from kernelkit.ops._rowops import CONFIGS

    if dtype_name == "bfloat16" and not arrays.use_torch:
        pytest.skip("bfloat16 through torch")
    vec = 16 // (4 if dtype_name == "float32" else 2)
    tol = 2e-5 if dtype_name == "float32" else 1.6e-2
    for c in CONFIGS if arrays.on_gpu else _cpu_configs():
        forced = {**c.values, "threadgroup": c.threadgroup}
        for n in _row_lengths(c, vec):
            rows = 2 * c.values["ROWS"] + 1
            a = RNG.standard_normal((rows, n)) * 3 + 1
            w, b = RNG.standard_normal(n), RNG.standard_normal(n)
            x, wx, bx = (put(arrays, v, dtype_name) for v in (a, w, b))
            xd, wd, bd = (exact(arrays, v, dtype_name) for v in (a, w, b))
            cases = [
                ("softmax", ops.softmax, (x,), _softmax(xd)),
                ("rms_norm", ops.rms_norm, (x, wx), _rms(xd, wd, 1e-6)),
                ("layer_norm", ops.layer_norm, (x, wx, bx), _layer(xd, wd, bd, 1e-5)),
            ]
            for op, fn, args, ref in cases:
                out = put(arrays, np.full((rows, n), np.nan), dtype_name)
                with force(op, "rows", forced):
                    fn(*args, out=out)
                got = get(arrays, out)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                assert np.isfinite(got).all() and err <= tol, (op, c.describe(), n, err)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_softmax_rows_with_minus_inf_and_large_values(arrays, dtype_name):
    """-inf entries give exact zeros, large values do not overflow (the max is subtracted first),
    and a row of only -inf gives NaN, as in torch; on the register path and the loop path."""
    if dtype_name == "bfloat16" and not arrays.use_torch:
        pytest.skip("bfloat16 through torch")
    big = {"float32": 3e4, "float16": 6e4, "bfloat16": 3e4}[dtype_name]
    for n, config in ((1024, {"BLOCK": 128, "ITEMS": 2}), (1024, {"BLOCK": 32, "ITEMS": 0})):
        a = RNG.standard_normal((4, n)) * 4
        a[0, ::3] = -np.inf
        a[1, :] = big - RNG.random(n) * 8  # exp(x) would overflow without the max subtracted
        a[1, 5] = -np.inf
        a[2, :] = -np.inf
        a[3, 7] = big
        forced = {**config, "ROWS": 1, "threadgroup": (config["BLOCK"],)}
        with force("softmax", "rows", forced):
            got = get(arrays, ops.softmax(put(arrays, a, dtype_name)))
        xd = exact(arrays, a, dtype_name)
        assert np.isnan(got[2]).all()
        ok = [0, 1, 3]
        with np.errstate(invalid="ignore"):
            ref = _softmax(xd[ok])
        assert (got[0, ::3] == 0).all() and got[1, 5] == 0
        np.testing.assert_allclose(got[ok], ref, atol=TOL[dtype_name], rtol=TOL[dtype_name])
        np.testing.assert_allclose(got[ok].sum(-1), 1.0, rtol=TOL[dtype_name] * 4)


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16"])
def test_softmax_rows_with_nan_or_plus_inf_are_nan(arrays, dtype_name):
    """A row holding NaN or +inf is NaN everywhere (torch's softmax), whatever the row's length
    and path: register rows, vector loops and element loops (unaligned lengths), with the NaN
    or inf alone in its vector or beside -inf; the other rows are untouched."""
    if dtype_name == "bfloat16" and not arrays.use_torch:
        pytest.skip("bfloat16 through torch")
    configs = ({"BLOCK": 32, "ITEMS": 2}, {"BLOCK": 32, "ITEMS": 0}, {"BLOCK": 64, "ITEMS": 0})
    for n in (3, 8, 257, 1024):
        for config in configs:
            a = RNG.standard_normal((6, n))
            a[0, n // 2] = np.nan
            a[1, -1] = np.inf
            a[2, :] = -np.inf
            a[2, 0] = np.nan  # NaN among -inf: alone in its vector
            a[3, :] = -np.inf
            a[3, -1] = np.inf
            a[4, 0] = np.nan
            a[4, 1] = np.inf
            forced = {**config, "ROWS": 1, "threadgroup": (config["BLOCK"],)}
            try:
                with force("softmax", "rows", forced):
                    got = get(arrays, ops.softmax(put(arrays, a, dtype_name)))
            except kernelkit.ArgumentError:  # a register config that cannot hold this row
                continue
            assert np.isnan(got[:5]).all(), (n, config, got[:5])
            ref = _softmax(exact(arrays, a[5:], dtype_name))
            np.testing.assert_allclose(got[5:], ref, atol=TOL[dtype_name], rtol=TOL[dtype_name])


def _rows_at_strides(arrays, dtype_name):
    """(what, x as a view whose rows are apart, its values in float64): heads of a fused QKV
    projection ([T, 3 H D] -> the K part as [T, H, D], aligned rows; three of the V heads, a
    count the kernels divide by rather than shift), columns sliced at an odd
    offset (rows misaligned: the element path), one row broadcast to four (stride 0), and with
    NumPy, rows reversed (a negative stride)."""
    t, h, d = 3, 4, 64
    qkv = RNG.standard_normal((t, 3 * h * d)) * 2 + 1
    buf = put(arrays, qkv, dtype_name)
    held = exact(arrays, qkv, dtype_name)
    heads = buf[:, h * d : 2 * h * d].reshape(t, h, d)
    three = buf[:, 2 * h * d : 2 * h * d + 3 * d].reshape(t, 3, d)  # a count not a power of two
    cases = [
        ("qkv heads", heads, held[:, h * d : 2 * h * d].reshape(t, h, d)),
        ("three heads", three, held[:, 2 * h * d : 2 * h * d + 3 * d].reshape(t, 3, d)),
        ("odd columns", buf[:, 3 : 3 + 200], held[:, 3 : 3 + 200]),
    ]
    if arrays.use_torch:
        four = ("one row, four times", buf[:1, :96].expand(4, 96), held[:1, :96].repeat(4, 0))
        cases.append(four)
    else:
        cases.append(("rows reversed", buf[::-1, :128], held[::-1, :128]))
    return cases


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_rows_at_strides_are_read_where_they_are(arrays, dtype_name):
    """A row op on x whose rows are apart (its last dimension contiguous, the weights
    row-contiguous) reads them in place, no copy first (XS = 1: ``_rowops.rows_apart``): each
    implementation forced (the register kernel with rows sharing a block, its long-row loop,
    rows_smem, rows_split), into poisoned outs, against float64."""
    from kernelkit.ops._rowops import rows_apart

    if dtype_name == "bfloat16" and not arrays.use_torch:
        pytest.skip("bfloat16 through torch")
    tol = 2e-5 if dtype_name == "float32" else 1.6e-2
    impls = [
        ("rows", {"BLOCK": 32, "ITEMS": 2, "ROWS": 4, "threadgroup": (128,)}),
        ("rows", {"BLOCK": 64, "ITEMS": 0, "ROWS": 1, "threadgroup": (64,)}),
        ("rows_smem", {"BLOCK": 64, "CL": 1, "threadgroup": (64,)}),
        ("rows_split", {"BLOCK": 32, "U": 2, "HINT": 1, "threadgroup": (32,)}),
    ]
    for what, x, xd in _rows_at_strides(arrays, dtype_name):
        n = xd.shape[-1]
        w, b = RNG.standard_normal(n), RNG.standard_normal(n)
        wx, bx = put(arrays, w, dtype_name), put(arrays, b, dtype_name)
        wd, bd = exact(arrays, w, dtype_name), exact(arrays, b, dtype_name)
        cases = [
            ("softmax", ops.softmax, (x,), _softmax(xd)),
            ("rms_norm", ops.rms_norm, (x, wx), _rms(xd, wd, 1e-6)),
            ("layer_norm", ops.layer_norm, (x, wx, bx), _layer(xd, wd, bd, 1e-5)),
        ]
        for op, fn, args, ref in cases:
            assert rows_apart(getattr(ops, op).explain(*args).problem) == 1, (what, op)
            for impl, forced in [(None, None), *impls]:
                out = put(arrays, np.full(xd.shape, np.nan), dtype_name)
                if impl is None:
                    fn(*args, out=out)
                else:
                    with force(op, impl, forced):
                        fn(*args, out=out)
                got = get(arrays, out)
                err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
                assert np.isfinite(got).all() and err <= tol, (what, op, impl, err)
            y = fn(*args)  # allocated, twice (the second call prepared)
            y = fn(*args)
            assert tuple(y.shape) == xd.shape
            err = np.linalg.norm(get(arrays, y) - ref) / np.linalg.norm(ref)
            assert err <= tol, (what, op, "allocated", err)
