"""``ops.elementwise`` under ``torch.compile``: the expression traced into torch operations in
float32 (inputs cast to float32, the results cast to the output dtype at the end), which
Inductor fuses with its neighbours into one loop; one ``+``, ``-`` or ``*`` of two tensors of
the output's dtype and shape is traced as that torch operation in their dtype (the same values:
torch rounds a 16-bit operation once, from float32), so Inductor can fold a residual add into
the matmul before it (``torch_traced._native``).

Why not one torch op carrying the expression (the design until issue 26): a custom op in a
compiled graph is called through the dispatcher and kernelkit's eager call, about 49 µs of host
time per call on an H100 host, where the fused loop costs Inductor nothing extra; and Inductor
cannot fuse across a custom op. The translation is only used while Dynamo traces; eager calls
run the kernel. Its functions are written as the kernel's header writes them (``silu`` is
``x / (1 + exp(-x))``, ``min``/``max`` are C's ``fminf``/``fmaxf``: a NaN operand gives the
other one), so results agree with the kernel's to float32 rounding (the compilers may contract
a * b + c into one fma).

Each expression is one generated Python function (``Elementwise.python_expression``, written
from the parser's trees by ``_elementwise_parse.python_source``: one assignment a node), which
calls the functions below by their C names (``_f_expf``, ``_f_kk_ew_silu``) and which Dynamo
inlines (``torch_traced``): its constants are in its code, so a compiled call guards on none.
(A common call is traced through ``Elementwise.python_traced``, the same lines inside the checks
and casts, written by ``_elementwise_parse.python_traced_source``.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..ops._elementwise_parse import MATH_FUNCTIONS, OWN_FUNCTIONS, PYTHON_FUNCTIONS

__all__ = ["FUNCTIONS"]


def _fmax(x: Any, y: Any) -> Any:
    return torch.fmax(x, y)


def _fmin(x: Any, y: Any) -> Any:
    return torch.fmin(x, y)


def _silu(x: Any) -> Any:
    return x / (1.0 + torch.exp(-x))


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + torch.exp(-x))


def _relu(x: Any) -> Any:
    return torch.fmax(x, torch.zeros_like(x))


def _gelu(x: Any) -> Any:
    return 0.5 * x * (1.0 + torch.erf(x * 0.70710678118654752))


def _gelu_tanh(x: Any) -> Any:
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


# the C name each token may carry -> its torch spelling on float32 tensors
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "kk_ew_silu": _silu,
    "kk_ew_sigmoid": _sigmoid,
    "kk_ew_relu": _relu,
    "kk_ew_gelu": _gelu,
    "kk_ew_gelu_tanh": _gelu_tanh,
    "expf": torch.exp,
    "exp2f": torch.exp2,
    "logf": torch.log,
    "log2f": torch.log2,
    "log1pf": torch.log1p,
    "sqrtf": torch.sqrt,
    "rsqrtf": torch.rsqrt,
    "tanhf": torch.tanh,
    "erff": torch.erf,
    "sinf": torch.sin,
    "cosf": torch.cos,
    "fabsf": torch.abs,
    "floorf": torch.floor,
    "ceilf": torch.ceil,
    "fminf": _fmin,
    "fmaxf": _fmax,
    "powf": torch.pow,
    "fmaf": lambda a, b, c: a * b + c,
}
# every function the expression language has is translated (checked at import)
if set(FUNCTIONS) != {f"kk_ew_{n}" for n in OWN_FUNCTIONS} | set(MATH_FUNCTIONS.values()):
    raise ImportError("[elementwise] the torch translation does not cover the expression language")
# what the expressions' Python forms (``Elementwise.python_expression``) call
PYTHON_FUNCTIONS.update({f"_f_{name}": fn for name, fn in FUNCTIONS.items()})
