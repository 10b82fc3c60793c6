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


PACKAGES = ("kernelkit.ops", "kernelkit._integrations", "kernelkit._arrays")


def _node(module: str) -> str:
    """A module's node: the package for the three layered packages, else the module."""
    for p in PACKAGES:
        if module == p or module.startswith(p + "."):
            return p
    return module


def _runtime_imports(path: Path, package: str) -> set[str]:
    """Like ``_imports``, leaving out ``if TYPE_CHECKING:`` blocks (never run)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    return _imports_text(ast.unparse(tree), package)


def _imports_text(text: str, package: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.add(name)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {n for n in found if n.startswith("kernelkit.")}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        is_init = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_init else parts)
        package = module if is_init else module.rsplit(".", 1)[0]
        if module == "kernelkit":  # the top re-exports and wires everything: above all
            continue
        src = _node(module)
        for name in _runtime_imports(path, package):
            dst = _node(name)
            if dst != src and dst != "kernelkit":
                graph.setdefault(src, set()).add(dst)
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A path start -> ... -> start, if one exists."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_cycle_through_the_ops_integrations_and_array_packages():
    graph = _graph()
    cycles = {p: _cycle_through(graph, p) for p in PACKAGES}
    assert not any(cycles.values()), {p: c for p, c in cycles.items() if c}
