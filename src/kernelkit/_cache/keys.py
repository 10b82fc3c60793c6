"""Cache keys from ordered, labelled, versioned parts (each part can be logged on its own).

The key covers every field of ``CompileRequest`` (a unit test fails when a field is added without
a label here) plus the compiler identity, the backend's version, kernelkit's version and the key
schema, so a disk or bundle hit is only possible for an identical request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .._records import CompileRequest
from .._version import __version__

__all__ = [
    "KEY_SCHEMA_VERSION",
    "BadKey",
    "CacheKey",
    "cache_key",
    "check_digest",
    "check_parts",
    "digest_of",
    "portable_digest",
]

# 2: the kernel name, parameter kinds and backend version joined the key.
KEY_SCHEMA_VERSION = 2

_SEP = "\x1f"  # unit separator: cannot appear in an option or a header name
_DIGEST = re.compile(r"[0-9a-f]{64}")  # what cache_key makes: lowercase hex sha256, nothing else


class BadKey(ValueError):
    """A key read from a file (bundle manifest, entry header, file name, database) that is not a
    digest of the form ``cache_key`` makes: it must never reach a path."""


def check_digest(value: object, where: str) -> str:
    """``value`` if it is a key digest (64 lowercase hex characters), else ``BadKey`` naming
    ``where`` it was read. Call it on every key read from a file before it names a path.

    Example::

        >>> check_digest("ab" * 32, "manifest") == "ab" * 32
        True
        >>> check_digest("/../../tmp/x", "manifest")
        Traceback (most recent call last):
        kernelkit._cache.keys.BadKey: manifest: key '/../../tmp/x' is not a cache key digest ...
    """
    if isinstance(value, str) and _DIGEST.fullmatch(value):
        return value
    raise BadKey(
        f"{where}: key {str(value)[:80]!r} is not a cache key digest (64 lowercase hex characters)"
    )


@dataclass(frozen=True)
class CacheKey:
    """The labelled parts of a key and their digest (the digest names the disk entry)."""

    parts: tuple[tuple[str, str], ...]
    digest: str

    def describe(self) -> str:
        """One ``label: value`` line per part (values cut at 80 characters), for logs."""
        return "\n".join(f"{label}: {value[:80]}" for label, value in self.parts)


def cache_key(
    request: CompileRequest, compiler_identity: str, backend_version: str = ""
) -> CacheKey:
    """Everything that can change the binary: source, header bytes, options, arch, compiler,
    backend, kernelkit version and key schema. Never the kernel name alone.

    Example::

        >>> from kernelkit._records import CompileRequest
        >>> r = CompileRequest("cpu", "k", "k_entry", "x86_64", "int x;", ("-O2",))
        >>> len(cache_key(r, "g++ 12").digest)
        64
    """
    parts = (
        ("schema", str(KEY_SCHEMA_VERSION)),
        ("kernelkit", __version__),
        ("backend", request.backend),
        ("backend_version", backend_version),
        ("compiler", compiler_identity),
        ("arch", request.arch),
        ("options", _SEP.join(request.options)),
        ("headers", _SEP.join(f"{n}={d}" for n, d in request.headers)),
        ("kernel", request.kernel),
        ("entry", request.entry),
        ("param_kinds", _SEP.join(request.param_kinds)),
        ("source", hashlib.sha256(request.source.encode()).hexdigest()),
    )
    return CacheKey(parts, digest_of(parts))


def digest_of(parts: Iterable[tuple[str, str]]) -> str:
    """The digest of labelled parts (what ``cache_key`` names its key by)."""
    h = hashlib.sha256()
    for label, value in parts:
        h.update(label.encode() + b"\x00" + value.encode() + b"\x00")
    return h.hexdigest()


def portable_digest(parts: Iterable[tuple[str, str]], free: frozenset[str]) -> str:
    """The digest of ``parts`` without the labels in ``free`` (which are named instead): two keys
    that differ only in those parts share it. Never equal to an exact key's digest."""
    kept = [(label, value) for label, value in parts if label not in free]
    return digest_of([("portable", _SEP.join(sorted(free))), *kept])


def check_parts(value: object, where: str) -> tuple[tuple[str, str], ...]:
    """Labelled parts read from a file (a list of [label, value] string pairs), else ``BadKey``."""
    if isinstance(value, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(s, str) for s in p)
        for p in value
    ):
        return tuple((label, text) for label, text in value)
    raise BadKey(f"{where}: key parts are not a list of [label, value] pairs")
