"""``kernelkit tune export FILE`` and ``kernelkit tune import FILE [--any-env]``: the tuning
database's ``TuningDB.export`` and ``TuningDB.import_file`` from the command line (to carry the
records tuned on one machine to others of the same kind)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "main"]

COMMANDS = ("export", "import")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelkit tune", description="move tuning records between machines"
    )
    sub = parser.add_subparsers(dest="tune_command", required=True)
    p = sub.add_parser("export", help="write every record of the tuning database to one file")
    p.add_argument("file", help="the JSON file to write")
    p.set_defaults(func=_export)
    p = sub.add_parser("import", help="add the records of an export to the tuning database")
    p.add_argument("file", help="a file `kernelkit tune export` (or TuningDB.export) wrote")
    p.add_argument(
        "--any-env",
        action="store_true",
        help="keep records made for other devices, compilers or versions (to prepare a "
        "database for other machines); by default only this machine's are imported",
    )
    p.set_defaults(func=_import)
    return parser


def _db():
    from .._select.tuning import db

    store = db.current_db()
    if store.root is None:
        print(
            "kernelkit tune: the tuning database is in memory only (KERNELKIT_CACHE=0): "
            "nothing to export or import",
            file=sys.stderr,
        )
        return None
    return store


def _export(args: argparse.Namespace) -> int:
    store = _db()
    if store is None:
        return 2
    try:
        n = store.export(args.file)
    except OSError as e:
        print(f"kernelkit tune: cannot write {args.file}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"wrote {args.file}: {n} record(s) from the tuning database ({store})")
    return 0


def _import(args: argparse.Namespace) -> int:
    store = _db()
    if store is None:
        return 2
    imported, refused = store.import_file(args.file, any_env=args.any_env)
    for why in refused:
        print(f"refused: {why}", file=sys.stderr)
    print(
        f"imported {imported} record(s) into the tuning database ({store})"
        + (f", refused {len(refused)}" if refused else "")
    )
    return 1 if refused else 0


def main(argv: Sequence[str]) -> int:
    """Run ``kernelkit tune export|import ...`` (``argv`` starts at ``export`` or ``import``)."""
    args = _parser().parse_args(list(argv))
    return int(args.func(args))
