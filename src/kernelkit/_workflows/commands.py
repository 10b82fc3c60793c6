"""``kernelkit cache info|list|clear|verify|export|import`` and ``kernelkit precompile``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from .. import _config
from .._cache import stats
from .._cache.disk import DiskCache, cache_dir
from .._errors import BundleError

__all__ = ["register"]


def _disk() -> DiskCache:
    """The configured directory, even with KERNELKIT_CACHE=0 (the commands manage files)."""
    return DiskCache(cache_dir(), _config.config.cache_max_bytes)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _info(args: argparse.Namespace) -> int:
    disk = _disk()
    files = disk.scan()
    made = disk.products()
    entries_bytes = sum(f.size_bytes for f in files)
    products_bytes = sum(p.size_bytes for p in made)
    report: dict[str, Any] = {
        "dir": str(disk.root),
        "enabled": _config.config.cache,
        "size_bytes": entries_bytes + products_bytes,
        "entries": len(files),
        "entries_bytes": entries_bytes,
        "products": [
            {"path": str(p.path.relative_to(disk.root)), "size_bytes": p.size_bytes} for p in made
        ],
        "products_bytes": products_bytes,
        "max_bytes": disk.max_bytes,
        "bundles": list(_config.config.bundle_path),
        "stats": stats.lifetime(str(disk.root)),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    off = "" if report["enabled"] else "  (off: KERNELKIT_CACHE=0)"
    print(f"cache dir:  {report['dir']}{off}")
    print(
        f"size:       {_size(report['size_bytes'])}: {report['entries']} entries "
        f"({_size(entries_bytes)}) and {len(made)} build products ({_size(products_bytes)}), "
        f"cap {_size(report['max_bytes'])}"
    )
    for p in report["products"]:
        print(f"  product   {p['path']} ({_size(p['size_bytes'])})")
    print(f"bundles:    {', '.join(report['bundles']) or 'none (KERNELKIT_BUNDLE_PATH)'}")
    print("counts (all processes since the last clear):")
    for name, n in report["stats"].items():
        print(f"  {name:14s} {n}")
    return 0


def _rows(disk: DiskCache) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(disk.scan(), key=lambda f: -f.mtime):
        h = disk.header(f)
        rows.append(
            {
                "key": f.digest,
                "kernel": h.get("kernel") if h else "?",
                "backend": h.get("backend") if h else "?",
                "arch": h.get("arch") if h else "?",
                "kind": h.get("kind") if h else "?",
                "size_bytes": f.size_bytes,
                "last_use": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f.mtime)),
            }
        )
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = _rows(_disk())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'kernel':24s} {'backend':8s} {'arch':8s} {'kind':6s} {'size':>10s}  "
        f"{'last use':19s}  key"
    )
    for r in rows:
        print(
            f"{str(r['kernel'])[:24]:24s} {r['backend']!s:8s} {r['arch']!s:8s} "
            f"{r['kind']!s:6s} {_size(r['size_bytes']):>10s}  {r['last_use']}  "
            f"{r['key'][:16]}"
        )
    print(f"{len(rows)} entries")
    return 0


def _clear(args: argparse.Namespace) -> int:  # noqa: ARG001  every command takes its parsed args
    disk = _disk()
    print(f"removed {disk.clear()} entries and build products from {disk.root}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from .._select.tuning.db import TuningDB

    disk = _disk()
    good, bad = disk.verify(remove=not args.keep)
    records, wrong = TuningDB(disk.root / "tuning").verify(remove=not args.keep)
    good, bad = good + records, bad + wrong
    for path, why in bad:
        print(f"bad: {path}: {why}" + ("" if args.keep else " (removed)"))
    print(f"{good} good entries, build products and tuning records, {len(bad)} bad in {disk.root}")
    return 1 if bad else 0


def _export(args: argparse.Namespace) -> int:
    from .._cache.bundles import write_bundle
    from .._cache.entry import BadEntry, decode
    from .._cache.files import Unreadable

    disk = _disk()
    pairs = []
    for f in disk.scan():
        try:
            data = disk.read_bytes(f.path)
            _, header = decode(data, f.digest)
        except (Unreadable, BadEntry):
            continue  # `cache verify` reports these
        if args.kernel and header.get("kernel") not in args.kernel:
            continue
        pairs.append((f.digest, data))
    manifest = write_bundle(args.output, pairs)
    print(f"wrote {args.output}: {len(manifest['entries'])} entries")
    return 0


def _import(args: argparse.Namespace) -> int:
    from .._cache.bundles import Bundle
    from .._cache.entry import BadEntry, decode

    try:
        bundle = Bundle(args.bundle)
    except BundleError as e:
        print(e, file=sys.stderr)
        return 1
    disk = _disk()
    written, bad = 0, 0
    for digest in bundle.by_key:
        try:
            data = bundle.read(digest)
            if data is None:
                continue
            decode(data, digest)
        except BadEntry as e:
            print(f"bad: {digest[:16]}...: {e} (skipped)", file=sys.stderr)
            bad += 1
            continue
        if not disk.write_raw(digest, data):
            print(f"cannot write to {disk.root}: {disk.write_error}", file=sys.stderr)
            return 1
        written += 1
    disk.evict()
    print(f"imported {written} entries into {disk.root}" + (f", skipped {bad} bad" if bad else ""))
    return 1 if bad else 0


def _precompile(args: argparse.Namespace) -> int:
    from .precompile import precompile

    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    if not archs:
        print("[precompile] --arch needs at least one arch", file=sys.stderr)
        return 2
    return precompile(args.target, archs, args.output, args.jobs, not args.quiet)


def register(subparsers: Any) -> None:
    """Add the ``cache`` and ``precompile`` commands to the ``kernelkit`` parser."""
    cache = subparsers.add_parser("cache", help="inspect and manage the compiled-kernel cache")
    sub = cache.add_subparsers(dest="cache_command", required=True)
    p = sub.add_parser("info", help="directory, size, entries, cap and hit/miss counts")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)
    p = sub.add_parser("list", help="entries: kernel, backend, arch, kind, size, last use")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_list)
    sub.add_parser("clear", help="remove every entry").set_defaults(func=_clear)
    p = sub.add_parser("verify", help="check every entry's checksum; remove bad ones (exit 1)")
    p.add_argument("--keep", action="store_true", help="report bad entries without removing")
    p.set_defaults(func=_verify)
    p = sub.add_parser("export", help="write the cache's entries to a .kkb bundle")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--kernel", action="append", help="only this kernel (repeatable)")
    p.set_defaults(func=_export)
    p = sub.add_parser("import", help="unpack a bundle's entries into the disk cache")
    p.add_argument("bundle")
    p.set_defaults(func=_import)
    p = subparsers.add_parser("precompile", help="build declared kernels for archs into a bundle")
    p.add_argument("target", metavar="MODULE_OR_FILE")
    p.add_argument("--arch", required=True, help="comma list, e.g. sm_80,sm_90")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_precompile)
