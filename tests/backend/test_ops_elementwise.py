"""``ops.elementwise``: fused expressions against a float64 reference, broadcasting, scalars,
several outputs, layouts (flat vector path, misaligned views, strided and broadcast views),
dtypes, out=, and expressions that must never reach the generated source."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import ops

RNG = np.random.default_rng(5)


def silu(x):
    return x / (1 + np.exp(-x))


SWIGLU = ops.elementwise("y = a * silu(b)")


@pytest.mark.parametrize("n", [1, 3, 7, 8, 33, 1000, 4099])
def test_flat_path_all_sizes(arrays, n):
    a, b = RNG.standard_normal(n).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    y = SWIGLU(a=arrays.put(a), b=arrays.put(b))
    np.testing.assert_allclose(arrays.get(y), a * silu(b.astype(np.float64)), rtol=2e-6, atol=1e-6)
    assert SWIGLU.explain(a=arrays.put(a), b=arrays.put(b)).choice.impl.endswith("/flat")


def test_misaligned_views_take_the_element_loop(arrays):
    a, b = (
        RNG.standard_normal(1025).astype(np.float32),
        RNG.standard_normal(1025).astype(np.float32),
    )
    da, db = arrays.put(a), arrays.put(b)
    y = SWIGLU(da[1:], db[1:])  # contiguous, 4 bytes off 16-byte alignment
    np.testing.assert_allclose(
        arrays.get(y), a[1:] * silu(b[1:].astype(np.float64)), rtol=2e-6, atol=1e-6
    )


def test_broadcasting_scalars_and_strided_views(arrays):
    a = RNG.standard_normal((4, 1, 6)).astype(np.float32)
    b = RNG.standard_normal((5, 1)).astype(np.float32)
    f = ops.elementwise("y = a * b + c")
    y = f(a=arrays.put(a), b=arrays.put(b), c=0.5)
    assert tuple(y.shape) == (4, 5, 6)
    np.testing.assert_allclose(arrays.get(y), a * b + 0.5, rtol=1e-6, atol=1e-6)
    t = RNG.standard_normal((6, 8)).astype(np.float32)
    view = arrays.put(t)[:, ::2]  # non-contiguous
    y = f(view, 2.0, 1.0)
    np.testing.assert_allclose(arrays.get(y), t[:, ::2] * 2 + 1, rtol=1e-6)
    assert f.explain(view, 2.0, 1.0).choice.impl.endswith("/strided")


def test_a_new_size_compiles_nothing_on_either_path(arrays):
    """The strided (broadcast) path took its element count as a template value: every new size
    compiled a kernel. Sizes now travel with the call, on both paths."""
    f = ops.elementwise("y = a * silu(b) + 1")
    b = RNG.standard_normal((1, 8)).astype(np.float32)
    for rows, compiled_before in ((3, None), (5, True), (9, True), (2, True)):
        a = RNG.standard_normal((rows, 8)).astype(np.float32)
        before = kernelkit.cache_stats()["compiles"]
        for x, w in ((a, b), (a, np.broadcast_to(b, a.shape).copy())):  # strided, then flat
            y = f(a=arrays.put(x), b=arrays.put(w))
            ref = x.astype(np.float64) * w / (1 + np.exp(-w.astype(np.float64))) + 1
            np.testing.assert_allclose(arrays.get(y), ref, rtol=1e-5, atol=1e-6)
        if compiled_before:
            assert kernelkit.cache_stats()["compiles"] == before, rows
    assert f.explain(arrays.put(a), arrays.put(b)).choice.impl.endswith("/strided")


def test_several_outputs_math_functions_and_out(arrays):
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    y = RNG.uniform(0.5, 2.0, (3, 50)).astype(np.float32)
    f = ops.elementwise("s = exp(x) + log(y) * 2e-1; g = gelu(x) - max(x, y); r = rsqrt(y)")
    outs = [arrays.put(np.full((3, 50), np.nan, np.float32)) for _ in range(3)]
    got = f(x=arrays.put(x), y=arrays.put(y), out=outs)
    assert [g is o for g, o in zip(got, outs)] == [True] * 3
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    from math import erf

    gelu = 0.5 * xd * (1 + np.vectorize(erf)(xd / np.sqrt(2)))
    np.testing.assert_allclose(arrays.get(outs[0]), np.exp(xd) + np.log(yd) * 0.2, rtol=2e-6)
    np.testing.assert_allclose(arrays.get(outs[1]), gelu - np.maximum(xd, yd), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(arrays.get(outs[2]), 1 / np.sqrt(yd), rtol=2e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_compute_in_float(arrays, dtype):
    if not arrays.use_torch:
        pytest.skip("half dtypes through torch tensors")
    torch = arrays.torch
    tdt = getattr(torch, dtype)
    a = torch.randn(7, 1031).to(tdt)
    b = torch.randn(7, 1031).to(tdt)
    if arrays.on_gpu:
        a, b = a.cuda(), b.cuda()
    y = SWIGLU(a=a, b=b)
    assert y.dtype == tdt
    ref = a.double() * torch.nn.functional.silu(b.double())
    tol = 1e-2 if dtype == "float16" else 4e-2
    torch.testing.assert_close(y.double(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("expression", "match"),
    [
        ('y = a; system("rm -rf /")', "not 'out = expr'"),
        ('y = a + "x"', "unexpected"),
        ("y = a } void evil() { ", "unexpected"),
        ("y = a # include", "unexpected"),
        ("y = printf(a)", "unknown function 'printf'"),
        ("y = kk_secret + a", "reserved"),
        ("y = __nv_x + a", "reserved"),
        ("y = exp", "is a function"),
        ("a + b", "not 'out = expr'"),
        ("y = a; y = b", "assigned twice"),
        ("y = y + 1", "both an input and an output"),
        ("y = ", "empty expression"),
        ("", "no 'out = expr'"),
        # malformed expressions: refused here, not by the C++ compiler (CompileError) at the call
        ("y = (a + b", r"unbalanced '\('"),
        ("y = a + b)", r"unbalanced '\)' after 'b'"),
        ("y = silu(a + b", r"unbalanced '\('"),
        ("y = a +", "expected an operand after '\\+', got the end"),
        ("y = a * / b", "expected an operand after '\\*', got '/'"),
        ("y = a b", "operator between 'a' and 'b'"),
        ("y = (a)(b)", r"operator between '\)' and '\('"),
        ("y = 2 a", "operator between '2' and 'a'"),
        ("y = a and b", "operator between 'a' and 'and'"),
        ("y = a ** b", r"operator '\*\*' is not supported \(use pow"),
        ("y = a % b", "operator '%' is not supported"),
        ("y = a & b", "operator '&' is not supported"),
        ("y = ~a", "operator '~' is not supported"),
        ("y = a << 1", "operator '<<' is not supported"),
        ("y = a = b", "operator '=' is not supported"),
        ("y = a == b", "operator '==' is not supported"),
        ("y = ++a", r"operator '\+\+' is not supported"),
        ("y = a > b ? a : b", "operator '>' is not supported"),
        ("y = a.x", r"operator '\.' is not supported"),
        ("y = a[0]", r"operator '\[' is not supported"),
        ("y = silu(a, b)", r"silu\(\) takes 1 argument, got 2"),
        ("y = pow(a)", r"pow\(\) takes 2 arguments, got 1"),
        ("y = max(a, b, 1)", r"max\(\) takes 2 arguments, got 3"),
        ("y = fma(a, b)", r"fma\(\) takes 3 arguments, got 2"),
        ("y = exp()", r"expected an operand after '\(', got '\)'"),
        ("y = ()", r"expected an operand after '\(', got '\)'"),
        # C's comma operator: a comma only separates a function's arguments
        ("y = a, 3", "',' outside a function's arguments after 'a'"),
        ("y = (a, 3)", "',' outside a function's arguments"),
        ("y = silu((a, b))", "',' outside a function's arguments"),
        # numbers are plain decimals (float32): no C hex, suffixes or malformed literals
        ("y = a * 0x10", "number '0x10' is not a plain decimal"),
        ("y = a * 1f", "number '1f' is not a plain decimal"),
        ("y = a + 1u", "number '1u' is not a plain decimal"),
        ("y = a + 2f", "number '2f' is not a plain decimal"),
        ("y = a + 2.5ff", "number '2.5ff' is not a plain decimal"),
        ("y = a + 10L", "number '10L' is not a plain decimal"),
        ("y = a + 1.2.3", "number '1.2.3' is not a plain decimal"),
        ("y = a * 2e", "number '2e' is not a plain decimal"),
        ("y = a * 1e39", "number '1e39' is out of float32's range"),
    ],
)
def test_bad_expressions_never_reach_the_source(expression, match):
    with pytest.raises(kernelkit.ArgumentError, match=match) as info:
        ops.elementwise(expression)
    assert str(info.value).startswith(f"[elementwise({expression!r})]")


def test_bad_calls_name_the_problem_and_the_next_call_works(arrays):
    a = arrays.put(np.ones(4, np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="missing"):
        SWIGLU(a=a)
    with pytest.raises(kernelkit.ArgumentError, match="do not broadcast"):
        SWIGLU(a=a, b=arrays.put(np.ones(3, np.float32)))
    with pytest.raises(kernelkit.ArgumentError, match="at least one input must be an array"):
        SWIGLU(a=1.0, b=2.0)
    np.testing.assert_allclose(arrays.get(SWIGLU(a=a, b=a)), np.full(4, silu(1.0)), rtol=1e-6)


def test_empty_inputs(arrays):
    y = SWIGLU(
        a=arrays.put(np.zeros((0, 3), np.float32)), b=arrays.put(np.zeros((0, 3), np.float32))
    )
    assert tuple(y.shape) == (0, 3)


def test_number_literals_are_float32_values_of_their_decimal_text(arrays):
    """Literals were copied into the C++ source as they stood: ``1/2`` was C's integer division
    (0), ``7/2`` was 3 and ``010`` octal 8."""
    a = (RNG.uniform(0.5, 2.0, (3, 17)) * RNG.choice([-1, 1], (3, 17))).astype(np.float32)
    ad = a.astype(np.float64)
    cases = [
        ("y = a * (1/2)", ad * 0.5),
        ("y = a + 7/2", ad + 3.5),
        ("y = a * 010", ad * 10),
        ("y = a * 1.5e1 - .25 + 2. + 1E-1", ad * 15 - 0.25 + 2 + 0.1),
        ("y = a / 3 + 0", ad / 3),
        ("y = pow(a * a, 1/2) - 2/4 * -a", np.abs(ad) + 0.5 * ad),
        ("y = a * 0.5f + 1e-1f - 2.F", ad * 0.5 + 0.1 - 2),  # CUDA's float literals
    ]
    for expression, ref in cases:
        out = arrays.full(a.shape, np.nan, np.float32)
        ops.elementwise(expression)(arrays.put(a), out=out)
        np.testing.assert_allclose(arrays.get(out), ref, rtol=2e-6, atol=1e-6, err_msg=expression)


def test_valid_expressions_keep_working(arrays):
    """What the checked grammar allows: unary signs, nested calls with their number of
    arguments, parentheses, whitespace."""
    a = RNG.uniform(0.5, 2.0, (5, 9)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, (5, 9)).astype(np.float32)
    ad, bd = a.astype(np.float64), b.astype(np.float64)
    f = ops.elementwise(
        "y = -a * -b + (+a - -b) / fma(a, b, 1)\n ; z = max(min(a, b), pow(sqrt(a), 2)) - (((b)))"
    )
    y, z = f(arrays.put(a), arrays.put(b))
    np.testing.assert_allclose(arrays.get(y), ad * bd + (ad + bd) / (ad * bd + 1), rtol=1e-5)
    np.testing.assert_allclose(
        arrays.get(z), np.maximum(np.minimum(ad, bd), ad) - bd, rtol=1e-5, atol=1e-6
    )


def test_out_must_be_the_output_shape_dtype_and_row_contiguous(arrays):
    """``out=`` was never checked against the broadcast shape: a larger out had the kernel read
    past the ends of the inputs (garbage, or a crash), a smaller one was partly computed. Each
    call's out is checked once per signature; nothing is written into a refused out."""
    a = RNG.uniform(0.5, 2.0, (4, 8)).astype(np.float32)
    b = RNG.uniform(0.5, 2.0, (1, 8)).astype(np.float32)
    ref = a.astype(np.float64) + b
    f = ops.elementwise("y = a + b")
    da, db = arrays.put(a), arrays.put(b)
    bad = [
        (
            np.full((8, 8), np.nan, np.float32),
            r"out must have the output shape \(4, 8\), got \(8, 8\)",
        ),
        (np.full((2, 8), np.nan, np.float32), r"output shape \(4, 8\), got \(2, 8\)"),
        (np.full((32,), np.nan, np.float32), r"output shape \(4, 8\), got \(32,\)"),
        (np.full((1, 8), np.nan, np.float32), r"output shape \(4, 8\), got \(1, 8\)"),
        (np.full((4, 8), np.nan, np.float64), "output dtype float32, got float64"),
        (np.full((4, 16), np.nan, np.float32)[:, ::2], "out must be row-contiguous"),
    ]
    for _ in range(2):  # a refused signature is refused again (nothing cached for it)
        for poisoned, match in bad:
            out = arrays.put(poisoned)
            with pytest.raises(kernelkit.ArgumentError, match="elementwise\\('y = a \\+ b'\\)"):
                f(da, db, out=out)
            with pytest.raises(kernelkit.ArgumentError, match=match):
                f(da, db, out=out)
            assert np.isnan(arrays.get(out)).all()
    for _ in range(2):  # the right out works, first call and repeated
        out = arrays.full((4, 8), np.nan, np.float32)
        assert f(da, db, out=out) is out
        np.testing.assert_allclose(arrays.get(out), ref, rtol=1e-6)
    with pytest.raises(kernelkit.ArgumentError, match="output shape"):  # after a cached good call
        f(da, db, out=arrays.full((8, 8), np.nan, np.float32))
    two = ops.elementwise("y = a + b; z = a * b")
    outs = [arrays.full((4, 8), np.nan, np.float32), arrays.full((4, 7), np.nan, np.float32)]
    with pytest.raises(kernelkit.ArgumentError, match=r"out\[1\] \('z'\) must have the output"):
        two(da, db, out=outs)
    with pytest.raises(kernelkit.ArgumentError, match="out= needs 2 arrays, got 1"):
        two(da, db, out=outs[:1])
    with pytest.raises(kernelkit.ArgumentTypeError, match="out must be an array, got list"):
        f(da, db, out=[[1.0]])


