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


# The whole package (issue 27): every module has a layer, imports run only down or sideways,
# no module imports another's private name, and the import graph has no cycle. Imports under
# ``if TYPE_CHECKING:`` never run and are left out; imports inside functions count.
GROUND = ("_errors", "_config", "_dtypes", "_records", "_version", "_limits", "_arrays", "_abi")
STORES = ("_select.records", "_select.keys", "_select.tables", "_select.tuning")
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", (*GROUND, "_generated")),
    ("backends, records and stores", ("backend", "_backends", "_dialects", "_cache", *STORES)),
    ("pipeline stages", ("_pipeline", "_select", "_tensor_map")),
    ("ops and API", ("_api", "_metal_api", "_choices", "ops", "_tune", "testing")),
    ("integrations", ("_integrations",)),
    ("workflows and the CLI", ("_workflows", "cli", "__main__", "")),
)


def _layer(module: str) -> int | None:
    """The index in ``LAYERS`` of ``module`` (the longest matching prefix), None if unplaced."""
    rel = module.removeprefix("kernelkit").removeprefix(".")
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            matches = rel == p or rel.startswith(p + ".") or (p == "" and rel == "")
            if matches and (best is None or len(p) > best[1]):
                best = (rank, len(p))
    return None if best is None else best[0]


def _modules() -> dict[str, tuple[Path, str]]:
    """Every module of the package: name -> (file, the package its relative imports start at)."""
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        is_init = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_init else parts)
        found[module] = (path, module if is_init else module.rsplit(".", 1)[0])
    return found


def _edges(modules: dict[str, tuple[Path, str]]) -> list[tuple[str, str, str, int]]:
    """(importer, imported module, imported name or "", line) for every runtime import."""
    edges = []
    for module, (path, package) in modules.items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in modules:
                        edges.append((module, f"{target}.{a.name}", "", node.lineno))
                    else:
                        edges.append((module, target, a.name, node.lineno))
            elif isinstance(node, ast.Import):
                edges += [(module, a.name, "", node.lineno) for a in node.names]
    return [e for e in edges if e[1] == "kernelkit" or e[1].startswith("kernelkit.")]


def test_every_module_has_a_layer():
    unplaced = [m for m in _modules() if _layer(m) is None]
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"


def test_no_module_imports_from_a_layer_above_it():
    bad = []
    for src, dst, name, line in _edges(_modules()):
        a, b = _layer(src), _layer(dst)
        if a is not None and b is not None and b > a:
            what = f"{dst}.{name}" if name else dst
            bad.append(f"{src}:{line} ({LAYERS[a][0]}) imports {what} ({LAYERS[b][0]})")
    assert not bad, "imports that run upward:\n" + "\n".join(bad)


def test_no_module_imports_another_modules_private_name():
    bad = [
        f"{src}:{line} imports {name} from {dst}"
        for src, dst, name, line in _edges(_modules())
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not bad, "private names imported from another module:\n" + "\n".join(bad)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module (iterative: the graph is ~150 nodes deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_import_graph_of_the_package_has_no_cycle():
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], int] = {}
    for src, dst, _, line in _edges(_modules()):
        if src != dst:
            graph.setdefault(src, set()).add(dst)
            where.setdefault((src, dst), line)
    cycles = []
    for component in _strongly_connected(graph):
        members = set(component)
        inner = sorted(
            f"{a}:{where[a, b]} -> {b}" for a in component for b in graph[a] if b in members
        )
        cycles.append(f"{' / '.join(component)}:\n    " + "\n    ".join(inner))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_finder_finds_a_cycle_and_passes_a_tree():
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]
    assert _strongly_connected({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []
