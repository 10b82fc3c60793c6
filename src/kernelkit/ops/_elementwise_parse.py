"""The expression language of ``elementwise``: ``;``-separated ``out = expr`` statements over
named float inputs, where an expression is numbers (float32), input names, ``+ - * /``,
parentheses and calls of an allowlisted set of math functions. ``parse_expression`` checks it
token by token and translates it to C++ over the kernel's float locals ``v0, v1, ...``."""

from __future__ import annotations

import math
import re
from typing import Any

from .._errors import ArgumentError, ArgumentTypeError
from ._kernel_files import source

# Functions an expression may call (all take and return float). The first group are kernelkit's
# own, ``kk_ew_<name>`` in elementwise/kernels/functions.cuh (the names are read from there); the
# second are CUDA's float math, which both backends provide.
OWN_FUNCTIONS = frozenset(
    re.findall(r"\bfloat kk_ew_(\w+)\(float x\)", source("elementwise", "functions"))
)
MATH_FUNCTIONS = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "log1p": "log1pf",
    "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "erf": "erff", "sin": "sinf",
    "cos": "cosf", "abs": "fabsf", "floor": "floorf", "ceil": "ceilf", "min": "fminf",
    "max": "fmaxf", "pow": "powf", "fma": "fmaf",
}  # fmt: skip
FUNCTIONS = frozenset(OWN_FUNCTIONS) | frozenset(MATH_FUNCTIONS)
# Tokens: a number-like run (checked against _NUMBER afterwards, so ``0x10``, ``1f`` or ``1.2.3``
# are refused whole rather than split), a name, an operator (C's multi-character ones whole, so an
# error names ``**`` or ``==``, not half of it), or any other character (refused as unexpected).
_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:[0-9]|\.[0-9])(?:[A-Za-z0-9_.]|(?<=[eE])[-+])*)|(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op>\*\*|==|!=|<=|>=|<<|>>|&&|\|\||\+\+|--|->|[-+*/%()<>=!&|^?:,~.\[\]])"
    r"|(?P<other>\S))"
)
# an optional f suffix on a number with a point or an exponent (0.5f, 1e-3f: CUDA's float
# literals, the same value); not on an integer (C has no 1f either)
_NUMBER = re.compile(
    r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[-+]?[0-9]+))?(?P<f>[fF])?\Z"
)
_FLOAT32_OVERFLOW = 2.0**128 - 2.0**103  # the smallest decimal value that rounds to inf
_BINARY = frozenset("+-*/")
_OPERATORS = _BINARY | frozenset("(),")
_ARITY = {name: 1 for name in FUNCTIONS} | {"min": 2, "max": 2, "pow": 2, "fma": 3}
_STATEMENT = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)(.*)\Z", re.S)


def _float_literal(text: str, where: str) -> str:
    """``text`` (a plain decimal number) as a C float literal of its decimal value: ``1`` ->
    ``1.0f`` (so ``1/2`` is 0.5, not C's integer division), ``010`` -> ``10.0f`` (not octal)."""
    m = _NUMBER.match(text)
    if m is not None and m["f"] and "." not in text and m["exp"] is None:
        m = None  # 1f
    if m is None or not (m["int"] or m["frac"]):
        raise ArgumentError(
            f"{where} number {text!r} is not a plain decimal number (digits, an optional "
            "fraction and exponent, an f suffix only after those; no 0x prefix, no u/l "
            "suffix); numbers are float32"
        )
    value = float(text.rstrip("fF"))
    if value >= _FLOAT32_OVERFLOW:
        raise ArgumentError(f"{where} number {text!r} is out of float32's range")
    if value == 0.0:
        return "0.0f"
    digits = f"{m['int'].lstrip('0') or '0'}.{m['frac'] or '0'}"
    return f"{digits}e{int(m['exp'])}f" if m["exp"] else f"{digits}f"


