"""``matmul`` on cuBLASLt through nvmath-python's bindings (``nvmath.bindings.cublasLt``, the
``kernelkit[vendor]`` extra): a plan per argument signature and pointer alignment, then one
library call per matmul on the arrays' framework's current stream.

Why the bindings and not ``nvmath.linalg.advanced.Matmul``: a planned ``Matmul`` still checks
its operands, makes a stream holder and allocates its result on every ``execute`` (tens of
microseconds a call, see ``benchmarks/matmul_vendor.py``); a plan here is the descriptors and
the algorithm cuBLASLt's heuristic picked, and a call is ``cublasLtMatmul`` on pointers.

Row-major arrays are column-major transposes, so ``y [M, N] = x [M, K] @ op(w)`` is
``y^T = op(w)^T @ x^T`` in cuBLASLt's terms: A is w as stored (transposed when w is [N, K], the
"TN" layout cuBLAS serves best), B is x as stored, D is y as stored; m = N, n = M, k = K, each
leading dimension an array's row stride (``gemm``).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any, NamedTuple

from .._errors import KernelkitError, LaunchError

__all__ = ["Gemm", "Plan", "alignment", "binding", "gemm", "launcher", "make_plan"]

WORKSPACE_BYTES = 32 << 20  # what cuBLAS asks for on Hopper
# cudaDataType_t of each dtype (CUDA_R_16F, CUDA_R_16BF, CUDA_R_32F)
DATA_TYPES = {"float16": 2, "bfloat16": 14, "float32": 0}
COMPUTE_32F = 68  # cublasComputeType_t: float accumulation, no TF32 (kernelkit's float32 is exact)
OP_N, OP_T = 0, 1  # cublasOperation_t
EPILOGUE_BIAS = 4  # cublasLtEpilogue_t: D = A @ B + bias, the bias broadcast over D's columns

_loaded: list[Any] = []  # [the bindings module, or why it cannot be had]


def binding() -> Any:
    """``nvmath.bindings.cublasLt`` with cuBLASLt loaded, or a string saying why not (once)."""
    if not _loaded:
        try:
            from nvmath.bindings import cublasLt

            cublasLt.get_version()  # loads libcublasLt: a missing library is found here
        except ImportError as e:
            found: Any = f"nvmath-python is not installed ({e}); pip install 'kernelkit[vendor]'"
        except Exception as e:  # noqa: BLE001 - any failure to load is a reason to pass over
            found = f"nvmath-python cannot load cuBLASLt ({type(e).__name__}: {e})"
        else:
            found = cublasLt
        _loaded.append(found)
    return _loaded[0]


class Gemm(NamedTuple):
    """One ``y = x @ op(w)`` in cuBLASLt's column-major terms: A's operation, then (rows,
    columns, leading dimension) of A (w), B (x) and D (y)."""

    transa: int
    a: tuple[int, int, int]
    b: tuple[int, int, int]
    d: tuple[int, int, int]


def gemm(m: int, n: int, k: int, transpose_b: bool, ldx: int, ldw: int, ldy: int) -> Gemm:
    """The cuBLASLt problem for row-major x [M, K] (row stride ``ldx``), w [N, K]
    (``transpose_b``) or [K, N] (row stride ``ldw``) and y [M, N] (row stride ``ldy``).

    Example::

        >>> gemm(3500, 4096, 1024, True, 1024, 1024, 4096)
        Gemm(transa=1, a=(1024, 4096, 1024), b=(1024, 3500, 1024), d=(4096, 3500, 4096))
    """
    a = (k, n, ldw) if transpose_b else (n, k, ldw)
    return Gemm(OP_T if transpose_b else OP_N, a, (k, m, ldx), (n, m, ldy))


def alignment(pointer: int) -> int:
    """What cuBLASLt's heuristic is told the pointers are aligned to (so that it picks no
    algorithm they cannot take): 256 bytes (its default), else 16 (vector and TMA copies),
    else the largest power of two they are a multiple of. Three classes at most: a signature
    whose buffers come from an allocator of small alignment gets one or two plans, not five."""
    low = pointer & -pointer if pointer else 256
    return 256 if low >= 256 else 16 if low >= 16 else low


def _set(setter: Any, obj: int, attr: Any, value: int, dtype: Any) -> None:
    import numpy as np

    buf = np.array([value], dtype=dtype)
    setter(obj, attr, buf.ctypes.data, buf.itemsize)


class Plan:
    """cuBLASLt's descriptors and chosen algorithm for one problem and pointer alignment; the
    descriptors are destroyed with the plan."""

    def __init__(self, lt: Any, handle: int, g: Gemm, dtype: str, bias: bool, align: int) -> None:
        import numpy as np

        types = DATA_TYPES[dtype]
        desc = lt.matmul_desc_create(COMPUTE_32F, DATA_TYPES["float32"])
        layouts = [lt.matrix_layout_create(types, *shape) for shape in (g.a, g.b, g.d)]
        weakref.finalize(self, _destroy, lt, desc, layouts)
        attr, dtype_of = lt.MatmulDescAttribute, lt.get_matmul_desc_attribute_dtype
        for name, value in (("TRANSA", g.transa), ("TRANSB", OP_N)):
            _set(lt.matmul_desc_set_attribute, desc, attr[name], value, dtype_of(attr[name]))
        if bias:
            _set(lt.matmul_desc_set_attribute, desc, attr.EPILOGUE, EPILOGUE_BIAS,
                 dtype_of(attr.EPILOGUE))  # fmt: skip
        self.algo, self.bias = lt.MatmulHeuristicResult(1), bias
        self.workspace_bytes = self._heuristic(lt, handle, desc, layouts, align)
        self.lt, self.desc, self.layouts = lt, desc, layouts
        self.scalars = np.array([1.0, 0.0], dtype=np.float32)  # alpha, beta (host pointers)
        self.bias_pointer = np.zeros(1, dtype=dtype_of(attr.BIAS_POINTER))
        self.bias_attr = attr.BIAS_POINTER

    def _heuristic(self, lt: Any, handle: int, desc: int, layouts: list[int], align: int) -> int:
        """Ask cuBLASLt for its best algorithm (into ``self.algo``); its workspace in bytes."""
        import numpy as np

        pref = lt.matmul_preference_create()
        try:
            p, dtype_of = lt.MatmulPreferenceAttribute, lt.get_matmul_preference_attribute_dtype
            values = [("MAX_WORKSPACE_BYTES", WORKSPACE_BYTES)] + [
                (f"MIN_ALIGNMENT_{m}_BYTES", align) for m in "ABCD"
            ]
            for name, value in values:
                _set(lt.matmul_preference_set_attribute, pref, p[name], value, dtype_of(p[name]))
            count = np.zeros(1, dtype=np.int32)
            a, b, d = layouts
            lt.matmul_algo_get_heuristic(handle, desc, a, b, d, d, pref, 1, self.algo.ptr,
                                         count.ctypes.data)  # fmt: skip
        finally:
            lt.matmul_preference_destroy(pref)
        if count[0] < 1:
            raise LaunchError("[matmul] cuBLASLt has no algorithm for this problem")
        nbytes = int(self.algo.workspace_size)
        # 16 bytes more with an epilogue, as nvmath-python's own Matmul asks (a library issue)
        return nbytes + 16 if nbytes and self.bias else nbytes

    def run(self, handle: int, w: int, x: int, y: int, bias: int, ws: int, stream: int) -> None:
        """``y = x @ op(w) (+ bias)`` on ``stream`` (pointers; the workspace ``ws`` has the
        plan's bytes at least)."""
        lt, a, b, d = self.lt, *self.layouts
        if bias and bias != self.bias_pointer[0]:
            self.bias_pointer[0] = bias
            lt.matmul_desc_set_attribute(self.desc, self.bias_attr, self.bias_pointer.ctypes.data,
                                         self.bias_pointer.itemsize)  # fmt: skip
        s = self.scalars.ctypes.data
        lt.matmul(handle, self.desc, s, w, a, x, b, s + 4, y, d, y, d, self.algo.ptr, ws,
                  self.workspace_bytes, stream)  # fmt: skip


def _destroy(lt: Any, desc: int, layouts: list[int]) -> None:
    for layout in layouts:
        lt.matrix_layout_destroy(layout)
    lt.matmul_desc_destroy(desc)


_lock = threading.Lock()
_handles: dict[tuple[int, int], int] = {}  # (thread, device) -> cuBLASLt handle
# (device, stream) -> (workspace array, its bytes): one a stream, so that no two matmuls that
# may run at once share one (the allocators reuse memory only in stream order)
_workspaces: dict[tuple[int, int], tuple[Any, int]] = {}


@contextlib.contextmanager
def _current(device: int) -> Iterator[None]:
    """``device`` current within the block (cuBLASLt's handle and heuristic read it)."""
    from cuda.bindings import runtime

    err, before = runtime.cudaGetDevice()
    if err != runtime.cudaError_t.cudaSuccess:
        raise LaunchError(f"[matmul] cannot read the current CUDA device ({err!r})")
    if before != device:
        runtime.cudaSetDevice(device)
    try:
        yield
    finally:
        if before != device:
            runtime.cudaSetDevice(before)


def handle(lt: Any, device: int) -> int:
    """This thread's cuBLASLt handle for ``device`` (created with the device current)."""
    key = (threading.get_ident(), device)
    h = _handles.get(key)
    if h is None:
        with _current(device):
            h = lt.create()
        with _lock:
            _handles[key] = h
    return h


def make_plan(lt: Any, device: int, g: Gemm, dtype: str, bias: bool, align: int) -> Plan:
    """A new plan, made with ``device`` current; LaunchError naming cuBLASLt's refusal."""
    try:
        with _current(device):
            return Plan(lt, handle(lt, device), g, dtype, bias, align)
    except KernelkitError:
        raise
    except Exception as e:
        raise LaunchError(
            f"[matmul] cuBLASLt cannot plan {g} for {dtype} ({type(e).__name__}: {e}); "
            "kernelkit.force('matmul', ...) another implementation"
        ) from e


def workspace(device: int, stream: int, nbytes: int, allocate: Any, pointer: Any) -> int:
    """The pointer of a workspace of ``nbytes`` at least for matmuls on ``stream``."""
    if not nbytes:
        return 0
    found = _workspaces.get((device, stream))
    if found is None or found[1] < nbytes:
        size = max(nbytes, found[1] if found else 0)
        with _lock:
            if len(_workspaces) >= 16:  # streams come and go: a few are in use at once
                _workspaces.clear()
            found = _workspaces[(device, stream)] = (allocate((size,)), size)
    return pointer(found[0])


def _ld(facts: Any, cols: int) -> int | None:
    """The leading dimension of a 2-D array as cuBLASLt reads it (its row stride), or None
    where its layout needs a copy (columns not adjacent, rows overlapping)."""
    rows, strides = facts.shape[0], facts.strides
    if strides[1] != 1 and cols > 1:
        return None
    if rows <= 1:
        return max(cols, 1)
    return strides[0] if strides[0] >= cols else None


def launcher(lt: Any, problem: Any) -> Any:
    """``launch(arrays, out)`` for one matmul signature (CUDA arrays of CuPy or anything
    viewed through an installed framework): inputs whose layout cuBLASLt cannot read are
    copied, an out= it cannot write is written through a temporary."""
    from .._arrays import DLPACK_CUDA
    from .._arrays.lookup import adapter_for
    from .._dtypes import normalize_dtype

    m, n, k, tb = (problem.attr(a) for a in ("M", "N", "K", "transpose_b"))
    fx, fw, fy = problem.arg("x"), problem.arg("w"), problem.arg("y")
    ldx, ldw = _ld(fx, k), _ld(fw, k if tb else n)
    ldy = _ld(fy, n) if fy.shape else n
    g = gemm(m, n, k, tb, ldx or k, ldw or (k if tb else n), ldy or n)
    dtype, device, has_bias = fx.dtype, problem.device_index, problem.attr("bias") is not None
    bias_copy = has_bias and problem.arg("bias").strides[0] != 1
    plans: dict[int, Plan] = {}
    fixed: list[Any] = []  # (adapter of the arrays as launched, allocate, allocate bytes)

    def first(x: Any) -> list[Any]:
        a = adapter_for(x, "a")
        make = [normalize_dtype(d, "[matmul]") for d in (dtype, "uint8")]
        fixed[:] = [a, *(a.allocator(d, DLPACK_CUDA, device) for d in make)]
        fixed.append(a.stream_getter(DLPACK_CUDA, device))
        return fixed

    def launch(arrays: Any, out: Any) -> Any:
        x, w, bias = (None if v is None else adapter_for(v, "a").prepare(v) for v in arrays)
        a, allocate, allocate_bytes, stream_of = fixed or first(x)
        x = x if ldx else a.contiguous(x)
        w = w if ldw else a.contiguous(w)
        if bias_copy:
            bias = a.contiguous(bias)
        view = None if out is None else adapter_for(out, "out").prepare(out)
        y = view if view is not None and ldy else allocate((m, n))
        px, pw, py = a.pointer(x), a.pointer(w), a.pointer(y)
        pb = a.pointer(bias) if has_bias else 0
        align = alignment(px | pw | py | pb)
        plan = plans.get(align)
        if plan is None:
            plan = plans[align] = make_plan(lt, device, g, dtype, has_bias, align)
        stream = stream_of()
        ws = workspace(device, stream, plan.workspace_bytes, allocate_bytes, a.pointer)
        plan.run(handle(lt, device), pw, px, py, pb, ws, stream)
        if out is None:
            return y
        if not ldy:
            view[...] = y  # type: ignore[index]
        return out

    return launch
