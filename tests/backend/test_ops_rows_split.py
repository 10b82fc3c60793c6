"""Long rows over many blocks (``rows_split``: chunk statistics, then the output) against
float64: every op and dtype, odd lengths (the element path), rows of one chunk and of more
chunks than a warp has lanes, NaN-poisoned outputs, non-contiguous and 3-D inputs, weights of
another dtype, softmax's -inf, NaN and +inf rows, a constant row's layer_norm, both cache-hint
settings, and the same bits on every run. CPU backend and CUDA when present, forced onto the
implementation and config."""

from __future__ import annotations

import numpy as np
import pytest

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _rows_split

torch = pytest.importorskip("torch")
from test_ops_rows_long import TOL, check_special_rows, f64, put, refs  # noqa: E402  (after torch: it needs it too)

RNG = np.random.default_rng(29)
NAMES = ("softmax", "rms_norm", "layer_norm")


@pytest.fixture
def dev(backend):
    if backend in ("cpu", "cuda"):
        return backend
    pytest.skip(f"{backend}: these tests use torch tensors")


def forced(block, u, hint=1):
    return {"BLOCK": block, "U": u, "HINT": hint, "threadgroup": (block,)}


def run(name, x, w, b, values, out_dtype=None):
    """``name`` forced onto rows_split with ``values``, into a NaN-poisoned out."""
    out = torch.full(x.shape, float("nan"), dtype=out_dtype or x.dtype, device=x.device)
    args = {"softmax": (x,), "rms_norm": (x, w, 1e-5), "layer_norm": (x, w, b, 1e-5)}[name]
    with force(name, "rows_split", values):
        assert getattr(ops, name)(*args, out=out) is out
        assert getattr(ops, name).explain(*args).choice.impl == f"{name}/rows_split"
    return out


def check(got, ref, dtype, what):
    g = f64(got)
    assert np.isfinite(g).all(), (what, "unwritten or non-finite elements")
    err = np.abs(g - ref).max() / max(1.0, np.abs(ref).max())
    assert err <= TOL[dtype], (what, err)


# (rows, n, BLOCK, U): one chunk, a few, more than 32 (warp 0's lanes take several), odd n
CASES = [(3, 1, 32, 2), (5, 7, 32, 2), (2, 1000, 64, 2), (3, 4096, 64, 2), (2, 40000, 64, 2),
         (2, 40001, 64, 4), (1, 131073, 256, 8)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("rows", "n", "block", "u"), CASES, ids=str)
def test_split_rows_match_float64_into_poisoned_outputs(dev, dtype, rows, n, block, u):
    a = RNG.standard_normal((rows, n)) * 3 + 2
    x, w, b = (
        put(a, dtype, dev),
        put(RNG.standard_normal(n), dtype, dev),
        put(RNG.standard_normal(n), dtype, dev),
    )
    want = refs(f64(x), f64(w), f64(b))
    for name in NAMES:
        check(run(name, x, w, b, forced(block, u)), want[name], dtype, (name, rows, n))


@pytest.mark.parametrize("hint", [0, 1])
def test_both_cache_hints_give_the_same_bits_every_run(dev, hint):
    """The row statistics are combined in chunk order: two runs (and both hint settings, which
    change only how memory is read) agree bit for bit."""
    n = 50000  # 98 chunks of 512 float32
    x = put(RNG.standard_normal((3, n)) * 5, "float32", dev)
    w, b = put(RNG.random(n) + 0.5, "float32", dev), put(RNG.standard_normal(n), "float32", dev)
    want = refs(f64(x), f64(w), f64(b))
    for name in NAMES:
        first = run(name, x, w, b, forced(64, 2, hint))
        again = run(name, x, w, b, forced(64, 2, hint))
        other = run(name, x, w, b, forced(64, 2, 1 - hint))
        assert torch.equal(first, again) and torch.equal(first, other), name
        check(first, want[name], "float32", name)


def test_non_contiguous_and_3d_inputs_and_weights_of_another_dtype(dev):
    n = 20000
    x = put(RNG.standard_normal((3, 2 * n)) * 2, "float32", dev)[:, ::2]  # a strided view
    assert not x.is_contiguous()
    x3 = put(RNG.standard_normal((2, 3, n)), "bfloat16", dev)
    w32, b32 = (put(RNG.standard_normal(n), "float32", dev) for _ in range(2))
    check(run("softmax", x, None, None, forced(64, 4)), refs(f64(x), 1, 0)["softmax"],
          "float32", "strided")  # fmt: skip
    want = refs(f64(x3), f64(w32), f64(b32))
    for name in ("rms_norm", "layer_norm"):
        check(run(name, x3, w32, b32, forced(128, 2)), want[name], "bfloat16", name)


def test_softmax_special_rows_and_a_constant_layer_norm_row(dev):
    check_special_rows(dev, "rows_split", forced(64, 2), forced(64, 2))


