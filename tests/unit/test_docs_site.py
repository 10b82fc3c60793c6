"""The documentation site's generated parts and its structure (no build needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from kernelkit import _config

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "config_table.py"


def _hook():
    spec = importlib.util.spec_from_file_location("config_table", HOOK)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_configuration_table_lists_every_variable_from_config():
    hook = _hook()
    page = (ROOT / "docs/configuration.md").read_text()
    assert hook.MARKER in page
    rendered = hook.on_page_markdown(page, page=None)
    assert hook.MARKER not in rendered
    rows = [line for line in rendered.splitlines() if line.startswith("| `KERNELKIT_")]
    assert [r.split("`")[1] for r in rows] == [v.name for v in _config.VARS]
    for row, var in zip(rows, _config.VARS):
        assert var.help.replace("|", "\\|") in row


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    conf = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def walk(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for item in node:
                yield from walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    nav = set(walk(conf["nav"]))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert nav == pages
