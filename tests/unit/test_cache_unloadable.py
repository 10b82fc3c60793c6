"""The real CPU backend over damaged cache files: a disk entry whose checksums hold but whose
library does not load here (built against another C++ runtime, or copied from another machine)
is removed and compiled again once, not a ``LaunchError`` in every process for ever (issue 24,
item 7); a garbled or planted precompiled prelude is rebuilt (items 6 and 13)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

from test_cache_support import SRC, worker_env

from kernelkit._cache.entry import decode, encode
from kernelkit._cache.keys import CacheKey

CALL = """
import numpy as np
import kernelkit
k = kernelkit.kernel(
    "unloadable_twice", ["x"], ["y"],
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2.0f * x[i];",
)
x = np.arange(64, dtype=np.float32)
(y,) = k([x], output_shapes=[(64,)], output_dtypes=[np.float32], grid=(64, 1, 1),
         threadgroup=(32, 1, 1), backend="cpu")
assert (y == 2 * x).all(), y
print("ok", kernelkit.cache_stats()["compiles"])
"""


def _call(root: Path) -> subprocess.CompletedProcess[str]:
    env = worker_env(root, PYTHONWARNINGS="always")
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(SRC)!r})\n{CALL}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _make_unloadable(entry: Path) -> None:
    """Rewrite ``entry`` with valid checksums around a library the loader refuses."""
    digest = entry.name.split(".")[0]
    artifact, header = decode(entry.read_bytes(), digest)
    key = CacheKey(tuple(tuple(p) for p in header.get("parts")), digest)  # type: ignore[misc]
    bad = dataclasses.replace(artifact, binary=b"\x7fELF\x02\x01\x01" + b"\0" * 2048)
    entry.write_bytes(encode(key, header.get("kernel"), header.get("backend"), bad))


def test_an_entry_that_does_not_load_is_compiled_again_once(tmp_path) -> None:
    root = tmp_path / "kkcache"
    first = _call(root)
    assert first.returncode == 0 and "ok 1" in first.stdout, first.stderr[-3000:]
    (entry,) = (root / "entries").glob("*.kke")
    _make_unloadable(entry)
    second = _call(root)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "ok 1" in second.stdout  # compiled once more, then loaded
    assert "passed its checksums but could not be loaded" in second.stderr
    third = _call(root)  # the rebuilt entry is on disk: served, nothing compiled, no warning
    assert third.returncode == 0 and "ok 0" in third.stdout, third.stderr[-3000:]
    assert "could not be loaded" not in third.stderr


def test_a_garbled_or_planted_prelude_is_rebuilt_for_the_next_compile(tmp_path) -> None:
    """Issue 24, items 6 and 13, on the real precompiled prelude (``cpu-pch/<digest>/``)."""
    from kernelkit._cache import products

    root = tmp_path / "kkcache"
    assert _call(root).returncode == 0
    (pch,) = (root / "cpu-pch").iterdir()
    good = {p.name for p in pch.iterdir()}
    sums = pch / products.SUMS
    sums.write_bytes(sums.read_bytes()[:-3] + b"\xff\xfe\n")  # one byte that is not UTF-8
    (pch / "kk_cpu.h").write_text("#error planted\n")  # found before the real prelude
    (root / "entries").rename(tmp_path / "entries-aside")  # so the next call compiles
    done = _call(root)
    assert done.returncode == 0 and "ok 1" in done.stdout, done.stderr[-3000:]
    assert products.verify(pch) is None and {p.name for p in pch.iterdir()} == good
