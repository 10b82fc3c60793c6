"""The disk cache: one checksummed file per key, published by an atomic rename.

Layout under the cache directory: ``entries/<digest>.kke`` (format in ``entry.py``),
``entries/.<digest>.<pid>.<token>.tmp`` while a writer works, ``locks/<digest>.lock`` (one
``filelock`` per key so processes compile a kernel once), ``stats.json`` (lifetime counts) and
``<area>/<name>/`` for backends' build products (``products.py``), which count in the size cap.
Every digest is checked (``keys.check_digest``) before it names a path.
A failed write (read-only directory, full disk) turns writes off for this process with one warning;
reads go on, and kernels are kept in memory. Files are read as untrusted data (``files.py``:
regular files only, bounded); a cache directory owned by another user or writable by others is
not used at all (one warning; ``KERNELKIT_CACHE_TRUST_SHARED=1`` accepts it), and such an entry
is recompiled and replaced.
"""

from __future__ import annotations

import errno
import os
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .. import _config
from .._records import Artifact
from . import files, products, stats
from .entry import FIXED_BYTES, BadEntry, EntryHeader, decode, encode, header_bytes, read_header
from .keys import BadKey, CacheKey, check_digest

__all__ = ["SUFFIX", "DiskCache", "EntryFile", "cache_dir", "current"]

SUFFIX = ".kke"
LOCK_TIMEOUT_S = 120.0  # after this, a waiter compiles anyway (a hung holder must not hang it)
STALE_TMP_S = 3600.0  # a temp file this old is a dead writer's, even if its pid looks alive
_LOW_WATER = 0.9  # eviction frees down to this fraction of the cap, so it does not run every write


@dataclass(frozen=True)
class EntryFile:
    """One published entry on disk."""

    path: Path
    digest: str
    size_bytes: int
    mtime: float


def cache_dir() -> Path:
    """``KERNELKIT_CACHE_DIR``, else the user cache directory (platformdirs)."""
    configured = _config.config.cache_dir
    if configured:
        return Path(configured).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("kernelkit"))


def tuning_records(root: Path) -> list[EntryFile]:
    """The tuning database's record files, ``tuning/<env digest>/<record digest>.json``
    (``_select/tuning/db.py``): they count in the size cap, least recently used going first."""
    found = []
    for env in _listing(root / "tuning"):
        if _digest_name(env.name, "") and env.is_dir(follow_symlinks=False):
            for d in _listing(Path(env.path)):
                digest = _digest_name(d.name, ".json")
                try:
                    if digest and d.is_file(follow_symlinks=False):
                        st = d.stat(follow_symlinks=False)
                        found.append(EntryFile(Path(d.path), digest, st.st_size, st.st_mtime))
                except OSError:
                    continue
    return found