def test_zero_d_arrays_broadcast_like_numpy(arrays):
    """A 0-d array was routed as a by-value scalar while the kernel took its pointer: the
    source did not compile. It broadcasts as a shape-() array does in NumPy."""
    s = np.array(RNG.uniform(0.5, 2.0), np.float32)
    t = np.array(RNG.uniform(-2.0, -0.5), np.float32)
    b = RNG.uniform(0.5, 2.0, (3, 5)).astype(np.float32)
    sd, td, bd = float(s), float(t), b.astype(np.float64)
    f = ops.elementwise("y = a * 3 + c")
    for _ in range(2):  # first call and repeated
        y = f(arrays.put(s), 0.25)
        assert tuple(y.shape) == ()
        np.testing.assert_allclose(arrays.get(y), sd * 3 + 0.25, rtol=1e-6)
        y = f(arrays.put(s), arrays.put(t))
        assert tuple(y.shape) == ()
        np.testing.assert_allclose(arrays.get(y), sd * 3 + td, rtol=1e-6)
        y = f(arrays.put(s), arrays.put(b))  # 0-d with an array: broadcast to its shape
        assert tuple(y.shape) == (3, 5)
        np.testing.assert_allclose(arrays.get(y), sd * 3 + bd, rtol=1e-6, atol=1e-6)
        y = f(arrays.put(b), arrays.put(t))
        np.testing.assert_allclose(arrays.get(y), bd * 3 + td, rtol=1e-6, atol=1e-6)
        out = arrays.full((), np.nan, np.float32)
        assert f(arrays.put(s), arrays.put(t), out=out) is out
        np.testing.assert_allclose(arrays.get(out), sd * 3 + td, rtol=1e-6)
    with kernelkit.force(f.op, "strided"):
        y = f(arrays.put(s), arrays.put(t))
        np.testing.assert_allclose(arrays.get(y), sd * 3 + td, rtol=1e-6)


