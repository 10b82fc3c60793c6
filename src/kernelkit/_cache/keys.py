"""Cache keys from ordered, labelled, versioned parts (each part can be logged on its own)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .._records import CompileRequest
from .._version import __version__

KEY_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CacheKey:
    """The labelled parts of a key and their digest (the digest names the disk entry)."""

    parts: tuple[tuple[str, str], ...]
    digest: str

    def describe(self) -> str:
        return "\n".join(f"{label}: {value[:80]}" for label, value in self.parts)


def cache_key(request: CompileRequest, compiler_identity: str) -> CacheKey:
    """Everything that can change the binary: source, header bytes, options, arch, compiler,
    kernelkit version and key schema. Never the kernel name alone."""
    parts = (
        ("schema", str(KEY_SCHEMA_VERSION)),
        ("kernelkit", __version__),
        ("backend", request.backend),
        ("compiler", compiler_identity),
        ("arch", request.arch),
        ("options", "\x1f".join(request.options)),
        ("headers", "\x1f".join(f"{n}={d}" for n, d in request.headers)),
        ("entry", request.entry),
        ("source", hashlib.sha256(request.source.encode()).hexdigest()),
    )
    h = hashlib.sha256()
    for label, value in parts:
        h.update(label.encode() + b"\x00" + value.encode() + b"\x00")
    return CacheKey(parts, h.hexdigest())
