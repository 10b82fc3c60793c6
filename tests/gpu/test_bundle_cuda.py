"""A bundle built without a GPU (`kernelkit precompile --arch sm_XY`) serves the real device:
a fresh process with an empty cache runs the kernel from the bundle, compiling nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DECL = """
import kernelkit
scale = kernelkit.kernel("bundle_scale", ["x", "a"], ["y"],
                         "uint i = blockIdx.x * blockDim.x + threadIdx.x;"
                         " if (i < x_shape[0]) y[i] = a * x[i];")
scale.precompile(["float32", float], ["float32"])
"""

USE = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import kernelkit
from decl import scale
x = torch.randn(5000, device="cuda")
(y,) = scale([x, 3.0], output_shapes=[x.shape], output_dtypes=[torch.float32],
             grid=(5000, 1, 1), threadgroup=(128, 1, 1))
ok = bool(torch.allclose(y, 3.0 * x))
print(json.dumps({"ok": ok, **kernelkit.cache_stats()}))
"""


def test_precompiled_bundle_serves_the_device(tmp_path: Path):
    major, minor = torch.cuda.get_device_capability()
    (tmp_path / "decl.py").write_text(DECL)
    env = dict(
        os.environ,
        KERNELKIT_CACHE_DIR=str(tmp_path / "build-cache"),
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH")])
        ),
    )
    bundle = tmp_path / "k.kkb"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelkit",
            "precompile",
            "decl.py",
            "--arch",
            f"sm_75,sm_{major}{minor}",
            "-o",
            str(bundle),
            "--quiet",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    env.update(KERNELKIT_CACHE_DIR=str(tmp_path / "empty-cache"), KERNELKIT_BUNDLE_PATH=str(bundle))
    run = subprocess.run(
        [sys.executable, "-c", USE, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    assert stats["ok"] and stats["bundle_hits"] == 1 and stats["compiles"] == 0, stats
