"""The tuning database: one JSON file per record, per environment, in front of a memory cache.

Layout under the root (``<cache dir>/tuning`` for ``current_db()``)::

    <env digest>/<record digest>.json                  one record (format below)
    <env digest>/.<record digest>.json.<pid>.<token>.tmp  while a writer works (atomic rename)
    locks/<record digest>.lock                         one file lock per key: processes tune it once

A record file is ``{"kernelkit": "tuning-record", "format": 1, "sha256": <of the record's
canonical JSON>, "record": {...}}``. A file is served only if its checksum holds, its record
parses, and the record's own environment and (op, environment, key) digests are the names it was
found under; anything else (truncated, edited, moved, crafted, a FIFO, a link, larger than 4 MB)
is a warning and a miss. Every digest read from a directory listing is checked
(``check_digest``) before it names a path. A record that parses is still checked against what
its op offers now before it is served (``_select.select.unservable``: its identity, its
implementation, a config from the op's list); one that fails is discarded with one warning
(``discard``). Temp files of a writer that died are removed when a folder is first read or
written in a process, and by ``verify``.

An export (``export``/``import_file``) is one JSON file: ``{"kernelkit": "tuning-export",
"format": 1, "records": [...]}``. Import refuses, with a message naming it, a malformed record, a
record of another environment (unless ``any_env``) and one naming an implementation that
``known_impl`` does not know; the good ones are still imported.

A failed write (read-only directory, full disk) turns writes off for this process with one
warning; records put then are still served from memory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ... import _config
from ..._cache import disk
from ..._cache import files as cache_files
from ..._cache.keys import BadKey, check_digest
from .exchange import FORMAT, check_item, read_export
from .files import names as _names
from .files import read_regular, stale_temps
from .records import TUNING_SCHEMA_VERSION, BadRecord, Environment, Key, TuningRecord, record_digest

__all__ = [
    "TUNING_SCHEMA_VERSION",
    "BadRecord",
    "Environment",
    "TuningDB",
    "TuningRecord",
    "current_db",
    "current_environments",
    "tune_mode",
]

SUFFIX = ".json"
_MAX_RECORD_BYTES = 4 << 20  # a record is a few KB; a larger file is not one of ours
LOCK_TIMEOUT_S = 900.0  # a process waiting for another's tuning of a key tunes it itself after
_MISS = None  # cached in memory for a key with no usable record (warned about once)
_UNSEEN = object()


def _canonical(record: TuningRecord) -> bytes:
    return json.dumps(record.to_dict(), sort_keys=True, allow_nan=False).encode()


def encode(record: TuningRecord) -> bytes:
    """A record file's bytes (checksummed envelope)."""
    body = record.to_dict()
    envelope = {
        "kernelkit": "tuning-record",
        "format": FORMAT,
        "sha256": hashlib.sha256(_canonical(record)).hexdigest(),
        "record": body,
    }
    return (json.dumps(envelope, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def decode(data: bytes, env_digest: str, digest: str) -> TuningRecord:
    """The record in a file found as ``<env_digest>/<digest>.json``; ``BadRecord`` if the file
    is not exactly that."""
    try:
        envelope = json.loads(data)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting too deep
        raise BadRecord(f"not JSON ({type(e).__name__}: {str(e)[:200]})") from None
    if not (
        isinstance(envelope, dict)
        and envelope.get("kernelkit") == "tuning-record"
        and set(envelope) == {"kernelkit", "format", "sha256", "record"}
    ):
        raise BadRecord("not a kernelkit tuning record")
    if envelope["format"] != FORMAT:
        raise BadRecord(f"record format {envelope['format']!r}, this kernelkit reads {FORMAT}")
    record = TuningRecord.from_dict(envelope["record"])
    if hashlib.sha256(_canonical(record)).hexdigest() != envelope["sha256"]:
        raise BadRecord("checksum mismatch (the record was changed after it was written)")
    if record.env.digest() != env_digest or record.digest() != digest:
        raise BadRecord("foreign record: its environment or key is not the one its path names")
    return record


class TuningDB:
    """Tuning records under ``root`` (None: in memory only, nothing touches the disk).

    ``get`` is a dictionary lookup once a key has been asked for (hit or miss); a put in this
    process replaces the cached answer. ``refresh()`` forgets the memory cache (to see records
    another process wrote since).

    Example::

        >>> db = TuningDB(None)
        >>> env = Environment("0.1.0", "cpu", "host", "x86_64", 0, "g++ 12")
        >>> from kernelkit._select.records import Config
        >>> db.put(TuningRecord("scale", (("n", "64"),), "scale/generic", Config(), env))
        True
        >>> db.get("scale", env, (("n", "64"),)).impl
        'scale/generic'
    """

    def __init__(self, root: Path | str | None) -> None:
        self.root = None if root is None else Path(root)
        self.write_error: str | None = None
        self._memory: dict[tuple[str, str, Key], TuningRecord | None] = {}
        self._lock = threading.Lock()
        self._swept: set[str] = set()  # env folders whose dead writers' temps were removed
        self._discarded: set[TuningRecord] = set()  # warned about once

    def __repr__(self) -> str:
        return f"TuningDB({str(self.root) if self.root else 'in memory'})"

    def path(self, op: str, env: Environment, key: Key) -> Path:
        """Where the record of (op, env, key) lives (ValueError for an in-memory database)."""
        if self.root is None:
            raise ValueError("an in-memory tuning database has no files")
        env_digest = env.digest()
        return self.root / env_digest / f"{record_digest(op, env_digest, key)}{SUFFIX}"

    # read ----------------------------------------------------------------------------------
    def get(self, op: str, env: Environment, key: Key) -> TuningRecord | None:
        """The record for ``key`` (a tuple of ``(feature, label)`` pairs, as ``KeySpec.of``
        gives) of ``op`` in ``env``, or None. A corrupt or foreign file is one warning and a
        miss."""
        found = self._memory.get((op, env.digest(), key), _UNSEEN)
        if found is not _UNSEEN:
            return found  # type: ignore[return-value]
        return self._load(op, env, key)

    def reload(self, op: str, env: Environment, key: Key) -> TuningRecord | None:
        """``get``, reading the file again (another process may have written it since)."""
        with self._lock:
            self._memory.pop((op, env.digest(), key), None)
        return self._load(op, env, key)

    def _load(self, op: str, env: Environment, key: Key) -> TuningRecord | None:
        record = None
        if self.root is not None:
            path = self.path(op, env, key)
            self._sweep(path.parent)
            record = self._read(path, env.digest(), path.stem)
        with self._lock:  # a put that raced this read wins
            return self._memory.setdefault((op, env.digest(), key), record)

    def _read(self, path: Path, env_digest: str, digest: str) -> TuningRecord | None:
        found = self._inspect(path, env_digest, digest)
        if isinstance(found, str):
            self._warn_unusable(path, found)
            return None
        return found

    @staticmethod
    def _inspect(path: Path, env_digest: str, digest: str) -> TuningRecord | str | None:
        """The record at ``path``, None when there is none, or why it is unusable."""
        try:
            data = read_regular(path, _MAX_RECORD_BYTES, follow=False)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            return e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        try:
            record = decode(data, env_digest, digest)
        except BadRecord as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - a hostile file is a miss, never a crash
            return f"{type(e).__name__}: {str(e)[:200]}"
        try:
            os.utime(path)  # the size cap removes least recently used files first
        except OSError:
            pass
        return record

    @staticmethod
    def _warn_unusable(path: Path, why: str) -> None:
        warnings.warn(
            f"kernelkit: tuning record {path} is unusable ({why}); ignored (tuning again, "
            "or `kernelkit tune`, replaces it)",
            RuntimeWarning,
            stacklevel=4,
        )

    def discard(self, record: TuningRecord, why: str) -> None:
        """Stop serving ``record`` in this process (one warning naming it and ``why``); tuning
        its key again replaces its file."""
        k = (record.op, record.env.digest(), record.key)
        with self._lock:
            if self._memory.get(k, _UNSEEN) == record:
                self._memory[k] = None
            if record in self._discarded:
                return  # warned about already (read again by a reload)
            self._discarded.add(record)
        warnings.warn(
            f"kernelkit: [{record.op}] tuning record {record.describe()[:300]} is not served: "
            f"{why}; discarded (the key is tuned again, or the next rule decides)",
            RuntimeWarning,
            stacklevel=5,
        )

    @contextmanager
    def lock(self, op: str, env: Environment, key: Key) -> Iterator[None]:
        """Hold the file lock of (op, env, key) so that processes tune a key once: the others
        wait, then read the record. Unlocked when the lock cannot be made (read-only, in
        memory) or after ``LOCK_TIMEOUT_S`` (one warning)."""
        held = None
        if self.root is not None and self.write_error is None:
            from filelock import FileLock, Timeout

            digest = record_digest(op, env.digest(), key)
            try:
                (self.root / "locks").mkdir(parents=True, exist_ok=True)
                held = FileLock(str(self.root / "locks" / f"{digest}.lock"), LOCK_TIMEOUT_S)
                held.acquire()
            except Timeout:
                held = None
                warnings.warn(
                    f"kernelkit: [{op}] waited {LOCK_TIMEOUT_S:.0f} s for another process to "
                    "tune this key; tuning it here",
                    RuntimeWarning,
                    stacklevel=4,
                )
            except OSError:
                held = None
        try:
            yield
        finally:
            if held is not None:
                held.release()

    def _sweep(self, folder: Path) -> None:
        """Remove the temp files of dead writers in ``folder``, once per process."""
        if folder.name in self._swept:
            return
        self._swept.add(folder.name)
        for tmp in stale_temps(folder):
            cache_files.unlink(tmp)

    def refresh(self) -> None:
        """Forget what was read (hits and misses); the files are read again when asked for."""
        with self._lock:
            self._memory.clear()

    # write ---------------------------------------------------------------------------------
    def put(self, record: TuningRecord) -> bool:
        """Store ``record`` (replacing the one of its key). False when it could not be written
        to disk (one warning per process); it is still served from memory."""
        if not isinstance(record, TuningRecord):
            raise TypeError(f"TuningDB.put takes a TuningRecord, got {type(record).__name__}")
        env_digest = record.env.digest()
        with self._lock:
            self._memory[(record.op, env_digest, record.key)] = record
        if self.root is None:
            return True
        if self.write_error is not None:
            return False
        try:
            self._sweep(self.root / env_digest)
            path = self.root / env_digest / (record.digest() + SUFFIX)
            cache_files.write_atomic(path, encode(record))
        except OSError as e:
            self._disable(e)
            return False
        return True

    def _disable(self, error: OSError) -> None:
        with self._lock:
            if self.write_error is not None:
                return
            name = errno.errorcode.get(error.errno or 0, "error")
            self.write_error = f"{name}: {error.strerror or error}"
        warnings.warn(
            f"kernelkit: cannot write the tuning database in {self.root} ({self.write_error}); "
            "tuning results are kept in memory only for the rest of this process",
            RuntimeWarning,
            stacklevel=3,
        )

    def remove(self, op: str, env: Environment, key: Key) -> bool:
        """Forget the record of (op, env, key); whether there was one on disk or in memory."""
        with self._lock:
            had = self._memory.pop((op, env.digest(), key), None) is not None
            self._memory[(op, env.digest(), key)] = None
        if self.root is None:
            return had
        return cache_files.unlink(self.path(op, env, key)) or had

    def clear(self, env: Environment | None = None) -> int:
        """Remove every record (of ``env`` only, if given) and leftover temp files; returns the
        number of records removed."""
        with self._lock:
            removed = sum(
                1
                for k, v in self._memory.items()
                if v is not None and (env is None or k[1] == env.digest())
            )
            self._memory.clear()
        if self.root is None:
            return removed
        removed = 0
        for folder in self._env_dirs(env):  # ours: everything in it goes (temps, strays too)
            for name in _names(folder):
                if cache_files.unlink(folder / name) and _is_record_name(name):
                    removed += 1
            try:
                folder.rmdir()
            except OSError:
                pass
        if env is None:
            for name in _names(self.root / "locks"):
                cache_files.unlink(self.root / "locks" / name)
        return removed

    def verify(self, remove: bool = True) -> tuple[int, list[tuple[Path, str]]]:
        """(number of good records, [(path, why)] of unusable records, dead writers' temp
        files and files that are not records); ``remove``: delete the bad ones."""
        good, bad = 0, []
        for folder in self._env_dirs(None):
            stale = set(stale_temps(folder))
            bad += [(t, "temp file of a writer that died") for t in sorted(stale)]
            for name in sorted(_names(folder)):
                path = folder / name
                if _is_record_name(name):
                    found = self._inspect(path, folder.name, name[: -len(SUFFIX)])
                    if isinstance(found, TuningRecord):
                        good += 1
                    elif found is not None:
                        bad.append((path, f"tuning record: {found}"))
                elif path not in stale and not (name.startswith(".") and name.endswith(".tmp")):
                    bad.append((path, "not a tuning record (its name is not a record digest)"))
        if remove:
            for path, _ in bad:
                if not path.is_dir() or path.is_symlink():
                    cache_files.unlink(path)
        return good, bad

    # list, export, import ------------------------------------------------------------------
    def _env_dirs(self, env: Environment | None) -> list[Path]:
        """Environment directories (their names checked as digests; links skipped)."""
        if self.root is None:
            return []
        if env is not None:
            return [self.root / env.digest()]
        out = []
        for name in _names(self.root):
            try:
                check_digest(name, "tuning database")
            except BadKey:
                continue  # not ours: never read, never removed
            folder = self.root / name
            if folder.is_dir() and not folder.is_symlink():
                out.append(folder)
        return out

    def records(self, env: Environment | None = None) -> list[TuningRecord]:
        """Every usable record (of ``env`` only, if given), sorted by op and key; unusable
        files are warned about and skipped."""
        found: dict[tuple[str, str, Key], TuningRecord] = {}
        for folder in self._env_dirs(env):
            for name in _names(folder):
                if not _is_record_name(name):
                    continue
                r = self._read(folder / name, folder.name, name[: -len(SUFFIX)])
                if r is not None:
                    found[(r.op, r.env.digest(), r.key)] = r
        with self._lock:
            for k, r in self._memory.items():
                if r is not None and (env is None or k[1] == env.digest()):
                    found[k] = r
        return sorted(found.values(), key=lambda r: (r.op, r.key, r.env.digest()))

    def export(self, path: Path | str, env: Environment | None = None) -> int:
        """Write every record (of ``env`` only, if given) to one JSON file, atomically;
        returns how many."""
        records = self.records(env)
        doc = {
            "kernelkit": "tuning-export",
            "format": FORMAT,
            "records": [r.to_dict() for r in records],
        }
        path = Path(path)
        data = (json.dumps(doc, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()
        cache_files.write_atomic(path, data)
        return len(records)

    def import_file(
        self,
        path: Path | str,
        known_impl: Callable[[str, str], bool] | None = None,
        *,
        envs: Iterable[Environment] | None = None,
        any_env: bool = False,
    ) -> tuple[int, list[str]]:
        """Import the records of an export (or of one record file). Returns (how many were
        imported, one message per refused record naming it and why).

        A record is refused when it is malformed, when its environment is not one of ``envs``
        (default: ``current_environments()``, the devices of the installed backends) unless
        ``any_env`` (to prepare a database for other machines), or when ``known_impl(op, impl)``
        is false (its implementation no longer exists). A file that is not an export at all
        gives one message and imports nothing.
        """
        items, problem = read_export(Path(path))
        if problem:
            return 0, [problem]
        allowed = None if any_env else list(current_environments() if envs is None else envs)
        imported, refused = 0, []
        for i, item in enumerate(items):
            why, record = check_item(item, allowed, known_impl)
            name = f"{path}: record {i}" + (f" ({record.describe()})" if record else "")
            if why is None and record is not None:
                if self.put(record):
                    imported += 1
                    continue
                why = f"not written ({self.write_error})"
            refused.append(f"{name}: {why}")
        return imported, refused


def _is_record_name(name: str) -> bool:
    """Whether a file name is ``<record digest>.json`` (checked before it names a path)."""
    if not name.endswith(SUFFIX):
        return False
    try:
        check_digest(name[: -len(SUFFIX)], "tuning database")
    except BadKey:
        return False
    return True


def current_environments() -> list[Environment]:
    """The environment of every device of every installed backend (probes them: slow path)."""
    from ..._backends import registry as _registry

    out = []
    for backend in _registry.backends().values():
        try:
            out += [Environment.of(backend, t) for t in backend.targets()]
        except Exception as e:  # noqa: BLE001 - a broken backend has no environment here
            warnings.warn(
                f"kernelkit: backend {backend.name!r} gave no environment ({e})",
                RuntimeWarning,
                stacklevel=2,
            )
    return out


_current: tuple[object, TuningDB] | None = None
_current_lock = threading.Lock()


def current_db() -> TuningDB:
    """The tuning database the configuration names: ``<cache dir>/tuning``, or one in memory
    with ``KERNELKIT_CACHE=0`` (nothing is written to disk then)."""
    global _current
    state = _current
    if state is not None and state[0] is _config.config:
        return state[1]
    with _current_lock:
        config = _config.config
        if _current is None or _current[0] is not config:
            root = disk.cache_dir() / "tuning" if config.cache else None
            _current = (config, TuningDB(root))
        return _current[1]


def tune_mode() -> str:
    """``KERNELKIT_TUNE``: ``"auto"`` (tune a missing key on first use), ``"serve"`` (replay
    the database, never time anything; a missing key falls through to the next rule) or
    ``"off"`` (ignore the database)."""
    return _config.config.tune