def test_scalar_inputs_do_not_depend_on_earlier_calls(arrays):
    """Whether an int is accepted (and its value) must not depend on what earlier calls
    passed: the first call of a signature was converting ints to float, and a cached one not."""
    a = RNG.uniform(0.5, 2.0, 6).astype(np.float32)
    da = arrays.put(a)
    for earlier in (None, 3, 2.5, True):
        f = ops.elementwise("y = a * s")
        if earlier is not None:
            f(da, earlier)
        for s in (2**40, -(2**31) - 5, 7, True, 2.0**-3):
            np.testing.assert_allclose(arrays.get(f(da, s)), a * float(s), rtol=1e-6)
        for huge in (10**400, -(2**1024)):
            with pytest.raises(kernelkit.ArgumentError, match=r"input 's' .* too large for a"):
                f(da, huge)
        for bad in (None, "3", 1 + 2j, [1.0]):
            with pytest.raises(kernelkit.ArgumentTypeError, match="input 's' must be an array or"):
                f(da, bad)
        np.testing.assert_allclose(arrays.get(f(da, 3)), a * 3, rtol=1e-6)


AFFINE = ops.elementwise("y = a * silu(b) + c; z = a - c")


def _affine_ref(a, b, c):
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    return a * silu(b) + c, a - c


