"""Shipped tables: tuned choices per op, device and problem, as package data (YAML or JSON).

A table file (``kernelkit tune`` writes them; ``write`` below)::

    kernelkit_table: 1
    op: matmul                      # default op of the entries (optional)
    device: {arch: sm_90}           # default device match (optional)
    entries:
      - device: {arch: sm_90, name: H100}     # arch exact and/or a case-sensitive substring
                                              # of the device name
        match:                                # features as _select.keys spells them (quote
          a.dtype: float16                    # 'a.shape[1]' inside YAML's {...}); exact values
          K: 4096                             # are compared as the feature's label
          M: [1, 16]                          # inclusive range; null for no bound
        impl: matmul/tiled
        config: {template: {BM: 64, BN: 128}, threadgroup: [128], shared_memory: 0}

A bucketed key feature is written as the range of its bucket (``kernelkit tune`` writes the
key ``M:ranges(1,2,3,5) = [3,5)`` as ``M: [3, 4]``; ``TableEntry.from_key``), so a row says
which sizes it covers. A shipped file is ``src/kernelkit/tables/<op>.<device>.yaml`` (e.g.
``matmul.h100.yaml``); every file there is loaded, and what a row applies to is its ``device``
(an H100 and an H200 are both sm_90: only the name, a substring of the device's name such as
``H100``, tells them apart).

Lookup: the entries of the op for the target's arch (and those without an arch) are indexed on
first use by their exact features, so a lookup is a few dictionary lookups and range checks.
The most specific matching entry wins, compared in this order: device (name and arch > name >
arch > none), then more exact features, then more ranges, then narrower ranges (smaller total
width), then the entry loaded first (files in the order given, then file order). ``matches``
gives every matching entry in that order: the selection stage takes the first one whose
implementation exists, matches the problem and lists the config (``_select.select``), and
``explain`` says why each one before it was passed over.

A malformed file or entry is a warning naming the file and the entry, and is skipped; an entry
naming an implementation ``known_impl`` rejects is skipped at lookup with one warning. Nothing
here raises at call time.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .._cache.files import write_atomic
from .._errors import ArgumentError
from .._records import Problem, Target
from .keys import Feature
from .records import Config, TemplateValue

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = ["BadTable", "Table", "TableEntry", "shipped_tables"]

TABLE_FORMAT = 1
SUFFIXES = (".yaml", ".yml", ".json")
_ENTRY_FIELDS = {"op", "device", "match", "impl", "config", "note"}
_INF = float("inf")

Bound = int | None


class BadTable(ArgumentError):
    """A table file or entry that is malformed (the message names which and why)."""


@dataclass(frozen=True)
class TableEntry:
    """One row of a table: where it applies (op, device, problem) and what it chooses.

    ``exact`` holds ``(feature, value)`` pairs, matched against the feature's label;
    ``ranges`` holds ``(feature, lo, hi)``, inclusive, matched against the raw value (``None``:
    no bound). Both are sorted by feature. ``where`` says where it was read (``file entry i``).
    """

    op: str
    impl: str
    config: Config
    arch: str | None = None
    device_name: str | None = None
    exact: tuple[tuple[str, TemplateValue], ...] = ()
    ranges: tuple[tuple[str, Bound, Bound], ...] = ()
    note: str = field(default="", compare=False)
    where: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact", tuple(sorted(self.exact)))
        object.__setattr__(self, "ranges", tuple(sorted(self.ranges, key=lambda r: r[0])))

    @property
    def rank(self) -> tuple[int, int, int, float]:
        """Specificity (larger wins): device, exact features, ranges, -(total range width)."""
        device = 2 * (self.device_name is not None) + (self.arch is not None)
        width = sum(
            _INF if lo is None or hi is None else float(hi - lo) for _, lo, hi in self.ranges
        )
        return (device, len(self.exact), len(self.ranges), -width)

    def describe(self) -> str:
        """One line for ``explain``: where it came from and what it matches."""
        parts = [f"arch {self.arch}"] if self.arch else []
        parts += [f"device ~ {self.device_name!r}"] if self.device_name else []
        parts += [f"{f}={v}" for f, v in self.exact]
        parts += [f"{f} in [{lo}, {hi}]" for f, lo, hi in self.ranges]
        return f"{self.where or 'table'}: {' '.join(parts) or 'any problem'} -> {self.impl}"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op}
        device = {k: v for k, v in (("arch", self.arch), ("name", self.device_name)) if v}
        if device:
            d["device"] = device
        match: dict[str, Any] = dict(self.exact)
        match.update({f: [lo, hi] for f, lo, hi in self.ranges})
        d["match"] = dict(sorted(match.items()))
        d["impl"] = self.impl
        d["config"] = {
            "template": dict(self.config.template),
            "threadgroup": list(self.config.threadgroup),
            "shared_memory": self.config.shared_memory,
        }
        if self.note:
            d["note"] = self.note
        return d

    @classmethod
    def from_dict(
        cls, d: Any, defaults: dict[str, Any] | None = None, where: str = ""
    ) -> TableEntry:
        """An entry from parsed YAML/JSON (``defaults``: the file's ``op`` and ``device``);
        ``BadTable`` naming what is wrong."""
        if not isinstance(d, dict):
            raise BadTable(f"an entry is a mapping, got {type(d).__name__}")
        unknown = set(d) - _ENTRY_FIELDS
        if unknown:
            raise BadTable(f"unknown fields {sorted(unknown)} (known: {sorted(_ENTRY_FIELDS)})")
        d = {**(defaults or {}), **d}
        op, impl = d.get("op"), d.get("impl")
        if not (isinstance(op, str) and op and isinstance(impl, str) and impl):
            raise BadTable("'op' and 'impl' must be non-empty strings")
        arch, name = _device(d.get("device"))
        exact, ranges = _match(d.get("match", {}))
        note = d.get("note", "")
        if not isinstance(note, str):
            raise BadTable("'note' must be a string")
        config = _config(d.get("config", {}))
        return cls(op, impl, config, arch, name, tuple(exact), tuple(ranges), note, where)

    @classmethod
    def from_key(
        cls,
        op: str,
        impl: str,
        config: Config,
        key: Iterable[tuple[str, str]],
        arch: str | None = None,
        device_name: str | None = None,
        note: str = "",
    ) -> TableEntry:
        """The row covering a problem key's bucket: a bucketed feature (``M:ranges(...)``,
        ``rows:pow2``) becomes the range of sizes its label stands for, every other feature
        an exact value (ints and bools as such, so the file reads naturally).

        Example::

            >>> e = TableEntry.from_key("mm", "mm/t", Config(), [("M:ranges(1,5)", "[1,5)")])
            >>> e.ranges
            (('M', 1, 4),)
        """
        exact: list[tuple[str, TemplateValue]] = []
        ranges: list[tuple[str, Bound, Bound]] = []
        for text, label in key:
            feature = Feature.parse(text)
            span = feature.span(label)
            taken = {f for f, _ in exact} | {f for f, _, _ in ranges}
            if span is None or feature.unbucketed in taken:
                exact.append((text, _plain(label)))
            else:
                ranges.append((feature.unbucketed, *span))
        return cls(op, impl, config, arch, device_name, tuple(exact), tuple(ranges), note)


def _device(value: Any) -> tuple[str | None, str | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict) or set(value) - {"arch", "name"}:
        raise BadTable(f"'device' is a mapping with 'arch' and/or 'name', got {value!r}")
    arch, name = value.get("arch"), value.get("name")
    for what, v in (("arch", arch), ("name", name)):
        if v is not None and not (isinstance(v, str) and v):
            raise BadTable(f"device {what} must be a non-empty string, got {v!r}")
    return arch, name


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _plain(label: str) -> TemplateValue:
    """A key label as the value a file would spell: "True" -> True, "4096" -> 4096 (both
    label back to the same text, so matching is unchanged)."""
    if label in ("True", "False"):
        return label == "True"
    if label.lstrip("-").isdigit() and str(int(label)) == label:
        return int(label)
    return label


def _match(value: Any) -> tuple[list[tuple[str, TemplateValue]], list[tuple[str, Bound, Bound]]]:
    if not isinstance(value, dict):
        raise BadTable(f"'match' is a mapping of feature to value or [lo, hi], got {value!r}")
    exact, ranges = [], []
    for text, v in value.items():
        try:
            feature = Feature.parse(text)
        except ArgumentError as e:
            raise BadTable(str(e)) from None
        if feature.text != text:
            raise BadTable(f"feature {text!r} has spaces around it")
        if isinstance(v, list):
            bounds_ok = len(v) == 2 and all(b is None or _int(b) for b in v)
            if not bounds_ok or (v[0] is not None and v[1] is not None and v[0] > v[1]):
                raise BadTable(f"{text}: a range is [lo, hi] with ints lo <= hi (or null), got {v}")
            lo, hi = v
            if feature.bucket != "exact" or feature.field in ("dtype", "contiguous"):
                raise BadTable(f"{text}: only an unbucketed size can match a range")
            ranges.append((text, lo, hi))
        elif isinstance(v, bool | int | str):
            exact.append((text, v))
        else:
            raise BadTable(f"{text}: a value is a string, an int, a bool or [lo, hi], got {v!r}")
    return exact, ranges


def _config(value: Any) -> Config:
    if not isinstance(value, dict):
        raise BadTable(f"'config' is a mapping, got {value!r}")
    value = dict(value)
    if isinstance(value.get("template"), dict):
        value["template"] = list(value["template"].items())
    try:
        return Config.from_dict(value)
    except (ArgumentError, TypeError, ValueError) as e:
        raise BadTable(f"bad config: {e}") from None


def _parse(source: Path | Traversable) -> Any:
    text = source.read_text(encoding="utf-8")
    if source.name.endswith(".json"):
        return json.loads(text)
    import yaml

    return yaml.safe_load(text)


def _entries(source: Path | Traversable) -> tuple[list[TableEntry], list[str]]:
    """The good entries of one file and a message per problem (file or entry)."""
    try:
        doc = _parse(source)
    except Exception as e:  # noqa: BLE001 - any reader error (OSError, JSON, YAML) is a warning
        return [], [f"table {source} is unusable ({type(e).__name__}: {e}); skipped"]
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        return [], [f"table {source} is unusable (no 'entries' list); skipped"]
    if doc.get("kernelkit_table", TABLE_FORMAT) != TABLE_FORMAT:
        return [], [f"table {source} has format {doc['kernelkit_table']!r}, not {TABLE_FORMAT}"]
    defaults = {k: doc[k] for k in ("op", "device") if k in doc}
    good, problems = [], []
    for i, item in enumerate(doc["entries"]):
        where = f"{source} entry {i}"
        try:
            good.append(TableEntry.from_dict(item, defaults, where))
        except BadTable as e:
            what = item.get("impl") if isinstance(item, dict) else None
            problems.append(f"table {where}{f' ({what})' if what else ''}: {e}; skipped")
    return good, problems


class _Row(NamedTuple):
    """An indexed entry: its precedence (specificity, then load order), its parsed ranges."""

    precedence: tuple[tuple[int, int, int, float], int]
    entry: TableEntry
    ranges: tuple[Feature, ...]


class _Group:
    """Entries of one (op, arch) sharing the same exact features, by those features' labels."""

    def __init__(self, features: tuple[Feature, ...]) -> None:
        self.features = features
        self.by_labels: dict[tuple[str, ...], list[_Row]] = {}

    def candidates(self, problem: Problem, seen: dict[str, str | None]) -> list[_Row]:
        labels = []
        for f in self.features:
            label = seen.get(f.text, _UNSET)
            if label is _UNSET:
                try:
                    label = f.label(f.value(problem))
                except KeyError:
                    label = None
                seen[f.text] = label
            if label is None:
                return []
            labels.append(label)
        return self.by_labels.get(tuple(labels), [])


