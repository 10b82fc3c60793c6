"""The caches end to end on the CPU backend: real kernels through ``kernelkit.kernel`` on NumPy
arrays, with damaged entries, failing disks, killed writers, many processes, and bundles."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_cache_support import SRC, isolated_cache, reset_caches

import kernelkit
from kernelkit import _config
from kernelkit._cache import clear_memory, disk, files, stats
from kernelkit.cli import main


def _cpu_ready() -> str | None:
    try:
        from kernelkit._backends.registry import get_backend

        return None if get_backend("cpu").targets() else "the cpu backend sees no device"
    except Exception as e:  # noqa: BLE001 - any failure means: not ready yet
        return f"the cpu backend is not available: {e}"


pytestmark = pytest.mark.skipif(_cpu_ready() is not None, reason=str(_cpu_ready()))

BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < inp_shape[0]) out[i] = {expr};"
KERNELS = textwrap.dedent("""
    import numpy as np, kernelkit
    BODY = {body!r}
    def make(n=0, dtype="float32"):
        expr = "expf(inp[i])" if n == 0 else f"expf(inp[i]) + {{n}}.0f"
        return kernelkit.kernel(f"cache_exp{{n}}", ["inp"], ["out"], BODY.format(expr=expr))
    def check(n=0, dtype=np.float32):
        x = np.linspace(-2, 2, 1024, dtype=dtype)
        (y,) = make(n)([x], output_shapes=[x.shape], output_dtypes=[dtype], grid=(1024, 1, 1),
                       threadgroup=(256, 1, 1))
        ok = np.allclose(y, np.exp(x.astype(np.float64)) + n, rtol=1e-5)
        if not ok:
            raise SystemExit(f"wrong output for kernel {{n}}")
        return ok
""").format(body=BODY)
ns: dict = {}
exec(KERNELS, ns)  # noqa: S102 - the test module's own text, built above
check, make = ns["check"], ns["make"]


@pytest.fixture(scope="module")
def warm_template(tmp_path_factory) -> Path:
    """A cache with kernels 0 and 1 and the cpu backend's prelude, built once."""
    root = tmp_path_factory.mktemp("template") / "kkcache"
    old = os.environ.get("KERNELKIT_CACHE_DIR")
    os.environ["KERNELKIT_CACHE_DIR"] = str(root)
    _config.reload()
    reset_caches()
    try:
        check(0)
        check(1)
    finally:
        if old is None:
            del os.environ["KERNELKIT_CACHE_DIR"]
        else:
            os.environ["KERNELKIT_CACHE_DIR"] = old
        _config.reload()
        reset_caches()
    return root