def _listing(folder: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError:
        return []


def _digest_name(name: str, suffix: str) -> str | None:
    """The digest a file name ``<digest><suffix>`` carries, or None."""
    try:
        return check_digest(name.removesuffix(suffix), "") if name.endswith(suffix) else None
    except BadKey:
        return None


class DiskCache:
    """The entries under one directory, with a size cap (least recently used go first)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = Path(root)
        self.entries = self.root / "entries"
        self.locks = self.root / "locks"
        self.max_bytes = max_bytes
        self.write_error: str | None = None  # set once a write failed: writes are off
        self._label = str(self.root)
        self._warn_lock = threading.Lock()

    def path(self, digest: str) -> Path:
        """Where the entry of ``digest`` lives (``BadKey`` unless it is a key digest)."""
        return self.entries / f"{check_digest(digest, 'disk cache')}{SUFFIX}"

    # read ---------------------------------------------------------------------------------
    def read(self, digest: str, report: bool = True) -> Artifact | None:
        """The stored artifact, or None (missing, or unusable: one warning, counted as corrupt)."""
        path = self.path(digest)
        try:
            data = self.read_bytes(path)
            artifact, _ = decode(data, digest)
        except files.Unreadable as e:
            if not e.missing:
                self._unusable(path, e, report)
            return None
        except BadEntry as e:
            self._unusable(path, e, report)
            return None
        try:
            os.utime(path)  # least recently used eviction goes by mtime
        except OSError:
            pass
        stats.record("disk_hits", self._label)
        return artifact

    def read_bytes(self, path: Path) -> bytes:
        """An entry file's bytes: a trusted regular file no larger than the cap (no entry
        larger is ever written), else ``files.Unreadable``."""
        return files.read_regular(path, self.max_bytes)

    def _unusable(self, path: Path, e: Exception, report: bool) -> None:
        if report:
            stats.record("corrupt", self._label)
            warnings.warn(
                f"kernelkit: cache entry {path} is unusable ({e}); it is compiled "
                "again and replaced",
                RuntimeWarning,
                stacklevel=3,
            )

    # write --------------------------------------------------------------------------------
    def write(self, key: CacheKey, kernel: str, backend: str, artifact: Artifact) -> bool:
        """Publish an entry atomically (temp file + rename); False when writes are off."""
        if self.write_error is not None:
            return False
        try:
            data = encode(key, kernel, backend, artifact)
        except (TypeError, ValueError) as e:
            warnings.warn(
                f"kernelkit: [{kernel}] not cached on disk: its artifact metadata is "
                f"not plain JSON ({e})",
                RuntimeWarning,
                stacklevel=2,
            )
            return False
        if not self.write_raw(key.digest, data):
            return False
        self.evict(keep=key.digest)
        return True

    def write_raw(self, digest: str, data: bytes) -> bool:
        """Publish already-encoded entry bytes under ``digest`` (temp file, then rename)."""
        check_digest(digest, "disk cache")  # before it names even the temp file
        if self.write_error is not None or len(data) > self.max_bytes:
            return False
        try:  # the temp file is .<digest>.<pid>.<token>.tmp (stale_temps reads its pid)
            files.write_atomic(self.path(digest), data, temp_stem=digest)
        except OSError as e:
            self.disable(e)
            return False
        stats.record("writes", self._label)
        return True

    def disable(self, error: OSError) -> None:
        """Turn writes off for this process, with one warning naming the cause."""
        with self._warn_lock:
            if self.write_error is not None:
                return
            name = errno.errorcode.get(error.errno or 0, "error")
            self.write_error = f"{name}: {error.strerror or error}"
        stats.record("write_errors")
        warnings.warn(
            f"kernelkit: cannot write the kernel cache in {self.root} "
            f"({self.write_error}); compiled kernels are kept in memory only for the "
            "rest of this process",
            RuntimeWarning,
            stacklevel=3,
        )

    # cross-process single flight ------------------------------------------------------------
    @contextmanager
    def lock(self, digest: str) -> Iterator[None]:
        """Hold this key's file lock; on timeout or when the lock cannot be made, go on unlocked."""
        with self.lock_named(check_digest(digest, "disk cache")):
            yield

    @contextmanager
    def lock_named(self, name: str) -> Iterator[None]:
        """Hold the file lock ``locks/<name>.lock`` (a key digest or a product's lock name)."""
        held = self._acquire(name)
        try:
            yield
        finally:
            if held is not None:
                held.release()

    def _acquire(self, name: str):
        if self.write_error is not None:
            return None
        from filelock import FileLock, Timeout

        try:
            files.make_dirs(self.locks)
            held = FileLock(str(self.locks / f"{name}.lock"), timeout=LOCK_TIMEOUT_S)
            held.acquire()
        except Timeout:
            stats.record("lock_timeouts", self._label)
            warnings.warn(
                f"kernelkit: waited {LOCK_TIMEOUT_S:.0f} s for another process to "
                f"compile {name[:24]}... (lock {self.locks}); compiling it here",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        except OSError as e:
            self.disable(e)
            return None
        return held

    # scan, evict, verify, clear -----------------------------------------------------------
    def scan(self) -> list[EntryFile]:
        """Every published entry (not temp files), in no particular order."""
        found = []
        try:
            with os.scandir(self.entries) as it:
                for d in it:
                    if d.name.startswith(".") or not d.name.endswith(SUFFIX):
                        continue
                    try:
                        check_digest(d.name[: -len(SUFFIX)], "disk cache scan")
                    except BadKey:
                        continue  # not a file kernelkit wrote: `cache verify` reports it
                    try:
                        st = d.stat()
                    except OSError:
                        continue
                    found.append(
                        EntryFile(Path(d.path), d.name[: -len(SUFFIX)], st.st_size, st.st_mtime)
                    )
        except OSError:
            pass
        return found

    def stale_temps(self) -> list[Path]:
        """Temp files whose writer is gone (dead pid here, or older than STALE_TMP_S)."""
        stale = []
        now = time.time()
        try:
            with os.scandir(self.entries) as it:
                for d in it:
                    if not (d.name.startswith(".") and d.name.endswith(".tmp")):
                        continue
                    parts = d.name.split(".")
                    pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else -1
                    try:
                        age = now - d.stat().st_mtime
                    except OSError:
                        continue
                    if age > STALE_TMP_S or not files.pid_alive(pid):
                        stale.append(Path(d.path))
        except OSError:
            pass
        return stale

    def evict(self, keep: str | None = None) -> int:
        """Remove least recently used entries and build products while the total is over the
        cap; ``keep`` (a digest, or a product's path) stays."""
        kept = self.scan() + tuning_records(self.root)
        made = products.scan(self.root)
        total = sum(f.size_bytes for f in kept) + sum(p.size_bytes for p in made)
        if total <= self.max_bytes:
            return 0
        goal = int(self.max_bytes * _LOW_WATER)
        items: list[tuple[float, str, EntryFile | products.Product]] = [
            (f.mtime, f.digest, f) for f in kept
        ]
        items += [(p.mtime, str(p.path), p) for p in made]
        removed = 0
        for _, name, item in sorted(items, key=lambda t: t[0]):
            if total <= goal:
                break
            if name == keep:
                continue
            total -= item.size_bytes
            if isinstance(item, EntryFile):
                if files.unlink(item.path):
                    removed += 1
                    files.unlink(self.locks / f"{item.digest}.lock")
            else:
                products.discard(item.path)
                removed += 1
        for tmp in self.stale_temps():
            files.unlink(tmp)
        if removed:
            stats.record("evictions", self._label, removed)
        return removed

    def products(self) -> list[products.Product]:
        """Backends' build products kept here (each counts in the size cap)."""
        return products.scan(self.root)

    def size_bytes(self) -> int:
        """Entries, tuning records and build products together (what the cap bounds)."""
        return sum(f.size_bytes for f in self.scan() + tuning_records(self.root)) + sum(
            p.size_bytes for p in products.scan(self.root)
        )

    def header(self, entry: EntryFile) -> EntryHeader | None:
        """An entry's checked JSON header, or None if it does not parse."""
        try:
            with files.open_regular(entry.path, self.max_bytes) as f:
                fixed = f.read(FIXED_BYTES)
                rest = f.read(header_bytes(fixed) - FIXED_BYTES)
            return read_header(fixed + rest)
        except (OSError, files.Unreadable, BadEntry):
            return None

    def verify(self, remove: bool = True) -> tuple[int, list[tuple[Path, str]]]:
        """(number of good entries, [(path, why)] of bad entries and stale temp files)."""
        good, bad = 0, []
        bad += [(d, f"directory {why}") for d, why in self.refusals()]
        for f in self.scan():
            try:
                decode(self.read_bytes(f.path), f.digest)
                good += 1
            except (files.Unreadable, BadEntry) as e:
                bad.append((f.path, str(e)))
        for p in products.scan(self.root):
            why = products.verify(p.path)
            if why is None:
                good += 1
            else:
                bad.append((p.path, f"build product: {why}"))
        bad += [(t, "temp file of a writer that died") for t in self.stale_temps()]
        bad += [
            (d, "build product directory left by a writer that died")
            for d in products.leftovers(self.root, files.pid_alive, STALE_TMP_S)
        ]
        bad += [(f, "not a cache entry (its name is not a key digest)") for f in self._foreign()]
        if remove:
            for path, _ in bad:
                if path in (self.root, self.entries):
                    continue  # an untrusted directory is reported, never removed
                if path.is_dir() and not path.is_symlink():
                    products.discard(path)
                else:
                    files.unlink(path)
        return good, bad

    def refusals(self) -> list[tuple[Path, str]]:
        """The cache directory and ``entries/`` when they are not to be trusted (another
        user's, or writable by others), each with why."""
        out = []
        for d in (self.root, self.entries):
            why = files.distrust(d)
            if why is not None:
                out.append((d, why))
        return out

    def _foreign(self) -> list[Path]:
        """``*.kke`` files in entries/ whose names are not key digests (never read or served)."""
        try:
            names = [d for d in self.entries.iterdir() if d.suffix == SUFFIX]
        except OSError:
            return []
        out = []
        for path in names:
            try:
                check_digest(path.stem, "")
            except BadKey:
                if not path.name.startswith("."):
                    out.append(path)
        return out

    def clear(self) -> int:
        """Remove every entry, build product, temp file, lock and the lifetime counts; returns
        the number of entries and products removed."""
        removed = sum(files.unlink(f.path) for f in self.scan())
        for p in products.scan(self.root):
            products.discard(p.path)
            removed += 1
        for d in products.leftovers(self.root, lambda _pid: False, 0.0):
            products.discard(d)
        for folder in (self.entries, self.locks):
            try:
                with os.scandir(folder) as it:
                    for item in it:
                        files.unlink(Path(item.path))
            except OSError:
                pass
        files.unlink(self.root / stats.STATS_FILE)
        return removed


_current: tuple[object, DiskCache | None] | None = None
_current_lock = threading.Lock()


def current() -> DiskCache | None:
    """The disk cache the configuration names (None with ``KERNELKIT_CACHE=0``)."""
    global _current
    config = _config.config
    state = _current
    if state is not None and state[0] is config:
        return state[1]
    with _current_lock:
        if _current is None or _current[0] is not _config.config:
            disk = DiskCache(cache_dir(), config.cache_max_bytes) if config.cache else None
            _current = (config, _trusted(disk) if disk is not None else None)
        return _current[1]


def _trusted(disk: DiskCache) -> DiskCache | None:
    """``disk`` (its directory made with mode 0o755 if missing), or None with one warning when
    the directory is not to be trusted: kernels are then kept in memory only."""
    try:
        files.make_dirs(disk.root)
        if not disk.refusals():
            files.make_dirs(disk.entries)
    except OSError:
        pass  # a read-only place: reads go on, the first write turns writes off
    refused = disk.refusals()
    if not refused:
        return disk
    where, why = refused[0]
    warnings.warn(
        f"kernelkit: not using the kernel cache in {disk.root}: {where} is {why}; "
        "compiled kernels are kept in memory only for this process (make the directory this "
        "user's and not writable by others: chown, chmod go-w)",
        RuntimeWarning,
        stacklevel=4,
    )
    return None
