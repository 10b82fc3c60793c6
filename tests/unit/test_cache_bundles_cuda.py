"""CUDA bundles built with one NVRTC serve a node with another (issue 7, item 5), without a GPU:
NVRTC compiles here; the node's NVRTC version and CUDA headers are faked. Also runs the bundle
recipe of docs/bundles.md as written. The real 13.x -> 13.0 case: tests/gpu/test_bundle_cuda.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_cache_support import SRC, cache_dir  # noqa: F401

import kernelkit
from kernelkit._cache import bundles, cache_stats, compile_cached
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")

BUNDLES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "bundles.md"
BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] * x[i];"
F32, F16 = DTYPES["float32"], DTYPES["float16"]


def _request(cuda, kernel, arch: str, dtype):
    return render_request(
        kernel.spec, cuda, cuda.target_for_arch(arch), [("array", dtype)], [dtype], (), False
    )[1]


def _as_ptx(request):
    import dataclasses

    arch = request.arch.replace("sm_", "compute_")
    options = tuple(o.replace(request.arch, arch) for o in request.options)
    return dataclasses.replace(request, arch=arch, options=options)


def _build_bundle(cuda, path: Path, requests) -> Path:
    from kernelkit._cache.entry import encode
    from kernelkit._cache.keys import cache_key

    pairs = []
    for r in requests:
        key = cache_key(r, cuda.compiler_identity(), cuda.version)
        pairs.append((key.digest, encode(key, r.kernel, r.backend, cuda.compile(r))))
    bundles.write_bundle(path, pairs)
    return path


@pytest.fixture
def node(cuda, monkeypatch):
    """``node["on"] = True`` turns this process into a node with an older NVRTC and its own CUDA
    headers; until then it builds with the real ones."""
    from kernelkit._backends.cuda import CUDABackend, nvrtc

    real_identity, real_headers = cuda.compiler_identity(), nvrtc.header_digests
    assert real_identity != "nvrtc-13.0", "this NVRTC is 13.0: pick another fake node version"
    state = {"on": False}

    def identity(self) -> str:
        return "nvrtc-13.0" if state["on"] else real_identity

    def headers(needs):
        found = real_headers(needs)
        return tuple((name, "0" * 64) for name, _ in found) if state["on"] else found

    monkeypatch.setattr(CUDABackend, "compiler_identity", identity)
    monkeypatch.setattr(nvrtc, "header_digests", headers)
    return state


def test_a_cubin_bundle_from_another_nvrtc_serves_the_node(cuda, cache_dir, tmp_path, node) -> None:  # noqa: F811
    k = kernelkit.kernel("bundle_sq", ["x"], ["y"], BODY)
    built = [_request(cuda, k, a, d) for a in ("sm_80", "sm_90") for d in (F32, F16)]
    kernelkit.add_bundle(_build_bundle(cuda, tmp_path / "b.kkb", built))
    wanted = bundles.loaded()[0].find(_digest(cuda, built[3]))
    node["on"] = True
    here = _request(cuda, k, "sm_90", F16)
    assert here.headers != built[3].headers  # the node's CUDA headers differ, as its NVRTC does
    got = compile_cached(cuda, here)
    stats = cache_stats()
    assert (stats["bundle_hits"], stats["compiles"]) == (1, 0)  # before the fix: (0, 1)
    assert got.kind == "cubin" and got.arch == "sm_90" and got.binary == wanted.binary


def _digest(cuda, request) -> str:
    from kernelkit._cache.keys import cache_key

    return cache_key(request, cuda.compiler_identity(), cuda.version).digest


def test_ptx_from_another_nvrtc_is_not_served(cuda, cache_dir, tmp_path, node) -> None:  # noqa: F811
    k = kernelkit.kernel("bundle_sq_ptx", ["x"], ["y"], BODY)
    ptx = _as_ptx(_request(cuda, k, "sm_80", F32))
    kernelkit.add_bundle(_build_bundle(cuda, tmp_path / "b.kkb", [ptx]))
    node["on"] = True
    with pytest.warns(RuntimeWarning, match="differs in compiler") as caught:
        got = compile_cached(cuda, _as_ptx(_request(cuda, k, "sm_80", F32)))
    assert "[bundle_sq_ptx]" in str(caught[0].message)
    assert got.kind == "ptx" and cache_stats()["compiles"] == 1


def test_an_arch_the_bundle_lacks_is_named(cuda, cache_dir, tmp_path, node) -> None:  # noqa: F811
    k = kernelkit.kernel("bundle_sq_arch", ["x"], ["y"], BODY)
    kernelkit.add_bundle(_build_bundle(cuda, tmp_path / "b.kkb", [_request(cuda, k, "sm_80", F32)]))
    node["on"] = True
    with pytest.warns(RuntimeWarning, match=r"differs in arch, options \(arch: 'sm_80' there"):
        compile_cached(cuda, _request(cuda, k, "sm_86", F32))
    assert cache_stats()["compiles"] == 1


def _docs_recipe() -> tuple[str, list[str]]:
    """docs/bundles.md's example: the ``# mykernels.py`` block and its precompile command."""
    text = BUNDLES_PAGE.read_text()
    (module,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "# mykernels.py" in b]
    (command,) = [
        line.split("#")[0].strip()
        for b in re.findall(r"```bash\n(.*?)```", text, re.S)
        for line in b.splitlines()
        if line.startswith("kernelkit precompile")
    ]
    return module, shlex.split(command)


