"""The tuning database: records, files, the memory cache, faults, export and import, config."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from test_cache_support import SRC, FakeBackend, cache_dir  # noqa: F401

from kernelkit import _config
from kernelkit._cache import files
from kernelkit._select.records import Config
from kernelkit._select.tuning import db as tdb
from kernelkit._select.tuning.db import (
    BadRecord,
    Environment,
    TuningDB,
    TuningRecord,
    current_db,
    tune_mode,
)
from kernelkit.cli import main

ENV = Environment("0.1.0", "cpu", "host", "x86_64", 0, "g++ 12.2")
OTHER = Environment("0.1.0", "cuda", "NVIDIA A100-SXM4-80GB", "sm_80", 12, "nvrtc-12.8")
KEY = (("x.dtype", "float32"), ("x.shape[0]:pow2", "1024"))


def rec(i: int = 0, env: Environment = ENV, impl: str = "scale/tiled", **kw) -> TuningRecord:
    """A distinct record per ``i``."""
    fields = dict(
        op="scale",
        key=(("x.dtype", "float32"), ("x.shape[0]:pow2", str(1 << i))),
        impl=impl,
        config=Config(template={"BLOCK": 64 << i, "T": "float32"}, threadgroup=(128,)),
        env=env,
        measurements=(("BLOCK=64", 12.5), ("BLOCK=128", 9.25), ("BLOCK=4096", None)),
        best_us=9.25,
        candidates=3,
        tuning_s=1.5,
        created="2025-01-02T03:04:05+00:00",
    )
    fields.update(kw)
    return TuningRecord(**fields)  # type: ignore[arg-type]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


# records ----------------------------------------------------------------------------------------
def test_environment_round_trip_and_stable_digest() -> None:
    assert Environment.from_dict(json.loads(json.dumps(ENV.to_dict()))) == ENV
    canonical = json.dumps(ENV.to_dict(), sort_keys=True, separators=(",", ":"))
    assert ENV.digest() == hashlib.sha256(canonical.encode()).hexdigest()
    # the digest is a function of the fields only: a fresh, equal instance has it too
    assert Environment(**{**ENV.to_dict(), "facts": ()}).digest() == ENV.digest()
    for field, value in [
        ("kernelkit", "0.2.0"),
        ("backend", "cuda"),
        ("device", "other"),
        ("arch", "aarch64"),
        ("driver_major", 13),
        ("compiler", "clang 18"),
        ("schema", 2),
        ("facts", (("rocm", "6"),)),
    ]:  # every field separates environments
        assert Environment(**{**ENV.to_dict(), "facts": (), field: value}).digest() != ENV.digest()


def test_environment_of_a_backend_uses_its_facts() -> None:
    from kernelkit._records import Target

    class WithDriver(FakeBackend):
        asked = 0

        def environment_facts(self) -> dict[str, int | str]:
            self.asked += 1
            return {"driver_major": 12, "firmware": "7"}

    target = Target("fake", 0, "fake64", "Fake GPU 9000", 1024, (1024,) * 3, (1,) * 3, 0, 0)
    backend = WithDriver()
    env = Environment.of(backend, target)
    assert Environment.of(backend, target) is env and backend.asked == 1  # asked once
    assert (env.backend, env.device, env.arch, env.compiler) == (
        "fake",
        "Fake GPU 9000",
        "fake64",
        "fakecc 1.0",
    )
    assert env.driver_major == 12 and env.facts == (("firmware", "7"),)
    assert Environment.of(FakeBackend(), target).driver_major == 0  # default hook: no facts


def test_cuda_backend_reports_the_driver_major(monkeypatch) -> None:
    from kernelkit._backends import cuda

    monkeypatch.setattr(cuda.driver, "driver_version", lambda: (12, 8))
    assert cuda.CUDABackend().environment_facts() == {"driver_major": 12}


def test_record_round_trip() -> None:
    r = rec()
    assert TuningRecord.from_json(r.to_json()) == r
    assert TuningRecord.from_dict(json.loads(r.to_json())).measurements[2] == ("BLOCK=4096", None)
    assert "scale [x.dtype=float32 x.shape[0]:pow2=1] -> scale/tiled" in r.describe()
    assert TuningRecord("s", (), "s/g", Config(), ENV).created.endswith("+00:00")  # ISO, UTC


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"op": ""}, "op"),
        ({"key": [["x.dtype"]]}, "pair"),
        ({"key": [["../../etc/passwd", "x"]]}, "cannot read feature"),
        ({"config": {"template": 5}}, "bad config"),
        ({"env": {"backend": "cpu"}}, "environment"),
        ({"measurements": [["a", float("nan")]]}, "finite"),
        ({"best_us": "fast"}, "finite"),
        ({"candidates": -1}, "candidates"),
        ({"surprise": 1}, "unknown fields"),
    ],
)
def test_malformed_records_are_refused(change, message) -> None:
    d = {**rec().to_dict(), **change}
    with pytest.raises(BadRecord, match=message):
        TuningRecord.from_dict(d)


# the store ------------------------------------------------------------------------------------
def test_put_get_round_trip_and_layout(tmp_path) -> None:
    db = TuningDB(tmp_path)
    r = rec()
    assert db.put(r) is True
    path = tmp_path / ENV.digest() / f"{r.digest()}.json"
    assert files_under(tmp_path) == [path] and db.path(r.op, ENV, r.key) == path
    assert db.get("scale", ENV, r.key) == r
    fresh = TuningDB(tmp_path)  # another process: read from the file
    assert fresh.get("scale", ENV, r.key) == r
    assert fresh.get("scale", ENV, KEY) is None  # another key
    assert fresh.get("scale", OTHER, r.key) is None  # another environment
    assert fresh.get("other", ENV, r.key) is None  # another op
    doc = json.loads(path.read_text())  # readable JSON, checksummed
    assert doc["kernelkit"] == "tuning-record" and doc["record"]["impl"] == "scale/tiled"


def test_put_replaces_and_the_memory_cache_serves_known_keys(tmp_path) -> None:
    db = TuningDB(tmp_path)
    db.put(rec(impl="scale/a"))
    db.put(rec(impl="scale/b"))
    assert db.get("scale", ENV, rec().key).impl == "scale/b"
    assert len(files_under(tmp_path)) == 1
    reader = TuningDB(tmp_path)
    assert reader.get("scale", ENV, KEY) is None
    path = reader.path("scale", ENV, rec().key)
    path.unlink()
    assert reader.get("scale", ENV, rec().key) is None  # first asked now: the file is gone
    TuningDB(tmp_path).put(rec(impl="scale/c"))  # another process writes it
    assert reader.get("scale", ENV, rec().key) is None  # the miss is remembered...
    reader.refresh()
    assert reader.get("scale", ENV, rec().key).impl == "scale/c"  # ...until refresh()


def test_records_remove_and_clear(tmp_path) -> None:
    db = TuningDB(tmp_path)
    for i in range(3):
        db.put(rec(i))
    db.put(rec(0, env=OTHER))
    assert len(TuningDB(tmp_path).records()) == 4
    assert [r.env for r in TuningDB(tmp_path).records(OTHER)] == [OTHER]
    assert db.remove("scale", ENV, rec(1).key) is True
    assert db.get("scale", ENV, rec(1).key) is None
    assert db.remove("scale", ENV, rec(1).key) is False
    assert TuningDB(tmp_path).clear(OTHER) == 1
    assert not (tmp_path / OTHER.digest()).exists()
    assert TuningDB(tmp_path).clear() == 2 and files_under(tmp_path) == []


def test_in_memory_database_writes_nothing(tmp_path) -> None:
    db = TuningDB(None)
    assert db.put(rec()) is True and db.get("scale", ENV, rec().key) == rec()
    assert db.records() == [rec()]
    assert db.clear() == 1 and db.get("scale", ENV, rec().key) is None


# corrupt, foreign and crafted files ------------------------------------------------------------
def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _damaged(tmp_path: Path, damage) -> list[str]:
    TuningDB(tmp_path).put(rec())
    path = TuningDB(tmp_path).path("scale", ENV, rec().key)
    damage(path)
    db = TuningDB(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert db.get("scale", ENV, rec().key) is None
        assert db.get("scale", ENV, rec().key) is None  # remembered: one warning, not one a call
    return [str(w.message) for w in caught]


@pytest.mark.parametrize(
    ("name", "damage", "why"),
    [
        ("empty", lambda p: p.write_bytes(b""), "not JSON"),
        ("truncated", lambda p: p.write_bytes(p.read_bytes()[:-40]), "not JSON"),
        (
            "edited",
            lambda p: _edit(p, lambda d: d["record"]["config"].update(template=[])),
            "checksum",
        ),
        ("not ours", lambda p: p.write_text('{"hello": 1}'), "not a kernelkit tuning record"),
        ("huge", lambda p: p.write_bytes(b" " * (5 << 20)), "larger than"),
        (
            "foreign",  # another key's valid file copied over this one
            lambda p: p.write_bytes(
                tdb.encode(rec(5)),
            ),
            "foreign",
        ),
        (
            "another format",
            lambda p: _edit(p, lambda d: d.update(format=9)),
            "format 9",
        ),
    ],
)
def test_a_bad_file_is_one_warning_and_a_miss(tmp_path, name, damage, why) -> None:
    messages = _damaged(tmp_path, damage)
    assert len(messages) == 1 and why in messages[0] and "unusable" in messages[0], messages
    TuningDB(tmp_path).put(rec())  # tuning again replaces it
    assert TuningDB(tmp_path).get("scale", ENV, rec().key) == rec()


def test_crafted_names_and_keys_never_escape_the_root(tmp_path) -> None:
    root, outside = tmp_path / "db", tmp_path / "outside"
    outside.mkdir()
    evil = rec(key=(("x.dtype", "../../../outside/x"), ("n", "/etc/passwd")))
    TuningDB(root).put(evil)  # the key is hashed: its file is <root>/<env digest>/<digest>.json
    assert [p.parent.parent for p in files_under(root)] == [root] and files_under(outside) == []

    # valid record files under names that are not digests, or through a link, are never read,
    # listed or removed
    (root / "not-a-digest").mkdir()
    (root / "not-a-digest" / f"{rec(1).digest()}.json").write_bytes(tdb.encode(rec(1)))
    (root / ENV.digest() / "evil.json").write_bytes(tdb.encode(rec(2)))
    linked = rec(3, env=OTHER)
    (outside / f"{linked.digest()}.json").write_bytes(tdb.encode(linked))
    (root / OTHER.digest()).symlink_to(outside, target_is_directory=True)
    assert TuningDB(root).records() == [evil]
    assert TuningDB(root).clear() == 1
    assert (outside / f"{linked.digest()}.json").exists()
    assert (root / "not-a-digest" / f"{rec(1).digest()}.json").exists()


def test_every_digest_from_a_listing_is_checked(tmp_path, monkeypatch) -> None:
    checked: list[str] = []
    real = tdb.check_digest

    def spy(value, where):
        checked.append(value)
        return real(value, where)

    TuningDB(tmp_path).put(rec())
    monkeypatch.setattr(tdb, "check_digest", spy)
    TuningDB(tmp_path).records()
    assert ENV.digest() in checked and rec().digest() in checked


# faults -------------------------------------------------------------------------------------------
def test_full_disk_is_one_warning_and_memory_still_serves(tmp_path, monkeypatch) -> None:
    def full(fd: int, data: bytes) -> None:
        os.write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "write_all", full)
    db = TuningDB(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert db.put(rec(0)) is False
        assert db.put(rec(1)) is False
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "ENOSPC" in messages[0] and "memory only" in messages[0]
    assert db.get("scale", ENV, rec(1).key) == rec(1)
    assert files_under(tmp_path) == []  # the partial temp file is gone


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod")
def test_read_only_directory(tmp_path) -> None:
    tmp_path.chmod(0o555)
    try:
        db = TuningDB(tmp_path / "tuning")
        with pytest.warns(RuntimeWarning, match="cannot write the tuning database"):
            assert db.put(rec()) is False
        assert db.get("scale", ENV, rec().key) == rec()
    finally:
        tmp_path.chmod(0o755)


def test_unwritable_root_simulated(tmp_path) -> None:
    (tmp_path / "a-file").write_text("")  # the root's parent is a file: mkdir fails, as read-only
    db = TuningDB(tmp_path / "a-file" / "tuning")
    with pytest.warns(RuntimeWarning, match="cannot write the tuning database"):
        assert db.put(rec()) is False
    assert db.get("scale", ENV, rec().key) == rec() and db.records() == [rec()]


_SLOW_WRITER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
sys.path.insert(0, {tests!r})
from kernelkit._cache import files
from kernelkit._select.tuning.db import TuningDB
from test_tune_db import rec

def half_then_hang(fd, data):
    os.write(fd, data[: len(data) // 2])
    Path({ready!r}).write_text("half")
    time.sleep(600)

files.write_all = half_then_hang
TuningDB({root!r}).put(rec(impl="scale/new"))
"""


