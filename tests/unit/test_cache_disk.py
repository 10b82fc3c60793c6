"""The disk layer: entry format, hits, the size cap, KERNELKIT_CACHE=0, and every corruption."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import pytest
from test_cache_support import FakeBackend, cache_dir, expected, make_request  # noqa: F401

from kernelkit import _config
from kernelkit._cache import cache_stats, clear_memory, compile_cached, disk, entry, keys
from kernelkit.cli import main


def _entry_path(root: Path, i: int = 0) -> Path:
    return disk.DiskCache(root, 1 << 30).path(
        keys.cache_key(make_request(i), "fakecc 1.0", "1").digest
    )


def test_entry_round_trip_is_equal_and_every_byte_is_checked() -> None:
    r = make_request(0)
    key, art = keys.cache_key(r, "cc"), expected(r)
    data = entry.encode(key, r.kernel, r.backend, art)
    back, header = entry.decode(data, key.digest)
    assert back == art and back.metadata == art.metadata and back.log == art.log
    assert header.get("kernel") == "k0" and header.get("binary_bytes") == len(art.binary)
    for i in range(0, len(data), 7):  # a flipped byte anywhere never decodes
        bad = bytearray(data)
        bad[i] ^= 0x40
        with pytest.raises(entry.BadEntry):
            entry.decode(bytes(bad), key.digest)
    with pytest.raises(entry.BadEntry, match="foreign"):
        entry.decode(data, "0" * 64)


def test_metadata_that_is_not_json_stays_in_memory(cache_dir) -> None:  # noqa: F811
    class Odd(FakeBackend):
        def compile(self, request):
            a = super().compile(request)
            return type(a)(a.kind, a.binary, a.entry, a.arch, metadata={"x": object()})

    with pytest.warns(RuntimeWarning, match="not plain JSON"):
        compile_cached(Odd(), make_request(0))
    assert cache_stats()["writes"] == 0


def test_cache_off_keeps_memory_only(cache_dir, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("KERNELKIT_CACHE", "0")
    _config.reload()
    backend = FakeBackend()
    compile_cached(backend, make_request(0))
    compile_cached(backend, make_request(0))
    assert backend.compiles == 1 and not cache_dir.exists()
    assert cache_stats()["memory_hits"] == 1


def test_size_cap_evicts_least_recently_used(cache_dir, monkeypatch) -> None:  # noqa: F811
    size = len(
        entry.encode(keys.cache_key(make_request(0), "c"), "k0", "fake", expected(make_request(0)))
    )
    monkeypatch.setenv("KERNELKIT_CACHE_MAX_BYTES", str(int(size * 4.5)))
    _config.reload()
    backend = FakeBackend()
    for i in range(4):
        compile_cached(backend, make_request(i))
        os.utime(_entry_path(cache_dir, i), (time.time() - 100 + i, time.time() - 100 + i))
    clear_memory()
    compile_cached(backend, make_request(0))  # a hit makes k0 the most recently used
    assert cache_stats()["disk_hits"] == 1
    for i in (4, 5):
        compile_cached(backend, make_request(i))
    left = {p.name for p in (cache_dir / "entries").iterdir()}
    assert _entry_path(cache_dir, 0).name in left
    assert _entry_path(cache_dir, 1).name not in left
    assert cache_stats()["evictions"] >= 1
    assert sum((cache_dir / "entries" / n).stat().st_size for n in left) <= size * 4.5
    assert main(["cache", "verify"]) == 0


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[:-100])


def _flip_binary(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[-10] ^= 0xFF
    p.write_bytes(bytes(b))


def _flip_header(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[entry.FIXED_BYTES + 20] ^= 0x01
    p.write_bytes(bytes(b))


def _empty(p: Path) -> None:
    p.write_bytes(b"")


def _garbage(p: Path) -> None:
    p.write_bytes(os.urandom(5000))


def _foreign(p: Path) -> None:
    other = make_request(9)
    p.write_bytes(
        entry.encode(keys.cache_key(other, "fakecc 1.0", "1"), "k9", "fake", expected(other))
    )


@pytest.mark.parametrize(
    "damage",
    [_truncate, _flip_binary, _flip_header, _empty, _garbage, _foreign],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_damaged_entry_is_one_warning_a_recompile_and_a_replacement(cache_dir, damage) -> None:  # noqa: F811
    backend = FakeBackend()
    compile_cached(backend, make_request(0))
    clear_memory()
    damage(_entry_path(cache_dir))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = compile_cached(backend, make_request(0))
    assert got == expected(make_request(0))
    assert [str(w.message) for w in caught if "unusable" in str(w.message)].__len__() == 1
    assert backend.compiles == 2 and cache_stats()["corrupt"] == 1
    clear_memory()
    assert compile_cached(backend, make_request(0)) == got  # replaced: a clean disk hit now
    assert cache_stats()["disk_hits"] == 1
    assert main(["cache", "verify"]) == 0


def test_verify_reports_and_removes_bad_entries(cache_dir, capsys) -> None:  # noqa: F811
    backend = FakeBackend()
    for i in range(3):
        compile_cached(backend, make_request(i))
    _flip_binary(_entry_path(cache_dir, 1))
    assert main(["cache", "verify", "--keep"]) == 1
    assert _entry_path(cache_dir, 1).exists()
    assert main(["cache", "verify"]) == 1
    assert "binary checksum mismatch" in capsys.readouterr().out
    assert not _entry_path(cache_dir, 1).exists()
    assert main(["cache", "verify"]) == 0
