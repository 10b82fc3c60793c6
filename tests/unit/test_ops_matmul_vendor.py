"""``matmul/vendor`` without a device: the route is taken only where a table (or the tuning
database, or an override) names it; it serves CuPy, JAX and other CUDA arrays, never torch
tensors (the framework route) nor the CPU; without nvmath-python (or without a loadable cuBLASLt)
a row naming it is passed over with the reason, and kernelkit's kernels run; the table row
validates; the column-major problem handed to cuBLASLt computes ``x @ op(w)`` (checked by a NumPy
model of cuBLASLt's layouts); and the JAX launcher (``jnp.matmul``) against float64."""

from __future__ import annotations

import contextlib
import ctypes
import enum
import sys
import types
from typing import ClassVar

import numpy as np
import pytest
from test_ops_matmul_mma import problem as mma_problem

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


def problem(m=3500, **kw) -> Problem:
    """A matmul problem as ``ops.matmul`` binds it, M = 3500 unless given (the vendor's range)."""
    return mma_problem(m, **kw)


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
    ("pointer", "align"),
    [(0x7F0000000000, 256), (0x7F0000000100, 256), (0x7F0000000010, 16), (0x7F0000000080, 16),
     (0x7F0000000008, 8), (0x7F0000000002, 2)],
)  # fmt: skip
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
    p = problem(m, n=n, k=k, dtype="float32", framework="jaxlib",
                bias="float32" if with_bias else None, transpose_b=transpose_b)  # fmt: skip
    launch = LIB.vendor_prepare(None, p, np.float32)
    args = [jnp.asarray(x), jnp.asarray(w), None if b is None else jnp.asarray(b)]
    y = launch(args, None)
    want = x.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64)
    if b is not None:
        want = want + b
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ArgumentError, match="immutable"):
        launch(args, jnp.zeros((m, n), jnp.float32))


# --- the launcher, on a NumPy model of the cuBLASLt calls it makes --------------------------------


class HostLt:
    """The cuBLASLt calls the route makes, carried out with NumPy on host memory the way the
    library reads device memory: column-major matrices at pointers, ``D = op(A) @ B (+ bias)``."""

    DTYPES: ClassVar[dict[int, type]] = {2: np.float16, 0: np.float32}
    MatmulDescAttribute = enum.IntEnum("MatmulDescAttribute", "TRANSA TRANSB EPILOGUE BIAS_POINTER")
    MatmulPreferenceAttribute = enum.IntEnum(
        "MatmulPreferenceAttribute",
        "MAX_WORKSPACE_BYTES MIN_ALIGNMENT_A_BYTES MIN_ALIGNMENT_B_BYTES MIN_ALIGNMENT_C_BYTES "
        "MIN_ALIGNMENT_D_BYTES",
    )

    def __init__(self, workspace_bytes=4096):
        self.objects, self.results, self.calls, self.plans = {}, {}, [], 0
        self.workspace_bytes = workspace_bytes

    def _new(self, value):
        self.objects[len(self.objects) + 1] = value
        return len(self.objects)

    @staticmethod
    def _read(ptr, dtype, count):
        return np.frombuffer((ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(ptr),
                             dtype=dtype)  # fmt: skip

    def get_matmul_desc_attribute_dtype(self, attr):
        return np.int64

    get_matmul_preference_attribute_dtype = get_matmul_desc_attribute_dtype

    def matmul_desc_create(self, compute, scale):
        assert (compute, scale) == (LT.COMPUTE_32F, 0)
        self.plans += 1
        return self._new({})

    def matmul_desc_set_attribute(self, desc, attr, ptr, size):
        assert size == 8
        self.objects[desc][attr.name] = int(self._read(ptr, np.int64, 1)[0])

    def matrix_layout_create(self, dtype, rows, cols, ld):
        assert ld >= rows, (rows, cols, ld)
        return self._new((self.DTYPES[dtype], rows, cols, ld))

    def matmul_preference_create(self):
        return self._new({})

    matmul_preference_set_attribute = matmul_desc_set_attribute

    def matmul_preference_destroy(self, pref):
        pass

    matrix_layout_destroy = matmul_desc_destroy = matmul_preference_destroy

    def MatmulHeuristicResult(self, size):  # noqa: N802 - the binding's class
        assert size == 1
        result = types.SimpleNamespace(ptr=10**6 + len(self.results), workspace_size=-1)
        self.results[result.ptr] = result
        return result

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, n, results, count):
        assert (c, n) == (d, 1) and self.objects[pref]["MAX_WORKSPACE_BYTES"] == 32 << 20
        self.objects[pref]["result"] = results
        self._read(count, np.int32, 1)[:] = 1  # one algorithm found
        self.results[results].workspace_size = self.workspace_bytes

    def create(self):
        return 7

    def _matrix(self, ptr, layout):
        dtype, rows, cols, ld = self.objects[layout]
        flat = self._read(ptr, dtype, ld * (cols - 1) + rows)
        i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        return flat, i + j * ld

    def matmul(self, handle, desc, alpha, a, ad, b, bd, beta, c, cd, d, dd, algo, ws, ws_bytes,
               stream):  # fmt: skip
        assert handle == 7 and (c, cd) == (d, dd) and stream == 0
        attrs = self.objects[desc]
        bias = attrs.get("EPILOGUE") == LT.EPILOGUE_BIAS
        assert ws_bytes == self.workspace_bytes + (16 if bias and self.workspace_bytes else 0)
        assert ws != 0 or not ws_bytes
        scale = self._read(alpha, np.float32, 1)[0], self._read(beta, np.float32, 1)[0]
        assert beta == alpha + 4 and scale == (1.0, 0.0)
        flat_a, ia = self._matrix(a, ad)
        op_a = flat_a[ia].T if attrs["TRANSA"] == LT.OP_T else flat_a[ia]
        assert attrs["TRANSB"] == LT.OP_N
        flat_b, ib = self._matrix(b, bd)
        y = op_a.astype(np.float64) @ flat_b[ib].astype(np.float64)
        if bias:
            y += self._read(attrs["BIAS_POINTER"], flat_a.dtype, y.shape[0])[:, None]
        flat_d, i_d = self._matrix(d, dd)
        assert y.shape == i_d.shape
        flat_d[i_d] = y
        self.calls.append(algo)


