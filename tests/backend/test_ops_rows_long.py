"""Long rows read once (``rows_smem``: a row in one block's shared memory; ``rows_cluster``: a
row over a thread-block cluster) against float64: every op and dtype, odd lengths (the scalar
path) and odd row counts, NaN-poisoned outputs, non-contiguous and 3-D inputs, softmax's -inf,
NaN and +inf rows, a constant row's layer_norm. On the CPU backend (clusters where it emulates
them) and on CUDA when present; each case is forced onto its implementation and config."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _rows_long

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(28)
TOL = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture
def dev(backend):
    if backend == "cpu":
        return "cpu"
    if backend == "cuda":
        return "cuda"
    pytest.skip(f"{backend}: these tests use torch tensors")


def put(a, dtype, dev):
    return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(DTYPES[dtype]).to(dev)


def f64(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


def refs(xd, wd, bd):
    """float64 references of the three row ops (eps 1e-5); quiet on non-finite rows."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(xd - xd.max(-1, keepdims=True))
        mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
        return {
            "softmax": e / e.sum(-1, keepdims=True),
            "rms_norm": xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-5) * wd,
            "layer_norm": (xd - mu) / np.sqrt(var + 1e-5) * wd + bd,
        }


def _target(dev):
    return ops.softmax.explain(torch.ones(1, 8, device=dev)).target


def _clusters(dev) -> bool:
    return "clusters" in _target(dev).features


def _cl_for(n, dtype, dev):
    """The fewest blocks a row of ``n`` takes here (None: none fits)."""
    sizes = (1, *_rows_long.CLUSTER_SIZES) if _clusters(dev) else (1,)
    room = min(_target(dev).max_shared_memory_optin_bytes, 227 * 1024)
    room -= _rows_long.STATIC_SHARED
    return next((cl for cl in sizes if _rows_long.slice_bytes(n, cl, dtype) <= room), None)


def run_all(x, w, b, cl, block, out_dtype, dev):
    """Each op forced onto rows_smem / rows_cluster with (block, cl), into a poisoned out."""
    impl = "rows_smem" if cl == 1 else "rows_cluster"
    forced = {"BLOCK": block, "CL": cl, "threadgroup": (block,)}
    got = {}
    for name, fn, args in (
        ("softmax", ops.softmax, (x,)),
        ("rms_norm", ops.rms_norm, (x, w, 1e-5)),
        ("layer_norm", ops.layer_norm, (x, w, b, 1e-5)),
    ):
        out = torch.full(x.shape, float("nan"), dtype=out_dtype, device=dev)
        with force(name, impl, forced):
            assert fn(*args, out=out) is out
        got[name] = f64(out)
    return got


def check(got, refs, dtype, what):
    for name, ref in refs.items():
        g = got[name]
        assert np.isfinite(g).all(), (name, what, "unwritten or non-finite elements")
        err = np.abs(g - ref).max() / max(1.0, np.abs(ref).max())
        assert err <= TOL[dtype], (name, what, err)


# (rows, n, block): odd lengths take the element path, multiples of 8 the vector path
CASES = [(3, 1, 32), (5, 7, 64), (3, 1000, 256), (3, 32001, 512), (2, 65536, 1024),
         (2, 65537, 512), (1, 131073, 1024)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("rows", "n", "block"), CASES, ids=str)
def test_long_rows_match_float64_into_poisoned_outputs(dev, dtype, rows, n, block):
    if dev == "cpu":
        block = 256  # one build per op, dtype and cluster size (a g++ run each)
    cl = _cl_for(n, dtype, dev)
    if cl is None:
        pytest.skip(f"a row of {n} {dtype} needs a cluster, which {dev} does not run")
    a = RNG.standard_normal((rows, n)) * 3 + 2
    w, b = RNG.standard_normal(n), RNG.standard_normal(n)
    x, wx, bx = put(a, dtype, dev), put(w, dtype, dev), put(b, dtype, dev)
    got = run_all(x, wx, bx, cl, block, x.dtype, dev)
    check(got, refs(f64(x), f64(wx), f64(bx)), dtype, (rows, n, cl))


