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


# --- a bundle from another NVRTC (issue 7, item 5) -------------------------------------------

# Builds like `kernelkit precompile`, but as a machine whose NVRTC reports another version.
PRECOMPILE_AS = """
import sys
from kernelkit._backends.cuda import CUDABackend
CUDABackend.compiler_identity = lambda self: sys.argv[1]
from kernelkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _env(**extra: str) -> dict[str, str]:
    src = str(Path(__file__).parents[2] / "src")
    path = os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def _use(tmp_path: Path, bundle: Path) -> dict:
    env = _env(
        KERNELKIT_CACHE_DIR=str(tmp_path / "node-cache"),
        KERNELKIT_BUNDLE_PATH=str(bundle),
    )
    run = subprocess.run(
        [sys.executable, "-W", "always", "-c", USE, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "stderr": run.stderr}


def _precompile_under_another_nvrtc(tmp_path: Path, bundle: Path) -> None:
    """Build tests/gpu's DECL for this device's arch as if NVRTC were version 99.9."""
    major, minor = torch.cuda.get_device_capability()
    cmd = [sys.executable, "-c", PRECOMPILE_AS, "nvrtc-99.9", "precompile", "decl.py"]
    cmd += ["--arch", f"sm_{major}{minor}", "-o", str(bundle), "--quiet"]
    out = subprocess.run(
        cmd,
        cwd=tmp_path,
        env=_env(KERNELKIT_CACHE_DIR=str(tmp_path / "build-cache")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr


def test_a_bundle_from_another_nvrtc_serves_the_device(tmp_path: Path):
    """Set KK_FOREIGN_BUNDLE to a bundle of tests/gpu's DECL built on another machine (e.g. NVRTC
    13.5 from pip, no GPU: `kernelkit precompile decl.py --arch sm_90 -o foreign.kkb`) for the
    real case; without it the bundle is built here under a faked NVRTC version."""
    (tmp_path / "decl.py").write_text(DECL)
    bundle = Path(os.environ.get("KK_FOREIGN_BUNDLE") or tmp_path / "foreign.kkb")
    if "KK_FOREIGN_BUNDLE" not in os.environ:
        _precompile_under_another_nvrtc(tmp_path, bundle)
    stats = _use(tmp_path, bundle)
    assert stats["ok"] and stats["bundle_hits"] == 1 and stats["compiles"] == 0, stats


def test_a_cubin_the_driver_refuses_is_compiled_with_a_warning(tmp_path: Path):
    """A bundle entry of the right key whose cubin the driver cannot load (garbage here)."""
    import zipfile

    (tmp_path / "decl.py").write_text(DECL)
    good = tmp_path / "good.kkb"
    _precompile_under_another_nvrtc(tmp_path, good)
    from kernelkit._cache import bundles, entry
    from kernelkit._cache.keys import CacheKey

    with zipfile.ZipFile(good) as zf:
        (item,) = json.loads(zf.read("manifest.json"))["entries"]
        artifact, header = entry.decode(zf.read(item["file"]), item["key"])
    key = CacheKey(tuple(tuple(p) for p in header.get("parts")), item["key"])
    broken = type(artifact)(
        artifact.kind, b"\x7fELF" + b"\x00" * 256, artifact.entry, artifact.arch, {}, ""
    )
    bad = tmp_path / "bad.kkb"
    bundles.write_bundle(bad, [(key.digest, entry.encode(key, item["kernel"], "cuda", broken))])
    stats = _use(tmp_path, bad)
    assert stats["ok"] and stats["bundle_hits"] == 1 and stats["compiles"] == 1, stats
    assert "could not be loaded" in stats["stderr"]
