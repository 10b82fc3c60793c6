"""What a tune-spec run has measured so far, stored as each result arrives, so that a run cut off
half way (Ctrl-C, a lost node, a killed job) resumes where it stopped: rerunning the same spec
measures no candidate twice.

Layout, under the tuning database's root (nothing with ``KERNELKIT_CACHE=0``)::

    runs/<run digest>/<kind>.s<shape>.c<config>.json   one ``Measured`` (``to_dict``)
    runs/<run digest>/<kind>.s<shape>.c<config>.npz    its outputs, until the shape is judged

The run digest hashes what decides a candidate's result: kernelkit's version, the module's bytes
(or its name when it is imported), the object's name, the shapes, backend, framework, check mode
and seed; so editing the kernel or the shapes starts a new run. Once every candidate of a shape
has a result, the parent judges them (outputs compared) and rewrites them ``judged``, their
outputs deleted. Files are read as untrusted: regular files only, bounded, every field checked;
an unreadable one is warned about, deleted, and its candidate measured again.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._cache.files import unlink, write_atomic
from .._select.tuning.files import names, read_regular
from .tune_tasks import Measured, Measurement

if TYPE_CHECKING:
    from .tune_spec import TuneSpec

__all__ = ["Journal", "run_digest"]

_MAX_JSON_BYTES = 1 << 20
_MAX_OUTPUTS_BYTES = 4 << 30
_LABEL = re.compile(r"[A-Za-z0-9_-]{1,64}")


def run_digest(spec: TuneSpec, source: bytes | None) -> str:
    """sha256 hex of what decides the spec's measurements (see the module's docstring)."""
    from .._version import __version__

    what = {
        "kernelkit": __version__,
        "module": hashlib.sha256(source).hexdigest() if source is not None else spec.module,
        "object": spec.object,
        "shapes": spec.shapes,
        "backend": spec.backend,
        "framework": spec.framework,
        "check": spec.check,
        "seed": spec.seed,
    }
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _name(m: Measurement) -> str:
    kind = m.kind or "any"
    if not _LABEL.fullmatch(kind):  # a kind names a file: letters, digits, - and _ only
        kind = "k" + hashlib.sha256(kind.encode()).hexdigest()[:16]
    return f"{kind}.s{m.shape}.c{m.config}"


class Journal:
    """The stored results of one run (``folder`` None: nothing is stored, nothing resumes)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._warned = False

    @classmethod
    def of(cls, spec: TuneSpec, source: bytes | None, fresh: bool = False) -> Journal:
        """The journal of ``spec`` in the current tuning database (``fresh``: emptied first)."""
        from .._select.tuning import db

        root = db.current_db().root
        journal = cls(None if root is None else root / "runs" / run_digest(spec, source))
        if fresh:
            journal.clear()
        return journal

    def clear(self) -> None:
        if self.folder is not None:
            for name in names(self.folder):
                unlink(self.folder / name)

    def load(self, m: Measurement) -> Measured | None:
        """The stored result of ``m``, or None (never stored, or unreadable: then deleted)."""
        if self.folder is None:
            return None
        base = self.folder / _name(m)
        try:
            d = json.loads(read_regular(_file(base, ".json"), _MAX_JSON_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError) as e:
            self._drop(base, f"{type(e).__name__}: {e}")
            return None
        try:
            outputs = None
            if d.get("status") == "ok" and not d.get("judged"):
                outputs = _read_outputs(_file(base, ".npz"))
            return Measured.from_dict(d, outputs)
        except Exception as e:  # noqa: BLE001 - anything wrong in a stored file: measure again
            self._drop(base, f"{type(e).__name__}: {e}")
            return None

    def store(self, m: Measurement, result: Measured) -> None:
        """Keep ``result`` (outputs first, then the record naming it: a reader never sees a
        record without its outputs). A failed write warns once and the run goes on."""
        if self.folder is None:
            return
        base = self.folder / _name(m)
        try:
            if result.outputs is not None and not result.judged:
                import numpy as np

                buf = io.BytesIO()
                np.savez(buf, *result.outputs)
                write_atomic(self.folder / (base.name + ".npz"), buf.getvalue())
            text = json.dumps(result.to_dict(), sort_keys=True, allow_nan=False)
            write_atomic(self.folder / (base.name + ".json"), text.encode())
            if result.judged:
                unlink(_file(base, ".npz"))
        except (OSError, ValueError) as e:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"kernelkit tune: cannot store results in {self.folder} ({e}); an "
                    "interrupted run will measure them again",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def _drop(self, base: Path, why: str) -> None:
        warnings.warn(
            f"kernelkit tune: discarding the stored result {base.name} ({why[:200]}); it is "
            "measured again",
            RuntimeWarning,
            stacklevel=3,
        )
        unlink(_file(base, ".json"))
        unlink(_file(base, ".npz"))


def _file(base: Path, suffix: str) -> Path:
    return base.with_name(base.name + suffix)  # the name holds dots: never with_suffix


def _read_outputs(path: Path) -> tuple[Any, ...]:
    import numpy as np

    data = read_regular(path, _MAX_OUTPUTS_BYTES)
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return tuple(z[f"arr_{i}"] for i in range(len(z.files)))
