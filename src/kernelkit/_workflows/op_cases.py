"""The built-in ops as the command line names them: what ``--dims`` spells for each, the arrays of
one problem, the public call that runs it (``out=`` given), the call that explains it and a
float64 NumPy reference. ``kernelkit explain OP`` and ``kernelkit tune OP`` (``tune_op``) both
read their problems through here, so they parse ``--dims``/``--dtype``/``--device`` alike.

Arrays are torch tensors on a CUDA device; on the CPU backend NumPy arrays, or torch CPU tensors
for bfloat16 (NumPy has no bfloat16) or when ``framework="torch"`` is asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import ArgumentError

__all__ = [
    "DTYPES",
    "OPS",
    "OpCase",
    "add_arguments",
    "make_case",
    "not_a_spec",
    "op_object",
    "parse_dims",
    "parse_dtypes",
]

# op -> what --dims spells
OPS = {
    "softmax": "ROWSxN (any leading dims: AxBxN)",
    "rms_norm": "ROWSxN",
    "layer_norm": "ROWSxN",
    "matmul": "MxNxK (x[M,K] @ w[N,K].T, a linear layer; w[K,N] with --no-transpose-b)",
}
DTYPES = ("float16", "bfloat16", "float32")
_EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}


def not_a_spec(command: str, spec: str) -> str | None:
    """Why ``spec`` names neither a tune spec file nor built-in ops (a misspelt op says which
    exist and the nearest), or None when it is a file."""
    import difflib
    import os

    if os.path.exists(spec):
        return None
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPS]
    near = [m for n in unknown for m in difflib.get_close_matches(n, list(OPS), n=1)]
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return (
        f"kernelkit {command}: {', '.join(map(repr, unknown or names))} is neither a tune spec "
        f"file nor a built-in op (ops: {', '.join(OPS)}){hint}"
    )


def parse_dims(op: str, text: str | Sequence[Any], where: str = "explain") -> list[tuple[int, ...]]:
    """``--dims``: problems separated by commas (``1x4096x4096,16x8192x8192``), or a list of
    such strings or of int tuples; ArgumentError naming what ``op`` expects."""
    if op not in OPS:
        raise ArgumentError(f"[{where}] unknown op {op!r}; built-in ops: {', '.join(OPS)}")
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        try:
            if isinstance(item, str):
                dims = tuple(int(d) for d in item.strip().lower().split("x"))
            else:
                dims = tuple(int(d) for d in item)
        except (TypeError, ValueError):
            raise ArgumentError(f"[{where}] --dims {item!r} is not {OPS[op]}") from None
        if not dims or any(d <= 0 for d in dims) or (op == "matmul" and len(dims) != 3):
            raise ArgumentError(f"[{where}] {op} --dims must be {OPS[op]}, got {item!r}")
        out.append(dims)
    if not out:
        raise ArgumentError(f"[{where}] --dims names no problem; {op} takes {OPS[op]}")
    return out


def parse_dtypes(text: str | Sequence[str], where: str = "explain") -> list[str]:
    """``--dtype``: one dtype or several separated by commas."""
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip().removeprefix("torch.") for n in names if n.strip()]
    bad = [n for n in names if n not in DTYPES]
    if bad or not names:
        raise ArgumentError(f"[{where}] --dtype must name {', '.join(DTYPES)}, got {text!r}")
    return names


def add_arguments(p: Any) -> None:
    """The options naming a built-in op's problems, alike for ``tune`` and ``explain``."""
    import argparse

    p.add_argument(
        "--dims",
        help="a built-in op's problems, comma-separated: ROWSxN (4096x4096), or MxNxK "
        "for matmul (1x4096x4096,16x8192x8192)",
    )
    p.add_argument(
        "--dtype",
        default="float32",
        help="a built-in op's dtypes, comma-separated (default float32)",
    )
    p.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU (needs torch)")
    p.add_argument(
        "--framework",
        choices=("numpy", "torch"),
        help="the arrays on the CPU backend (default: numpy; torch for bfloat16)",
    )
    p.add_argument(
        "--transpose-b",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="matmul: the weight as [N, K] (default), or [K, N]",
    )


