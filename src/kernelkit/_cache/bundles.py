"""Precompiled bundles (``.kkb``): read-only cache layers consulted after memory and disk.

A bundle is a zip archive holding ``manifest.json`` and one ``entries/<digest>.kke`` per entry (the
disk cache's entry format, with its own checksums). The manifest names the kernelkit version and
key schema it was built for, and each entry's key with its labelled parts (``keys.py``). A bundle
for another version, or one whose keys are not digests of their parts, is refused whole
(``BundleError``): no key read from a bundle ever names a path before it is checked.

Which entry serves a request (the policy)
-----------------------------------------
1. An entry of the exact key, whatever its kind.
2. Else an entry whose key differs from the request's only in parts that the backend lets an
   artifact of that kind differ in (``Backend.bundle_portable_parts``). The CUDA backend lets a
   cubin (SASS for the exact arch) differ in ``compiler`` (the NVRTC version) and ``headers`` (the
   CUDA headers' bytes): a cubin is self-contained, so the node's own NVRTC and headers play no
   part in it, while the source (kernelkit's prelude included), options, arch, kernelkit and
   backend versions must still match. PTX is served for the exact key only, since the node's
   driver must accept its ISA version; a bundle built with NVRTC 13.5 thus serves an NVRTC 13.0
   node its cubins.
3. When the backend cannot load what a bundle served (``recompile_refused``), that entry is
   dropped for the process with a warning and the kernel is compiled.
4. When no entry serves a request but a bundle holds entries of the same kernel and backend, one
   warning per kernel names the key parts in which the closest entry differed.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import _config
from .._errors import BundleError
from .._records import Artifact
from .._version import __version__
from . import files, stats
from .entry import ENTRY_FORMAT_VERSION, BadEntry, decode, read_header
from .keys import (
    KEY_SCHEMA_VERSION,
    BadKey,
    CacheKey,
    check_digest,
    check_parts,
    digest_of,
    portable_digest,
)

__all__ = ["Bundle", "add_bundle", "find", "loaded", "refuse", "write_bundle"]

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "kernelkit-bundle"
# 2: each manifest entry holds its key's labelled parts.
BUNDLE_FORMAT_VERSION = 2


class Bundle:
    """One opened, version-checked bundle."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import zipfile

        self.path = Path(path)
        try:
            if not stat.S_ISREG(os.stat(self.path).st_mode):  # a FIFO would block the open
                raise OSError(f"{self.path} is not a regular file")
            self._zip = zipfile.ZipFile(self.path)
            manifest = json.loads(self._zip.read(MANIFEST))
        except (OSError, zipfile.BadZipFile, KeyError, ValueError) as e:
            raise BundleError(
                f"[bundle] {self.path} is not a readable kernelkit bundle: {type(e).__name__}: {e}"
            ) from None
        self.manifest: dict[str, Any] = _check_manifest(self.path, manifest)
        self.by_key: dict[str, dict[str, Any]] = {e["key"]: e for e in manifest["entries"]}
        self._lock = threading.Lock()
        self._portable: dict[tuple[str, str, frozenset[str]], dict[str, list[str]]] = {}

    def portable(self, backend: str, kind: str, free: frozenset[str]) -> dict[str, list[str]]:
        """Portable digest (``keys.portable_digest``) -> keys of this bundle's entries of
        ``backend`` and ``kind`` (an index made on first use)."""
        with self._lock:
            index = self._portable.get((backend, kind, free))
            if index is None:
                index = {}
                for item in self.by_key.values():
                    if item.get("backend") == backend and item.get("kind") == kind:
                        digest = portable_digest(item["parts"], free)
                        index.setdefault(digest, []).append(item["key"])
                self._portable[(backend, kind, free)] = index
            return index

    def entries_of(self, backend: str, kernel: str) -> list[dict[str, Any]]:
        """The manifest entries of one kernel of one backend."""
        return [
            i
            for i in self.by_key.values()
            if (i.get("backend"), i.get("kernel")) == (backend, kernel)
        ]

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
    for i, item in enumerate(entries):
        _check_item(path, i, item)
    return manifest


def _check_item(path: Path, i: int, item: dict[str, Any]) -> None:
    """A manifest entry's key is a digest, its file is ``entries/<key>.kke`` and its labelled
    parts hash to its key; anything else refuses the whole bundle (it was made by hand)."""
    try:
        key = check_digest(item["key"], f"manifest entry {i}")
        if item["file"] != f"entries/{key}.kke":
            raise BadKey(
                f"manifest entry {i}: file {str(item['file'])[:80]!r} is not entries/<key>.kke"
            )
        if digest_of(check_parts(item.get("parts"), f"manifest entry {i}")) != key:
            raise BadKey(f"manifest entry {i}: key parts do not hash to its key")
    except BadKey as e:
        raise BundleError(
            f"[bundle] {path} is refused: {e}. kernelkit never writes such a bundle; none of "
            "its entries is used or imported"
        ) from None


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


_served: dict[str, tuple[Bundle, str]] = {}  # request key -> (bundle, key of the entry served)
_refused: set[tuple[Path, str]] = set()  # (bundle, entry key) the backend could not load
_explained: set[tuple[str, str]] = set()  # (backend, kernel) whose miss was explained


