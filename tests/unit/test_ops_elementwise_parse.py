"""The Python form of an elementwise expression (``_elementwise_parse.python_source``), which
torch.compile traces in place of the kernel: property-tested against a direct walk of the same
tree on random trees (every function and operator, constants, repeated inputs), and built
without recursion for chains deeper than Python's recursion limit."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kernelkit._generated import execute
from kernelkit.ops._elementwise_parse import python_native_source, python_source

torch = pytest.importorskip("torch")

from kernelkit._integrations.torch_elementwise import FUNCTIONS  # noqa: E402

ARITY = {name: 3 if name == "fmaf" else 2 if name in ("fminf", "fmaxf", "powf") else 1
         for name in FUNCTIONS}  # fmt: skip
N_INPUTS = 3


def _trees():
    leaves = st.one_of(
        st.builds(lambda i: ("v", i), st.integers(0, N_INPUTS - 1)),
        st.builds(lambda x: ("c", x), st.floats(-4, 4, width=32)),
    )

    def grow(children):
        binary = st.tuples(st.sampled_from("+-*/"), children, children)
        neg = st.tuples(st.just("neg"), children)
        call = st.sampled_from(sorted(FUNCTIONS)).flatmap(
            lambda f: st.tuples(st.just("f"), st.just(f), st.tuples(*[children] * ARITY[f]))
        )
        return st.one_of(binary, neg, call)

    return st.recursive(leaves, grow, max_leaves=24)


def _walk(t, v, c):
    """The reference: the tree evaluated directly, node by node."""
    kind = t[0]
    if kind == "v":
        return v[t[1]]
    if kind == "c":
        return c(t[1])
    if kind == "neg":
        return -_walk(t[1], v, c)
    if kind == "f":
        return FUNCTIONS[t[1]](*[_walk(a, v, c) for a in t[2]])
    left, right = _walk(t[1], v, c), _walk(t[2], v, c)
    return {"+": left + right, "-": left - right, "*": left * right}.get(kind, left / right)


def _compiled(trees):
    names = {f"_f_{name}": fn for name, fn in FUNCTIONS.items()}
    return execute(python_source(trees, N_INPUTS), {}, "test expression", names)["expression"]


@settings(max_examples=150, deadline=None)
@given(st.lists(_trees(), min_size=1, max_size=3), st.integers(0, 2**31 - 1))
def test_the_python_form_computes_what_the_tree_does(trees, seed):
    g = torch.Generator().manual_seed(seed)
    v = [torch.rand(7, generator=g, dtype=torch.float64) * 3 + 0.1 for _ in range(N_INPUTS)]

    def c(x):
        return torch.tensor(x, dtype=torch.float64)

    got = _compiled(tuple(trees))(*v, c)
    assert len(got) == len(trees)
    for y, t in zip(got, trees):  # the same operations in the same order: the same bits
        torch.testing.assert_close(y, _walk(t, v, c), rtol=0, atol=0, equal_nan=True)


def test_a_chain_deeper_than_the_recursion_limit_is_written_without_recursion():
    t = ("v", 0)
    for _ in range(5000):
        t = ("+", t, ("c", 1.0))
    source = python_source((t,), 1)
    assert source.count("\n") == 5002 and "((" not in source
    y = _compiled_one(source)(torch.zeros(2, dtype=torch.float64), lambda x: x)
    assert y[0].tolist() == [5000.0, 5000.0]


def _compiled_one(source):
    return execute(source, {}, "test expression")["expression"]


@settings(max_examples=150, deadline=None)
@given(st.lists(_trees(), min_size=1, max_size=2), st.integers(0, 2**31 - 1))
@example([("+", ("v", 0), ("v", 1))], 0)
@example([("*", ("v", 2), ("v", 2))], 1)
@example([("-", ("v", 1), ("v", 0))], 2)
@example([("/", ("v", 1), ("v", 0))], 3)
def test_the_native_form_is_the_one_operation_of_two_inputs_or_none(trees, seed):
    """``python_native_source``: a tree that is one ``+``, ``-`` or ``*`` of two inputs gives
    that operation (the same bits as the tree's walk), every other expression None."""
    g = torch.Generator().manual_seed(seed)
    v = [torch.rand(7, generator=g, dtype=torch.float64) for _ in range(N_INPUTS)]
    native = execute(python_native_source(tuple(trees), N_INPUTS), {}, "test native", {})
    got = native["native"](*v)
    (t, *more) = trees
    if not more and t[0] in ("+", "-", "*") and t[1][0] == t[2][0] == "v":
        torch.testing.assert_close(got, _walk(t, v, None), rtol=0, atol=0)
    else:
        assert got is None
