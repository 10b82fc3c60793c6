"""Build products a backend keeps beside the entries (the CPU backend's precompiled prelude).

Layout: ``<cache dir>/<area>/<name>/`` holds the product's files and ``SHA256SUMS``, one
``<sha256> <size> <file>`` line per file. A product is built in
``<area>/.<name>.<pid>.<token>.tmp/``, its list written last, and published by renaming the whole
directory, so a reader sees a complete product or none. A reader checks every file against the
list before using it: a truncated or garbled file, a file the list does not name (planted: the
directory is the first ``-I`` of a compile), a list that does not parse, or one without a list, is
moved aside to ``.<name>...bad/``, removed and rebuilt; so is a product directory, file or area
that is another user's or writable by others (``files.distrust``).
Products count in the disk cache's size cap and in ``kernelkit cache info|clear|verify``.

With the disk cache off (``KERNELKIT_CACHE=0``) or not writable, products are built in a
temporary directory of this process, removed when it exits: nothing is written to the cache
directory. Building one product takes a per-product file lock, so processes build it once.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import files

__all__ = [
    "SUMS",
    "Product",
    "build_in_process",
    "build_into",
    "check_name",
    "discard",
    "is_area",
    "leftovers",
    "process_dir",
    "scan",
    "size_bytes",
    "usable",
    "verify",
]

SUMS = "SHA256SUMS"
_MAX_SUMS_BYTES = 1 << 20  # a list is a few lines
_MAX_FILE_BYTES = 4 << 30  # a precompiled header is ~40 MB
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")
_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")  # no separator, never "." or ".."
_NOT_AREAS = frozenset({"entries", "locks", "tuning"})  # tuning/: the tuning db, not products
_lock = threading.Lock()
_process_dir: tuple[int, Path] | None = None


@dataclass(frozen=True)
class Product:
    """One published product directory."""

    path: Path
    size_bytes: int
    mtime: float  # of its checksum list: the last use (least recently used go first)


def is_area(name: str) -> bool:
    """Whether a directory of the cache root can hold products (not entries/ or locks/)."""
    return name not in _NOT_AREAS and _NAME.fullmatch(name) is not None


def check_name(what: str, name: str) -> str:
    if not _NAME.fullmatch(name) or (what == "area" and not is_area(name)):
        raise ValueError(
            f"[cache] product {what} {name!r} must match {_NAME.pattern}"
            + (f" and not be one of {sorted(_NOT_AREAS)}" if what == "area" else "")
        )
    return name


def process_dir() -> Path:
    """This process's temporary product directory, made on first use and removed at exit."""
    global _process_dir
    with _lock:
        if _process_dir is None or _process_dir[0] != os.getpid():  # a forked child makes its own
            path = Path(tempfile.mkdtemp(prefix="kernelkit-products-"))
            _process_dir = (os.getpid(), path)
            atexit.register(_remove_process_dir, os.getpid(), path)
        return _process_dir[1]


def _remove_process_dir(pid: int, path: Path) -> None:
    if os.getpid() == pid:  # never the parent's directory from a forked child's exit
        shutil.rmtree(path, ignore_errors=True)


def build_in_process(area: str, name: str, build: Callable[[Path], bool]) -> Path | None:
    """Product ``name`` of ``area`` in this process's temporary directory (the disk cache off or
    not writable), built by ``build`` when missing; None when the build fails."""
    where = process_dir() / area
    target = where / name
    with _lock:  # threads of this process build it once
        return target if usable(target) or build_into(where, name, build) else None


def usable(target: Path) -> bool:
    """Whether ``target`` is a complete, undamaged product; a damaged one is moved aside."""
    try:
        if not target.is_dir():
            return False
    except OSError:  # an unreadable parent (EACCES) counts as "no product here"
        return False
    if verify(target) is not None:
        discard(target)
        return False
    try:
        os.utime(target / SUMS)  # last use, for the size cap's least-recently-used order
    except OSError:
        pass
    return True


