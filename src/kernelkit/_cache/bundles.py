"""Precompiled bundles (``.kkb``): read-only cache layers consulted after memory and disk.

A bundle is a zip archive holding ``manifest.json`` and one ``entries/<digest>.kke`` per entry (the
disk cache's entry format, with its own checksums). The manifest names the kernelkit version and
key schema it was built for; a bundle for another version is rejected whole (``BundleError``).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import _config
from .._errors import BundleError
from .._records import Artifact
from .._version import __version__
from . import stats
from .entry import ENTRY_FORMAT_VERSION, BadEntry, decode, read_header
from .keys import KEY_SCHEMA_VERSION

__all__ = ["Bundle", "add_bundle", "find", "loaded", "write_bundle"]

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "kernelkit-bundle"
BUNDLE_FORMAT_VERSION = 1


class Bundle:
    """One opened, version-checked bundle."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import zipfile

        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
            manifest = json.loads(self._zip.read(MANIFEST))
        except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:
            raise BundleError(
                f"[bundle] {self.path} is not a readable kernelkit bundle: {type(e).__name__}: {e}"
            ) from None
        self.manifest: dict[str, Any] = _check_manifest(self.path, manifest)
        self.by_key: dict[str, dict[str, Any]] = {e["key"]: e for e in manifest["entries"]}
        self._lock = threading.Lock()

    def read(self, digest: str) -> bytes | None:
        """The raw entry bytes of ``digest`` checked against the manifest, or None if absent."""
        item = self.by_key.get(digest)
        if item is None:
            return None
        try:
            with self._lock:
                data = self._zip.read(item["file"])
        except (OSError, KeyError, ValueError) as e:
            raise BadEntry(f"cannot read {item.get('file')}: {e}") from None
        if hashlib.sha256(data).hexdigest() != item.get("sha256"):
            raise BadEntry("checksum does not match the manifest")
        return data

    def find(self, digest: str) -> Artifact | None:
        """The artifact for ``digest``; a bad entry warns, is counted, and reads as absent."""
        try:
            data = self.read(digest)
            return None if data is None else decode(data, digest)[0]
        except BadEntry as e:
            stats.record("corrupt")
            warnings.warn(
                f"kernelkit: bundle {self.path}: entry {digest[:16]}... is rejected "
                f"({e}); it is compiled instead",
                RuntimeWarning,
                stacklevel=3,
            )
            return None


def _check_manifest(path: Path, manifest: Any) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"[bundle] {path} has no kernelkit bundle manifest")
    seen = (
        manifest.get("format_version"),
        manifest.get("kernelkit"),
        manifest.get("key_schema"),
        manifest.get("entry_format"),
    )
    want = (BUNDLE_FORMAT_VERSION, __version__, KEY_SCHEMA_VERSION, ENTRY_FORMAT_VERSION)
    if seen != want:
        raise BundleError(
            f"[bundle] {path} was built by kernelkit {seen[1]} (bundle format {seen[0]}, key "
            f"schema {seen[2]}, entry format {seen[3]}); this is kernelkit {want[1]} (bundle "
            f"format {want[0]}, key schema {want[2]}, entry format {want[3]}). None of its "
            "entries can be used: rebuild it with `kernelkit precompile`"
        )
    entries = manifest.get("entries")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and {"key", "file", "sha256"} <= e.keys() for e in entries
    ):
        raise BundleError(f"[bundle] {path}: manifest entries are malformed")
    return manifest


_added: list[Bundle] = []
_configured: tuple[object, list[Bundle]] | None = None
_lock = threading.Lock()


def add_bundle(path: str | os.PathLike[str]) -> None:
    """Consult a precompiled bundle (``kernelkit precompile ... -o bundle.kkb``) before compiling.

    Bundles are read-only layers after the memory and disk caches. Raises ``BundleError`` when the
    file is not a bundle or was built for another kernelkit version or key schema.

    Example::

        >>> import kernelkit
        >>> kernelkit.add_bundle("kernels.kkb")  # doctest: +SKIP
    """
    bundle = Bundle(path)
    with _lock:
        _added.append(bundle)


def _from_config() -> list[Bundle]:
    """Bundles named by ``KERNELKIT_BUNDLE_PATH``; an unusable one warns and is skipped."""
    global _configured
    config = _config.config
    if _configured is not None and _configured[0] is config:
        return _configured[1]
    with _lock:
        opened = []
        for path in config.bundle_path:
            try:
                opened.append(Bundle(path))
            except BundleError as e:
                warnings.warn(
                    f"kernelkit: KERNELKIT_BUNDLE_PATH: {e}", RuntimeWarning, stacklevel=4
                )
        _configured = (config, opened)
        return opened


def loaded() -> list[Bundle]:
    """Every bundle consulted, in order: configured ones, then those added by ``add_bundle``."""
    return [*_from_config(), *_added]


def find(digest: str) -> Artifact | None:
    """The artifact for ``digest`` from the first bundle that holds a good copy."""
    bundles = loaded()
    for bundle in bundles:
        found = bundle.find(digest)
        if found is not None:
            stats.record("bundle_hits")
            return found
    return None


def reset() -> None:
    """Forget added and configured bundles (tests)."""
    global _configured
    with _lock:
        _added.clear()
        _configured = None


def write_bundle(path: str | os.PathLike[str], entries: Iterable[tuple[str, bytes]]) -> dict:
    """Write ``(digest, entry bytes)`` pairs as a bundle, atomically; returns the manifest."""
    import zipfile

    path = Path(path)
    items, seen = [], set()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for digest, data in entries:
                if digest in seen:
                    continue
                seen.add(digest)
                items.append(_manifest_item(digest, data))
                zf.writestr(items[-1]["file"], data)
            manifest = {
                "format": BUNDLE_FORMAT,
                "format_version": BUNDLE_FORMAT_VERSION,
                "kernelkit": __version__,
                "key_schema": KEY_SCHEMA_VERSION,
                "entry_format": ENTRY_FORMAT_VERSION,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "entries": items,
            }
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return manifest


def _manifest_item(digest: str, data: bytes) -> dict[str, Any]:
    header = read_header(data)
    item: dict[str, Any] = {
        "key": digest,
        "file": f"entries/{digest}.kke",
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
    }
    for name in ("kernel", "backend", "kind", "arch", "entry"):
        item[name] = header.get(name)
    return item
