"""Integrations wrap the ops from above (issue 26): no module of ``kernelkit.ops`` imports
``kernelkit._integrations``, at module level or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import kernelkit

SRC = Path(kernelkit.__file__).parent


def _imports(path: Path, package: str) -> set[str]:
    """Every kernelkit module a file imports (absolute names), wherever the import stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n.startswith("kernelkit")}


def test_no_op_module_imports_an_integration():
    bad = []
    for path in sorted((SRC / "ops").glob("*.py")):
        for name in _imports(path, "kernelkit.ops"):
            if name.startswith("kernelkit._integrations"):
                bad.append(f"{path.name} imports {name}")
    assert not bad, bad
