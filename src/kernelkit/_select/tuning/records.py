"""The tuning database's records: where a timing was taken (``Environment``) and what won
(``TuningRecord``).

A record is only valid in the environment it was measured in: the same kernelkit, backend, device,
driver major version and compiler, and the same spelling of keys. Both records are frozen,
validated at construction, and round-trip through JSON exactly; ``from_dict`` checks every field
of what it reads (a file may be corrupt, foreign or crafted) and raises ``BadRecord`` naming it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..._cache.keys import digest_of
from ..._errors import ArgumentError
from ..._version import __version__
from ..keys import Feature
from ..records import Config

if TYPE_CHECKING:
    from ..._records import Target
    from ...backend import Backend

__all__ = [
    "TUNING_SCHEMA_VERSION",
    "BadRecord",
    "Environment",
    "TuningRecord",
    "checked_key",
    "checked_us",
    "record_digest",
]

# 1: keys are (feature, label) pairs as _select.keys spells and buckets them. Bump it when that
# spelling or bucketing changes: records made under another schema are then never served.
TUNING_SCHEMA_VERSION = 1

Key = tuple[tuple[str, str], ...]


class BadRecord(ArgumentError):
    """A malformed record (read from a file or an export, or built with bad fields): refused,
    never served."""


def _str(d: dict[str, Any], name: str, where: str, empty: bool = False) -> str:
    v = d.get(name)
    if not isinstance(v, str) or (not empty and not v):
        raise BadRecord(f"{where}: {name!r} must be a{'' if empty else ' non-empty'} string")
    return v


def _int(d: dict[str, Any], name: str, where: str) -> int:
    v = d.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise BadRecord(f"{where}: {name!r} must be an int >= 0, got {v!r}")
    return v


def checked_us(v: Any, what: str) -> float | None:
    """A stored time in µs (None allowed), or BadRecord naming ``what``."""
    if v is None:
        return None
    try:
        f = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
    except OverflowError:  # an int beyond a float's range (10**400)
        f = math.inf
    if not math.isfinite(f) or f < 0:
        raise BadRecord(f"{what} must be a finite number >= 0 or null, got {str(v)[:40]}")
    return f


def _only(d: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise BadRecord(f"{where} is not a JSON object")
    extra = set(d) - allowed
    if extra:
        raise BadRecord(f"{where} has unknown fields {sorted(extra)}")
    return d


@dataclass(frozen=True)
class Environment:
    """Where a timing is valid: kernelkit, backend, device, driver major, compiler, key schema.

    ``facts`` holds a backend's other ``environment_facts()`` as sorted ``(name, text)`` pairs.
    ``digest()`` names the database directory of the records made here.

    Example::

        >>> e = Environment("0.1.0", "cpu", "host", "x86_64", 0, "g++ 12")
        >>> len(e.digest()), e == Environment.from_dict(e.to_dict())
        (64, True)
    """

    kernelkit: str
    backend: str
    device: str
    arch: str
    driver_major: int
    compiler: str
    schema: int = TUNING_SCHEMA_VERSION
    facts: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("kernelkit", "backend", "device", "arch", "compiler"):
            if not isinstance(getattr(self, name), str):
                raise ArgumentError(f"Environment.{name} must be a string")
        for name in ("driver_major", "schema"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ArgumentError(f"Environment.{name} must be an int >= 0, got {v!r}")
        object.__setattr__(self, "facts", tuple(sorted((str(k), str(v)) for k, v in self.facts)))

    @classmethod
    def of(cls, backend: Backend, target: Target) -> Environment:
        """The environment of ``target`` on ``backend``: its compiler identity and
        ``environment_facts()``, asked once per (backend object, target) in a process."""
        known = _environments.get((backend, target))
        if known is not None:
            return known
        facts = dict(backend.environment_facts())
        driver = facts.pop("driver_major", 0)
        env = cls(
            kernelkit=__version__,
            backend=backend.name,
            device=target.name,
            arch=target.arch,
            driver_major=int(driver),
            compiler=backend.compiler_identity(),
            facts=tuple(facts.items()),  # type: ignore[arg-type]
        )
        return _environments.setdefault((backend, target), env)

    def digest(self) -> str:
        """sha256 hex of the canonical JSON; computed once per instance."""
        d = self.__dict__.get("_digest")
        if d is None:
            text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
            d = hashlib.sha256(text.encode()).hexdigest()
            object.__setattr__(self, "_digest", d)  # frozen: a cache, not a field
        return d

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["facts"] = [list(f) for f in self.facts]
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Environment:
        where = "environment"
        d = _only(d, {f for f in cls.__dataclass_fields__}, where)
        facts = d.get("facts", [])
        if not isinstance(facts, list) or not all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(s, str) for s in f)
            for f in facts
        ):
            raise BadRecord(f"{where}: 'facts' must be a list of [name, text] pairs")
        return cls(
            kernelkit=_str(d, "kernelkit", where),
            backend=_str(d, "backend", where),
            device=_str(d, "device", where, empty=True),
            arch=_str(d, "arch", where, empty=True),
            driver_major=_int(d, "driver_major", where),
            compiler=_str(d, "compiler", where, empty=True),
            schema=_int(d, "schema", where),
            facts=tuple((k, v) for k, v in facts),
        )

    def describe(self) -> str:
        """One line: ``cuda on 'NVIDIA H100' (sm_90), driver 12, nvrtc-12.8, kernelkit 0.1.0``."""
        extra = "".join(f", {k}={v}" for k, v in self.facts)
        return (
            f"{self.backend} on {self.device!r} ({self.arch}), driver {self.driver_major}, "
            f"{self.compiler}, kernelkit {self.kernelkit}, schema {self.schema}{extra}"
        )

    def differences(self, other: Environment) -> list[str]:
        """``field: this vs other`` for each field that differs (for refusal messages)."""
        a, b = self.to_dict(), other.to_dict()
        return [f"{k} {a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k]]


_environments: dict[tuple[Backend, Target], Environment] = {}  # backends hash by identity


def checked_key(value: Any, where: str) -> Key:
    """A stored key (a list of [feature, label] pairs), or BadRecord naming ``where``."""
    if not isinstance(value, list | tuple):
        raise BadRecord(f"{where}: 'key' must be a list of [feature, label] pairs")
    out = []
    for item in value:
        if not (
            isinstance(item, list | tuple)
            and len(item) == 2
            and all(isinstance(s, str) for s in item)
        ):
            raise BadRecord(f"{where}: key entry {item!r} is not a [feature, label] pair")
        try:
            Feature.parse(item[0])
        except ArgumentError as e:
            raise BadRecord(f"{where}: {e}") from None
        out.append((item[0], item[1]))
    return tuple(out)


def record_digest(op: str, env_digest: str, key: Key) -> str:
    """The digest naming a record's file: labelled (op, environment, key) parts."""
    return digest_of((("op", op), ("env", env_digest), ("key", json.dumps([list(k) for k in key]))))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class TuningRecord:
    """What tuning found for one key of one op in one environment.

    ``impl`` and ``config`` are the winner; ``best_us`` its median time; ``measurements`` every
    candidate's ``(config description, median µs)``, ``None`` for one that failed or was skipped;
    ``candidates`` how many were considered; ``tuning_s`` the wall time tuning took; ``created``
    an ISO 8601 time (UTC). ``identity`` is the op's ``identity`` when it was measured (for an
    autotuned kernel, the digest of its spec and config list; see ``Op.identity``): a record is
    served only to an op of the same identity.

    Example::

        >>> env = Environment("0.1.0", "cpu", "host", "x86_64", 0, "g++ 12")
        >>> r = TuningRecord("scale", (("x.dtype", "float32"),), "scale/generic", Config(), env)
        >>> TuningRecord.from_json(r.to_json()) == r
        True
    """

    op: str
    key: Key
    impl: str
    config: Config
    env: Environment
    measurements: tuple[tuple[str, float | None], ...] = ()
    best_us: float | None = None
    candidates: int = 0
    tuning_s: float = 0.0
    created: str = field(default_factory=_now)
    identity: str = ""

    def __post_init__(self) -> None:
        try:
            if not (isinstance(self.op, str) and self.op and isinstance(self.impl, str)):
                raise BadRecord("op and impl must be non-empty strings")
            if not self.impl or not isinstance(self.created, str):
                raise BadRecord("impl must be non-empty and created a string")
            if not isinstance(self.identity, str) or len(self.identity) > 200:
                raise BadRecord("identity must be a string (a digest)")
            if not isinstance(self.config, Config) or not isinstance(self.env, Environment):
                raise BadRecord("config must be a Config and env an Environment")
            object.__setattr__(self, "key", checked_key(self.key, "key"))
            ms = []
            for m in self.measurements:
                if not (isinstance(m, list | tuple) and len(m) == 2 and isinstance(m[0], str)):
                    raise BadRecord(f"measurement {m!r} is not a (config, µs) pair")
                ms.append((m[0], checked_us(m[1], f"measurement of {m[0]!r}")))
            object.__setattr__(self, "measurements", tuple(ms))
            object.__setattr__(self, "best_us", checked_us(self.best_us, "best_us"))
            tuning = checked_us(self.tuning_s, "tuning_s")
            object.__setattr__(self, "tuning_s", 0.0 if tuning is None else tuning)
            c = self.candidates
            if not isinstance(c, int) or isinstance(c, bool) or c < 0:
                raise BadRecord(f"candidates must be an int >= 0, got {c!r}")
        except BadRecord as e:
            raise BadRecord(f"[tuning record {self.op!r}] {e}") from None

    def digest(self) -> str:
        """The digest naming this record's file (of op, environment and key)."""
        return record_digest(self.op, self.env.digest(), self.key)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "key": [list(k) for k in self.key],
            "impl": self.impl,
            "config": self.config.to_dict(),
            "env": self.env.to_dict(),
            "measurements": [list(m) for m in self.measurements],
            "best_us": self.best_us,
            "candidates": self.candidates,
            "tuning_s": self.tuning_s,
            "created": self.created,
            "identity": self.identity,
        }

    @classmethod
    def from_dict(cls, d: Any) -> TuningRecord:
        """A record from parsed JSON; ``BadRecord`` naming what is wrong (whatever it is: a
        number too large for a float, nesting too deep to compare, a wrong type)."""
        try:
            return cls._from_dict(d)
        except BadRecord:
            raise
        except (RecursionError, MemoryError) as e:
            raise BadRecord(f"tuning record: {type(e).__name__} while reading it") from None
        except Exception as e:  # noqa: BLE001 - anything read from disk may be hostile
            raise BadRecord(f"tuning record: {type(e).__name__}: {str(e)[:200]}") from None

    @classmethod
    def _from_dict(cls, d: Any) -> TuningRecord:
        d = _only(d, set(cls.__dataclass_fields__), "tuning record")
        where = f"tuning record {str(d.get('op'))[:60]!r}"
        missing = {"op", "key", "impl", "config", "env"} - set(d)
        if missing:
            raise BadRecord(f"{where} lacks {sorted(missing)}")
        try:
            config = Config.from_dict(d["config"])
        except (ArgumentError, TypeError, ValueError) as e:
            raise BadRecord(f"{where}: bad config: {e}") from None
        ms = d.get("measurements", [])
        if not isinstance(ms, list):
            raise BadRecord(f"{where}: 'measurements' must be a list")
        return cls(
            op=_str(d, "op", where),
            key=checked_key(d["key"], where),
            impl=_str(d, "impl", where),
            config=config,
            env=Environment.from_dict(d["env"]),
            measurements=tuple(tuple(m) if isinstance(m, list) else m for m in ms),
            best_us=d.get("best_us"),
            candidates=d.get("candidates", 0),
            tuning_s=d.get("tuning_s", 0.0),
            created=_str(d, "created", where, empty=True) if "created" in d else "",
            identity=_str(d, "identity", where, empty=True) if "identity" in d else "",
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> TuningRecord:
        try:
            return cls.from_dict(json.loads(text))
        except BadRecord:
            raise
        except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
            raise BadRecord(f"not JSON: {type(e).__name__}: {str(e)[:200]}") from None

    def describe(self) -> str:
        """``op [feature=label ...] -> impl [config]``: names the record in messages."""
        key = " ".join(f"{f}={v}" for f, v in self.key)
        return f"{self.op} [{key}] -> {self.impl} [{self.config.describe()}]"