@pytest.fixture
def host_lt(monkeypatch):
    lt = HostLt()
    monkeypatch.setattr(LT, "_current", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(LT, "_handles", {})
    monkeypatch.setattr(LT, "_workspaces", {})
    return lt


def host_problem(x, w, bias, out, transpose_b):
    """The problem ``ops.matmul`` binds for these NumPy arrays (on the CPU: the launcher does not
    ask where memory is, the model reads it from the host)."""
    from kernelkit.ops._matmul_args import prepare

    flat, _, _, options = prepare(x, w, bias, None, transpose_b)
    problem, _, _ = MM._RUNNER.problem([flat, w, bias], flat.dtype, out, options)
    return problem


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "padded_rows", "transposed_views"])
@pytest.mark.parametrize("out_kind", [None, "contiguous", "padded_rows", "column_major"])
def test_the_launcher_on_a_host_model_of_cublaslt(host_lt, dtype, transpose_b, layout, out_kind):
    rng = np.random.default_rng(2)
    m, n, k = 13, 7, 9
    x = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    if layout == "padded_rows":  # rows further apart than their length: read in place
        x = np.pad(x, ((0, 0), (0, 5)))[:, :k]
        w = np.pad(w, ((0, 0), (0, 3)))[:, : w.shape[1]]
    elif layout == "transposed_views":  # columns not adjacent: copied first
        x, w = np.asfortranarray(x), np.asfortranarray(w)
    bias = rng.standard_normal(n).astype(dtype)
    out = {None: None, "contiguous": np.full((m, n), np.nan, dtype),
           "padded_rows": np.full((m, n + 4), np.nan, dtype)[:, :n],
           "column_major": np.full((n, m), np.nan, dtype).T}[out_kind]  # fmt: skip
    launch = LT.launcher(host_lt, host_problem(x, w, bias, out, transpose_b))
    y = launch([x, w, bias], out)
    assert y is out if out is not None else y.shape == (m, n)
    want = x.astype(np.float64) @ (w.T if transpose_b else w).astype(np.float64) + bias
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    if out_kind == "padded_rows":
        assert np.isnan(out.base[:, n:]).all(), "written outside out="
    launch([x, w, bias], out)  # a second call: the same plan, the same workspace
    # (a new y each call without out=: NumPy's small allocations are 16- or 256-byte aligned)
    assert host_lt.plans == 1 or (out is None and host_lt.plans == 2)
    assert len(host_lt.calls) == 2 and len(LT._workspaces) == 1


def test_a_plan_per_pointer_alignment(host_lt):
    flat = np.zeros(4 * 16 + 8, np.float32)
    w = np.ones((3, 16), np.float32)
    aligned, shifted = flat[: 4 * 16].reshape(4, 16), flat[1 : 1 + 4 * 16].reshape(4, 16)
    launch = LT.launcher(host_lt, host_problem(aligned, w, None, None, True))
    launch([aligned, w, None], None)
    launch([shifted, w, None], None)  # 4 bytes further: another plan, told 4-byte alignment
    prefs = [o for o in host_lt.objects.values() if isinstance(o, dict) and "result" in o]
    assert host_lt.plans == 2
    assert [p["MIN_ALIGNMENT_A_BYTES"] for p in prefs][1] == 4