SERVE = textwrap.dedent("""
    import json, runpy, sys
    import kernelkit
    from kernelkit._backends.cuda import CUDABackend, nvrtc
    from kernelkit._cache import compile_cached
    from kernelkit._pipeline.declare import declared
    from kernelkit._backends.registry import get_backend

    real = nvrtc.header_digests
    CUDABackend.compiler_identity = lambda self: "nvrtc-13.0"  # an older node
    nvrtc.header_digests = lambda needs: tuple((n, "0" * 64) for n, _ in real(needs))
    kernelkit.add_bundle("mykernels.kkb")
    runpy.run_path("mykernels.py")
    for decl in declared():
        for arch in sys.argv[1].split(","):
            request = decl.request(arch)  # as the node renders it, here without a device
            art = compile_cached(get_backend(request.backend), request)
            assert art.kind == "cubin" and art.arch == arch, (art.kind, art.arch)
    print(json.dumps(kernelkit.cache_stats()))
""")


def test_the_docs_bundle_recipe_runs_without_a_gpu_and_serves_an_older_nvrtc(
    cuda,
    tmp_path,
) -> None:
    module, command = _docs_recipe()
    assert command[:2] == ["kernelkit", "precompile"]
    archs = command[command.index("--arch") + 1]
    unsupported = [a for a in archs.split(",") if a not in cuda.compile_targets()]
    if unsupported:
        pytest.skip(f"this NVRTC cannot compile for {unsupported}")
    (tmp_path / "mykernels.py").write_text(module)
    env = dict(
        os.environ,
        PYTHONPATH=str(SRC),
        KERNELKIT_CACHE_DIR=str(tmp_path / "cache"),
        CUDA_VISIBLE_DEVICES="",  # no GPU, as on the CI box of the report
    )
    out = subprocess.run(
        [sys.executable, "-m", "kernelkit", *command[1:], "--quiet"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    declarations = module.count(".precompile(")
    n = declarations * len(archs.split(","))
    assert f"wrote mykernels.kkb: {n} entries" in out.stdout
    assert len(bundles.Bundle(tmp_path / "mykernels.kkb").by_key) == n
    served = subprocess.run(
        [sys.executable, "-c", SERVE, archs],
        cwd=tmp_path,
        env=dict(env, KERNELKIT_CACHE_DIR=str(tmp_path / "node-cache")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert served.returncode == 0, served.stderr
    stats = json.loads(served.stdout.strip().splitlines()[-1])
    assert (stats["bundle_hits"], stats["compiles"]) == (n, 0), stats