def _translate(expr: str, inputs: dict[str, int], where: str) -> str:
    """The expression as C++ over the float locals ``v0, v1, ...``; ArgumentError (its message
    starting with ``where``) naming what is not allowed. New names are added to ``inputs`` in
    order of first use. The grammar: operands (numbers, input names, ``f(arg, ...)`` calls of
    the functions in FUNCTIONS with their number of arguments, parenthesized expressions),
    unary ``+ -`` before an operand, binary ``+ - * /`` between operands; a comma only
    separates a call's arguments. C gives these the same precedence, so the checked tokens are
    emitted as they stand."""
    tokens: list[tuple[str, str]] = []  # (kind, text)
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:  # only whitespace is left
            break
        pos = m.end()
        kind = m.lastgroup or "other"
        if kind == "other":
            raise ArgumentError(
                f"{where} unexpected {expr[m.start(kind) :].strip()[:20]!r}; an expression "
                "may use input names, numbers, + - * / ( ) and the functions "
                f"{', '.join(sorted(FUNCTIONS))}"
            )
        tokens.append((kind, m[kind]))
    if not tokens:
        raise ArgumentError(f"{where} empty expression")
    out: list[str] = []
    stack: list[list[Any]] = []  # per open '(': [function name (None: a group), arguments seen]
    operand = True  # an operand is expected next (else a binary operator, ')' or ',')
    previous = "the start"
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        if kind == "op" and text not in _OPERATORS:
            hint = " (use pow(x, y))" if text == "**" else ""
            raise ArgumentError(
                f"{where} operator {text!r} is not supported{hint}; an expression may use "
                "+ - * / and parentheses"
            )
        if operand:
            if kind == "num":
                out.append(_float_literal(text, where))
                operand = False
            elif kind == "name" and tokens[i + 1 : i + 2] == [("op", "(")]:
                if text not in FUNCTIONS:
                    raise ArgumentError(
                        f"{where} unknown function {text!r}; known: {', '.join(sorted(FUNCTIONS))}"
                    )
                out += [f"kk_ew_{text}" if text in OWN_FUNCTIONS else MATH_FUNCTIONS[text], "("]
                stack.append([text, 0])
                i += 1  # its '(' is taken
            elif kind == "name":
                if text in FUNCTIONS:
                    raise ArgumentError(f"{where} {text!r} is a function")
                if text.startswith(("kk_", "__")):
                    raise ArgumentError(f"{where} name {text!r} is reserved")
                out.append(f"v{inputs.setdefault(text, len(inputs))}")
                operand = False
            elif text == "(":
                stack.append([None, 0])
                out.append(text)
            elif text in ("+", "-"):
                out.append(text)  # unary
            else:
                raise ArgumentError(f"{where} expected an operand after {previous}, got {text!r}")
        elif text in _BINARY:
            out.append(text)
            operand = True
        elif text in (")", ","):
            if not stack or (text == "," and stack[-1][0] is None):
                what = "unbalanced ')'" if text == ")" else "',' outside a function's arguments"
                raise ArgumentError(f"{where} {what} after {previous}")
            name = stack[-1][0]
            if name is not None:
                stack[-1][1] += 1
                n, want = stack[-1][1], _ARITY[name]
                if n > want or (text == ")" and n < want):
                    raise ArgumentError(
                        f"{where} {name}() takes {want} argument{'s' if want > 1 else ''}, "
                        f"got {n}{' or more' if text == ',' else ''}"
                    )
            if text == ")":
                stack.pop()
            else:
                operand = True
            out.append(text)
        else:
            raise ArgumentError(f"{where} expected an operator between {previous} and {text!r}")
        previous = repr(tokens[i][1])
        i += 1
    if operand:
        raise ArgumentError(f"{where} expected an operand after {previous}, got the end")
    if stack:
        raise ArgumentError(f"{where} unbalanced '(': {len(stack)} not closed")
    return " ".join(out)


def parse_expression(text: str) -> tuple[list[str], dict[str, int], list[str]]:
    """(output names, input names -> index, C++ expressions) of ``"y = ...; z = ..."``."""
    if not isinstance(text, str):
        raise ArgumentTypeError(f"[elementwise] the expression must be a str, got {text!r}")
    where = f"elementwise({text!r})"
    outputs, inputs, exprs = [], {}, []  # type: ignore[var-annotated]
    for i, stmt in enumerate(s for s in text.split(";") if s.strip()):
        m = _STATEMENT.match(stmt)
        if m is None:
            raise ArgumentError(f"[{where}] statement {i} {stmt.strip()!r} is not 'out = expr'")
        name, expr = m.group(1), m.group(2)
        if name in outputs or name in FUNCTIONS:
            raise ArgumentError(f"[{where}] output {name!r} is assigned twice or is a function")
        exprs.append(_translate(expr, inputs, f"[{where}] {name} = ...:"))
        outputs.append(name)
    if not outputs:
        raise ArgumentError(f"[{where}] no 'out = expr' statement in the expression")
    clash = set(outputs) & set(inputs)
    if clash:
        raise ArgumentError(f"[{where}] {sorted(clash)[0]!r} is both an input and an output")
    return outputs, inputs, exprs