@pytest.mark.parametrize("cl", _rows_long.CLUSTER_SIZES)
def test_every_cluster_size_on_short_rows(dev, cl):
    """Each cluster size splits a row into slices that leave the last blocks part or wholly
    empty (n = 7 over 8 blocks: ranks 2-7 hold nothing); one op a size on the CPU backend."""
    if not _clusters(dev):
        pytest.skip("no clusters here")
    names = ["softmax", "rms_norm", "layer_norm"]
    if dev == "cpu":
        names = [names[_rows_long.CLUSTER_SIZES.index(cl) % 3]]
    forced = {"BLOCK": 64, "CL": cl, "threadgroup": (64,)}
    for n in (7, 1000, 4099):
        a = RNG.standard_normal((3, n)) * 2 + 1
        w, b = RNG.standard_normal(n), RNG.standard_normal(n)
        x, wx, bx = (put(v, "float32", dev) for v in (a, w, b))
        want = refs(f64(x), f64(wx), f64(bx))
        args = {"softmax": (x,), "rms_norm": (x, wx, 1e-5), "layer_norm": (x, wx, bx, 1e-5)}
        for name in names:
            out = torch.full(x.shape, float("nan"), device=dev)
            with force(name, "rows_cluster", forced):
                getattr(ops, name)(*args[name], out=out)
            check({name: f64(out)}, {name: want[name]}, "float32", (n, cl))


def test_non_contiguous_and_3d_inputs_and_weights_of_another_dtype(dev):
    n = 20000  # 78 KiB of float32: one block a row on every target
    base = RNG.standard_normal((3, 2 * n)) * 2
    x = put(base, "float32", dev)[:, ::2]  # a strided view
    assert not x.is_contiguous()
    x3 = put(RNG.standard_normal((2, 3, n)), "bfloat16", dev)
    w32 = put(RNG.standard_normal(n), "float32", dev)  # float32 weight, bfloat16 x
    forced = {"BLOCK": 256, "CL": 1, "threadgroup": (256,)}
    with force("softmax", "rows_smem", forced):
        y = ops.softmax(x)
    np.testing.assert_allclose(f64(y), refs(f64(x), 1.0, 0.0)["softmax"], atol=2e-6)
    with force("rms_norm", "rows_smem", forced):
        y3 = ops.rms_norm(x3, w32, 1e-5)
    ref = refs(f64(x3), f64(w32), 0.0)["rms_norm"]
    assert np.abs(f64(y3) - ref).max() <= TOL["bfloat16"] * np.abs(ref).max()
    with force("layer_norm", "rows_smem", forced):
        y3 = ops.layer_norm(x3, w32, w32, 1e-5)
    ref = refs(f64(x3), f64(w32), f64(w32))["layer_norm"]
    assert np.abs(f64(y3) - ref).max() <= TOL["bfloat16"] * np.abs(ref).max()