def build_into(where: Path, name: str, build: Callable[[Path], bool]) -> bool:
    """Build into a temp directory, list its checksums last, and publish it by one rename."""
    tmp = where / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        files.make_dirs(where)
        os.mkdir(tmp, 0o755)
        if not build(tmp):
            return False
        lines = []
        for f in sorted(tmp.iterdir()):
            if f.is_file() and not f.is_symlink():
                os.chmod(f, 0o644)  # the umask may have left it group-writable
                lines.append(f"{_sha256(f)} {f.stat().st_size} {f.name}\n")
        (tmp / SUMS).write_text("".join(lines))
        os.chmod(tmp / SUMS, 0o644)
        target = where / name
        if target.exists():
            discard(target)  # damaged (its reader found it so): replace it
        os.rename(tmp, target)
        return True
    except OSError:
        return False  # read-only or full disk, or another process published first
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def size_bytes(target: Path) -> int:
    try:
        return sum(f.stat().st_size for f in target.iterdir())
    except OSError:
        return 0


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def verify(target: Path) -> str | None:
    """Why the product in ``target`` is unusable, or None if every file matches its list, no
    other file is there, and the directory and its files are this user's and not writable by
    others. Never raises: anything unexpected is a reason."""
    try:
        return _check(target)
    except Exception as e:  # noqa: BLE001 - a product on disk is data: any failure discards it
        return f"cannot be checked: {type(e).__name__}: {e}"


def _check(target: Path) -> str | None:
    for d in (target.parent, target):
        why = files.distrust(d)
        if why is not None:
            return f"directory {d.name} is {why}"
    try:
        raw = files.read_regular(target / SUMS, _MAX_SUMS_BYTES)
    except files.Unreadable as e:
        if e.missing:
            return "no checksum list (an interrupted or older writer left it)"
        return f"checksum list: {e}"
    try:
        listed = raw.decode("ascii").splitlines()
    except UnicodeDecodeError:
        return "checksum list is not ASCII text"
    names = set()
    for line in listed:
        parts = line.split(" ", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not _FILE.fullmatch(parts[2]):
            return f"checksum list line {line[:60]!r} is malformed"
        sha, size, fname = parts
        names.add(fname)
        why = _check_file(target / fname, int(size), sha)
        if why is not None:
            return f"{fname} {why}"
    if not names:
        return "empty checksum list"
    here = {p.name for p in target.iterdir()} - {SUMS}
    if here - names:
        return f"holds files its checksum list does not name: {', '.join(sorted(here - names))}"
    return None


def _check_file(path: Path, size: int, sha: str) -> str | None:
    """Why ``path`` does not hold ``size`` bytes of checksum ``sha``, or None."""
    try:
        with files.open_regular(path, _MAX_FILE_BYTES) as f:
            st = os.fstat(f.fileno())
            if st.st_size != size:
                return f"is {st.st_size} bytes, its list says {size}"
            h = hashlib.sha256()
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except files.Unreadable as e:
        return f"cannot be used: {e}"
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    return None if h.hexdigest() == sha else "does not match its checksum"


def discard(target: Path) -> None:
    """Move a damaged product aside and remove it (files a running compiler holds stay valid)."""
    aside = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.bad")
    try:
        os.rename(target, aside)
    except OSError:
        return  # already gone, or the directory is read-only
    shutil.rmtree(aside, ignore_errors=True)


def scan(root: Path) -> list[Product]:
    """Every published product under the cache root, in no particular order."""
    found = []
    for area in _dirs(root):
        if not is_area(area.name):
            continue
        for item in _dirs(area):
            if item.name.startswith("."):
                continue
            size, mtime = 0, 0.0
            try:
                for f in item.iterdir():
                    st = f.stat()
                    size += st.st_size
                    if f.name == SUMS:
                        mtime = st.st_mtime
                if not mtime:
                    mtime = item.stat().st_mtime
            except OSError:
                continue
            found.append(Product(item, size, mtime))
    return found


def leftovers(root: Path, alive: Callable[[int], bool], max_age_s: float) -> list[Path]:
    """Temp and moved-aside directories whose process is gone (or older than ``max_age_s``)."""
    import time

    stale, now = [], time.time()
    for area in _dirs(root):
        if not is_area(area.name):
            continue
        for item in _dirs(area):
            parts = item.name.split(".")
            if not (item.name.startswith(".") and parts[-1] in ("tmp", "bad")):
                continue
            pid = int(parts[2]) if len(parts) > 4 and parts[2].isdigit() else -1
            try:
                age = now - item.stat().st_mtime
            except OSError:
                continue
            if parts[-1] == "bad" or age > max_age_s or not alive(pid):
                stale.append(item)
    return stale


def _dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