def test_strided_views_by_vectors_and_by_elements(arrays):
    """The strided path's vectors (rows of whole 16-byte vectors; each input contiguous along
    the last dimension with aligned rows, or constant along it) and its element loop (every other
    layout): a bias of [N] and a per-row scale of [M, 1] broadcast, rows sliced out of wider
    arrays at aligned and misaligned offsets, a broadcast middle dimension, rows no vector
    divides; two outputs, fresh and into poisoned out= arrays."""
    big = RNG.standard_normal((5, 40)).astype(np.float32)
    full = arrays.put(big)

    def own(shape):  # an array of its own, and its host copy
        v = RNG.standard_normal(shape).astype(np.float32)
        return arrays.put(v), v

    def rows(lo, hi):  # columns [lo, hi) of `big`: rows 160 bytes apart
        return full[:, lo:hi], big[:, lo:hi]

    cases = {
        "bias [N]": (rows(0, 24), rows(8, 32), own(24)),
        "per-row [M, 1]": (rows(0, 24), own((5, 1)), rows(16, 40)),
        "misaligned rows": (rows(1, 25), rows(8, 32), own(24)),
        "rows of 22": (rows(0, 22), own(22), rows(4, 26)),
        "3-d, middle broadcast": (own((2, 3, 16)), own((2, 1, 16)), own((1, 3, 16))),
    }
    for what, pairs in cases.items():
        args, host = [p[0] for p in pairs], [p[1] for p in pairs]
        assert AFFINE.explain(*args).choice.impl.endswith("/strided"), what
        want = _affine_ref(*host)
        y, z = AFFINE(*args)
        outs = [arrays.full(want[0].shape, np.nan, np.float32) for _ in range(2)]
        assert AFFINE(*args, out=outs) == outs
        for got, ref in ((y, want[0]), (z, want[1]), (outs[0], want[0]), (outs[1], want[1])):
            np.testing.assert_allclose(arrays.get(got), ref, rtol=2e-6, atol=2e-6, err_msg=what)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_strided_vectors_in_half_dtypes(arrays, dtype):
    """A bias add and a per-row scale on 16-bit rows (8 elements a vector), and a bfloat16 row
    with a float32 bias (two widths: the element loop)."""
    if not arrays.use_torch:
        pytest.skip("half dtypes through torch tensors")
    torch = arrays.torch
    dev = "cuda" if arrays.on_gpu else "cpu"
    tdt = getattr(torch, dtype)
    x = torch.randn(7, 48, device=dev).to(tdt)
    for other in (torch.randn(48, device=dev).to(tdt), torch.randn(7, 1, device=dev).to(tdt),
                  torch.randn(48, device=dev)):  # fmt: skip
        y, z = AFFINE(x[:, :40], other[..., :40] if other.shape[-1] > 1 else other, x[:, 8:])
        a, b, c = (v.double().cpu().numpy() for v in (x[:, :40], other, x[:, 8:]))
        want = _affine_ref(a, b[..., :40] if b.shape[-1] > 1 else b, c)
        tol = 1e-2 if dtype == "bfloat16" else 2e-3
        for got, ref in ((y, want[0]), (z, want[1])):
            np.testing.assert_allclose(got.double().cpu().numpy(), ref, rtol=tol, atol=tol)


