"""One candidate of a tune spec and what its measurement gave, as the local worker pool
(``tune_pool.py``) and the Ray tasks (``tune_ray.py``) both send and receive them.

A ``Measurement`` names a candidate: a shape of the spec, a config of the autotuned kernel, and
the device kind it must run on (None: any device the worker has). A ``Measured`` is its result:
``ok`` (timed, with its outputs for the parent to compare), ``skipped``, ``failed`` (did not
compile or run, crashed its worker, timed out); the parent turns an ``ok`` whose outputs disagree
into ``rejected`` (``judged``). ``Bench`` runs measurements in a worker process, keeping one
tuning session per shape.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._cache.files import write_atomic
from .._errors import LaunchError

if TYPE_CHECKING:
    from .._select.tuning.records import Environment
    from .tune_spec import TuneSpec

__all__ = ["Bench", "Measured", "Measurement"]

STATUSES = ("ok", "skipped", "failed", "rejected", "not timed")


@dataclass(frozen=True)
class Measurement:
    """A candidate: shape ``shape`` of the spec, config ``config`` of the kernel's list, on a
    device of kind ``kind`` (None: whatever device the worker has)."""

    shape: int
    config: int
    kind: str | None = None

    def label(self) -> str:
        return f"{self.kind or 'any'}.s{self.shape}.c{self.config}"


@dataclass(frozen=True)
class Measured:
    """What a candidate gave: status, seconds per run (``ok`` only), why (or how it was timed),
    the outputs as host arrays (``ok`` and not yet ``judged``), the problem's key and the
    environment it ran in (None when the worker never got that far) and the node it ran on."""

    status: str
    seconds: float | None = None
    detail: str = ""
    outputs: tuple[Any, ...] | None = field(default=None, compare=False, repr=False)
    key: tuple[tuple[str, str], ...] | None = None
    env: Environment | None = None
    where: str = ""
    judged: bool = False
    # a device fault: the worker's CUDA context is lost, so the worker is replaced
    context_lost: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"[tune] a measurement's status is one of {STATUSES}, got {self.status!r}"
            )

    @staticmethod
    def failure(detail: str, where: str = "") -> Measured:
        return Measured("failed", detail=detail, where=where)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (outputs are stored beside it, by the journal)."""
        return {
            "status": self.status,
            "seconds": self.seconds,
            "detail": self.detail,
            "key": None if self.key is None else [list(k) for k in self.key],
            "env": None if self.env is None else self.env.to_dict(),
            "where": self.where,
            "judged": self.judged,
        }

    @classmethod
    def from_dict(cls, d: Any, outputs: tuple[Any, ...] | None = None) -> Measured:
        """Read back ``to_dict``'s form (from disk: every field checked, ``ValueError`` naming
        the first bad one)."""
        from .._select.tuning.records import Environment, checked_key, checked_us

        fields = {"status", "seconds", "detail", "key", "env", "where", "judged"}
        if not isinstance(d, dict) or set(d) != fields:
            raise ValueError("not a stored measurement")
        if not isinstance(d["detail"], str) or not isinstance(d["where"], str):
            raise ValueError("'detail' and 'where' must be strings")
        if not isinstance(d["judged"], bool):
            raise ValueError("'judged' must be true or false")
        return cls(
            status=str(d["status"]),
            seconds=checked_us(d["seconds"], "'seconds'"),
            detail=d["detail"],
            outputs=outputs,
            key=None if d["key"] is None else checked_key(d["key"], "measurement"),
            env=None if d["env"] is None else Environment.from_dict(d["env"]),
            where=d["where"],
            judged=d["judged"],
        )

    def verdict(self, status: str, detail: str) -> Measured:
        """This result judged by the parent: its final status, outputs dropped."""
        seconds = self.seconds if status == "ok" else None
        return replace(
            self, status=status, seconds=seconds, detail=detail, outputs=None, judged=True
        )


def module_source(spec: TuneSpec) -> bytes | None:
    """The bytes of the spec's module file (None for an importable module), shipped with
    measurements to nodes that may not have the file."""
    if not spec.module.endswith(".py"):
        return None
    return Path(spec.module).read_bytes()


def local_spec(spec: TuneSpec, source: bytes | None) -> TuneSpec:
    """``spec`` with its module at a path of this node holding ``source``: the spec's own when
    it holds these bytes (a shared file system), else a copy in a temp folder named for them."""
    if source is None:
        return spec
    here = Path(spec.module)
    try:
        if here.is_file() and here.read_bytes() == source:
            return spec
    except OSError:
        pass
    digest = hashlib.sha256(source).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / f"kernelkit-tune-{os.getuid()}-{digest}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{folder} is not a folder of this user's: the module is not written there")
    copy = folder / here.name
    if not (copy.is_file() and copy.read_bytes() == source):
        write_atomic(copy, source)
    return replace(spec, module=str(copy))


class Bench:
    """A worker's state: the spec's autotuned kernel and one tuning session per shape."""

    def __init__(self, spec: TuneSpec, where: str = "") -> None:
        from .tune_spec import load_object

        self.spec, self.where = spec, where
        self.obj = load_object(spec)
        self.sessions: dict[int, Any] = {}

    def measure(self, m: Measurement) -> Measured:
        """Run one candidate; never raises for a bad candidate or shape."""
        from .._tune.tuner import failure_reason as _reason

        try:
            session = self._session(m.shape)
        except Exception as e:  # noqa: BLE001 - reported, the worker goes on
            return Measured.failure(f"{type(e).__name__}: {e}", self.where)
        env = _environment(session)
        config = self.obj.impl.configs[m.config]
        key = tuple((str(f), str(v)) for f, v in session.key)
        why = session.legal(config)
        if why is not None:
            return Measured("skipped", None, why, None, key, env, self.where)
        try:
            session.compile(config)
            outputs = tuple(session.outputs(config))
            seconds, how = session.time(config)
        except Exception as e:  # noqa: BLE001
            lost = isinstance(e, LaunchError)  # a device fault
            why = _reason(e)
            return Measured("failed", None, why, None, key, env, self.where, context_lost=lost)
        return Measured("ok", seconds, how, outputs, key, env, self.where)

    def _session(self, shape: int) -> Any:
        from .._tune.autotune import KernelCall
        from .tune_spec import make_call

        session = self.sessions.get(shape)
        if session is None:
            spec, obj = self.spec, self.obj
            args = make_call(obj, spec, shape)
            problem, bound = obj.problem(**args)
            call = KernelCall(
                args["inputs"],
                args["output_shapes"],
                args["output_dtypes"],
                backend=spec.backend,
                check=spec.check,
            )
            session = self.sessions[shape] = obj.session(problem, bound, call)
        return session


def _environment(session: Any) -> Environment:
    from .._select.tuning.records import Environment

    return Environment.of(session.backend, session.target)