def _framework(device: str, dtype: str, framework: str | None) -> str:
    if framework is None:
        return "numpy" if device == "cpu" and dtype != "bfloat16" else "torch"
    if framework not in ("numpy", "torch"):
        raise ArgumentError(f"[tune] framework must be numpy or torch, got {framework!r}")
    if framework == "numpy" and (device != "cpu" or dtype == "bfloat16"):
        raise ArgumentError(
            f"[tune] NumPy arrays run on the CPU backend in float16/float32 only, not "
            f"{dtype} on {device}: use torch"
        )
    return framework


def _check_torch_device(op: str, device: str) -> None:
    """A one-line error, before any array is made, when torch cannot reach ``device``."""
    import torch

    if not device.startswith("cuda"):
        return
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        raise ArgumentError(
            f"[{op}] --device {device} needs a CUDA build of torch, got torch "
            f"{torch.__version__} without CUDA (install a CUDA build, or use --device cpu)"
        )
    if not torch.cuda.is_available():
        raise ArgumentError(
            f"[{op}] --device {device}: torch {torch.__version__} sees no CUDA device "
            "(check the driver and CUDA_VISIBLE_DEVICES, or use --device cpu)"
        )


class _Maker:
    """Arrays of one framework, dtype and device: zeros (explain), random (tune) or NaN."""

    def __init__(self, framework: str, dtype: str, device: str, seed: int | None) -> None:
        self.framework, self.dtype, self.device = framework, dtype, device
        self.seed = seed
        if framework == "torch":
            import torch

            self.torch = torch
            self.generator = None
            if seed is not None:
                self.generator = torch.Generator(device=device).manual_seed(seed)
        else:
            import numpy as np

            self.np = np
            self.rng = np.random.default_rng(seed)

    def make(self, shape: tuple[int, ...], scale: float = 1.0, offset: float = 0.0) -> Any:
        if self.framework == "torch":
            t = self.torch
            if self.generator is None:
                return t.zeros(shape, dtype=getattr(t, self.dtype), device=self.device)
            a = t.randn(shape, generator=self.generator, device=self.device) * scale + offset
            return a.to(getattr(t, self.dtype))
        if self.seed is None:
            return self.np.zeros(shape, self.dtype)
        a = self.rng.standard_normal(shape, dtype=self.np.float32) * scale + offset
        return a.astype(self.dtype)

    def nan(self, shape: tuple[int, ...]) -> Any:
        """An output poisoned with NaN: a candidate that leaves an element unwritten fails."""
        if self.framework == "torch":
            t = self.torch
            return t.full(shape, float("nan"), dtype=getattr(t, self.dtype), device=self.device)
        return self.np.full(shape, self.np.nan, self.dtype)


@dataclass
class OpCase:
    """One problem of a built-in op as arrays: ``inputs`` in the order ``call`` takes them
    (arrays and scalars), an output of the result's shape, the public call, its ``explain``."""

    op: str
    dims: tuple[int, ...]
    dtype: str
    device: str
    framework: str
    inputs: list[Any]
    out: Any
    call: Callable[[Sequence[Any], Any], Any]  # (inputs, out) -> the op's result, in out
    explainer: Callable[[Sequence[Any]], Any]  # (inputs) -> Selection
    reference: Callable[[list[Any]], Any] = field(repr=False)  # float64 host inputs -> result

    @property
    def label(self) -> str:
        """``1x4096x4096 bfloat16``: names the problem in reports and plots."""
        return f"{'x'.join(map(str, self.dims))} {self.dtype}"

    def explain(self) -> Any:
        """The ``Selection`` of the op for this problem (with its problem and target)."""
        return self.explainer(self.inputs)

    def expected(self) -> Any:
        """The float64 NumPy reference result for ``inputs``."""
        from .._tune.timing import is_array, to_host

        host = [to_host(x).astype("float64") if is_array(x) else x for x in self.inputs]
        return self.reference(host)

    def stream(self, handle: int) -> Any:
        """A context in which the arrays' framework launches on stream ``handle`` (the tuner's
        timed stream): torch's current stream on a GPU; nothing to do on the host."""
        if self.framework == "torch" and self.device != "cpu":
            import torch

            device = self.inputs[0].device
            return torch.cuda.stream(torch.cuda.ExternalStream(handle, device=device))
        return contextlib.nullcontext()

    @property
    def captures(self) -> bool:
        """Whether ``capture`` records graphs (torch CUDA tensors) rather than the backend."""
        return self.framework == "torch" and self.device != "cpu"

    def capture(self, handle: int, launches: Callable[[int], None]) -> Callable[[], None] | None:
        """``launches(handle)`` recorded once as a torch CUDA graph on stream ``handle``, as a
        replay callable (it runs on ``handle``), or None when it cannot be captured. torch must
        know of the capture: an allocation inside it (cuBLAS's output through
        ``F.linear``) then comes from the graph's own pool, not from blocks handed out again."""
        import torch

        stream = torch.cuda.ExternalStream(handle, device=self.inputs[0].device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=stream):
                launches(handle)
        except Exception:  # noqa: BLE001 - not capturable: the tuner times runs one by one
            return None

        def replay() -> None:
            with torch.cuda.stream(stream):
                graph.replay()

        return replay