def tree(expr: str) -> Any:
    """One translated expression (``_translate``'s checked tokens) as a framework-neutral tree
    for other evaluators (the torch integration's, under ``torch.compile``): ``("v", i)`` an
    input, ``("c", value)`` a float32 constant, ``("f", c_name, (args...))`` a call (C names:
    ``expf``, ``kk_ew_silu``), ``("neg", x)``, ``(op, left, right)`` for ``+ - * /``; C's
    precedence and left-to-right grouping."""
    tokens = expr.split()
    pos = 0

    def take() -> str:
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def peek() -> str:
        return tokens[pos] if pos < len(tokens) else ""

    def sum_() -> Any:
        left = product()
        while peek() in ("+", "-"):
            op = take()
            left = (op, left, product())
        return left

    def product() -> Any:
        left = unary()
        while peek() in ("*", "/"):
            op = take()
            left = (op, left, unary())
        return left

    def unary() -> Any:
        if peek() in ("+", "-"):
            op = take()
            x = unary()
            return ("neg", x) if op == "-" else x
        return primary()

    def primary() -> Any:
        tok = take()
        if tok == "(":
            x = sum_()
            take()  # ")"
            return x
        if tok[0] == "v" and tok[1:].isdigit():
            return ("v", int(tok[1:]))
        if tok[0].isdigit():
            return ("c", float(tok.rstrip("f")))
        take()  # a function's "("
        args = [sum_()]
        while take() == ",":
            args.append(sum_())
        return ("f", tok, tuple(args))

    result = sum_()
    if pos != len(tokens):  # cannot happen for _translate's output
        raise ArgumentError(f"[elementwise] unexpected {tokens[pos]!r} in {expr!r}")
    return result


# The functions a tree's Python form (``python_source``) calls, as ``_f_<C name>``: filled by the
# torch integration when it is imported (``torch_elementwise``); the forms only run after that.
PYTHON_FUNCTIONS: dict[str, Any] = {}


def python_source(trees: tuple, n: int) -> str:
    """``def expression(v0, .., c)``: the trees (one per output) over ``n`` inputs as one
    Python function of float32 tensors ``v0..`` returning a tuple, constants made by
    ``c(value)``, one assignment a node (no nesting: any depth compiles, and Dynamo traces it
    without recursing). Written from the trees' checked tokens only (input indices,
    allowlisted C names, float values), so a tracer reads no tree and guards on none of its
    entries."""
    params = ", ".join([*(f"v{i}" for i in range(n)), "c"])
    lines, results = _expression_lines(trees, "v")
    return (
        "\n".join([f"def expression({params}):", *lines, f"    return ({', '.join(results)},)"])
        + "\n"
    )


def _expression_lines(trees: tuple, prefix: str) -> tuple[list[str], list[str]]:
    """The trees' assignments (inputs named ``<prefix>0..``, constants ``c(value)``, nodes
    ``t<k>``), post-order without recursion (a chain of 10,000 terms is 10,000 deep), and the
    name holding each tree's value."""
    lines: list[str] = []
    results = []
    for t in trees:
        values: list[str] = []
        stack: list[tuple[Any, bool]] = [(t, False)]
        while stack:
            node, ready = stack.pop()
            kind = node[0]
            if kind == "v":
                values.append(f"{prefix}{int(node[1])}")
                continue
            if kind == "c":
                value = float(node[1])
                values.append(f"c({value!r})" if math.isfinite(value) else f"c(float('{value}'))")
                continue
            children = [node[1]] if kind == "neg" else list(node[2]) if kind == "f" else node[1:]
            if not ready:
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(children))
                continue
            args = values[len(values) - len(children) :]
            del values[len(values) - len(children) :]
            lines.append(f"    t{len(lines) + 1} = {_node(kind, node, args)}")
            values.append(f"t{len(lines)}")
        results.append(values[0])
    return lines, results