def find(key: CacheKey, portable: Mapping[str, frozenset[str]] | None = None) -> Artifact | None:
    """The artifact for ``key`` from the first bundle with a good entry of the exact key, else
    of a key differing only in the parts ``portable[kind]`` lets an entry of that kind differ in
    (the module docstring has the policy). A miss warns once per kernel when a bundle holds
    entries of it."""
    bundles = loaded()
    if not bundles:
        return None
    here = dict(key.parts)
    backend, kernel = here.get("backend", ""), here.get("kernel", "")
    for bundle in bundles:
        if (bundle.path, key.digest) not in _refused:
            found = bundle.find(key.digest)
            if found is not None:
                return _hit(key, bundle, key.digest, found)
    for kind, free in (portable or {}).items():
        wanted = portable_digest(key.parts, frozenset(free))
        for bundle in bundles:
            for digest in bundle.portable(backend, kind, frozenset(free)).get(wanted, ()):
                if (bundle.path, digest) in _refused:
                    continue
                found = bundle.find(digest)
                if found is not None and found.kind == kind:
                    return _hit(key, bundle, digest, found)
    _explain_miss(bundles, key, backend, kernel, portable or {})
    return None


def _hit(key: CacheKey, bundle: Bundle, digest: str, found: Artifact) -> Artifact:
    stats.record("bundle_hits")
    with _lock:
        _served[key.digest] = (bundle, digest)
    return found


def _explain_miss(
    bundles: list[Bundle],
    key: CacheKey,
    backend: str,
    kernel: str,
    portable: Mapping[str, frozenset[str]],
) -> None:
    """One warning per kernel: which key parts the closest bundle entry of it differed in."""
    if (backend, kernel) in _explained:
        return
    best: tuple[Bundle, list[str], dict[str, str]] | None = None
    count = 0
    for bundle in bundles:
        for item in bundle.entries_of(backend, kernel):
            count += 1
            free = portable.get(item.get("kind", ""), frozenset())
            theirs = dict(item["parts"])
            differ = [n for n, v in key.parts if n not in free and theirs.get(n) != v]
            if best is None or len(differ) < len(best[1]):
                best = (bundle, differ, theirs)
    if best is None or not best[1]:  # none, or a match that was refused or damaged (warned)
        return
    with _lock:
        if (backend, kernel) in _explained:
            return
        _explained.add((backend, kernel))
    bundle, differ, theirs = best
    here = dict(key.parts)
    shown = "; ".join(f"{n}: {_short(theirs.get(n))} there, {_short(here[n])} here" for n in differ)
    warnings.warn(
        f"kernelkit: [{kernel}] bundle {bundle.path} holds {count} entries of this kernel "
        f"(backend {backend}) but none serves this request: the closest differs in "
        f"{', '.join(differ)} ({shown}); compiling it",
        RuntimeWarning,
        stacklevel=4,
    )


def _short(value: str | None) -> str:
    if value is None:
        return "(absent)"
    text = value.replace("\x1f", " ")
    return repr(text if len(text) <= 40 else text[:37] + "...")


def refuse(digest: str, error: BaseException) -> bool:
    """The backend could not load what a bundle served for key ``digest``: stop serving that
    entry in this process, with one warning; False when no bundle served this key."""
    with _lock:
        origin = _served.pop(digest, None)
        if origin is None:
            return False
        bundle, entry_key = origin
        _refused.add((bundle.path, entry_key))
    item = bundle.by_key[entry_key]
    theirs = dict(item["parts"])
    warnings.warn(
        f"kernelkit: [{item.get('kernel')}] the {item.get('kind')} for {item.get('arch')} from "
        f"bundle {bundle.path} (compiler {theirs.get('compiler')}) could not be loaded "
        f"({type(error).__name__}: {error}); compiling it here",
        RuntimeWarning,
        stacklevel=4,
    )
    return True


def reset() -> None:
    """Forget added and configured bundles, and what they served or failed to serve (tests)."""
    global _configured
    with _lock:
        _added.clear()
        _configured = None
        _served.clear()
        _refused.clear()
        _explained.clear()


def write_bundle(path: str | os.PathLike[str], entries: Iterable[tuple[str, bytes]]) -> dict:
    """Write ``(digest, entry bytes)`` pairs as a bundle, atomically; returns the manifest."""
    import zipfile

    path = Path(path)
    items, blobs = [], {}
    for digest, data in entries:  # every key checked before a file is made
        if digest not in blobs:
            items.append(_manifest_item(digest, data))
            blobs[digest] = data
    with (
        files.atomic_writer(path) as fd,
        os.fdopen(fd, "wb", closefd=False) as f,
        zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf,
    ):
        for item in items:
            zf.writestr(item["file"], blobs[item["key"]])
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
    return manifest


def _manifest_item(digest: str, data: bytes) -> dict[str, Any]:
    check_digest(digest, "write_bundle")
    header = read_header(data)  # checks its key is a digest of its parts
    if header.key != digest or "parts" not in header.fields:
        raise ValueError(f"[bundle] the entry given for {digest[:16]}... holds another key")
    item: dict[str, Any] = {
        "key": digest,
        "file": f"entries/{digest}.kke",
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "parts": header.get("parts"),
    }
    for name in ("kernel", "backend", "kind", "arch", "entry"):
        item[name] = header.get(name)
    return item
