"""Which features of a problem a decision depends on, and how dynamic sizes are bucketed.

A feature is written as text, so that tuning specs, tables and the database share one spelling:

    x.dtype            the dtype of argument x
    x.shape[1]         a dimension, exact
    x.ndim, x.contiguous
    M                  a named dimension or attribute of the problem (an op's M, N, K, ...)
    M:pow2             bucketed to the next power of two (1, 2, 4, 8, ...)
    M:ranges(1,17,129) bucketed by boundaries: [1,17) [17,129) [129,inf)

Bucketing makes tuning run once per bucket, not once per size. The key of a problem is a tuple of
``(feature, label)`` strings, stable across processes and machines (it names database records).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import ArgumentError
from .._records import Problem

__all__ = ["Feature", "KeySpec"]

_FEATURE = re.compile(
    r"(?P<name>[A-Za-z_]\w*)(?:\.(?P<field>dtype|ndim|contiguous|shape\[(?P<index>-?\d+)\]))?"
    r"(?::(?P<bucket>exact|pow2|ranges\((?P<bounds>[\d,\s]+)\)))?\Z"
)


@dataclass(frozen=True)
class Feature:
    """One parsed feature: what to read from the problem and how to bucket it."""

    text: str
    name: str
    field: str | None  # None: a problem attribute; else "dtype", "ndim", "contiguous", "shape"
    index: int = 0
    bucket: str = "exact"
    bounds: tuple[int, ...] = ()

    @classmethod
    def parse(cls, text: Any) -> Feature:
        if not isinstance(text, str):
            raise ArgumentError(
                f"[key] a feature is a string such as 'x.shape[0]:pow2', got {text!r}"
            )
        m = _FEATURE.match(text.strip())
        if m is None:
            raise ArgumentError(
                f"[key] cannot read feature {text!r}: expected 'arg.dtype', 'arg.shape[i]', "
                "'arg.ndim', 'arg.contiguous' or a problem attribute such as 'M', optionally "
                "followed by ':pow2' or ':ranges(a,b,...)'"
            )
        field = m["field"]
        bounds: tuple[int, ...] = ()
        if m["bounds"] is not None:
            bounds = tuple(int(b) for b in m["bounds"].split(",") if b.strip())
            if not bounds or list(bounds) != sorted(set(bounds)):
                raise ArgumentError(f"[key] ranges in {text!r} must be increasing, got {bounds}")
        bucket = "ranges" if bounds else (m["bucket"] or "exact")
        if bucket != "exact" and field in ("dtype", "contiguous"):
            raise ArgumentError(f"[key] {text!r}: only sizes can be bucketed")
        return cls(
            text=text.strip(),
            name=m["name"],
            field="shape" if field and field.startswith("shape") else field,
            index=int(m["index"]) if m["index"] is not None else 0,
            bucket=bucket,
            bounds=bounds,
        )

    def value(self, problem: Problem) -> Any:
        """The raw value of this feature in ``problem`` (KeyError naming what is missing)."""
        if self.field is None:
            return problem.attr(self.name)
        arg = problem.arg(self.name)
        if self.field == "dtype":
            return arg.dtype
        if self.field == "ndim":
            return len(arg.shape)
        if self.field == "contiguous":
            return arg.contiguous
        try:
            return arg.shape[self.index]
        except IndexError:
            raise KeyError(
                f"{self.text}: argument {self.name!r} has {len(arg.shape)} dimensions"
            ) from None

    def label(self, value: Any) -> str:
        """The bucket ``value`` falls in, as a stable string."""
        if self.bucket == "exact" or not isinstance(value, int) or isinstance(value, bool):
            return str(value)
        if self.bucket == "pow2":
            return str(1 << max(0, (value - 1).bit_length()))
        lo = None
        for b in self.bounds:
            if value < b:
                return f"[{lo if lo is not None else '-inf'},{b})"
            lo = b
        return f"[{lo},inf)"

    def contains(self, label: str, value: Any) -> bool:
        """Whether ``value`` falls in the bucket ``label`` (for tables written as buckets)."""
        return self.label(value) == label

    @property
    def unbucketed(self) -> str:
        """The text without its bucket (``M:pow2`` -> ``M``): what a table's range matches."""
        return self.text.split(":", 1)[0]

    def span(self, label: str) -> tuple[int | None, int | None] | None:
        """The sizes whose bucket is ``label``, as an inclusive ``(lo, hi)`` (None: unbounded),
        so a table row can describe the bucket; None for an unbucketed feature or a label
        this feature never gives.

        Example::

            >>> Feature.parse("M:ranges(1,17,129)").span("[17,129)")
            (17, 128)
            >>> Feature.parse("M:pow2").span("64")
            (33, 64)
        """
        if self.bucket == "pow2":
            if not label.isdigit() or int(label) & (int(label) - 1) or int(label) == 0:
                return None
            v = int(label)
            return (1, 1) if v == 1 else (v // 2 + 1, v)
        if self.bucket != "ranges" or not (label.startswith("[") and label.endswith(")")):
            return None
        lo_text, _, hi_text = label[1:-1].partition(",")
        try:
            lo = None if lo_text == "-inf" else int(lo_text)
            hi = None if hi_text == "inf" else int(hi_text) - 1
        except ValueError:
            return None
        inside = lo if lo is not None else hi
        if inside is None or self.label(inside) != label:
            return None  # not a bucket of these bounds
        return lo, hi


@dataclass(frozen=True)
class KeySpec:
    """The features a decision depends on, in order.

    Example::

        >>> from kernelkit._records import ArgFacts, Problem
        >>> p = Problem("k", (ArgFacts("x", "array", "float32", (1000, 64)),))
        >>> KeySpec.parse(["x.dtype", "x.shape[0]:pow2", "x.shape[1]"]).of(p)
        (('x.dtype', 'float32'), ('x.shape[0]:pow2', '1024'), ('x.shape[1]', '64'))
    """

    features: tuple[Feature, ...]

    @classmethod
    def parse(cls, features: Sequence[str] | str) -> KeySpec:
        if isinstance(features, str):
            features = [features]
        if not isinstance(features, Sequence):
            raise ArgumentError(f"[key] key must be a list of features, got {features!r}")
        parsed = tuple(Feature.parse(f) for f in features)
        texts = [f.text for f in parsed]
        if len(set(texts)) != len(texts):
            raise ArgumentError(f"[key] a feature is listed twice in {texts}")
        return cls(parsed)

    def of(self, problem: Problem) -> tuple[tuple[str, str], ...]:
        """The problem's key: ``(feature, bucket label)`` per feature. KeyError if a feature
        names what the problem does not have."""
        return tuple((f.text, f.label(f.value(problem))) for f in self.features)

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(f.text for f in self.features)
