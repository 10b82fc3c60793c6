"""Backends' build products (the CPU backend's precompiled prelude) in the disk cache: published
whole, checked before use, rebuilt when damaged, counted in the size cap and in the cache
commands, and never written to the cache directory with the cache off (issue 7, items 2-3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_cache_support import SRC, FakeBackend, cache_dir, make_request  # noqa: F401

from kernelkit import _config
from kernelkit._cache import compile_cached, disk, products
from kernelkit._cache.lookup import get_product
from kernelkit.cli import main

BLOB = bytes(range(256)) * 64  # 16 KiB


class Builder:
    """A build function that counts its calls and writes ``blob.bin`` (and ``note.txt``)."""

    def __init__(self, ok: bool = True) -> None:
        self.calls = 0
        self.ok = ok
        self.lock = threading.Lock()

    def __call__(self, directory: Path) -> bool:
        with self.lock:
            self.calls += 1
        (directory / "blob.bin").write_bytes(BLOB)
        (directory / "note.txt").write_text("made by a test\n")
        return self.ok


def test_a_product_is_published_whole_and_reused(cache_dir) -> None:  # noqa: F811
    build = Builder()
    got = get_product("test-area", "p1", build)
    assert got == cache_dir / "test-area" / "p1"
    assert sorted(p.name for p in got.iterdir()) == ["SHA256SUMS", "blob.bin", "note.txt"]
    assert products.verify(got) is None
    assert get_product("test-area", "p1", build) == got and build.calls == 1
    assert [p.name for p in (cache_dir / "test-area").iterdir()] == ["p1"]  # no temp left


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "no list", "empty"])
def test_a_damaged_product_is_rebuilt(cache_dir, damage) -> None:  # noqa: F811
    build = Builder()
    got = get_product("test-area", "p1", build)
    blob = got / "blob.bin"
    if damage == "truncate":  # a crash or a full disk while it was written, before the fix
        blob.write_bytes(BLOB[:1000])
    elif damage == "flip":
        blob.write_bytes(BLOB[:-1] + b"\x00")
    elif damage == "delete":
        blob.unlink()
    elif damage == "no list":  # as the kernelkit before this fix left it
        (got / products.SUMS).unlink()
    else:
        (got / products.SUMS).write_text("")
    assert products.verify(got) is not None
    assert get_product("test-area", "p1", build) == got
    assert build.calls == 2 and blob.read_bytes() == BLOB and products.verify(got) is None


def test_a_failed_build_publishes_nothing(cache_dir) -> None:  # noqa: F811
    assert get_product("test-area", "p1", Builder(ok=False)) is None
    assert list((cache_dir / "test-area").iterdir()) == []


def test_threads_build_a_product_once(cache_dir) -> None:  # noqa: F811
    build = Builder()
    results: list[Path | None] = []
    threads = [
        threading.Thread(target=lambda: results.append(get_product("test-area", "p", build)))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert build.calls == 1 and len(set(results)) == 1 and results[0] is not None


def test_names_cannot_leave_the_area(cache_dir) -> None:  # noqa: F811
    for area, name in (("..", "p"), ("a", "../p"), ("a/b", "p"), ("entries", "p"), ("a", ".p")):
        with pytest.raises(ValueError, match="must match"):
            get_product(area, name, Builder())


def test_cache_commands_count_verify_and_clear_products(cache_dir, capsys) -> None:  # noqa: F811
    compile_cached(FakeBackend(), make_request(0))
    got = get_product("test-area", "p1", Builder())
    size = sum(f.stat().st_size for f in got.iterdir())
    capsys.readouterr()
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["products"] == [{"path": "test-area/p1", "size_bytes": size}]
    assert info["size_bytes"] == info["entries_bytes"] + size
    assert main(["cache", "info"]) == 0 and "test-area/p1" in capsys.readouterr().out
    assert main(["cache", "verify"]) == 0
    (got / "blob.bin").write_bytes(b"damaged")
    assert main(["cache", "verify"]) == 1
    assert "build product" in capsys.readouterr().out and not got.exists()
    get_product("test-area", "p1", Builder())
    assert main(["cache", "clear"]) == 0
    assert not got.exists() and disk.DiskCache(cache_dir, 1 << 30).products() == []


def test_products_count_in_the_size_cap(cache_dir, monkeypatch) -> None:  # noqa: F811
    backend = FakeBackend()
    compile_cached(backend, make_request(0))
    entry_bytes = disk.DiskCache(cache_dir, 1 << 30).size_bytes()
    old = os.path.getmtime(next((cache_dir / "entries").iterdir())) - 100
    os.utime(next((cache_dir / "entries").iterdir()), (old, old))
    monkeypatch.setenv("KERNELKIT_CACHE_MAX_BYTES", str(len(BLOB) + entry_bytes))
    _config.reload()
    disk._current = None
    got = get_product("test-area", "p1", Builder())  # entry + product > cap: the entry goes
    assert got is not None and got.parent.parent == cache_dir
    assert list((cache_dir / "entries").glob("*.kke")) == []
    cache = disk.current()
    assert cache is not None and cache.size_bytes() <= cache.max_bytes


def test_a_product_larger_than_the_cap_stays_in_the_process(cache_dir, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("KERNELKIT_CACHE_MAX_BYTES", str(len(BLOB) // 2))
    _config.reload()
    disk._current = None
    got = get_product("test-area", "p1", Builder())
    assert got is not None and got.parent.parent == products.process_dir()
    assert list((cache_dir / "test-area").iterdir()) == []


def test_a_read_only_cache_builds_in_the_process(cache_dir, monkeypatch) -> None:  # noqa: F811
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(products.os, "rename", refuse)
    got = get_product("test-area", "p1", Builder())
    assert got is not None and got.parent.parent == products.process_dir()


CACHE_OFF = """
import json, os, sys
from kernelkit._cache.lookup import get_product
got = get_product("test-area", "p1", lambda d: (d / "f").write_bytes(b"x" * 100) > 0)
print(json.dumps({"path": str(got), "exists": got.is_dir()}))
"""


def test_cache_off_writes_nothing_to_the_cache_dir(tmp_path) -> None:
    root = tmp_path / "kkcache"
    env = dict(os.environ, KERNELKIT_CACHE="0", KERNELKIT_CACHE_DIR=str(root), PYTHONPATH=str(SRC))
    out = subprocess.run(
        [sys.executable, "-c", CACHE_OFF], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["exists"] and not seen["path"].startswith(str(root))
    assert not root.exists()
    assert not Path(seen["path"]).exists()  # the process's temporary directory went at exit


def test_a_forked_child_does_not_remove_its_parents_directory(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KERNELKIT_CACHE", "0")
    _config.reload()
    disk._current = None
    try:
        mine = products.process_dir()
        pid = os.fork()
        if pid == 0:  # the child exits through atexit handlers, as a multiprocessing child may
            code = 0 if products.process_dir() != mine else 1
            products._remove_process_dir(os.getppid(), mine)  # the parent's handler, inherited
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0 and mine.is_dir()
    finally:
        monkeypatch.undo()
        _config.reload()
        disk._current = None
