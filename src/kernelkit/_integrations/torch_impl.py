"""The CPU/CUDA implementations of a kernel's torch op, generated per op as straight-line
Python, as the launch stage does for a kernel call: the op's eager call should cost the dispatcher
and little more. Constant rules are bound as values, only the rules that depend on the inputs
are called, the gradient tests are inline attribute reads, and the kernel is called with its
arguments in ``Kernel.__call__``'s order. The text is built from kernelkit's own fragments only
(slot names, indices) and kept as ``op.impl_source`` for reading."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._generated import execute
from .._pipeline.key import MISS
from .torch_grad import refuse_tangents

__all__ = ["Constant", "generate"]

# Kernel.__call__'s parameters in order; the generated call passes them positionally
_CALL = (
    "inputs, {shapes}, {dtypes}, {grid}, {block}, {template}, _init, False, None, {out}, "
    "None, None, {shared}"
)
# the same call as the kernel's last specialization takes it (``key.CallArgs``' order), tried
# first as the kernel's own call does, without a second instance call
_RUN = (
    "inputs, {shapes}, {dtypes}, {grid}, {block}, {template}, _init, None, {out}, None, None, "
    "{shared}"
)


class Constant:
    """A rule that does not depend on the inputs (its value is bound into the generated code)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, args: tuple) -> Any:  # noqa: ARG002  a constant route: same call as the others
        return self.value


def generate(
    op: Any, kernel: Any, rules: dict[str, Callable[[tuple], Any]], init_value: Any
) -> tuple[Callable[..., Any], Callable[..., None]]:
    """``impl(*inputs) -> output(s)`` and ``impl_out(*inputs, *outs)`` for ``op``: gradient
    tests (and a forward-mode AD tangent refused: the op has no JVP), then the kernel call
    (``out=`` calls check the outputs' shapes and bump their versions, as torch's own out= ops
    do)."""
    import torch

    n_in, outs = len(op.input_names), len(op.output_names)
    ns: dict[str, Any] = {
        "_k": kernel,
        "_op": op,
        "_init": init_value,
        "_grad": torch.is_grad_enabled,
        "_bump": torch.autograd.graph.increment_version,
        "_MISS": MISS,
        "_fwd": torch.autograd.forward_ad,  # its level: >= 0 inside dual_level()
        "_tangents": lambda args: refuse_tangents(torch, op.name, op.input_names, args),
    }

    def expr(name: str) -> str:
        rule = rules[name]
        ns[f"_{name}"] = rule.value if isinstance(rule, Constant) else rule
        return f"_{name}" if isinstance(rule, Constant) else f"_{name}(inputs)"

    values = {n: expr(n) for n in rules}
    names = {n: f"r_{n}" for n in rules}  # each rule's value, computed once a call
    needs = " or ".join(_requires_grad(i, op) for i in op.tensor_positions) or "False"
    written = " or ".join(f"args[{n_in + j}].requires_grad" for j in range(outs))
    result = "ys[0]" if outs == 1 else "tuple(ys)"
    lines = [
        "def impl(*args):",
        f"    if _grad() and ({needs}) and not _op.differentiable:",
        "        _op.check_grad(args)",
        "    if _fwd._current_level >= 0:",
        "        _tangents(args)",
        "    inputs = args",
        *_rule_lines(values),
        f"    ys = _k._last({_RUN.format(out='None', **names)})",
        "    if ys is _MISS:",
        f"        ys = _k({_CALL.format(out='None', **names)})",
        f"    return {result}",
        "",
        "def impl_out(*args):",
        f"    if _grad() and ({written}):",
        "        _op.check_out(args)",
        "    if _fwd._current_level >= 0:",
        f"        _tangents(args[:{n_in}])",
        f"    inputs = args[:{n_in}]",
        f"    outs = args[{n_in}:]",
        *_rule_lines({n: v for n, v in values.items() if n != "dtypes"}),
        f"    if _k._last({_RUN.format(out='outs', **{**names, 'dtypes': 'None'})}) is _MISS:",
        f"        _k({_CALL.format(out='outs', **{**names, 'dtypes': 'None'})})",
        *(f"    _bump(args[{n_in + j}])" for j in range(outs)),
    ]
    source = "\n".join(lines) + "\n"
    execute(source, ns, "torch op")
    op.impl_source = source
    return ns["impl"], ns["impl_out"]


def _rule_lines(values: dict[str, str]) -> list[str]:
    """The rules' values into locals ``r_<name>``, each computed once (a rule given as a
    function is the user's: it runs once a call, whether or not the first try serves it)."""
    return [f"    r_{n} = {v}" for n, v in values.items()]


def _requires_grad(i: int, op: Any) -> str:
    optional = op.schema.params[i][1].endswith("?")
    test = f"args[{i}].requires_grad"
    return f"(args[{i}] is not None and {test})" if optional else test
