"""The tuning database's files as untrusted data, and as part of the cache: a FIFO or a device at
a record path is a warning, never a hang or an unbounded read; one bad record in an export is
refused by name and the rest imported; a killed writer's temp file is removed; ``verify`` (and
``kernelkit cache verify``) reports bad records; records count in the cache's size cap."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from pathlib import Path

import pytest
from test_cache_support import cache_dir  # noqa: F401
from test_tune_db import ENV, _kill_mid_write, files_under, rec

from kernelkit._cache.disk import DiskCache
from kernelkit._select.tuning import files
from kernelkit._select.tuning.db import TuningDB, current_db
from kernelkit.cli import main


def _get_within(db: TuningDB, seconds: float = 10.0) -> tuple[bool, list[str]]:
    """(whether ``db.get`` of rec()'s key returned within ``seconds``, its warnings)."""
    caught: list[str] = []

    def read() -> None:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            assert db.get("scale", ENV, rec().key) is None
        caught.extend(str(w.message) for w in ws)

    t = threading.Thread(target=read, daemon=True)  # a hung open() must not hang the run
    t.start()
    t.join(seconds)
    return not t.is_alive(), caught


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (os.mkfifo, "not a regular file"),
        (lambda p: os.symlink("/dev/zero", p), "symbolic link"),
        (lambda p: p.mkdir(), "not a regular file"),
    ],
    ids=["fifo", "link to /dev/zero", "directory"],
)
def test_what_is_not_a_regular_file_is_a_warning_never_a_hang(tmp_path, make, why) -> None:
    db = TuningDB(tmp_path)
    path = db.path("scale", ENV, rec().key)
    path.parent.mkdir(parents=True)
    make(path)
    done, messages = _get_within(db)
    assert done, "reading the record hung"
    assert len(messages) == 1 and why in messages[0] and "unusable" in messages[0], messages


def test_read_regular_is_bounded(tmp_path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 1001)
    assert files.read_regular(tmp_path / "big", 1001) == b"x" * 1001
    with pytest.raises(ValueError, match="larger than 1000 bytes"):
        files.read_regular(tmp_path / "big", 1000)


def _export_with(tmp_path: Path, *bad: object) -> Path:
    src = TuningDB(tmp_path / "a")
    for i in range(3):
        src.put(rec(i))
    src.export(tmp_path / "x.json")
    doc = json.loads((tmp_path / "x.json").read_text())
    doc["records"][1:1] = bad
    (tmp_path / "x.json").write_text(json.dumps(doc))
    return tmp_path / "x.json"


def test_one_bad_record_never_stops_an_import(tmp_path) -> None:
    beyond_float = dict(rec(7).to_dict(), best_us=10**400)
    measured = dict(rec(8).to_dict(), measurements=[["U=1", 10**400]])
    deep: object = "x"
    for _ in range(500):  # parses as JSON; far too deep for a config
        deep = [deep]
    nested = dict(rec(9).to_dict(), config={"template": deep})
    export = _export_with(tmp_path, beyond_float, measured, nested)
    imported, refused = TuningDB(tmp_path / "b").import_file(export, envs=[ENV])
    assert imported == 3 and len(refused) == 3, refused
    assert all("malformed" in m and "x.json: record" in m for m in refused)
    assert "best_us" in refused[0] and "measurement" in refused[1]
    assert len(TuningDB(tmp_path / "b").records()) == 3


@pytest.mark.parametrize(
    "content", [b"[" * 100_000, b'{"kernelkit": ' * 100_000], ids=["arrays", "objects"]
)
def test_an_export_nested_too_deep_is_one_message(tmp_path, content) -> None:
    (tmp_path / "deep.json").write_bytes(content)
    imported, refused = TuningDB(tmp_path / "b").import_file(tmp_path / "deep.json", envs=[ENV])
    assert imported == 0 and len(refused) == 1
    assert "deep.json" in refused[0] and "cannot read" in refused[0]