def _random_input(rng, shape, arrays):
    """An array of ``shape`` in a random layout (its host copy beside it): contiguous, or
    sliced out of a wider array (size-1 dimensions then keep the wider array's strides, which
    the kernel must read as stride 0), or a transposed copy viewed back; NumPy arrays also
    reversed along the last dimension (a negative stride)."""
    host = rng.standard_normal(shape).astype(np.float32)
    layout = rng.integers(0, 4 if not arrays.use_torch else 3)
    if layout == 0 or not shape:
        return arrays.put(host), host
    if layout == 1:  # a slice: every dimension 3 wider, offset by 1 (misaligned rows)
        wide = np.zeros(tuple(d + 3 for d in shape), np.float32)
        inner = tuple(slice(1, 1 + d) for d in shape)
        wide[inner] = host
        return arrays.put(wide)[inner], host
    if layout == 2:  # the last two dimensions swapped in memory
        if len(shape) < 2:
            return arrays.put(host), host
        swapped = arrays.put(np.ascontiguousarray(np.swapaxes(host, -1, -2)))
        return swapped.transpose(-1, -2) if arrays.use_torch else swapped.swapaxes(-1, -2), host
    flipped = arrays.put(np.ascontiguousarray(host[..., ::-1]))
    return flipped[..., ::-1], host


