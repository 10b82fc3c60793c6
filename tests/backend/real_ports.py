"""Real CUDA kernels ported as a user would (issue 25): the body and its helpers as the project
ships them, only the signature removed. Shared by tests/backend/test_real_ports_*.py (every
backend, float64 NumPy references) and tests/unit/test_real_ports_nvrtc.py (NVRTC, sm_90).

A ``Port`` lists the original parameters as ``name:kind``: ``T*`` is an array of the case's
dtype, ``i32*``/``f32*`` an array of that dtype, ``T``/``i32``/``i64``/``f32`` a scalar of that
type, ``struct`` a by-value type from ``structs`` (passed as bytes).
Type template parameters named in ``template`` are bound to the case's dtype; ``fixed`` holds
other template values the launcher sets (the compile test uses the first of each).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import kernelkit

SHORT = {
    "i32": "int32", "i64": "int64", "u64": "uint64", "f32": "float32", "f64": "float64",
    "u32": "uint32",
}  # fmt: skip
TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
NP = {"float64": np.float64, "float32": np.float32, "float16": np.float16}


@dataclass(frozen=True)
class Port:
    name: str
    repo: str
    path: str
    commit: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    body: str
    header: str = ""
    template: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float32",)
    fixed: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # (name, the values a launcher uses)
    structs: tuple[tuple[str, str, int], ...] = ()  # (parameter, C++ type, size in bytes)
    optional: tuple[str, ...] = ()  # array inputs a call may pass as None (a null pointer)
    edits: tuple[str, ...] = field(default=("only the signature removed",))

    def kernel(self, dtype: str = "float32") -> Any:
        names = [p.split(":")[0] for p in self.inputs], [p.split(":")[0] for p in self.outputs]
        structs = {p: kernelkit.struct(t, n) for p, t, n in self.structs}
        kinds = dict(p.split(":") for p in self.inputs)
        optional = {n: dtype_of(kinds[n], dtype) for n in self.optional}
        return kernelkit.kernel(
            self.name, *names, self.body, header=self.header, structs=structs,
            optional_inputs=optional or None,
        )  # fmt: skip


def dtype_of(kind: str, dtype: str) -> str:
    """The dtype name of a ``T``/``i32``/... kind (``*`` stripped) in a case of ``dtype``."""
    base = kind.rstrip("*")
    return dtype if base == "T" else SHORT[base]


class Ports:
    """Runs ports on one backend with torch tensors (NumPy has no bfloat16)."""

    def __init__(self, backend: str) -> None:
        self.torch = pytest.importorskip("torch")
        self.backend = backend
        self.device = "cuda" if backend == "cuda" else "cpu"

    def put(self, a: Any, dtype: str) -> Any:
        t = self.torch.from_numpy(np.array(a, np.float64))  # a copy: outputs may be in place
        return t.to(self.device).to(getattr(self.torch, dtype))

    def round(self, a: Any, dtype: str) -> np.ndarray:
        """``a`` as ``dtype`` would hold it, in float64 (the reference's inputs)."""
        return self.put(a, dtype).double().cpu().numpy()

    def _args(self, port: Port, dtype: str, values: list[Any]) -> list[Any]:
        args = []
        for kind, v in zip(port.inputs, values, strict=True):
            if kind.endswith((":struct", ":bool")) or v is None:
                args.append(v)
                continue
            name = dtype_of(kind.split(":")[1], dtype)
            if kind.endswith("*"):
                args.append(self.put(v, name))
            else:
                args.append(np.dtype(NP.get(name, name)).type(v))
        return args

    def run(self, port: Port, dtype: str, values: list[Any], outs: list[Any], **kw: Any) -> list:
        """float64 results; ``outs`` are shapes (NaN-poisoned outputs) or arrays (read and
        written in place). On the CPU backend also in checked mode, which must agree; on CUDA,
        where every output is new, the same call twice again (the second call makes a call
        repeated in C where it can be, ``_pipeline/repeat.py``, the third one runs it), which
        must agree."""
        k = port.kernel(dtype)
        template = [(t, dtype) for t in port.template] + list(kw.pop("template", []))
        results = []
        again = all(isinstance(o, tuple) for o in outs)
        runs = (False, True) if self.backend == "cpu" else (False,) * (3 if again else 1)
        for check in runs:
            out = []
            for kind, o in zip(port.outputs, outs, strict=True):
                name = dtype_of(kind.split(":")[1], dtype)
                if isinstance(o, tuple):
                    fill = np.nan if name.startswith(("float", "bfloat")) else -7
                    o = np.full(o, fill)
                out.append(self.put(o, name))
            res = k(self._args(port, dtype, values), out=out, check=check, template=template, **kw)
            results.append([r.double().cpu().numpy() for r in res])
        for other in results[1:]:
            for a, b in zip(results[0], other, strict=True):
                agree(port, dtype, self.backend, a, b)
        return results[0]


def agree(port: Port, dtype: str, backend: str, a: np.ndarray, b: np.ndarray) -> None:
    """Two runs of one call give the same results: exactly on the CPU backend, unless the
    kernel adds with float atomics, whose order varies wherever blocks run at once (the CPU
    backend's threads too: darknet's upsample backward differed in the last bit once in many
    runs); else within the dtype's rounding."""
    if backend == "cpu" and "atomic" not in (port.body + port.header).lower():
        np.testing.assert_array_equal(a, b)
    else:
        tol = TOL.get(dtype, 0.0)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


def close(got: np.ndarray, want: np.ndarray, dtype: str, scale: float = 4.0) -> None:
    tol = scale * TOL[dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
