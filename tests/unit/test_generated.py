"""One helper turns kernelkit's generated Python into functions (issue 27): no other module
calls ``exec`` or ``compile``; equal texts share one code object; the label names the text
in a traceback."""

from __future__ import annotations

import ast
import traceback
from pathlib import Path

import pytest

import kernelkit
from kernelkit import _generated as generated

SRC = Path(kernelkit.__file__).parent


def test_only_the_helper_calls_exec_or_compile():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("exec", "compile", "eval")
                and rel != "_generated.py"
            ):
                found.append(f"{rel}:{node.lineno} {node.func.id}()")
    assert not found, f"generated code run outside _generated.py: {found}"


def test_equal_texts_share_a_code_object_and_the_label_names_the_text():
    source = "def f(x):\n    if x < 0:\n        raise ValueError(x)\n    return k * x\n"
    one = generated.execute(source, {"k": 2}, "test fn")["f"]
    two = generated.execute(source, {"k": 3}, "test fn")["f"]
    assert (one(5), two(5)) == (10, 15)
    assert one.__code__ is two.__code__
    with pytest.raises(ValueError, match="-1") as e:
        one(-1)
    assert traceback.extract_tb(e.tb)[-1].filename == "<kernelkit test fn>"