def _kill_mid_write(root: Path, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = _SLOW_WRITER.format(
        src=str(SRC), tests=str(Path(__file__).parent), ready=str(ready), root=str(root)
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, "writer exited early"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()


def test_a_writer_killed_mid_write_publishes_nothing(tmp_path) -> None:
    root = tmp_path / "db"
    _kill_mid_write(root, tmp_path)
    left = files_under(root)
    assert len(left) == 1 and left[0].name.startswith(".") and left[0].suffix == ".tmp"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a plain miss: nothing was published
        assert TuningDB(root).get("scale", ENV, rec().key) is None
        assert TuningDB(root).records() == []
    assert TuningDB(root).clear() == 0 and files_under(root) == []  # clear takes the temp too


def test_a_writer_killed_while_replacing_leaves_the_old_record(tmp_path) -> None:
    root = tmp_path / "db"
    TuningDB(root).put(rec(impl="scale/old"))
    _kill_mid_write(root, tmp_path)
    assert TuningDB(root).get("scale", ENV, rec().key).impl == "scale/old"


# export and import ------------------------------------------------------------------------------
def test_export_import_round_trip(tmp_path) -> None:
    src = TuningDB(tmp_path / "a")
    for i in range(3):
        src.put(rec(i))
    src.put(rec(0, env=OTHER))
    assert src.export(tmp_path / "all.json") == 4
    assert src.export(tmp_path / "mine.json", env=ENV) == 3
    dst = TuningDB(tmp_path / "b")
    assert dst.import_file(tmp_path / "mine.json", envs=[ENV]) == (3, [])
    assert dst.records() == src.records(ENV)
    assert TuningDB(tmp_path / "b").get("scale", ENV, rec(2).key) == rec(2)


def test_import_refuses_other_environments_unknown_impls_and_malformed_records(tmp_path) -> None:
    src = TuningDB(tmp_path / "a")
    src.put(rec(0))
    src.put(rec(1, impl="scale/retired"))
    src.put(rec(2, env=OTHER))
    src.put(rec(3))
    src.export(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    doc["records"].append({"op": "scale", "impl": "scale/tiled"})  # malformed: no key, env...
    doc["records"].append("not even a mapping")
    (tmp_path / "x.json").write_text(json.dumps(doc))

    dst = TuningDB(tmp_path / "b")
    imported, refused = dst.import_file(
        tmp_path / "x.json", lambda op, impl: impl != "scale/retired", envs=[ENV]
    )
    assert imported == 2, refused
    assert len(refused) == 4
    text = "\n".join(refused)
    assert "another environment" in text and "NVIDIA A100" in text and "any_env" in text
    assert "'scale/retired' does not exist" in text
    assert text.count("malformed") == 2
    assert all(str(tmp_path / "x.json") in m and "record" in m for m in refused)
    assert "x.shape[0]:pow2=4" in text  # a refused record is named by its key
    assert {r.key for r in dst.records()} == {rec(0).key, rec(3).key}

    # --any-env keeps the other machine's record (under its own environment, never served here)
    imported, refused = TuningDB(tmp_path / "c").import_file(tmp_path / "x.json", any_env=True)
    assert imported == 4 and len(refused) == 2
    assert TuningDB(tmp_path / "c").get("scale", OTHER, rec(2).key) == rec(2, env=OTHER)


def test_import_of_what_is_not_an_export(tmp_path) -> None:
    db = TuningDB(tmp_path / "db")
    for content in (b"", b"[1, 2]", b'{"kernelkit": "tuning-export", "records": 3}'):
        (tmp_path / "bad.json").write_bytes(content)
        imported, refused = db.import_file(tmp_path / "bad.json", envs=[ENV])
        assert imported == 0 and len(refused) == 1 and "bad.json" in refused[0]
    assert db.import_file(tmp_path / "missing.json", envs=[ENV])[0] == 0
    TuningDB(tmp_path / "a").put(rec())  # one record file imports as an export of one
    one = TuningDB(tmp_path / "a").path("scale", ENV, rec().key)
    assert db.import_file(one, envs=[ENV]) == (1, [])


def test_import_defaults_to_the_environments_of_this_machine(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tdb, "current_environments", lambda: [OTHER])
    TuningDB(tmp_path / "a").put(rec(0))
    TuningDB(tmp_path / "a").export(tmp_path / "x.json")
    imported, refused = TuningDB(tmp_path / "b").import_file(tmp_path / "x.json")
    assert imported == 0 and "driver_major 0 vs 12" in refused[0]


def test_current_environments_lists_the_cpu_backend(clean_state) -> None:
    clean_state.setenv("KERNELKIT_BACKENDS", "cpu")
    _config.reload()
    envs = tdb.current_environments()
    assert [e.backend for e in envs] == ["cpu"] and envs[0].driver_major == 0


# configuration: where the database lives, KERNELKIT_CACHE=0, KERNELKIT_TUNE ----------------------
def test_current_db_lives_in_the_cache_dir(cache_dir) -> None:  # noqa: F811
    db = current_db()
    assert db.root == cache_dir / "tuning" and current_db() is db
    db.put(rec())
    assert main(["cache", "verify"]) == 0  # the cache's own checks leave tuning records alone
    main(["cache", "clear"])
    assert current_db().get("scale", ENV, rec().key) == rec()
    assert TuningDB(cache_dir / "tuning").get("scale", ENV, rec().key) == rec()


def test_cache_off_keeps_the_database_in_memory(cache_dir, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setenv("KERNELKIT_CACHE", "0")
    _config.reload()
    db = current_db()
    assert db.root is None
    assert db.put(rec()) is True and current_db().get("scale", ENV, rec().key) == rec()
    db.export(cache_dir.parent / "out.json")  # export still works: the user named a file
    assert not cache_dir.exists()


@pytest.mark.parametrize(
    ("text", "mode"), [(None, "auto"), ("", "auto"), ("serve", "serve"), (" OFF ", "off")]
)
def test_tune_mode(clean_state, text, mode) -> None:
    if text is None:
        clean_state.delenv("KERNELKIT_TUNE", raising=False)
    else:
        clean_state.setenv("KERNELKIT_TUNE", text)
    _config.reload()
    assert tune_mode() == mode


def test_bad_tune_mode_names_the_variable(clean_state) -> None:
    clean_state.setenv("KERNELKIT_TUNE", "always")
    with pytest.raises(ValueError, match=r"KERNELKIT_TUNE='always'.*auto, serve, off"):
        _config.reload()


def test_serve_mode_replays_in_a_fresh_process(cache_dir) -> None:  # noqa: F811
    current_db().put(rec(impl="scale/winner"))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])\n"
        "from kernelkit._select.tuning.db import current_db, tune_mode\n"
        "from test_tune_db import ENV, rec\n"
        "print(tune_mode(), current_db().get('scale', ENV, rec().key).impl)\n"
    )
    env = dict(os.environ, KERNELKIT_CACHE_DIR=str(cache_dir), KERNELKIT_TUNE="serve")
    out = subprocess.run(
        [sys.executable, "-c", code, str(SRC), str(Path(__file__).parent)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["serve", "scale/winner"]