@pytest.fixture
def cache(warm_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A private copy of the warm cache (its prelude build shared), isolated and restored."""
    root = tmp_path / "kkcache"
    shutil.copytree(warm_template / "entries", root / "entries")
    if (warm_template / "cpu-pch").exists():
        (root / "cpu-pch").symlink_to(warm_template / "cpu-pch")
    yield from isolated_cache(root, monkeypatch)


def _entry_of(root: Path, kernel: str = "cache_exp0") -> Path:
    cache = disk.DiskCache(root, 1 << 40)
    for f in cache.scan():
        h = cache.header(f)
        if h and h.get("kernel") == kernel:
            return f.path
    raise AssertionError(f"no entry for {kernel}")


def _run(code: str, root: Path, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ, KERNELKIT_CACHE_DIR=str(root), PYTHONPATH=str(SRC), **env)
    return subprocess.run(
        [sys.executable, "-c", KERNELS + textwrap.dedent(code)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_fresh_process_hits_the_disk(cache) -> None:
    out = _run(
        "check(0); print(json.dumps(kernelkit.cache_stats()))".replace(
            "json.", "__import__('json')."
        ),
        cache,
    )
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert (s["disk_hits"], s["compiles"]) == (1, 0)


def test_loaded_artifact_equals_the_compiled_one(cache) -> None:
    from kernelkit._cache import compile_cached

    k = make(6)
    x = np.ones(1024, np.float32)
    k([x], [x.shape], [np.float32], grid=(1024, 1, 1), threadgroup=(256, 1, 1))
    (plan,) = k._plans.values()
    backend = kernelkit._backends.registry.get_backend(plan.request.backend)
    compiled = compile_cached(backend, plan.request)  # from memory: what compile returned
    clear_memory()
    loaded = compile_cached(backend, plan.request)
    assert kernelkit.cache_stats()["disk_hits"] == 1
    assert loaded == compiled and loaded is not compiled
    assert loaded.metadata == compiled.metadata and loaded.log == compiled.log


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-1000])


def _flip(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))


def _empty(p: Path) -> None:
    p.write_bytes(b"")


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "foreign"])
def test_a_damaged_entry_still_runs_right(cache, damage) -> None:
    path = _entry_of(cache)
    if damage == "foreign":
        other = next(f.path for f in disk.DiskCache(cache, 1 << 40).scan() if f.path != path)
        path.write_bytes(other.read_bytes())
    else:
        {"truncate": _truncate, "flip": _flip, "empty": _empty}[damage](path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check(0)
    assert len([w for w in caught if "unusable" in str(w.message)]) == 1
    assert kernelkit.cache_stats()["compiles"] == 1
    assert main(["cache", "verify"]) == 0


def test_read_only_cache_simulated(cache, monkeypatch) -> None:
    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(disk.os, "replace", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check(5) and check(0)
    assert len([w for w in caught if "memory only" in str(w.message)]) == 1
    monkeypatch.undo()
    assert main(["cache", "verify"]) == 0


def test_full_disk_simulated(cache, monkeypatch) -> None:
    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_all", full)
    with pytest.warns(RuntimeWarning, match="ENOSPC"):
        assert check(2)
    monkeypatch.undo()
    assert main(["cache", "verify"]) == 0


def test_a_writer_killed_mid_write(cache, tmp_path) -> None:
    ready = tmp_path / "ready"
    code = f"""
        import os, time
        from kernelkit._cache import files
        def slow(fd, data):
            os.write(fd, data[: len(data) // 2]); open({str(ready)!r}, "w").close(); time.sleep(600)
        files.write_all = slow
        check(3)
    """
    full = dict(os.environ, KERNELKIT_CACHE_DIR=str(cache), PYTHONPATH=str(SRC))
    proc = subprocess.Popen([sys.executable, "-c", KERNELS + textwrap.dedent(code)], env=full)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert ready.exists()
    names = [
        h.get("kernel")
        for f in disk.DiskCache(cache, 1 << 40).scan()
        if (h := disk.DiskCache(cache, 1 << 40).header(f))
    ]
    assert "cache_exp3" not in names  # nothing partial was published
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check(3)
    assert main(["cache", "verify"]) == 1 and main(["cache", "verify"]) == 0  # temp file gone


def _procs(cache: Path, n: int, code: str) -> None:
    full = dict(os.environ, KERNELKIT_CACHE_DIR=str(cache), PYTHONPATH=str(SRC))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", KERNELS + textwrap.dedent(code)],
            env=full,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err


def test_eight_processes_compile_once(cache) -> None:
    _procs(cache, 8, "check(4)")
    assert stats.lifetime(str(cache))["compiles"] == 1
    assert stats.lifetime(str(cache))["disk_hits"] == 7
    assert check(4) and main(["cache", "verify"]) == 0


def test_two_threads_by_four_processes_on_twenty_kernels(cache) -> None:
    _procs(
        cache,
        4,
        """
        import threading
        errors = []
        def run(offset):
            for j in range(20):
                try:
                    check(10 + (j + offset) % 20)
                except BaseException as e:
                    errors.append(e)
        ts = [threading.Thread(target=run, args=(t * 7,)) for t in range(2)]
        [t.start() for t in ts]; [t.join() for t in ts]
        assert not errors, errors
    """,
    )
    assert stats.lifetime(str(cache))["compiles"] == 20
    assert main(["cache", "verify"]) == 0
    clear_memory()
    for n in (10, 29):
        assert check(n)
    assert kernelkit.cache_stats()["compiles"] == 0


@pytest.fixture(scope="module")
def bundle(warm_template: Path, tmp_path_factory) -> Path:
    """A bundle of kernel 0 (float32) built by `kernelkit precompile` for the cpu arch."""
    where = tmp_path_factory.mktemp("bundle")
    (where / "decl.py").write_text(KERNELS + "make(0).precompile(['float32'], ['float32'])\n")
    arch = kernelkit._backends.registry.get_backend("cpu").targets()[0].arch
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelkit",
            "precompile",
            "decl.py",
            "--arch",
            arch,
            "-o",
            "b.kkb",
            "--quiet",
        ],
        cwd=where,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC), KERNELKIT_CACHE_DIR=str(warm_template)),
    )
    assert out.returncode == 0, out.stderr
    return where / "b.kkb"


def _empty_cache(cache: Path) -> None:
    shutil.rmtree(cache / "entries")


def test_a_bundle_serves_a_cold_cache(cache, bundle) -> None:
    _empty_cache(cache)
    kernelkit.add_bundle(bundle)
    assert check(0)
    s = kernelkit.cache_stats()
    assert (s["bundle_hits"], s["compiles"]) == (1, 0)


def test_a_bundle_entry_with_a_bad_checksum_is_compiled(cache, bundle, tmp_path) -> None:
    import zipfile

    bad = tmp_path / "bad.kkb"
    with zipfile.ZipFile(bundle) as zin, zipfile.ZipFile(bad, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name.startswith("entries/"):
                data = data[:-1] + bytes([data[-1] ^ 1])
            zout.writestr(name, data)
    _empty_cache(cache)
    kernelkit.add_bundle(bad)
    with pytest.warns(RuntimeWarning, match="rejected"):
        assert check(0)
    assert kernelkit.cache_stats()["compiles"] == 1
    assert main(["cache", "verify"]) == 0


def test_a_bundle_for_another_version_is_refused(cache, bundle, tmp_path) -> None:
    import zipfile

    old = tmp_path / "old.kkb"
    with zipfile.ZipFile(bundle) as zin, zipfile.ZipFile(old, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == "manifest.json":
                m = json.loads(data)
                m["kernelkit"] = "0.0.1"
                data = json.dumps(m).encode()
            zout.writestr(name, data)
    with pytest.raises(kernelkit.BundleError, match=r"kernelkit 0.0.1"):
        kernelkit.add_bundle(old)
    _empty_cache(cache)
    assert check(0) and kernelkit.cache_stats()["bundle_hits"] == 0
    assert main(["cache", "verify"]) == 0


# --- the precompiled prelude (issue 7, items 2 and 3) ----------------------------------------


@pytest.fixture
def own_pch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty isolated cache that builds its own precompiled prelude (others share one)."""
    from kernelkit._backends.cpu import _toolchain

    _toolchain._pch_dirs.clear()  # as a fresh process would
    yield from isolated_cache(tmp_path / "kkcache", monkeypatch)
    _toolchain._pch_dirs.clear()


def _pch(root: Path) -> Path:
    (found,) = root.glob("cpu-pch/*/kk_cpu.h.gch")
    return found.parent


def _as_a_new_process() -> None:
    from kernelkit._backends.cpu import _toolchain

    _toolchain._pch_dirs.clear()
    clear_memory()


def test_a_truncated_precompiled_header_is_rebuilt(own_pch, capsys) -> None:
    assert check(0)
    gch = _pch(own_pch) / "kk_cpu.h.gch"
    gch.write_bytes(gch.read_bytes()[: 1 << 20])  # a crash or a full disk while it was written
    _as_a_new_process()
    assert check(1)  # before the fix: "fatal error: cannot read PCH file", on every compile
    assert gch.stat().st_size > 1 << 20 and main(["cache", "verify"]) == 0
    capsys.readouterr()
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    (product,) = info["products"]
    assert product["path"].startswith("cpu-pch/") and product["size_bytes"] > 1 << 20
    assert info["size_bytes"] == info["entries_bytes"] + product["size_bytes"]


def test_a_pch_the_compiler_refuses_is_dropped_and_the_compile_retried(own_pch) -> None:
    assert check(0)
    where = _pch(own_pch)
    gch = where / "kk_cpu.h.gch"
    gch.write_bytes(gch.read_bytes()[: 1 << 20])  # damage its checksums do not show
    sums = f"{hashlib.sha256(gch.read_bytes()).hexdigest()} {gch.stat().st_size} kk_cpu.h.gch\n"
    (where / "SHA256SUMS").write_text(sums)
    _as_a_new_process()
    assert check(1)  # compiled without the PCH, which is removed
    assert not where.exists() or (where / "SHA256SUMS").read_text() != sums
    _as_a_new_process()
    assert check(2) and (_pch(own_pch) / "kk_cpu.h.gch").stat().st_size > 1 << 20


def test_cache_clear_removes_the_precompiled_header(own_pch) -> None:
    assert check(0)
    where = _pch(own_pch)
    assert main(["cache", "clear"]) == 0
    assert not where.exists() and list(own_pch.glob("cpu-pch/*/*")) == []
    clear_memory()  # this process still knows the removed PCH's path
    assert check(3) and _pch(own_pch) == where  # built again, not silently done without


def test_cache_off_writes_nothing_under_the_cache_dir(tmp_path) -> None:
    root = tmp_path / "kkcache"
    code = "from kernelkit._backends.cpu import _toolchain; check(7); print(_toolchain._pch_dirs)"
    out = _run(code, root, KERNELKIT_CACHE="0")
    assert out.returncode == 0, out.stderr
    assert not root.exists()  # before the fix: root/cpu-pch/<digest>/kk_cpu.h.gch (40 MB)
    (used,) = re.findall(r"PosixPath\('([^']+)'\)", out.stdout)
    assert not Path(used).exists()  # the process's own PCH, removed at exit
