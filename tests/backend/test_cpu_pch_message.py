"""The first CPU compile says once that it builds the precompiled prelude and how big it is
(issue 27, item 6): a ``kernelkit`` logger message, not a print; a process that finds the
header in the cache says nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

import kernelkit

pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

SRC = str(Path(kernelkit.__file__).parents[1])  # this checkout's, in the child too
CODE = """
import numpy as np, kernelkit
body = "uint i = threadIdx.x; if (i < x_shape[0]) y[i] = x[i];"
for name in ("pch_a", "pch_b"):  # two compiles: the header is built (and said) once
    k = kernelkit.kernel(name, ["x"], ["y"], body)
    x = np.ones(8, np.float32)
    (y,) = k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(8,), threadgroup=(8,))
    assert (y == x).all()
print("done")
"""
SAID = re.compile(r"precompiled prelude header \((\d+) MB, [\d.]+ s\)")


def _run(cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, KERNELKIT_CACHE_DIR=str(cache), PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, env=env
    )


def test_the_first_compile_says_once_that_it_builds_the_header(tmp_path):
    first = _run(tmp_path / "cache")
    assert first.returncode == 0, first.stderr
    said = SAID.findall(first.stderr)
    assert len(said) == 1, first.stderr
    assert int(said[0]) >= 1  # ~40 MB with g++
    assert "precompiled" not in first.stdout  # a log message, not a print
    again = _run(tmp_path / "cache")
    assert again.returncode == 0, again.stderr
    assert "precompiled" not in again.stderr  # found in the cache: nothing to say