def make_case(
    op: str,
    dims: tuple[int, ...],
    dtype: str = "float32",
    device: str = "cpu",
    *,
    framework: str | None = None,
    transpose_b: bool = True,
    seed: int | None = None,
) -> OpCase:
    """The arrays of one problem of ``op`` (zeros without ``seed``, else seeded random
    values: x ~ N(0, 1), a matmul weight scaled by 1/sqrt(K)) and how to run and explain it."""
    parse_dims(op, [dims])
    chosen = _framework(device, dtype, framework)
    if chosen == "torch" and device != "cpu":
        _check_torch_device(op, device)
    make = _Maker(chosen, dtype, device, seed)
    if op == "matmul":
        parts = _matmul_parts(make, dims, transpose_b)
    else:
        parts = _row_op_parts(make, op, dims)
    return OpCase(op, dims, dtype, device, make.framework, *parts)


# What a case holds beyond its problem: inputs, out, call, explainer, reference (see OpCase).
_Parts = tuple[
    list[Any],
    Any,
    Callable[[Sequence[Any], Any], Any],
    Callable[[Sequence[Any]], Any],
    Callable[[list[Any]], Any],
]


def _matmul_parts(make: _Maker, dims: tuple[int, ...], transpose_b: bool) -> _Parts:
    """``matmul``'s case: x [M, K], w [N, K] (or [K, N]) and y [M, N]."""
    from .. import ops

    m, n, k = dims
    x = make.make((m, k))
    w = make.make((n, k) if transpose_b else (k, n), scale=k**-0.5)

    def call(ins: Sequence[Any], out: Any) -> Any:
        return ops.matmul(ins[0], ins[1], transpose_b=transpose_b, out=out)

    def explain(ins: Sequence[Any]) -> Any:
        return ops.matmul.explain(ins[0], ins[1], transpose_b=transpose_b)  # type: ignore[attr-defined]

    def reference(h: list[Any]) -> Any:
        return h[0] @ (h[1].T if transpose_b else h[1])

    return [x, w], make.nan((m, n)), call, explain, reference


def _row_op_parts(make: _Maker, op: str, dims: tuple[int, ...]) -> _Parts:
    """A row op's case: x, its weight and bias as the op takes them, eps, and y like x."""
    from .. import ops

    x = make.make(dims)
    params = [make.make(dims[-1:], 0.1, 1.0), make.make(dims[-1:], 0.1)][: _params(op)]
    eps = _EPS.get(op)
    inputs = [x, *params] + ([eps] if eps is not None else [])
    fn = getattr(ops, op)
    return (
        inputs,
        make.nan(dims),
        lambda ins, out: fn(*ins, out=out),
        lambda ins: fn.explain(*ins),
        _REFERENCES[op],
    )


def _params(op: str) -> int:
    return {"softmax": 0, "rms_norm": 1, "layer_norm": 2}[op]


def _softmax(h: list[Any]) -> Any:
    import numpy as np

    e = np.exp(h[0] - h[0].max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _rms_norm(h: list[Any]) -> Any:
    import numpy as np

    x, w, eps = h
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _layer_norm(h: list[Any]) -> Any:
    import numpy as np

    x, w, b, eps = h
    d = x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * w + b


_REFERENCES = {"softmax": _softmax, "rms_norm": _rms_norm, "layer_norm": _layer_norm}


def op_object(op: str) -> Any:
    """The selection stage's ``Op`` of built-in ``op`` (its implementations and key)."""
    from ..ops import _matmul, _norms, _softmax

    found = {
        "matmul": _matmul.OP,
        "softmax": _softmax.OP,
        "rms_norm": _norms.RMS_OP,
        "layer_norm": _norms.LAYER_OP,
    }
    if op not in found:
        raise ArgumentError(f"[tune] unknown op {op!r}; built-in ops: {', '.join(OPS)}")
    return found[op]
