"""Long rows streamed through persistent clusters (``rows_stream``) against float64: every op
and dtype, clusters that take one to several rows (every G-th row of the grid's G clusters,
the two shared-memory slices in turn), odd lengths (the element path) and multiples of 16
bytes (the vector path: bulk copies on sm_90), NaN-poisoned outputs, non-contiguous and 3-D
inputs, softmax's special rows and a constant layer_norm row. On the CPU backend, which
emulates clusters, and on CUDA when present; each case is forced onto its config."""

from __future__ import annotations

import numpy as np
import pytest
from test_ops_rows_long import TOL, check, check_special_rows, f64, put, refs

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops import _rows_stream

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(29)


@pytest.fixture
def dev(backend):
    if backend not in ("cpu", "cuda"):
        pytest.skip(f"{backend}: these tests use torch tensors")
    dev = backend
    if "clusters" not in ops.softmax.explain(torch.ones(1, 8, device=dev)).target.features:
        pytest.skip("rows_stream needs clusters")
    return dev


def forced(block, cl, r):
    return {"BLOCK": block, "CL": cl, "R": r, "threadgroup": (block,)}


def run_all(x, w, b, values, dev, names=("softmax", "rms_norm", "layer_norm")):
    """The ops forced onto rows_stream with ``values``, each into a NaN-poisoned out."""
    args = {"softmax": (x,), "rms_norm": (x, w, 1e-5), "layer_norm": (x, w, b, 1e-5)}
    got = {}
    for name in names:
        out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=dev)
        fn = getattr(ops, name)
        assert fn.explain(*args[name]).choice.impl != f"{name}/rows_stream"  # listed only
        with force(name, "rows_stream", values):
            assert fn.explain(*args[name]).choice.impl == f"{name}/rows_stream"
            assert fn(*args[name], out=out) is out
        got[name] = f64(out)
    return got


# (rows, n, cl, r): a cluster a row (R = 1: one slice), 7 rows over 4 clusters (two rows each
# but the last's one), 9 over 3 (three each: both slices twice and more), one row, a row's tail
# in an empty last block (n = 7 over 8 blocks), odd lengths on the element path
CASES = [(3, 4096, 4, 1), (7, 4096, 4, 2), (9, 1000, 2, 4), (1, 20000, 1, 16), (5, 7, 8, 2),
         (6, 32001, 3, 2), (16, 65536, 16, 4)]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize(("rows", "n", "cl", "r"), CASES, ids=str)
def test_streamed_rows_match_float64_into_poisoned_outputs(dev, dtype, rows, n, cl, r):
    if dev == "cpu" and (dtype != "float32") and cl not in (1, 4):
        pytest.skip("CPU backend: 16-bit dtypes on two cluster sizes (a g++ build each)")
    block = 256 if dev == "cpu" else 512
    a = RNG.standard_normal((rows, n)) * 3 + 2
    w, b = RNG.standard_normal(n), RNG.standard_normal(n)
    x, wx, bx = put(a, dtype, dev), put(w, dtype, dev), put(b, dtype, dev)
    got = run_all(x, wx, bx, forced(block, cl, r), dev)
    check(got, refs(f64(x), f64(wx), f64(bx)), dtype, (rows, n, cl, r))


@pytest.mark.parametrize("r", _rows_stream.ROWS)
def test_every_rows_a_cluster_on_the_gpu_and_its_blocks(dev, r):
    """Every R with every cluster size (CUDA) or one (CPU): 37 rows leave the last cluster
    fewer rows than the others; a poisoned out shows any row no cluster wrote."""
    sizes = _rows_stream.SIZES
    if dev == "cpu":
        sizes = (sizes[_rows_stream.ROWS.index(r) % len(sizes)],)
    n = 12288
    a = RNG.standard_normal((37, n))
    w, b = RNG.standard_normal(n), RNG.standard_normal(n)
    x, wx, bx = (put(v, "float32", dev) for v in (a, w, b))
    want = refs(f64(x), f64(wx), f64(bx))
    for cl in sizes:
        names = ("softmax", "rms_norm", "layer_norm") if dev == "cuda" else ("rms_norm",)
        got = run_all(x, wx, bx, forced(256, cl, r), dev, names)
        check(got, {k: want[k] for k in names}, "float32", (cl, r))


def test_non_contiguous_and_3d_inputs_and_weights_of_another_dtype(dev):
    n = 20000
    x = put(RNG.standard_normal((3, 2 * n)) * 2, "float32", dev)[:, ::2]  # a strided view
    assert not x.is_contiguous()
    x3 = put(RNG.standard_normal((2, 3, n)), "bfloat16", dev)
    w32 = put(RNG.standard_normal(n), "float32", dev)  # float32 weight, bfloat16 x
    values = forced(256, 2, 2)
    with force("softmax", "rows_stream", values):
        y = ops.softmax(x)
    np.testing.assert_allclose(f64(y), refs(f64(x), 1.0, 0.0)["softmax"], atol=2e-6)
    for name, args, ref in (
        ("rms_norm", (x3, w32, 1e-5), refs(f64(x3), f64(w32), 0.0)["rms_norm"]),
        ("layer_norm", (x3, w32, w32, 1e-5), refs(f64(x3), f64(w32), f64(w32))["layer_norm"]),
    ):
        with force(name, "rows_stream", values):
            got = f64(getattr(ops, name)(*args))
        assert np.abs(got - ref).max() <= TOL["bfloat16"] * np.abs(ref).max(), name


def test_softmax_special_rows_and_a_constant_layer_norm_row(dev):
    check_special_rows(dev, "rows_stream", forced(512, 2, 2), forced(256, 1, 2))
