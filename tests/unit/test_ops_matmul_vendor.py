"""``matmul/vendor`` without a device: the route is taken only where a table (or the tuning
database, or an override) names it; it serves CuPy, JAX and other CUDA arrays, never torch
tensors (the framework route) nor the CPU; without nvmath-python (or without a loadable cuBLASLt)
a row naming it is passed over with the reason, and kernelkit's kernels run; the table row
validates; the column-major problem handed to cuBLASLt computes ``x @ op(w)`` (checked by a NumPy
model of cuBLASLt's layouts); and the JAX launcher (``jnp.matmul``) against float64."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from kernelkit._errors import ArgumentError
from kernelkit._records import ArgFacts, Problem, Target
from kernelkit._select.records import Config
from kernelkit._select.select import Override, select, unservable
from kernelkit._select.tables import Table, TableEntry
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_cublaslt as LT
from kernelkit.ops import _matmul_library as LIB

FEATURES = frozenset({"fp16", "bf16", "cp_async", "mma_sync", "tma", "clusters"})
H100 = Target("cuda", 0, "sm_90", "NVIDIA H100 80GB HBM3", 1024, (1024, 1024, 64),
              (2**31 - 1, 65535, 65535), 48 * 1024, 227 * 1024, 32, FEATURES)  # fmt: skip
CPU = Target("cpu", 0, "x86_64", "host", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
             48 * 1024, 227 * 1024, 32, frozenset({"cpu"}))  # fmt: skip


def problem(m=3500, n=4096, k=4096, dtype="bfloat16", framework="cupy", bias=None,
            activation=None, device_type=2, transpose_b=True) -> Problem:  # fmt: skip
    w_shape = (n, k) if transpose_b else (k, n)
    args = (
        ArgFacts("x", "array", dtype, (m, k), (k, 1)),
        ArgFacts("w", "array", dtype, w_shape, (w_shape[1], 1)),
        ArgFacts("bias", "null" if bias is None else "array", bias or "float32", (n,), (1,)),
        ArgFacts("y", "array", dtype, is_output=True),
    )
    options = {"transpose_b": transpose_b, "activation": activation, "bias": bias,
               "framework": framework, "aligned16": True}  # fmt: skip
    attrs = {"M": m, "K": k, "N": n, **options}
    return Problem("matmul", args, tuple(sorted(attrs.items())), device_type=device_type)


# the row ``benchmarks/matmul_vendor.py --rows`` writes where the route measured ahead
ROW = TableEntry("matmul", "matmul/vendor", Config(), "sm_90", "H100",
                 exact=(("K", 4096), ("N", 4096), ("x.dtype", "bfloat16")),
                 ranges=(("M", 1025, None),), where="test row")  # fmt: skip


def table_lookup(*entries: TableEntry):
    table = Table(entries)

    def lookup(p, t, key):
        return [(e.impl, e.config, f"table {e.where}") for e in table.matches("matmul", t, p)]

    return lookup


@pytest.fixture
def with_binding(monkeypatch):
    """nvmath's bindings present and cuBLASLt loadable (a stand-in module: no device here)."""
    monkeypatch.setattr(LT, "_loaded", [types.ModuleType("cublasLt")])


