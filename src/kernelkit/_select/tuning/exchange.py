"""Tuning database exports: one JSON file, ``{"kernelkit": "tuning-export", "format": 1,
"records": [...]}`` (a single record file counts as an export of one), read as untrusted data:
a regular file only, at most 512 MB, and each record checked on its own, so one malformed record
(wrong types, a number beyond a float, nesting too deep) is refused by name and the rest are
still imported."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .files import read_regular
from .records import Environment, TuningRecord

__all__ = ["FORMAT", "check_item", "read_export"]

FORMAT = 1  # of record files and exports
_MAX_EXPORT_BYTES = 512 << 20


def read_export(path: Path) -> tuple[list[Any], str | None]:
    """The records list of an export (a record file counts as an export of one)."""
    try:
        doc = json.loads(read_regular(path, _MAX_EXPORT_BYTES))
    except (OSError, ValueError, RecursionError) as e:  # too large, not JSON, nested too deep
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)[:200]
        return [], f"{path}: cannot read a tuning export ({why})"
    kind = doc.get("kernelkit") if isinstance(doc, dict) else None
    if kind == "tuning-record" and isinstance(doc, dict) and "record" in doc:
        return [doc["record"]], None
    if kind != "tuning-export" or not isinstance(doc.get("records"), list):
        return [], f"{path}: not a kernelkit tuning export"
    if doc.get("format") != FORMAT:
        return [], f"{path}: export format {doc.get('format')!r}, this kernelkit reads {FORMAT}"
    return doc["records"], None


def check_item(
    item: Any,
    allowed: list[Environment] | None,
    known_impl: Callable[[str, str], bool] | None,
) -> tuple[str | None, TuningRecord | None]:
    """(why it is refused or None, the record if it parsed)."""
    try:
        record = TuningRecord.from_dict(item)
    except Exception as e:  # noqa: BLE001 - one bad record never stops an import
        return f"malformed: {str(e)[:300]}", None
    if allowed is not None and record.env not in allowed:
        here = "; ".join(e.describe() for e in allowed) or "no device"
        near = [e for e in allowed if e.backend == record.env.backend] or allowed
        diff = f" (differs in {', '.join(record.env.differences(near[0]))})" if near else ""
        return (
            f"made for another environment: {record.env.describe()}; this machine has "
            f"{here}{diff}. Pass any_env (--any-env) to keep it for other machines",
            record,
        )
    if known_impl is not None:
        try:
            known = bool(known_impl(record.op, record.impl))
        except Exception as e:  # noqa: BLE001 - a failing check refuses, never crashes import
            return f"cannot check implementation {record.impl!r}: {e}", record
        if not known:
            return f"implementation {record.impl!r} does not exist (in op {record.op!r})", record
    return None, record