def test_an_export_that_is_a_fifo_is_refused(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    imported, refused = TuningDB(tmp_path / "b").import_file(tmp_path / "pipe.json", envs=[ENV])
    assert imported == 0 and "not a regular file" in refused[0]


def test_a_killed_writers_temp_file_is_removed_on_next_use(tmp_path) -> None:
    root = tmp_path / "db"
    _kill_mid_write(root, tmp_path)
    (temp,) = files_under(root)
    assert temp.name.endswith(".tmp")
    assert TuningDB(root).get("scale", ENV, rec().key) is None  # the next process reads
    assert files_under(root) == []


def test_old_temp_files_go_on_write_live_ones_stay(tmp_path) -> None:
    db = TuningDB(tmp_path)
    folder = tmp_path / ENV.digest()
    folder.mkdir()
    old = folder / f".{'a' * 64}.json.{os.getpid()}.0badc0de.tmp"  # a live pid, but too old
    live = folder / f".{'b' * 64}.json.{os.getpid()}.600dc0de.tmp"
    for p in (old, live):
        p.write_bytes(b"half")
    past = time.time() - files.STALE_TMP_S - 60
    os.utime(old, (past, past))
    db.put(rec())
    assert not old.exists() and live.exists()


def test_verify_reports_and_removes_what_is_bad(tmp_path) -> None:
    db = TuningDB(tmp_path)
    db.put(rec(0))
    db.put(rec(1))
    folder = tmp_path / ENV.digest()
    db.path("scale", ENV, rec(1).key).write_text("[" * 100_000)
    os.mkfifo(folder / f"{'c' * 64}.json")
    (folder / "notes.txt").write_text("mine")
    stale = folder / f".{'d' * 64}.json.999999999.00000000.tmp"  # no such pid
    stale.write_bytes(b"")
    good, bad = TuningDB(tmp_path).verify(remove=False)
    assert good == 1
    why = {p.name: w for p, w in bad}
    assert "RecursionError" in why[db.path("scale", ENV, rec(1).key).name]
    assert "not a regular file" in why[f"{'c' * 64}.json"]
    assert "not a tuning record" in why["notes.txt"] and "died" in why[stale.name]
    assert TuningDB(tmp_path).verify() == (1, bad)  # removes them
    assert TuningDB(tmp_path).verify() == (1, [])
    assert TuningDB(tmp_path).get("scale", ENV, rec(0).key) == rec(0)


def test_cache_verify_looks_at_the_tuning_database(cache_dir, capsys) -> None:  # noqa: F811
    db = current_db()
    db.put(rec(0))
    db.put(rec(1))
    assert main(["cache", "verify"]) == 0
    db.path("scale", ENV, rec(1).key).write_text("{truncated")
    assert main(["cache", "verify", "--keep"]) == 1
    out = capsys.readouterr().out
    assert "tuning record: not JSON" in out and str(cache_dir / "tuning") in out
    assert main(["cache", "verify"]) == 1 and main(["cache", "verify"]) == 0
    assert TuningDB(cache_dir / "tuning").records() == [rec(0)]


def test_tuning_records_count_in_the_size_cap(tmp_path) -> None:
    db = TuningDB(tmp_path / "tuning")
    for i in range(10):
        db.put(rec(i))
        path = db.path("scale", ENV, rec(i).key)
        os.utime(path, (1000 + i, 1000 + i))  # rec(0) is the least recently used
    sizes = [db.path("scale", ENV, rec(i).key).stat().st_size for i in range(10)]
    cache = DiskCache(tmp_path, max_bytes=sum(sizes) - 1)
    assert cache.size_bytes() == sum(sizes)
    assert cache.evict() >= 1
    left = {r.key for r in TuningDB(tmp_path / "tuning").records()}
    assert rec(0).key not in left and rec(9).key in left
    assert cache.size_bytes() <= 0.9 * (sum(sizes) - 1)
