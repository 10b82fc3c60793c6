"""MkDocs hook: the configuration page's table, generated from ``kernelkit._config.VARS`` at build
time, so the page lists exactly the variables the code reads (never a hand-kept copy)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

MARKER = "<!-- config-table -->"
SRC = Path(__file__).resolve().parents[2] / "src"


def render_table() -> str:
    """A Markdown table: every KERNELKIT_* variable with its default and help line."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from kernelkit._config import VARS

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for var in VARS:
        default = var.default
        if isinstance(default, tuple):
            default = ",".join(default)
        shown = f"`{default}`" if default not in ("", ()) else "(empty)"
        text = var.help.replace("|", "\\|")
        rows.append(f"| `{var.name}` | {shown} | {text} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render_table())
