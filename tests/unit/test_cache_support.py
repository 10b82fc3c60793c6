"""Shared pieces of the cache tests: a fake backend, requests, an isolated-cache fixture, and a
subprocess worker (``python tests/unit/test_cache_support.py MODE ...``). Holds no tests."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

import pytest  # noqa: E402

from kernelkit import _config  # noqa: E402
from kernelkit._cache import bundles, clear_memory, disk, files, stats  # noqa: E402
from kernelkit._records import Artifact, CompileRequest, KernelSource, Target  # noqa: E402
from kernelkit.backend import Backend  # noqa: E402

COUNTER_ENV = "KK_TEST_COMPILE_COUNTER"  # a file the fake backend appends one line per compile to
DELAY_ENV = "KK_TEST_COMPILE_S"  # seconds each fake compile takes (widens race windows)


class FakeBackend(Backend):
    """Compiles by wrapping the source: the 'binary' is a pure function of the request."""

    name = "fake"
    version = "1"

    def __init__(self, identity: str = "fakecc 1.0") -> None:
        self.identity = identity
        self.compiles = 0

    def targets(self) -> list[Target]:
        return []

    def compiler_identity(self) -> str:
        return self.identity

    def render(self, source: KernelSource, target: Target, check: bool = False) -> CompileRequest:
        raise NotImplementedError

    def compile(self, request: CompileRequest) -> Artifact:
        delay = float(os.environ.get(DELAY_ENV, "0") or 0)
        if delay:
            time.sleep(delay)
        counter = os.environ.get(COUNTER_ENV)
        if counter:
            fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(fd, f"{os.getpid()} {request.kernel}\n".encode())
            os.close(fd)
        self.compiles += 1
        return expected(request)

    def load(self, artifact: Artifact, target: Target) -> Any:
        return artifact

    def launcher(self, program: Any, target: Target, shared_memory_bytes: int) -> Any:
        return lambda *a: None


def make_request(i: int = 0, **changes: Any) -> CompileRequest:
    """A distinct request per ``i``; ``changes`` override fields."""
    fields: dict[str, Any] = dict(
        backend="fake",
        kernel=f"k{i}",
        entry=f"kk_k{i}",
        arch="fake64",
        source=f"// kernel {i}\nout[i] = expf(inp[i]);\n",
        options=("-O2", "-std=c++17"),
        headers=(("kk.h", "ab" * 32),),
        param_kinds=("array", "array"),
    )
    fields.update(changes)
    return CompileRequest(**fields)


def expected(request: CompileRequest) -> Artifact:
    """What the fake backend compiles ``request`` to."""
    binary = b"FAKEBIN\0" + request.source.encode() + bytes(range(256)) * 4
    return Artifact(
        kind="so",
        binary=binary,
        entry=request.entry,
        arch=request.arch,
        metadata={"compiler": "fakecc", "registers": 7, "tags": ["a", "b"]},
        log="warning: none",
    )


def reset_caches() -> None:
    """Forget memory entries, counts, bundles and the memoized disk cache."""
    clear_memory()
    stats.reset()
    bundles.reset()
    disk._current = None


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An isolated cache directory in the environment and config; everything restored after."""
    yield from isolated_cache(tmp_path / "kkcache", monkeypatch)


def isolated_cache(root: Path, monkeypatch: pytest.MonkeyPatch):
    """Point KERNELKIT_CACHE_DIR at ``root`` with default cache settings, yield ``root``, then
    restore the environment, configuration and in-process caches."""
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(root))
    for name in ("KERNELKIT_CACHE", "KERNELKIT_CACHE_MAX_BYTES", "KERNELKIT_BUNDLE_PATH"):
        monkeypatch.delenv(name, raising=False)
    _config.reload()
    reset_caches()
    yield root
    monkeypatch.undo()
    _config.reload()
    reset_caches()


def worker_env(root: Path, **extra: str) -> dict[str, str]:
    """Environment for a subprocess worker using cache ``root``."""
    env = dict(os.environ)
    env.update(KERNELKIT_CACHE_DIR=str(root), PYTHONPATH=str(SRC), **extra)
    return env


def _compile_many(n_kernels: int, n_threads: int) -> dict[str, int]:
    """Compile ``n_kernels`` requests from ``n_threads`` threads; fail loudly on a wrong result."""
    from kernelkit._cache import cache_stats, compile_cached

    backend, errors = FakeBackend(), []

    def run(offset: int) -> None:
        for j in range(n_kernels):
            r = make_request((j + offset) % n_kernels)
            got = compile_cached(backend, r)
            if got != expected(r) or got.metadata != expected(r).metadata:
                errors.append(r.kernel)

    threads = [threading.Thread(target=run, args=(t * 7,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"wrong artifacts: {errors}")
    return cache_stats()


def _slow_write(ready: str) -> None:
    """Start writing request 0's entry, announce it half way, then hang until killed."""
    from kernelkit._cache import compile_cached

    def half_then_hang(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        Path(ready).write_text("half")
        time.sleep(600)

    files.write_all = half_then_hang
    compile_cached(FakeBackend(), make_request(0))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "compile":
        print(json.dumps(_compile_many(int(sys.argv[2]), int(sys.argv[3]))))  # noqa: T201 - to the parent
    elif mode == "slow-write":
        _slow_write(sys.argv[2])