def test_the_strided_kernel_broadcasts_any_shapes_as_numpy_does(arrays):
    """Inputs of fewer dimensions and of size-1 dimensions, in random layouts, broadcast by the
    kernel itself (no views made per call): 40 random triples against NumPy's float64
    broadcast, each called twice (the second through the prepared signature) and into a
    poisoned out=."""
    rng = np.random.default_rng(11)
    f = ops.elementwise("y = a * silu(b) + c")
    for case in range(40):
        nd = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(1, 6, nd))
        shape = (*shape[:-1], int(rng.choice([1, 3, 8, 12])))
        inputs = []
        for _ in range(3):
            own = shape[int(rng.integers(0, nd + 1)) :]  # trailing dimensions, maybe none
            own = tuple(1 if rng.random() < 0.3 else d for d in own)
            inputs.append(_random_input(rng, own, arrays))
        args, host = [v for v, _ in inputs], [h.astype(np.float64) for _, h in inputs]
        want = host[0] * silu(host[1]) + host[2]
        for _ in range(2):
            y = f(*args)
            assert tuple(y.shape) == want.shape, case
            what = f"case {case}: {[h.shape for h in host]}"
            np.testing.assert_allclose(arrays.get(y), want, rtol=2e-6, atol=2e-6, err_msg=what)
        out = arrays.full(want.shape, np.nan, np.float32)
        assert f(*args, out=out) is out
        np.testing.assert_allclose(arrays.get(out), want, rtol=2e-6, atol=2e-6, err_msg=str(case))


def test_prepared_calls_with_python_numbers_take_each_calls_value(arrays):
    """A warm call with Python numbers among its inputs is prepared too (its key: the arrays'
    signature and each input's class): each call's numbers reach the kernel, into out= and not,
    with a broadcast input beside them; a number first (no array to sign) stays correct."""
    a = RNG.standard_normal((3, 8)).astype(np.float32)
    c = RNG.standard_normal(8).astype(np.float32)
    da, dc = arrays.put(a), arrays.put(c)
    f = ops.elementwise("y = a * s + c")
    out = arrays.full((3, 8), np.nan, np.float32)
    for s in (0.5, -2.0, 3, True, 1e-3, 7):
        np.testing.assert_allclose(arrays.get(f(da, s, dc)), a * float(s) + c, rtol=1e-6)
        assert f(da, s, dc, out=out) is out
        np.testing.assert_allclose(arrays.get(out), a * float(s) + c, rtol=1e-6)
        np.testing.assert_allclose(arrays.get(f(s, da, dc)), float(s) * a + c, rtol=1e-6)


def test_numpy_scalars_go_as_python_numbers_with_and_without_out(arrays):
    """A NumPy scalar (np.float32(2): a shape and a dtype, but no array adapter, on no device) is
    taken as the Python number it holds, first call and later, into out= too (with out= it
    raised NotImplementedError once the kernel took inputs unbroadcast; beside CUDA tensors it
    was a host array); np.float64 does not widen the output, as in torch."""
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    da = arrays.put(a)
    f = ops.elementwise("y = a * b")
    out = arrays.full((2, 3), np.nan, np.float32)
    for b in (np.float32(2.0), np.float32(-3.0), np.float64(0.5), np.int64(3)):
        np.testing.assert_allclose(arrays.get(f(da, b)), a * float(b), rtol=1e-6)
        assert f(da, b, out=out) is out
        np.testing.assert_allclose(arrays.get(out), a * float(b), rtol=1e-6)


def test_prepared_calls_with_two_outputs_give_each_calls_values(arrays):
    """An expression with two outputs is prepared too (without out=): repeated calls of one
    signature, contiguous and with a broadcast bias, each give their own data's two results."""
    f = ops.elementwise("y = a + b; z = a * b")
    for shape_b in ((4, 8), (8,)):
        for _ in range(3):
            a = RNG.standard_normal((4, 8)).astype(np.float32)
            b = RNG.standard_normal(shape_b).astype(np.float32)
            y, z = f(arrays.put(a), arrays.put(b))
            np.testing.assert_allclose(arrays.get(y), a + b, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(arrays.get(z), a * b, rtol=1e-6, atol=1e-6)
