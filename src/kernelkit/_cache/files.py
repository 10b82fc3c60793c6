"""Reading cache files as untrusted data, deciding whether a cache path may be trusted, and the
one atomic writer of every file kernelkit keeps (cache entries, bundles, statistics, tuning
records, tables).

Everything under the cache directory may have been planted or damaged, so a read opens with
``O_NONBLOCK`` (a FIFO cannot block it), ``fstat``s the open file (only regular files are read:
never a FIFO, a device such as ``/dev/zero``, or a socket) and reads at most ``limit`` bytes (a
larger file is refused before a byte is read). A cache directory or file is code that runs in
this process (a CPU kernel is ``dlopen``ed, the precompiled prelude is compiled into every
kernel), so one owned by another user (root excepted), or writable by the group or others, is
refused unless ``KERNELKIT_CACHE_TRUST_SHARED=1`` accepts it (with one warning per path).

A file is written whole or not at all: into ``.<name>.<pid>.<token>.tmp`` beside it (created
exclusively, mode 0o644), then renamed over it, so a reader sees the old file or the new one and
a writer that dies leaves only a temp file, which its pid tells is stale (``pid_alive``).
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .. import _config

__all__ = [
    "Unreadable",
    "atomic_writer",
    "distrust",
    "make_dirs",
    "open_regular",
    "pid_alive",
    "read_regular",
    "trust_refusal",
    "unlink",
    "write_all",
    "write_atomic",
]

_warned: set[str] = set()
_lock = threading.Lock()


class Unreadable(Exception):
    """A cache file that is not read: missing, not a regular file, too large, or untrusted."""

    def __init__(self, why: str, missing: bool = False) -> None:  # missing: could not open
        super().__init__(why)
        self.missing = missing


def make_dirs(path: Path) -> None:
    """``mkdir -p`` with mode 0o755 for every directory it makes (``Path.mkdir(parents=True)``
    gives the parents the umask's mode, group-writable under umask 002, which ``distrust``
    would then refuse)."""
    missing = []
    p = Path(path)
    while not p.is_dir() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o755)
        except FileExistsError:
            if not d.is_dir():
                raise


def write_all(fd: int, data: bytes) -> None:
    """Write every byte (a separate function so tests can slow it down and kill the writer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def unlink(path: Path) -> bool:
    """Remove ``path``; False when it could not be (missing, or no permission)."""
    try:
        path.unlink()
        return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (whoever owns it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


@contextmanager
def atomic_writer(path: Path, temp_stem: str | None = None) -> Iterator[int]:
    """A descriptor of a new temp file beside ``path`` (``.<temp_stem or name>.<pid>.<token>.tmp``,
    its folders made as needed), renamed over ``path`` when the block ends without an error;
    the temp file is removed on any error, which propagates (OSError for the file's own)."""
    tmp = path.parent / f".{temp_stem or path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        make_dirs(path.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            yield fd
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        unlink(tmp)
        raise


def write_atomic(path: Path, data: bytes, temp_stem: str | None = None) -> None:
    """Publish ``data`` as ``path``, whole or not at all (``atomic_writer``); OSError when it
    could not be written, with nothing left behind."""
    with atomic_writer(path, temp_stem) as fd:
        write_all(fd, data)


def _open_checked(path: Path, limit: int, trust: bool, follow: bool = True) -> tuple[int, int]:
    """(an open descriptor, its size) once ``path`` is known to be a regular file of at most
    ``limit`` bytes that ``distrust`` accepts (with ``trust``); ``Unreadable`` naming why not.
    ``follow=False`` refuses a symbolic link as the last component."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise Unreadable("missing", missing=True) from None
    except OSError as e:
        if not follow and e.errno == getattr(os, "ELOOP", -1):
            raise Unreadable("a symbolic link, not a regular file") from None
        # unreadable as a missing file is (a read-only or locked-down cache)
        raise Unreadable(f"cannot open: {e.strerror or e}", missing=True) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable(f"not a regular file ({_kind(st.st_mode)})")
        if st.st_size > limit:
            raise Unreadable(f"larger than {limit} bytes ({st.st_size})")
        why = distrust(path, st) if trust else None
        if why is not None:
            raise Unreadable(why)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


@contextmanager
def open_regular(path: Path, limit: int, trust: bool = True) -> Iterator[BinaryIO]:
    """``path`` opened for reading once it is known to be a regular file of at most ``limit``
    bytes (and, with ``trust``, one that ``distrust`` accepts); ``Unreadable`` naming why not."""
    fd, _ = _open_checked(path, limit, trust)
    with os.fdopen(fd, "rb") as f:
        yield f


def read_regular(path: Path, limit: int, trust: bool = True, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); ``Unreadable`` naming why
    otherwise. With ``trust``, a file that ``distrust`` refuses is not read either;
    ``follow=False`` refuses a symbolic link as the last component."""
    fd, size = _open_checked(path, limit, trust, follow)
    try:
        chunks, left = [], size + 1  # not limit + 1: a read of n bytes allocates n up front
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise Unreadable(f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > size:  # written to while it was read (kernelkit only ever renames)
        raise Unreadable(f"grew past its {size} bytes while it was read")
    return data


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return f"mode {oct(mode)}"


def _uid() -> int:
    """This process's effective user id (a function, so tests can act as another user)."""
    return os.geteuid()


def trust_refusal(st: os.stat_result) -> str | None:
    """Why a path with status ``st`` is not to be trusted (owner, mode), or None."""
    me = _uid()
    if st.st_uid not in (me, 0):  # root can change anything anyway (as ssh trusts it)
        return f"owned by uid {st.st_uid}, not by this user (uid {me}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by its group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def distrust(path: Path, st: os.stat_result | None = None) -> str | None:
    """Why ``path`` is refused (another user's, or writable by others), or None: trusted, or
    accepted with one warning under ``KERNELKIT_CACHE_TRUST_SHARED``. A path that cannot be
    looked at is not refused here (reading it fails on its own)."""
    if st is None:
        try:
            st = os.stat(path)
        except OSError:
            return None
    why = trust_refusal(st)
    if why is None:
        return None
    if not _config.config.cache_trust_shared:
        return f"{why}; not trusted (KERNELKIT_CACHE_TRUST_SHARED=1 accepts it)"
    with _lock:
        first = str(path) not in _warned
        _warned.add(str(path))
    if first:
        warnings.warn(
            f"kernelkit: using {path} although it is {why} (KERNELKIT_CACHE_TRUST_SHARED=1): "
            "whoever can write it can run code in this process",
            RuntimeWarning,
            stacklevel=3,
        )
    return None