def test_no_workspace_when_the_algorithm_needs_none(host_lt):
    host_lt.workspace_bytes = 0
    x, w = np.ones((2, 8), np.float32), np.ones((3, 8), np.float32)
    y = LT.launcher(host_lt, host_problem(x, w, None, None, True))([x, w, None], None)
    assert (y == 8).all() and LT._workspaces == {}


def test_the_constants_are_the_bindings():
    """The cuBLAS enum values the route passes as ints are the binding's own."""
    lt = pytest.importorskip("nvmath.bindings.cublasLt")
    from nvmath import CudaDataType
    from nvmath.bindings import cublas

    assert {"float16": int(CudaDataType.CUDA_R_16F),
                             "bfloat16": int(CudaDataType.CUDA_R_16BF),
                             "float32": int(CudaDataType.CUDA_R_32F)} == LT.DATA_TYPES  # fmt: skip
    assert int(cublas.ComputeType.COMPUTE_32F) == LT.COMPUTE_32F
    assert (int(cublas.Operation.N), int(cublas.Operation.T)) == (LT.OP_N, LT.OP_T)
    assert int(lt.Epilogue.BIAS) == LT.EPILOGUE_BIAS
    assert lt.matmul_heuristic_result_dtype.names[0] == "algo"  # the struct's pointer is algo's


def test_the_launcher_views_arrays_that_only_speak_an_interface(host_lt):
    """Arrays kernelkit views through an installed framework (on a GPU: numba's and others'
    ``__cuda_array_interface__``; here the host's ``__array_interface__``) are launched as the
    view, and the result is the view's framework's array."""

    class Interface:
        def __init__(self, a):
            self.shape, self.dtype, self.strides = a.shape, a.dtype, a.strides
            self.__array_interface__ = a.__array_interface__

    x = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    w = np.linspace(-1, 1, 18, dtype=np.float32).reshape(3, 6)
    out = np.full((4, 3), np.nan, np.float32)
    problem = host_problem(Interface(x), Interface(w), None, Interface(out), True)
    assert problem.attr("framework") == Interface.__module__.split(".")[0]
    got = LT.launcher(host_lt, problem)([Interface(x), Interface(w), None], Interface(out))
    assert isinstance(got, Interface)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-6)
    y = LT.launcher(host_lt, host_problem(Interface(x), Interface(w), None, None, True))(
        [Interface(x), Interface(w), None], None
    )
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-6)


def test_torch_s_framework_route_takes_a_bias_of_x_s_dtype_only():
    """torch's matmul refuses a bias of another dtype (``F.linear``: "self and mat2 must have
    the same dtype"), which ``ops.matmul`` takes: such calls go to kernelkit's kernels, which add
    it in float32, and a forced framework route says why it cannot."""
    mixed = problem(64, framework="torch", bias="float32")
    why = LIB.framework_match(mixed, H100)
    assert why is not None and "adds a bias of x's dtype (bfloat16) only, got float32" in why
    assert LIB.framework_match(problem(64, framework="torch", bias="bfloat16"), H100) is None
    s = select(MM.OP, mixed, H100)
    assert s.choice.impl != "matmul/framework"
    with pytest.raises(ArgumentError, match=r"forced 'framework'.*bias of x's dtype"):
        select(MM.OP, mixed, H100, override=Override("framework"))


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("transpose_b", [True, False])
@pytest.mark.parametrize("out", [None, "contiguous", "strided"])
def test_the_framework_route_s_runs_compute_x_w_on_torch_tensors(
    bias, activation, transpose_b, out
):
    """What the framework route calls is torch's own code, so its prepared run and its general
    run are checked here on CPU tensors (the route itself is for CUDA tensors only): into a
    contiguous out= through torch.mm/addmm, anything else through F.linear/matmul and a copy."""
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    m, k, n = 5, 24, 16
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) if transpose_b else torch.randn(k, n, generator=g)
    b = torch.randn(n, generator=g) if bias else None
    want = x.double() @ (w.double().T if transpose_b else w.double())
    want = want + b.double() if bias else want
    want = torch.relu(want) if activation else want
    p = problem(m, n=n, k=k, dtype="float32", transpose_b=transpose_b, framework="torch",
                bias="float32" if bias else None, activation=activation)  # fmt: skip
    runs = [LIB.framework_prepare(None, p, torch.float32)]
    runs.append(lambda arrays, o: LIB.framework_run(None, (p, arrays, torch.float32, o)))
    for run in runs:
        o = None
        if out == "contiguous":
            o = torch.full((m, n), float("nan"))
        elif out == "strided":
            o = torch.full((n, m), float("nan")).t()
        y = run([x, w, b], o)
        assert o is None or y is o
        torch.testing.assert_close(y.double(), want, atol=1e-4, rtol=1e-4)
