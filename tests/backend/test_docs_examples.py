"""Every ```python block of README.md and docs/*.md runs as written (on the CPU backend here).

A block that needs something this machine may lack says so in an HTML comment on the line just
above its fence, e.g. ``<!-- needs: torch cuda -->``; it is skipped, naming the block and what is
missing, when that is absent (never silently: the skip shows in pytest's summary). A block with no
such line runs everywhere. An unknown requirement fails the test, so a typo cannot hide a block.
Each block runs alone, in a fresh namespace, with a tuning database of its own.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
NEEDS = re.compile(r"<!--\s*needs:\s*([\w\s]+?)\s*-->\s*\Z")


def _cuda_archs() -> list[int]:
    """Compute capabilities (90 for sm_90) of the CUDA devices here; none without the cuda extra."""
    from kernelkit._backends.cuda import CUDABackend

    return [int(re.sub(r"\D", "", t.arch)) for t in CUDABackend().targets()]


REQUIREMENTS: dict[str, Callable[[], bool]] = {
    "torch": lambda: importlib.util.find_spec("torch") is not None,
    "jax": lambda: importlib.util.find_spec("jax") is not None,
    "mlx": lambda: importlib.util.find_spec("mlx") is not None,
    "matplotlib": lambda: importlib.util.find_spec("matplotlib") is not None,
    "ray": lambda: importlib.util.find_spec("ray") is not None,  # kernelkit[ray]
    "cuda": lambda: bool(_cuda_archs()),  # an NVIDIA GPU with the cuda extra installed
    "sm90": lambda: any(cc >= 90 for cc in _cuda_archs()),  # Hopper or newer (TMA, wgmma)
}


def _needs(text: str, fence_start: int) -> tuple[str, ...]:
    """The requirements named on the line just above the fence that starts at ``fence_start``."""
    above = text[:fence_start].rstrip("\n").rsplit("\n", 1)[-1].strip()
    m = NEEDS.search(above)
    return tuple(m.group(1).split()) if m else ()


def _blocks() -> list[tuple[str, str, tuple[str, ...]]]:
    """(id 'page:line', code, requirements) for each python block of every page."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", m.group(1), _needs(text, m.start())))
    return found


BLOCKS = _blocks()


def test_pages_have_examples():
    pages = {b[0].split(":")[0] for b in BLOCKS}
    assert "README.md" in pages and len(pages) >= 8, sorted(pages)


@pytest.mark.parametrize(("where", "code", "needs"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_example_runs(where, code, needs, own_tuning_db):
    unknown = [n for n in needs if n not in REQUIREMENTS]
    assert not unknown, f"{where}: unknown requirement(s) {unknown}; known: {sorted(REQUIREMENTS)}"
    missing = [n for n in needs if not REQUIREMENTS[n]()]
    if missing:
        pytest.skip(f"{where} needs {', '.join(missing)}, absent here")
    exec(compile(code, where, "exec"), {"__name__": "docs_example"})  # noqa: S102


def test_needs_comment_is_read_only_just_above_the_fence():
    tagged = "x\n<!-- needs: torch cuda -->\n```python\npass\n```\n"
    apart = "<!-- needs: torch -->\ntext between\n```python\npass\n```\n"
    assert _needs(tagged, tagged.index("```")) == ("torch", "cuda")
    assert _needs(apart, apart.index("```")) == ()


def test_demo_command_runs_and_checks_its_result():
    out = subprocess.run(
        [sys.executable, "-m", "kernelkit", "demo"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "demo_scaled_exp" in out.stdout
