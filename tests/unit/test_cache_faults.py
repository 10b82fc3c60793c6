"""Faults: read-only and full disks, a stuck lock holder, a writer killed mid-write, and many
processes and threads compiling the same kernels (each compiled exactly once)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from test_cache_support import (  # noqa: F401
    COUNTER_ENV,
    DELAY_ENV,
    HERE,
    FakeBackend,
    cache_dir,
    expected,
    make_request,
    worker_env,
)

from kernelkit._cache import cache_stats, clear_memory, compile_cached, disk, files, keys, stats
from kernelkit.cli import main


def _compile_twice_collecting_warnings() -> list[str]:
    backend = FakeBackend()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(2):
            assert compile_cached(backend, make_request(i)) == expected(make_request(i))
        clear_memory()
        assert compile_cached(backend, make_request(0)) == expected(make_request(0))
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("where", ["replace", "open", "mkdir"])
def test_read_only_directory_simulated(cache_dir, monkeypatch, where) -> None:  # noqa: F811
    def refuse(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    target = {
        "replace": (disk.os, "replace"),
        "open": (disk.os, "open"),
        "mkdir": (disk.Path, "mkdir"),
    }[where]
    monkeypatch.setattr(*target, refuse)
    messages = _compile_twice_collecting_warnings()
    assert len([m for m in messages if "memory only" in m]) == 1, messages
    assert "EACCES" in messages[0]
    monkeypatch.undo()
    left = list((cache_dir / "entries").glob("*")) if (cache_dir / "entries").exists() else []
    assert left == []  # no temp file left behind either
    assert cache_stats()["write_errors"] == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; see the simulated test")
def test_read_only_directory_chmod(cache_dir) -> None:  # noqa: F811
    (cache_dir / "entries").mkdir(parents=True)
    (cache_dir / "locks").mkdir()
    for d in (cache_dir / "entries", cache_dir / "locks", cache_dir):
        d.chmod(0o555)
    try:
        messages = _compile_twice_collecting_warnings()
        assert len([m for m in messages if "memory only" in m]) == 1
    finally:
        for d in (cache_dir, cache_dir / "entries", cache_dir / "locks"):
            d.chmod(0o755)


def test_full_disk_simulated(cache_dir, monkeypatch) -> None:  # noqa: F811
    def full(fd: int, data: bytes) -> None:
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_all", full)
    messages = _compile_twice_collecting_warnings()
    assert len([m for m in messages if "ENOSPC" in m and "memory only" in m]) == 1, messages
    assert list((cache_dir / "entries").iterdir()) == []  # the partial temp file is gone
    monkeypatch.undo()
    assert main(["cache", "verify"]) == 0


def test_a_stuck_lock_holder_does_not_hang_others(cache_dir, monkeypatch) -> None:  # noqa: F811
    # No clock: the waiter must ask filelock for a bounded wait (LOCK_TIMEOUT_S, 0 here), get
    # Timeout while the holder still holds the lock, then compile and publish anyway.
    import filelock

    asked: list[float] = []

    class Recording(filelock.FileLock):
        def acquire(self, timeout=None, *args, **kwargs):
            asked.append(self.timeout if timeout is None else timeout)
            return super().acquire(timeout, *args, **kwargs)

    monkeypatch.setattr(disk, "LOCK_TIMEOUT_S", 0)
    monkeypatch.setattr(filelock, "FileLock", Recording)
    digest = keys.cache_key(make_request(0), "fakecc 1.0", "1").digest
    lock_path = cache_dir / "locks" / f"{digest}.lock"
    lock_path.parent.mkdir(parents=True)
    with open(lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as filelock does, from another open file
        with pytest.warns(RuntimeWarning, match="compiling it here"):
            got = compile_cached(FakeBackend(), make_request(0))
        assert asked == [0]  # one bounded wait, the configured one; never "wait forever" (-1)
    assert got == expected(make_request(0))
    assert cache_stats()["lock_timeouts"] == 1 and cache_stats()["writes"] == 1
    assert main(["cache", "verify"]) == 0


def _kill_mid_write(root: Path, tmp_path: Path) -> list[Path]:
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "test_cache_support.py"), "slow-write", str(ready)],
        env=worker_env(root),
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "worker exited early"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    return list((root / "entries").glob(".*.tmp"))


def test_a_writer_killed_mid_write_never_publishes_a_partial_entry(cache_dir, tmp_path) -> None:  # noqa: F811
    temps = _kill_mid_write(cache_dir, tmp_path)
    assert len(temps) == 1  # the half-written temp file, never renamed
    assert list((cache_dir / "entries").glob("*.kke")) == []
    backend = FakeBackend()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plain miss: nothing corrupt was published
        assert compile_cached(backend, make_request(0)) == expected(make_request(0))
    assert backend.compiles == 1
    assert main(["cache", "verify"]) == 1  # reports and removes the dead writer's temp file
    assert main(["cache", "verify"]) == 0


def test_a_writer_killed_while_replacing_leaves_the_old_file(cache_dir, tmp_path) -> None:  # noqa: F811
    compile_cached(FakeBackend(), make_request(0))
    path = next((cache_dir / "entries").glob("*.kke"))
    path.write_bytes(path.read_bytes()[:-50])  # damaged, so the worker recompiles and replaces
    before = path.read_bytes()
    _kill_mid_write(cache_dir, tmp_path)
    assert path.read_bytes() == before  # untouched: the half-written temp file was never renamed
    clear_memory()
    with pytest.warns(RuntimeWarning, match="unusable"):
        assert compile_cached(FakeBackend(), make_request(0)) == expected(make_request(0))
    assert main(["cache", "verify"]) == 1  # the dead writer's temp file
    assert main(["cache", "verify"]) == 0


def _run_workers(
    root: Path, tmp_path: Path, n_procs: int, n_kernels: int, n_threads: int, delay_s: str
) -> tuple[list[str], list[dict]]:
    counter = tmp_path / "compiles.txt"
    env = worker_env(root, **{COUNTER_ENV: str(counter), DELAY_ENV: delay_s})
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "test_cache_support.py"),
                "compile",
                str(n_kernels),
                str(n_threads),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n_procs)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    return counter.read_text().splitlines(), results


def test_eight_processes_compile_one_kernel_once(cache_dir, tmp_path) -> None:  # noqa: F811
    lines, results = _run_workers(cache_dir, tmp_path, 8, 1, 1, "0.5")
    assert len(lines) == 1, lines
    assert sum(r["compiles"] for r in results) == 1
    assert sum(r["disk_hits"] for r in results) == 7
    assert stats.lifetime(str(cache_dir))["compiles"] == 1  # merged from each process at exit
    assert main(["cache", "verify"]) == 0


def test_two_threads_by_four_processes_on_twenty_kernels(cache_dir, tmp_path) -> None:  # noqa: F811
    lines, results = _run_workers(cache_dir, tmp_path, 4, 20, 2, "0.02")
    kernels = sorted(line.split()[1] for line in lines)
    assert kernels == sorted(f"k{i}" for i in range(20)), kernels  # each compiled exactly once
    assert sum(r["compiles"] for r in results) == 20
    assert main(["cache", "verify"]) == 0
    clear_memory()
    backend = FakeBackend()
    for i in range(20):
        assert compile_cached(backend, make_request(i)) == expected(make_request(i))
    assert backend.compiles == 0
