"""The README's examples run as written (on the CPU backend here; on a GPU as well)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_python_examples_run(own_tuning_db):
    blocks = _blocks()
    assert blocks, "the README has python examples"
    for code in blocks:
        exec(compile(code, str(README), "exec"), {"__name__": "readme"})  # noqa: S102


def test_demo_command_runs_and_checks_its_result():
    out = subprocess.run(
        [sys.executable, "-m", "kernelkit", "demo"], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "demo_scaled_exp" in out.stdout