def test_configs_refuse_what_they_cannot_run(dev):
    x = put(RNG.standard_normal((2, 64)), "float32", dev)
    p = ops.softmax.explain(x).problem
    assert _rows_split.fits(p, _rows_split.config(96, 3)) is not None  # U = 3
    assert _rows_split.fits(p, _rows_split.config(100, 2)) is not None  # not a warp multiple
    assert _rows_split.fits(p, _rows_split.config(256, 4, 0)) is None
    assert _rows_split.chunks(40000, "float32", _rows_split.config(64, 2)) == 79


def test_the_heuristic_takes_few_long_rows_where_they_leave_sms_idle(dev):
    """No clusters (an sm_80-like target), a row beyond a block's shared memory, fewer rows
    than SMs: rows_split, chosen by the rules; with clusters, only 1-4 rows of 192 KiB or
    more; more rows, or a row one block holds: the other kernels, as before."""
    import dataclasses

    x = put(RNG.standard_normal((2, 64)), "float32", dev)
    here = ops.softmax.explain(x).target
    plain = dataclasses.replace(
        here, features=here.features - {"clusters"}, multiprocessor_count=108,
        max_shared_memory_optin_bytes=163 * 1024,
    )  # fmt: skip
    clusters = dataclasses.replace(plain, features=(plain.features | {"clusters"}) - {"cpu"})

    def problem(rows, n, dtype):
        return ops.softmax.explain(put(np.zeros((rows, n)), dtype, dev)).problem

    long32 = problem(64, 262144, "float32")
    got = _rows_split.heuristic(long32, plain)
    assert got is not None and got.values == {"BLOCK": 256, "U": 4, "HINT": 1}
    assert _rows_split.heuristic(problem(64, 262144, "bfloat16"), plain).values["U"] == 2
    assert _rows_split.heuristic(long32, clusters) is None
    assert _rows_split.heuristic(problem(108, 262144, "float32"), plain) is None  # rows >= SMs
    assert _rows_split.heuristic(problem(64, 40000, "float32"), plain) is None  # rows_smem's
    assert _rows_split.heuristic(problem(64, 8192, "float32"), plain) is None  # registers'
    # with clusters, 1-4 rows of 192 KiB or more (a vocabulary's logits at decode): split
    # (measured 1.05-1.97x the cluster kernel on an H100 and an H200); 8 rows, or rows of
    # 128 KiB, stay on the clusters
    for rows, n, dtype in ((1, 128256, "float32"), (4, 128256, "bfloat16"), (1, 98304, "bfloat16"),
                           (2, 262144, "float16"), (1, 49152, "float32")):  # fmt: skip
        got = _rows_split.heuristic(problem(rows, n, dtype), clusters)
        # U = 2 in every dtype there (float32's U = 4 measured 1.00-1.22x the best, the H200)
        assert got is not None and got.values == {"BLOCK": 256, "U": 2, "HINT": 1}, (rows, n)
    for rows, n, dtype in ((8, 128256, "float32"), (1, 65536, "bfloat16"), (1, 32000, "float32"),
                           (5, 262144, "float32"), (1, 49151, "float32")):  # fmt: skip
        assert _rows_split.heuristic(problem(rows, n, dtype), clusters) is None, (rows, n, dtype)
    emulated = dataclasses.replace(clusters, features=clusters.features | {"cpu"})
    assert _rows_split.heuristic(problem(1, 128256, "float32"), emulated) is None
    # on this backend's own target: rows_split for 4 rows of 300000 on a GPU with clusters,
    # never by the rules on the CPU backend (it emulates clusters) or without clusters (a row
    # one block's shared memory cannot hold goes to the other kernels there)
    target = ops.softmax.explain(x).target
    split = "clusters" in target.features and "cpu" not in target.features
    split = split and target.multiprocessor_count > 4
    got = ops.softmax.explain(put(np.zeros((4, 300000)), "float32", dev)).choice.impl
    assert (got == "softmax/rows_split") == split, got


def test_layer_norm_into_x_itself_reads_no_other_chunk_of_x(dev, monkeypatch):
    """out= x: each output block may read only its own chunk of x, which it reads before it
    writes; chunk 0's block may have overwritten the row's first element (layer_norm's shift)
    before another block of the row starts. Simulated, deterministically: x[:, 0] is overwritten
    between the two kernels, and every other element must still be right."""
    real = _rows_split.kernel_caller

    def caller(k, kw):
        call = real(k, kw)
        if not k.name.endswith("_split_stats"):
            return call

        def stats_then_chunk0_writes(arrays, *rest):
            got = call(arrays, *rest)
            arrays[0][:, 0] = 1e4
            return got

        return stats_then_chunk0_writes

    monkeypatch.setattr(_rows_split, "kernel_caller", caller)
    n = 3001  # a shape of its own: the patched launch stays prepared for this signature only
    x = put(RNG.standard_normal((3, n)) * 2 + 5, "float32", dev)
    w, b = (put(RNG.standard_normal(n), "float32", dev) for _ in range(2))
    want = refs(f64(x), f64(w), f64(b))["layer_norm"]
    with force("layer_norm", "rows_split", forced(32, 2)):
        assert ops.layer_norm(x, w, b, 1e-5, out=x) is x
    check(x[:, 1:], want[:, 1:], "float32", "in place")
