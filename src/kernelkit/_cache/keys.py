"""Cache keys from ordered, labelled, versioned parts (each part can be logged on its own).

The key covers every field of ``CompileRequest`` (a unit test fails when a field is added without
a label here) plus the compiler identity, the backend's version, kernelkit's version and the key
schema, so a disk or bundle hit is only possible for an identical request.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .._records import CompileRequest
from .._version import __version__

__all__ = ["KEY_SCHEMA_VERSION", "CacheKey", "cache_key"]

# 2: the kernel name, parameter kinds and backend version joined the key.
KEY_SCHEMA_VERSION = 2

_SEP = "\x1f"  # unit separator: cannot appear in an option or a header name


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
    h = hashlib.sha256()
    for label, value in parts:
        h.update(label.encode() + b"\x00" + value.encode() + b"\x00")
    return CacheKey(parts, h.hexdigest())