def python_traced_source(trees: tuple, n: int, output_dtype: str | None) -> str:
    """``def traced(args, torch)``: the whole of a compiled call of the expression in the
    common case (``n`` tensors in order, no ``out=``, no gradient wanted, a float output
    dtype), as ``torch_traced.elementwise`` computes it, with every fact about the expression
    (its inputs, outputs, output dtype, whether it is one native operation, its trees) a
    constant of the code: a compiled call guards on this function's code alone, not on the
    attributes and helpers the general path reads. It returns None for any other call, which
    the general path then takes (and names what is wrong)."""
    if n == 0:  # no input, so no array: the general path says so
        return "def traced(args, torch):\n    return None\n"
    v = [f"x{i}" for i in range(n)]
    lines = ["def traced(args, torch):", f"    if len(args) != {n}:", "        return None"]
    lines.append(f"    {', '.join(v)}, = args")
    lines.append("    T = torch.Tensor")
    for x in v:
        lines.append(f"    if not isinstance({x}, T) or {x}.layout != torch.strided:")
        lines.append("        return None")
    grad = " or ".join(f"{x}.requires_grad" for x in v)
    lines += [f"    if torch.is_grad_enabled() and ({grad}):", "        return None"]
    if output_dtype is not None:
        lines.append(f"    dt = torch.{output_dtype}")
    else:  # promote_dtypes: float16 with bfloat16 gives float32 (a float64 beside them too),
        # else the widest float; no float: None
        ds = f"({', '.join(f'{x}.dtype' for x in v)},)"
        lines += [
            f"    ds = {ds}",
            "    if torch.float16 in ds and torch.bfloat16 in ds:",
            "        dt = torch.float32",
            "    elif torch.float64 in ds:",
            "        dt = torch.float64",
            "    elif torch.float32 in ds:",
            "        dt = torch.float32",
            "    elif torch.float16 in ds:",
            "        dt = torch.float16",
            "    elif torch.bfloat16 in ds:",
            "        dt = torch.bfloat16",
            "    else:",
            "        return None",
        ]
    lines.append(f"    shape = torch.broadcast_shapes({', '.join(f'{x}.shape' for x in v)})")
    native = _native_body(trees, "x")
    if output_dtype is not None and output_dtype not in ("float16", "bfloat16", "float32"):
        native = None  # torch would compute in the output's own precision (or refuse: bool)
    if native is not None:  # torch_traced._native: the same values, the plain torch graph
        same = " and ".join(
            f"{x}.dtype == dt and {x}.shape == shape and {x}.is_contiguous()" for x in v
        )
        if output_dtype is None:  # promoted: float64 computes in float32, as the kernel does
            same = f"dt is not torch.float64 and {same}"
        lines += [f"    if {same}:", f"        return {native}"]
    lines.append(f"    device = {v[0]}.device")
    lines.append("    def c(value):")
    lines.append("        return torch.full((), value, dtype=torch.float32, device=device)")
    lines += [f"    v{i} = {x}.to(torch.float32)" for i, x in enumerate(v)]
    body, results = _expression_lines(trees, "v")
    lines += body
    ys = [f"{r}.to(dt).expand(shape).clone(memory_format=torch.contiguous_format)" for r in results]
    lines.append(f"    return {ys[0]}" if len(ys) == 1 else f"    return [{', '.join(ys)}]")
    return "\n".join(lines) + "\n"


def _native_body(trees: tuple, prefix: str) -> str | None:
    """``<a> <op> <b>`` where the expression is one ``+``, ``-`` or ``*`` of two of its inputs."""
    if len(trees) == 1 and trees[0][0] in ("+", "-", "*"):
        op, left, right = trees[0]
        if left[0] == "v" and right[0] == "v":
            return f"{prefix}{int(left[1])} {op} {prefix}{int(right[1])}"
    return None


def python_native_source(trees: tuple, n: int) -> str:
    """``def native(v0, ..)``: where the expression is one ``+``, ``-`` or ``*`` of two of its
    inputs, that operation on its arguments, else None; for tracers, which call it on tensors
    in their own dtype (``torch_traced``). Written from the trees' checked tokens, as
    ``python_source``, so a tracer reads no tree."""
    params = ", ".join(f"v{i}" for i in range(n))
    return f"def native({params}):\n    return {_native_body(trees, 'v')}\n"


def _node(kind: str, node: Any, args: list[str]) -> str:
    if kind == "neg":
        return f"-{args[0]}"
    if kind == "f":
        if not node[1].isidentifier():  # cannot happen: the names come from the allowlist
            raise ArgumentError(f"[elementwise] unexpected function {node[1]!r}")
        return f"_f_{node[1]}({', '.join(args)})"
    if kind not in ("+", "-", "*", "/"):
        raise ArgumentError(f"[elementwise] unexpected operator {kind!r}")
    return f"{args[0]} {kind} {args[1]}"
