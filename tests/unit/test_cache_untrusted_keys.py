"""Keys read from files (bundle manifests, entry headers, file names) are checked as digests of
the exact form ``cache_key`` makes before they touch a path (issue 7, item 4)."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from pathlib import Path

import pytest
from test_cache_support import FakeBackend, cache_dir, expected, make_request  # noqa: F401

import kernelkit
from kernelkit._cache import bundles, compile_cached, disk, entry, keys
from kernelkit._version import __version__
from kernelkit.cli import main

ESCAPE = "/" + "../" * 24 + "{tmp}/x/ESCAPED"  # more ../ than any cache dir is deep


def _crafted_entry(key: str) -> bytes:
    """An entry whose header names ``key`` (bypassing ``entry.encode``, as an attacker would)."""
    r = make_request(0)
    art = expected(r)
    header = {
        "key": key,
        "kernel": r.kernel,
        "backend": r.backend,
        "kind": art.kind,
        "entry": art.entry,
        "arch": art.arch,
        "metadata": {},
        "log": "",
        "binary_bytes": len(art.binary),
        "binary_sha256": hashlib.sha256(art.binary).hexdigest(),
        "created": 0.0,
    }
    raw = json.dumps(header, sort_keys=True).encode()
    fixed = struct.pack(
        "<8sII32s", entry.MAGIC, entry.ENTRY_FORMAT_VERSION, len(raw), hashlib.sha256(raw).digest()
    )
    return fixed + raw + art.binary


def _crafted_bundle(path: Path, key: str, file: str | None = None) -> Path:
    """The bundle of the report: manifest and entry header both name ``key``."""
    data = _crafted_entry(key)
    file = file if file is not None else f"entries/{key}.kke"
    manifest = {
        "format": bundles.BUNDLE_FORMAT,
        "format_version": bundles.BUNDLE_FORMAT_VERSION,
        "kernelkit": __version__,
        "key_schema": keys.KEY_SCHEMA_VERSION,
        "entry_format": entry.ENTRY_FORMAT_VERSION,
        "entries": [
            {
                "key": key,
                "file": file,
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                "parts": [["schema", "2"]],
                "kernel": "k0",
                "backend": "fake",
                "kind": "so",
                "arch": "fake64",
                "entry": "kk_k0",
            }
        ],
    }
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(file, data)
        zf.writestr("manifest.json", json.dumps(manifest))
    return path


def test_check_digest_accepts_only_what_cache_key_makes() -> None:
    good = keys.cache_key(make_request(0), "cc").digest
    assert keys.check_digest(good, "test") == good
    for bad in (
        ESCAPE,
        "../" + good[3:],
        good.upper(),
        good[:-1],
        good + "0",
        good[:-1] + "/",
        good + "\n",
        "",
        None,
        64,
        ["a" * 64],
    ):
        with pytest.raises(keys.BadKey, match="not a cache key digest"):
            keys.check_digest(bad, "test")
    assert issubclass(keys.BadKey, ValueError)


def test_cache_import_refuses_a_bundle_whose_key_escapes(cache_dir, tmp_path, capsys) -> None:  # noqa: F811
    outside = tmp_path / "outside"
    (outside / "x").mkdir(parents=True)
    key = ESCAPE.format(tmp=str(outside).lstrip("/"))
    path = _crafted_bundle(tmp_path / "evil.kkb", key)
    assert main(["cache", "import", str(path)]) == 1
    err = capsys.readouterr().err
    assert "is refused" in err and "not a cache key digest" in err
    assert list((outside / "x").iterdir()) == []  # before the fix: x/ESCAPED.kke was written
    assert not (cache_dir / "entries").exists()  # refused whole: nothing imported
    with pytest.raises(kernelkit.BundleError, match="is refused"):
        kernelkit.add_bundle(path)


def test_a_bundle_with_one_bad_key_is_refused_whole(cache_dir, tmp_path) -> None:  # noqa: F811
    good_req = make_request(1)
    good_key = keys.cache_key(good_req, "fakecc 1.0", "1")
    good = entry.encode(good_key, "k1", "fake", expected(good_req))
    path = tmp_path / "mixed.kkb"
    bundles.write_bundle(path, [(good_key.digest, good)])
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        files = {n: zf.read(n) for n in zf.namelist() if n != "manifest.json"}
    bad = _crafted_entry("../" * 3 + "x")
    manifest["entries"].append(dict(manifest["entries"][0], key="../../../x", file="entries/x.kke"))
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
        zf.writestr("entries/x.kke", bad)
        zf.writestr("manifest.json", json.dumps(manifest))
    with pytest.raises(kernelkit.BundleError, match="manifest entry 1"):
        bundles.Bundle(path)
    assert main(["cache", "import", str(path)]) == 1
    assert not (cache_dir / "entries").exists()


@pytest.mark.parametrize(
    "change",
    ["file elsewhere", "parts of another key", "parts missing"],
)
def test_manifest_entries_must_match_their_key(cache_dir, tmp_path, change) -> None:  # noqa: F811
    r = make_request(0)
    key = keys.cache_key(r, "fakecc 1.0", "1")
    path = tmp_path / "b.kkb"
    bundles.write_bundle(path, [(key.digest, entry.encode(key, "k0", "fake", expected(r)))])
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    manifest = json.loads(files.pop("manifest.json"))
    item = manifest["entries"][0]
    if change == "file elsewhere":
        files["../escape.kke"] = files.pop(item["file"])
        item["file"] = "../escape.kke"
    elif change == "parts of another key":
        item["parts"] = [list(p) for p in keys.cache_key(make_request(1), "cc").parts]
    else:
        del item["parts"]
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
        zf.writestr("manifest.json", json.dumps(manifest))
    with pytest.raises(kernelkit.BundleError, match="is refused"):
        bundles.Bundle(path)


def test_an_entry_header_with_a_crafted_key_never_decodes() -> None:
    data = _crafted_entry("/../../tmp/x/ESCAPED")
    with pytest.raises(entry.BadEntry, match="not a cache key digest"):
        entry.read_header(data)
    with pytest.raises(entry.BadEntry, match="not a cache key digest"):
        entry.decode(data, "/../../tmp/x/ESCAPED")
    with pytest.raises(ValueError, match="not a cache key digest"):
        bundles.write_bundle(Path("/nonexistent/never.kkb"), [("/../../tmp/x/ESCAPED", data)])


def test_an_entry_header_whose_parts_do_not_hash_to_its_key() -> None:
    r = make_request(0)
    key = keys.cache_key(r, "cc")
    lying = keys.CacheKey(keys.cache_key(make_request(1), "cc").parts, key.digest)
    data = entry.encode(lying, "k0", "fake", expected(r))
    with pytest.raises(entry.BadEntry, match="do not hash to the key"):
        entry.decode(data, key.digest)


def test_the_disk_cache_never_makes_a_path_from_a_bad_key(cache_dir) -> None:  # noqa: F811
    cache = disk.DiskCache(cache_dir, 1 << 30)
    for bad in (ESCAPE.format(tmp="tmp"), "..", "a" * 63):
        with pytest.raises(keys.BadKey):
            cache.path(bad)
        with pytest.raises(keys.BadKey):
            cache.write_raw(bad, b"x")
        with pytest.raises(keys.BadKey), cache.lock(bad):
            pass
    # a file in entries/ whose name is not a digest is never listed or served, and verify
    # reports it
    compile_cached(FakeBackend(), make_request(0))
    stray = cache_dir / "entries" / "not-a-digest.kke"
    stray.write_bytes(b"junk")
    assert [f.path for f in cache.scan()] != [] and stray not in [f.path for f in cache.scan()]
    good, bad = cache.verify(remove=True)
    assert good == 1 and [p for p, _ in bad] == [stray] and not stray.exists()