_UNSET: Any = object()


def _in_ranges(row: _Row, problem: Problem) -> bool:
    for feature, (_, lo, hi) in zip(row.ranges, row.entry.ranges):
        try:
            v = feature.value(problem)
        except KeyError:
            return False
        if not _int(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            return False
    return True


class Table:
    """Entries from table files, indexed by (op, arch) and exact features on first lookup.

    Example::

        >>> from kernelkit._records import ArgFacts, Problem, Target
        >>> e = TableEntry("scale", "scale/wide", Config(), arch="x86_64", ranges=(("n", 1, 64),))
        >>> t = Table([e])
        >>> target = Target("cpu", 0, "x86_64", "host", 1024, (1024,) * 3, (1 << 31,) * 3, 0, 0)
        >>> t.lookup("scale", target, Problem("scale", attrs=(("n", 8),))).impl
        'scale/wide'
    """

    def __init__(self, entries: Iterable[TableEntry], problems: Sequence[str] = ()) -> None:
        self.entries = tuple(entries)
        self.problems = tuple(problems)  # what loading skipped, one message each
        self._index: dict[tuple[str, str | None], list[_Group]] | None = None
        self._warned: set[int] = set()
        self._lock = threading.Lock()

    @classmethod
    def load(cls, paths: Iterable[Path | str | Traversable]) -> Table:
        """The entries of every file (YAML by ``.yaml``/``.yml``, else JSON by ``.json``); a
        malformed file or entry is one warning naming it, and is skipped."""
        entries, problems = [], []
        for p in paths:
            source = Path(p) if isinstance(p, str | os.PathLike) else p
            good, bad = _entries(source)
            entries += good
            problems += bad
        for message in problems:
            warnings.warn(f"kernelkit: {message}", RuntimeWarning, stacklevel=2)
        return cls(entries, problems)

    def _build(self) -> dict[tuple[str, str | None], list[_Group]]:
        index: dict[tuple[str, str | None], dict[tuple[str, ...], _Group]] = {}
        for i, e in enumerate(self.entries):
            groups = index.setdefault((e.op, e.arch), {})
            names = tuple(f for f, _ in e.exact)
            group = groups.get(names)
            if group is None:
                group = groups[names] = _Group(tuple(Feature.parse(f) for f in names))
            labels = tuple(f.label(v) for f, (_, v) in zip(group.features, e.exact))
            ranges = tuple(Feature.parse(f) for f, _, _ in e.ranges)
            group.by_labels.setdefault(labels, []).append(_Row((e.rank, -i), e, ranges))
        return {k: list(v.values()) for k, v in index.items()}

    def lookup(
        self,
        op: str,
        target: Target,
        problem: Problem,
        known_impl: Callable[[str, str], bool] | None = None,
    ) -> TableEntry | None:
        """The most specific entry matching ``op`` on ``target`` for ``problem`` (see the
        module's docstring for the order), or None. With ``known_impl``, an entry whose
        implementation it rejects is skipped (one warning naming the entry)."""
        for row in self._rows(op, target, problem):
            if known_impl is None or self._known(row, known_impl):
                return row.entry
        return None

    def matches(self, op: str, target: Target, problem: Problem) -> list[TableEntry]:
        """Every entry matching ``op`` on ``target`` for ``problem``, most specific first."""
        return [row.entry for row in self._rows(op, target, problem)]

    def _rows(self, op: str, target: Target, problem: Problem) -> list[_Row]:
        index = self._index
        if index is None:
            with self._lock:
                if self._index is None:
                    self._index = self._build()
                index = self._index
        found = []
        seen: dict[str, str | None] = {}
        for arch in (target.arch, None):
            for group in index.get((op, arch), ()):
                for row in group.candidates(problem, seen):
                    name = row.entry.device_name
                    if name is not None and name not in target.name:
                        continue
                    if row.ranges and not _in_ranges(row, problem):
                        continue
                    found.append(row)
        return sorted(found, reverse=True)  # rows compare by precedence first

    def _known(self, row: _Row, known_impl: Callable[[str, str], bool]) -> bool:
        e = row.entry
        if known_impl(e.op, e.impl):
            return True
        if row.precedence[1] not in self._warned:
            self._warned.add(row.precedence[1])
            warnings.warn(
                f"kernelkit: {e.where or 'table entry'} names implementation {e.impl!r}, "
                f"which op {e.op!r} does not have; skipped",
                RuntimeWarning,
                stacklevel=3,
            )
        return False

    def validate(self, known_impl: Callable[[str, str], bool] | None = None) -> list[str]:
        """Every problem, one message each: what loading skipped, entries naming an unknown
        implementation, and entries matching exactly what an earlier one matches."""
        out = list(self.problems)
        first: dict[tuple[Any, ...], TableEntry] = {}
        for e in self.entries:
            if known_impl is not None and not known_impl(e.op, e.impl):
                out.append(f"{e.where}: implementation {e.impl!r} of {e.op!r} does not exist")
            scope = (e.op, e.arch, e.device_name, e.exact, e.ranges)
            if scope in first:
                out.append(f"{e.where}: matches what {first[scope].where} does (never chosen)")
            first.setdefault(scope, e)
        return out

    @staticmethod
    def write(
        path: Path | str,
        entries: Iterable[TableEntry],
        op: str | None = None,
        device: dict[str, str] | None = None,
    ) -> None:
        """Write a table file (YAML for ``.yaml``/``.yml``, else JSON), atomically. ``op`` and
        ``device`` are written once as the file's defaults and left out of the entries they
        equal (a file of one op and one device reads as a list of problems)."""
        path = Path(path)
        rows = []
        for e in entries:
            d = e.to_dict()
            for name, value in (("op", op), ("device", device)):
                if value is not None and d.get(name) == value:
                    del d[name]
                elif value is not None and name not in d:
                    raise BadTable(f"{e.describe()} has no {name}: it would take the file's")
            rows.append(d)
        header = {k: v for k, v in (("op", op), ("device", device)) if v is not None}
        doc = {"kernelkit_table": TABLE_FORMAT, **header, "entries": rows}
        if path.suffix in (".yaml", ".yml"):
            import yaml

            text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
        else:
            text = json.dumps(doc, indent=1) + "\n"
        write_atomic(path, text.encode())


_shipped: Table | None = None
_shipped_lock = threading.Lock()


def _name(t: Traversable) -> str:
    return t.name


def shipped_tables() -> Table:
    """Every table shipped in ``kernelkit/tables/`` (loaded once, on first use)."""
    global _shipped
    if _shipped is None:
        with _shipped_lock:
            if _shipped is None:
                folder = files("kernelkit") / "tables"
                found = list(folder.iterdir()) if folder.is_dir() else []
                tables = sorted((t for t in found if t.name.endswith(SUFFIXES)), key=_name)
                _shipped = Table.load(tables)
    return _shipped