def check_special_rows(dev, impl, softmax_values, layer_norm_values):
    """-inf entries give zeros, a row of only -inf or holding NaN/+inf gives NaN (as torch);
    a constant row's layer_norm is exactly the bias; the vector and the element path: ``impl``
    forced with those config values."""
    for n in (20000, 20001):
        a = RNG.standard_normal((5, n)) * 4
        a[0, ::3] = -np.inf
        a[1, :] = 3e4 - RNG.random(n) * 8
        a[2, :] = -np.inf
        a[3, n // 2] = np.nan
        a[4, -1] = np.inf
        x = put(a, "float32", dev)
        with force("softmax", impl, softmax_values):
            got = f64(ops.softmax(x))
        assert np.isnan(got[2:]).all()
        assert (got[0, ::3] == 0).all()
        np.testing.assert_allclose(got[:2], refs(f64(x)[:2], 1, 0)["softmax"], atol=2e-6)
        c = put(np.full((2, n), 1234.5), "float32", dev)
        w, b = (put(RNG.standard_normal(n), "float32", dev) for _ in range(2))
        with force("layer_norm", impl, layer_norm_values):
            y = ops.layer_norm(c, w, b)
        assert (f64(y) == f64(b)[None, :]).all()


def test_softmax_special_rows_and_a_constant_layer_norm_row(dev):
    check_special_rows(dev, "rows_smem", {"BLOCK": 512, "CL": 1, "threadgroup": (512,)},
                       {"BLOCK": 256, "CL": 1, "threadgroup": (256,)})  # fmt: skip


def hard_layer_norm_rows(n):
    """float32 rows whose variance a one-pass method loses: a large mean with unit spread; a
    first element far from the rest (a shift by x[0] for every thread cancels n-fold, and
    each thread's sums around its own first element cancel in the thread that holds it, by
    its element count: 6.6e-5 at n = 20000 where the exact two passes give 1e-6); every
    thread's first element far from its others; then an ordinary row. Seeded by n: the same
    rows whatever ran before."""
    a = np.random.default_rng(n).standard_normal((5, n))
    a[0] = 3e4 + a[0]
    a[1] = 5 + 1e-2 * a[1]
    a[1, 0] = 1e4
    a[2] = 5 + 1e-3 * a[2]
    a[2, : 4 * 512 : 4] = 100.0
    a[3] = 5 + 1e-3 * a[3]
    a[3, 0] = 15.0
    return a


@pytest.mark.parametrize("impl", ["rows_smem", "rows_cluster"])
def test_layer_norm_keeps_the_variance_of_hard_rows(dev, impl):
    cl = 2 if impl == "rows_cluster" else 1
    if cl > 1 and not _clusters(dev):
        pytest.skip("no clusters here")
    forced = {"BLOCK": 64, "CL": cl, "threadgroup": (64,)}  # 156-316 elements a thread
    for n in (20000, 20001):  # the vector and the element path
        x = put(hard_layer_norm_rows(n), "float32", dev)
        rng = np.random.default_rng(n + 1)
        w, b = (put(rng.standard_normal(n), "float32", dev) for _ in range(2))
        out = torch.full(x.shape, float("nan"), device=dev)
        with force("layer_norm", impl, forced):
            ops.layer_norm(x, w, b, 1e-5, out=out)
        ref = refs(f64(x), f64(w), f64(b))["layer_norm"]
        for i in range(len(x)):  # each row on its own scale
            err = np.abs(f64(out)[i] - ref[i]).max() / np.abs(ref[i]).max()
            assert err <= TOL["float32"], (n, i, err)


@st.composite
def layer_norm_rows(draw):
    """(rows as float64, the forced cluster size and block): two float32 rows of an offset far
    from or near zero plus a spread from 1e-3 to 1e3; the first row's first element far above
    the rest (a shift by it cancels) and up to four more spikes, the second row plain or with
    each thread's first element far from its others; lengths on both sides of the vector width
    (the vector and the element path) and of a block."""
    n = draw(st.one_of(st.sampled_from([1, 2, 7, 65, 4097, 20000, 20001]), st.integers(1, 20001)))
    offset = draw(st.sampled_from([0.0, 1.0, -7.5, 3e2, -4e3, 1e4]))
    spread = 10.0 ** draw(st.integers(-3, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a = offset + spread * rng.standard_normal((2, n))
    a[0, 0] = offset + spread * 10.0 ** draw(st.integers(1, 6))
    spikes = draw(st.lists(st.tuples(st.integers(0, n - 1), st.floats(-1e4, 1e4)), max_size=4))
    for i, v in spikes:
        a[0, i] = v
    if draw(st.booleans()):
        a[1, ::64] = offset + 1e3 * spread
    cl, block = draw(st.sampled_from([(1, 64), (1, 256), (2, 64), (3, 128)]))
    return a, cl, block


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the same rows every run: CI cannot flake on a rare example
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(layer_norm_rows())
def test_layer_norm_matches_float64_on_generated_rows(dev, case):
    a, cl, block = case
    if cl > 1 and not _clusters(dev):
        cl = 1
    n = a.shape[1]
    x = put(a, "float32", dev)
    w, b = (put(RNG.standard_normal(n), "float32", dev) for _ in range(2))
    out = torch.full(x.shape, float("nan"), device=dev)
    impl = "rows_smem" if cl == 1 else "rows_cluster"
    with force("layer_norm", impl, {"BLOCK": block, "CL": cl, "threadgroup": (block,)}):
        ops.layer_norm(x, w, b, 1e-5, out=out)
    ref = refs(f64(x), f64(w), f64(b))["layer_norm"]
    for i in range(2):  # each row on its own scale
        check({"layer_norm": f64(out)[i]}, {"layer_norm": ref[i]}, "float32", (n, cl, block, i))


def test_long_rows_are_chosen_by_the_heuristic(dev):
    x = put(RNG.standard_normal((2, 40000)), "bfloat16", dev)
    choice = ops.softmax.explain(x).choice
    assert choice.impl in ("softmax/rows_smem", "softmax/rows_cluster")


def hard_16bit_rows(n, dtype):
    """16-bit rows far from zero with the least spread their type holds: each element a large
    offset plus a few of its type's steps; every element the offset but one a step above it (a
    standard deviation of a step / sqrt(n)); a first element far above values near 5; then an
    ordinary row. Seeded by n."""
    step = 2.0 ** (15 - (8 if dtype == "bfloat16" else 11))  # the type's spacing at 2^15
    big = 2.0**15 + 3 * step
    rng = np.random.default_rng(n)
    a = rng.standard_normal((4, n))
    a[0] = big + step * rng.integers(-3, 4, n)
    a[1] = big
    a[1, n // 3] = big + step
    a[2] = 5 + 0.25 * a[2]
    a[2, 0] = 1e4
    return a


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("impl", ["rows_smem", "rows_cluster"])
def test_16bit_layer_norm_is_right_to_its_type_on_hard_rows(dev, impl, dtype):
    """Each output of a 16-bit row is its float64 value (of the same 16-bit inputs) to within
    its own rounding plus 2^-(p+4) of the row's largest output (p: the type's significand
    bits), on rows whose deviations are single steps of a value 2^15 above zero. (Centring
    such rows by one float32 offset, x[0] + mean, as torch centres by its float32 mean, keeps
    to this bound; an exact two-step centring is what the long rows do.)"""
    cl = 2 if impl == "rows_cluster" else 1
    if cl > 1 and not _clusters(dev):
        pytest.skip("no clusters here")
    forced = {"BLOCK": 64, "CL": cl, "threadgroup": (64,)}
    p = 8 if dtype == "bfloat16" else 11  # bits of the type's significand
    for n in (20000, 20001):  # the vector and the element path
        x = put(hard_16bit_rows(n, dtype), dtype, dev)
        rng = np.random.default_rng(n + 1)
        w, b = (put(rng.standard_normal(n), dtype, dev) for _ in range(2))
        out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=dev)
        with force("layer_norm", impl, forced):
            ops.layer_norm(x, w, b, 1e-5, out=out)
        ref = refs(f64(x), f64(w), f64(b))["layer_norm"]
        got = f64(out)
        for i in range(len(x)):
            # half a step of the output's type, float32's rounding of the statistics, and the
            # float16 subnormals' spacing (2^-24)
            bound = 2.0**-p * np.abs(ref[i]) + 2.0 ** -(p + 4) * np.abs(ref[i]).max() + 2.0**-24
            excess = (np.abs(got[i] - ref[i]) - bound).max()
            assert excess <= 0, (n, i, excess)


# (x, weight and bias) dtypes: a float32 weight of a 16-bit row (two 16-byte loads a vector of
# x), a 16-bit weight of a float32 row (one 8-byte load), 16-bit types that differ
MIXED = [("bfloat16", "float32"), ("float16", "float32"), ("float32", "bfloat16"),
         ("float32", "float16"), ("bfloat16", "float16")]  # fmt: skip


@pytest.mark.parametrize("impl", ["rows", "rows_smem", "rows_split"])
@pytest.mark.parametrize(("xdtype", "wdtype"), MIXED, ids=lambda v: v)
def test_norms_with_weights_of_another_width_match_float64(dev, impl, xdtype, wdtype):
    """rms_norm and layer_norm with weights of another dtype than x, on the vector path (the
    weights in vectors of their own width, kk_wvec) and the element path: rows of whole vectors
    with the last block's vectors partly missing, and of a length no 16-byte vector divides,
    into poisoned outputs; each implementation forced with its heuristic's config."""
    for n in (4104, 4102):
        x = put(RNG.standard_normal((3, n)) * 2 + 1, xdtype, dev)
        w, b = (put(RNG.standard_normal(n), wdtype, dev) for _ in range(2))
        want = refs(f64(x), f64(w), f64(b))
        for name, fn, args in (
            ("rms_norm", ops.rms_norm, (x, w, 1e-5)),
            ("layer_norm", ops.layer_norm, (x, w, b, 1e-5)),
        ):
            out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=dev)
            with force(name, impl, None):
                assert fn(*args, out=out) is out
            check({name: f64(out)}, {name: want[name]}, xdtype, (impl, n, wdtype))
