"""Bundles as read-only layers, their version and checksum checks, and the cache commands."""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path

import pytest
from test_cache_support import FakeBackend, cache_dir, expected, make_request  # noqa: F401

import kernelkit
from kernelkit import _config
from kernelkit._cache import bundles, cache_stats, clear_memory, compile_cached, entry, keys
from kernelkit.cli import main


def _make_bundle(path: Path, n: int = 3) -> Path:
    pairs = []
    for i in range(n):
        r = make_request(i)
        key = keys.cache_key(r, "fakecc 1.0", "1")
        pairs.append((key.digest, entry.encode(key, r.kernel, r.backend, expected(r))))
    bundles.write_bundle(path, pairs)
    return path


def _rewrite(path: Path, manifest_change=None, member_change=None) -> None:
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(files.pop("manifest.json"))
    if manifest_change:
        manifest_change(manifest)
    if member_change:
        name = manifest["entries"][0]["file"]
        files[name] = member_change(files[name])
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
        zf.writestr("manifest.json", json.dumps(manifest))


def test_add_bundle_is_consulted_before_compiling(cache_dir, tmp_path) -> None:  # noqa: F811
    kernelkit.add_bundle(_make_bundle(tmp_path / "b.kkb"))
    backend = FakeBackend()
    for i in range(3):
        want = expected(make_request(i))
        got = compile_cached(backend, make_request(i))
        assert got == want and got.metadata == want.metadata
    assert backend.compiles == 0 and cache_stats()["bundle_hits"] == 3
    compile_cached(backend, make_request(7))  # not in the bundle: compiled
    assert backend.compiles == 1


def test_disk_comes_before_bundles(cache_dir, tmp_path) -> None:  # noqa: F811
    compile_cached(FakeBackend(), make_request(0))
    clear_memory()
    kernelkit.add_bundle(_make_bundle(tmp_path / "b.kkb"))
    compile_cached(FakeBackend(), make_request(0))
    assert cache_stats()["disk_hits"] == 1 and cache_stats()["bundle_hits"] == 0


def test_bundle_path_from_the_environment(cache_dir, tmp_path, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("KERNELKIT_BUNDLE_PATH", str(_make_bundle(tmp_path / "b.kkb")))
    _config.reload()
    backend = FakeBackend()
    assert compile_cached(backend, make_request(2)) == expected(make_request(2))
    assert backend.compiles == 0


def test_an_entry_with_a_bad_checksum_is_rejected_and_compiled(cache_dir, tmp_path) -> None:  # noqa: F811
    path = _make_bundle(tmp_path / "b.kkb")
    _rewrite(path, member_change=lambda d: d[:-1] + bytes([d[-1] ^ 1]))
    kernelkit.add_bundle(path)
    backend = FakeBackend()
    with pytest.warns(RuntimeWarning, match="rejected"):
        assert compile_cached(backend, make_request(0)) == expected(make_request(0))
    assert backend.compiles == 1 and cache_stats()["corrupt"] == 1
    assert compile_cached(backend, make_request(1)) == expected(make_request(1))
    assert backend.compiles == 1  # the bundle's other entries are still used
    assert main(["cache", "verify"]) == 0


@pytest.mark.parametrize(
    ("field", "value"), [("kernelkit", "0.0.1"), ("key_schema", 1), ("format_version", 9)]
)
def test_a_bundle_for_another_version_is_rejected_whole(
    cache_dir,  # noqa: F811 - the fixture imported above
    tmp_path,
    field,
    value,
    monkeypatch,
) -> None:
    path = _make_bundle(tmp_path / "b.kkb")
    _rewrite(path, manifest_change=lambda m: m.__setitem__(field, value))
    with pytest.raises(kernelkit.BundleError, match="rebuild it with `kernelkit precompile`"):
        kernelkit.add_bundle(path)
    monkeypatch.setenv("KERNELKIT_BUNDLE_PATH", str(path))
    _config.reload()
    backend = FakeBackend()
    with pytest.warns(RuntimeWarning, match="KERNELKIT_BUNDLE_PATH"):
        assert compile_cached(backend, make_request(0)) == expected(make_request(0))
    assert backend.compiles == 1 and cache_stats()["bundle_hits"] == 0


def test_a_file_that_is_not_a_bundle(tmp_path) -> None:
    (tmp_path / "x.kkb").write_bytes(b"hello")
    with pytest.raises(kernelkit.BundleError, match="not a readable kernelkit bundle"):
        kernelkit.add_bundle(tmp_path / "x.kkb")


def test_export_clear_import_round_trip(cache_dir, tmp_path, capsys) -> None:  # noqa: F811
    backend = FakeBackend()
    for i in range(3):
        compile_cached(backend, make_request(i))
    out = tmp_path / "export.kkb"
    assert main(["cache", "export", "-o", str(out)]) == 0
    assert main(["cache", "export", "-o", str(tmp_path / "one.kkb"), "--kernel", "k1"]) == 0
    assert len(bundles.Bundle(tmp_path / "one.kkb").by_key) == 1
    assert main(["cache", "clear"]) == 0
    assert not list((cache_dir / "entries").glob("*.kke"))
    assert main(["cache", "import", str(out)]) == 0
    clear_memory()
    for i in range(3):
        assert compile_cached(backend, make_request(i)) == expected(make_request(i))
    assert backend.compiles == 3 and cache_stats()["disk_hits"] == 3
    assert main(["cache", "verify"]) == 0


def test_import_rejects_a_wrong_version_bundle(cache_dir, tmp_path, capsys) -> None:  # noqa: F811
    path = _make_bundle(tmp_path / "b.kkb")
    _rewrite(path, manifest_change=lambda m: m.__setitem__("kernelkit", "0.0.1"))
    assert main(["cache", "import", str(path)]) == 1
    assert "kernelkit 0.0.1" in capsys.readouterr().err
    assert not (cache_dir / "entries").exists()


def test_info_and_list(cache_dir, capsys) -> None:  # noqa: F811
    backend = FakeBackend()
    for i in range(2):
        compile_cached(backend, make_request(i))
    from kernelkit._cache import stats

    stats.flush()
    capsys.readouterr()
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["dir"] == str(cache_dir) and info["entries"] == 2
    assert info["stats"]["compiles"] == 2 and info["stats"]["writes"] == 2
    assert main(["cache", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["kernel"] for r in rows) == ["k0", "k1"]
    assert {r["arch"] for r in rows} == {"fake64"} and {r["kind"] for r in rows} == {"so"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["cache", "info"]) == 0 and main(["cache", "list"]) == 0
    assert "k0" in capsys.readouterr().out
