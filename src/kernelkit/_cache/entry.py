"""The byte format of one cache entry, shared by the disk cache and bundles.

Layout (little-endian)::

    magic        8 bytes   b"KKENTRY\\0"
    version      u32       ENTRY_FORMAT_VERSION
    header_len   u32       length of the JSON header
    header_sha   32 bytes  sha256 of the JSON header bytes
    header       JSON      key, parts, kernel, backend, kind, entry, arch, metadata, log,
                           binary_bytes, binary_sha256, created
    binary       bytes     the cubin, PTX or shared library

Every byte is covered by a checksum, so a truncated, garbled or empty file never decodes, and the
header's ``key`` must equal the key asked for, so another key's file never decodes either. A header
whose ``key`` is not a digest of the form ``cache_key`` makes, or whose ``parts`` do not hash to
it, does not decode at all (a crafted key must never name a path).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass
from typing import Any

from .._records import Artifact
from .keys import BadKey, CacheKey, check_digest, check_parts, digest_of

__all__ = [
    "ENTRY_FORMAT_VERSION",
    "FIXED_BYTES",
    "BadEntry",
    "EntryHeader",
    "decode",
    "encode",
    "header_bytes",
    "read_header",
]

MAGIC = b"KKENTRY\0"
ENTRY_FORMAT_VERSION = 1
_FIXED = struct.Struct("<8sII32s")
FIXED_BYTES = _FIXED.size
_MAX_HEADER_BYTES = 64 << 20


class BadEntry(Exception):
    """An entry that does not decode: truncated, garbled, foreign or of another format."""


@dataclass(frozen=True)
class EntryHeader:
    """The JSON header of an entry (everything but the binary)."""

    fields: dict[str, Any]

    @property
    def key(self) -> str:
        return str(self.fields.get("key", ""))

    def get(self, name: str, default: Any = None) -> Any:
        """One header field."""
        return self.fields.get(name, default)


def encode(key: CacheKey, kernel: str, backend: str, artifact: Artifact) -> bytes:
    """The entry's bytes; raises TypeError/ValueError when the metadata is not plain JSON."""
    header = {
        "key": key.digest,
        "parts": [list(p) for p in key.parts],
        "kernel": kernel,
        "backend": backend,
        "kind": artifact.kind,
        "entry": artifact.entry,
        "arch": artifact.arch,
        "metadata": artifact.metadata,
        "log": artifact.log,
        "binary_bytes": len(artifact.binary),
        "binary_sha256": hashlib.sha256(artifact.binary).hexdigest(),
        "created": time.time(),
    }
    raw = json.dumps(header, sort_keys=True, allow_nan=False).encode()
    fixed = _FIXED.pack(MAGIC, ENTRY_FORMAT_VERSION, len(raw), hashlib.sha256(raw).digest())
    return b"".join((fixed, raw, artifact.binary))


def _split(data: bytes) -> tuple[dict[str, Any], int]:
    """The checked JSON header and the offset of the binary."""
    if len(data) < FIXED_BYTES:
        raise BadEntry(f"truncated: {len(data)} bytes, shorter than the fixed header")
    magic, version, n, sha = _FIXED.unpack_from(data)
    if magic != MAGIC:
        raise BadEntry("not a kernelkit cache entry (bad magic)")
    if version != ENTRY_FORMAT_VERSION:
        raise BadEntry(f"entry format {version}, this kernelkit reads {ENTRY_FORMAT_VERSION}")
    raw = data[FIXED_BYTES : FIXED_BYTES + n]
    if n > _MAX_HEADER_BYTES or len(raw) != n:
        raise BadEntry("truncated header")
    if hashlib.sha256(raw).digest() != sha:
        raise BadEntry("header checksum mismatch")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise BadEntry(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise BadEntry("header is not a JSON object")
    try:
        key = check_digest(header.get("key"), "entry header")
        if "parts" in header and digest_of(check_parts(header["parts"], "entry header")) != key:
            raise BadKey("entry header: key parts do not hash to the key")
    except BadKey as e:
        raise BadEntry(str(e)) from None
    return header, FIXED_BYTES + n


def header_bytes(fixed: bytes) -> int:
    """How many bytes from the start hold the whole header, given the first FIXED_BYTES."""
    if len(fixed) < FIXED_BYTES:
        raise BadEntry(f"truncated: {len(fixed)} bytes, shorter than the fixed header")
    return FIXED_BYTES + min(_FIXED.unpack_from(fixed)[2], _MAX_HEADER_BYTES)


def read_header(data: bytes) -> EntryHeader:
    """The checked header of an entry (the binary is not checked; ``decode`` does that)."""
    return EntryHeader(_split(data)[0])


def decode(data: bytes, digest: str) -> tuple[Artifact, EntryHeader]:
    """The artifact stored in ``data``, which must be the entry of key ``digest``."""
    header, start = _split(data)
    if header.get("key") != digest:
        raise BadEntry(
            f"foreign entry: holds key {str(header.get('key'))[:16]}..., expected {digest[:16]}..."
        )
    binary = data[start:]
    if len(binary) != header.get("binary_bytes"):
        raise BadEntry(f"binary is {len(binary)} bytes, header says {header.get('binary_bytes')}")
    if hashlib.sha256(binary).hexdigest() != header.get("binary_sha256"):
        raise BadEntry("binary checksum mismatch")
    try:
        artifact = Artifact(
            kind=header["kind"],
            binary=binary,
            entry=header["entry"],
            arch=header["arch"],
            metadata=header.get("metadata") or {},
            log=header.get("log") or "",
        )
    except KeyError as e:
        raise BadEntry(f"header lacks {e}") from None
    return artifact, EntryHeader(header)