@pytest.fixture
def without_nvmath(monkeypatch):
    """nvmath-python not installed: its import fails, whatever this machine has."""
    monkeypatch.setattr(LT, "_loaded", [])
    for name in [n for n in sys.modules if n == "nvmath" or n.startswith("nvmath.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "nvmath", None)


def verdicts(selection, impl="matmul/vendor"):
    return [(c.source, c.verdict) for c in selection.considered if c.impl == impl]


# --- selection --------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["cupy", "jax", "jaxlib", "numba"])
@pytest.mark.parametrize("m", [1, 16, 128, 3500, 8192])
def test_never_chosen_by_the_rules(with_binding, framework, m):
    s = select(MM.OP, problem(m, framework=framework), H100)
    assert s.choice.impl != "matmul/vendor"
    assert s.choice.source in ("heuristic", "default")
    assert verdicts(s) == [("microkernel", "taken only where a table, the tuning database or "
                                           "kernelkit.force names it")]  # fmt: skip


@pytest.mark.parametrize("framework", ["cupy", "jax", "jaxlib", "numba"])
@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_a_table_row_sends_cupy_jax_and_other_cuda_arrays_to_it(with_binding, framework, dtype):
    s = select(MM.OP, problem(3500, framework=framework, dtype=dtype), H100,
               table=table_lookup(ROW))  # fmt: skip
    assert (s.choice.impl, s.choice.source) == ("matmul/vendor", "table")
    assert "test row" in s.choice.reason
    # below the row's M range, or on another weight: kernelkit's kernels
    for p in (problem(1024, framework=framework), problem(3500, n=14336, framework=framework)):
        assert select(MM.OP, p, H100, table=table_lookup(ROW)).choice.impl != "matmul/vendor"


def test_torch_keeps_the_framework_route_under_a_vendor_row(with_binding):
    s = select(MM.OP, problem(3500, framework="torch"), H100, table=table_lookup(ROW))
    assert s.choice.impl == "matmul/framework"
    assert verdicts(s)[0] == (
        "table",
        "refused: torch tensors take the framework route (torch's cuBLAS) (table test row)",
    )


@pytest.mark.parametrize(
    ("p", "t", "why"),
    [
        (problem(framework="numpy", device_type=1), CPU, "needs CUDA arrays on a CUDA device"),
        (problem(activation="silu"), H100, "fuses no activation (silu)"),
        (problem(bias="float32"), H100, "adds a bias of x's dtype (bfloat16) only, got float32"),
        (problem(k=0), H100, "K = 0"),
    ],
    ids=["cpu", "activation", "bias_dtype", "k0"],
)
def test_refused_with_a_reason(with_binding, p, t, why):
    assert why in LIB.vendor_match(p, t)
    with pytest.raises(ArgumentError, match=r"\[matmul\] forced 'vendor'"):
        select(MM.OP, p, t, override=Override("vendor"))


def test_a_bias_of_x_dtype_is_taken(with_binding):
    assert LIB.vendor_match(problem(bias="bfloat16"), H100) is None


def test_without_nvmath_the_row_is_passed_over_and_explain_says_why(without_nvmath):
    MM.OP.forget()
    s = select(MM.OP, problem(3500), H100, table=table_lookup(ROW))
    assert s.choice.impl in ("matmul/mma", "matmul/wgmma")  # kernelkit's own kernel
    source, verdict = verdicts(s)[0]
    assert source == "table" and "nvmath-python is not installed" in verdict
    assert "pip install 'kernelkit[vendor]'" in verdict
    text = s.explain()
    assert "table matmul/vendor: refused: nvmath-python is not installed" in text
    assert text.splitlines()[0].startswith(f"matmul: {s.choice.impl}")
    # JAX arrays need no nvmath: jnp.matmul serves them
    assert select(MM.OP, problem(3500, framework="jaxlib"), H100,
                  table=table_lookup(ROW)).choice.impl == "matmul/vendor"  # fmt: skip


def test_a_library_that_cannot_load_is_a_reason_too(monkeypatch):
    def missing():
        raise RuntimeError("libcublasLt.so.13: cannot open shared object file")

    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublasLt = types.SimpleNamespace(get_version=missing)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvmath", types.ModuleType("nvmath"))
    monkeypatch.setitem(sys.modules, "nvmath.bindings", bindings)
    monkeypatch.setattr(LT, "_loaded", [])
    why = LIB.vendor_match(problem(), H100)
    assert why.startswith("nvmath-python cannot load cuBLASLt (RuntimeError: libcublasLt")


def test_explain_names_the_route_and_what_it_calls(with_binding):
    text = select(MM.OP, problem(3500), H100, table=table_lookup(ROW)).explain()
    first = text.splitlines()[0]
    assert first.startswith("matmul: matmul/vendor")
    assert "cuBLASLt through nvmath-python" in first and "jnp.matmul" in first
    assert "test row" in first


def test_the_table_row_validates_and_round_trips(tmp_path):
    from kernelkit._workflows.op_cases import op_object

    assert unservable(MM.OP, "matmul/vendor", Config()) is None
    assert "takes no config" in unservable(MM.OP, "matmul/vendor", Config({"BM": 64}, (128,)))
    path = tmp_path / "matmul.h100.yaml"
    Table.write(path, [ROW], op="matmul")
    loaded = Table.load([path])
    assert loaded.entries == (ROW,) or list(loaded.entries) == [ROW]
    assert loaded.validate(lambda op, impl: op_object(op).get(impl) is not None) == []


# --- the problem handed to cuBLASLt -------------------------------------------------------------


def _column_major(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    """The matrix cuBLASLt reads from a flat buffer: element (i, j) at i + j * ld."""
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return buf[i + j * ld]


@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize(("m", "n", "k", "pad"), [(5, 7, 3, 0), (1, 9, 4, 3), (6, 1, 2, 5)])
def test_the_column_major_problem_computes_x_times_op_w(transpose_b, m, n, k, pad):
    rng = np.random.default_rng(0)
    ldx, ldw, ldy = k + pad, (k if transpose_b else n) + pad, n + pad
    x = rng.standard_normal((m, ldx))
    w = rng.standard_normal((n if transpose_b else k, ldw))
    g = LT.gemm(m, n, k, transpose_b, ldx, ldw, ldy)
    a = _column_major(w.ravel(), *g.a)
    op_a = a.T if g.transa == LT.OP_T else a
    d = op_a @ _column_major(x.ravel(), *g.b)  # cuBLASLt's D = op(A) @ B
    assert d.shape == g.d[:2]
    y = np.zeros(m * ldy)
    i, j = np.meshgrid(np.arange(g.d[0]), np.arange(g.d[1]), indexing="ij")
    y[i + j * g.d[2]] = d
    want = x[:, :k] @ (w[:, :k].T if transpose_b else w[:, :n])
    np.testing.assert_allclose(y.reshape(m, ldy)[:, :n], want, rtol=1e-12)


@pytest.mark.parametrize(
    ("pointer", "align"), [(0x7F0000000000, 256), (0x7F0000000010, 16), (0x7F0000000002, 2)]
)
def test_alignment_told_to_the_heuristic(pointer, align):
    assert LT.alignment(pointer) == align


@pytest.mark.parametrize(
    ("shape", "strides", "cols", "ld"),
    [((4, 8), (8, 1), 8, 8), ((4, 8), (12, 1), 8, 12), ((4, 8), (1, 4), 8, None),
     ((4, 8), (0, 1), 8, None), ((1, 8), (3, 1), 8, 8), ((4, 1), (1, 7), 1, 1)],
    ids=["contiguous", "padded_rows", "transposed_view", "broadcast", "one_row", "one_column"],
)  # fmt: skip
def test_leading_dimensions_or_a_copy(shape, strides, cols, ld):
    assert LT._ld(ArgFacts("x", "array", "float16", shape, strides), cols) == ld


# --- the JAX launcher (jnp.matmul), on the CPU --------------------------------------------------


@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_jax_launcher_against_float64(transpose_b, with_bias):
    jnp = pytest.importorskip("jax.numpy")
    rng = np.random.default_rng(1)
    m, n, k = 33, 17, 40
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32) if with_bias else None
    p = problem(m, n, k, "float32", "jaxlib", "float32" if with_bias else None,
                transpose_b=transpose_b)  # fmt: skip
    launch = LIB.vendor_prepare(None, p, np.float32)
    args = [jnp.asarray(x), jnp.asarray(w), None if b is None else jnp.asarray(b)]
    y = launch(args, None)
    want = x.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64)
    if b is not None:
        want = want + b
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ArgumentError, match="immutable"):
        launch(args, jnp.zeros((m, n), jnp.float32))
