"""Op families and their implementations: what the selection stage chooses among.

An ``Op`` groups the implementations of one operation. A *generic* implementation is a kernel
with a tuning space (template values, block shape, shared memory) and a rule deriving the grid
from the problem and the config; a *microkernel* is a hand-tuned kernel or a call into a vendor
or framework library that declares what it matches, with a priority. Every implementation says
whether it can run a problem on a target (``check``): a rule, a table or the database can only
ever return one that can.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ArgumentError
from .._records import Problem, Target
from .keys import KeySpec
from .records import Config

__all__ = ["GridRule", "Implementation", "MatchRule", "Op"]

# (problem, target) -> None when the implementation can run it, else why not (for ``explain``)
MatchRule = Callable[[Problem, Target], "str | None"]
# (problem, config) -> grid in threads (MLX's convention: blocks = ceil(grid / threadgroup))
GridRule = Callable[[Problem, Config], Sequence[int]]


@dataclass(frozen=True, eq=False)
class Implementation:
    """One way to compute an op.

    ``run(choice, call)`` carries out a ``KernelChoice`` on a call's arguments (whatever the op
    passes as ``call``) and decides nothing. ``requires`` names target features it needs
    (``"bf16"``, ``"cp_async"``, ``"arch_specific"`` for wgmma, ...), ``match`` any further rule
    (dtypes, layouts, shapes, exact arch). Generic implementations have ``configs`` (the tuning
    space) and a ``default`` that runs every problem they match; ``heuristic`` may pick a config
    for shapes no table covers. ``pads`` says what tiling or padding the implementation imposes
    when chosen (recorded in the choice's reason). ``fits(problem, config)`` says why a config
    cannot run a problem (e.g. a row longer than the registers it keeps), or None; a default
    must fit every problem the implementation matches. ``listed_only``: the rules (microkernel
    priority, heuristics, defaults) never choose it; only a table, the tuning database or an
    override does (a library route that is taken only where it measured ahead). ``defers``:
    why the rules (a microkernel's priority, a heuristic) pass it over for a problem it can run,
    leaving the problem to the next rule, or None; a table, the tuning database or an override
    still names it (with a heuristic's config where it has one), and a generic implementation's
    default stays the last resort."""

    name: str
    run: Callable[[Any, Any], Any]
    kind: Literal["generic", "microkernel"] = "generic"
    grid: GridRule | None = None
    configs: tuple[Config, ...] = ()
    default: Config | None = None
    heuristic: Callable[[Problem, Target], Config | None] | None = None
    requires: AbstractSet[str] = frozenset()  # any set given; kept as a frozenset
    match: MatchRule | None = None
    priority: int = 0
    pads: str = ""
    fits: Callable[[Problem, Config], str | None] | None = None
    # prepare(choice, problem, output_dtype) -> launch(inputs, out): what ``run`` does, with
    # everything fixed by the choice and problem worked out once (the op caches ``launch`` per
    # argument signature); None: ``run`` is called every time
    prepare: Callable[[Any, Problem, Any], Callable[[Any, Any], Any]] | None = None
    listed_only: bool = False
    defers: MatchRule | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("generic", "microkernel"):
            raise ArgumentError(f"[{self.name}] kind must be 'generic' or 'microkernel'")
        object.__setattr__(self, "configs", tuple(self.configs))
        object.__setattr__(self, "requires", frozenset(self.requires))
        if self.kind == "generic":
            if self.grid is None:
                raise ArgumentError(f"[{self.name}] a generic implementation needs a grid rule")
            if self.default is None:
                if not self.configs:
                    raise ArgumentError(
                        f"[{self.name}] a generic implementation needs configs or a default"
                    )
                object.__setattr__(self, "default", self.configs[0])

    def deferral(self, problem: Problem, target: Target) -> str | None:
        """Why the rules pass this implementation over for ``problem`` (``defers``), or None;
        a rule that cannot read the problem defers nothing."""
        if self.defers is None:
            return None
        try:
            return self.defers(problem, target)
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def check(self, problem: Problem, target: Target) -> str | None:
        """None when this implementation can run ``problem`` on ``target``, else why not."""
        missing = sorted(self.requires - target.features)
        if missing:
            return f"needs {', '.join(missing)}, which {target.name} ({target.arch}) lacks"
        if self.match is not None:
            try:
                return self.match(problem, target)
            except (KeyError, IndexError, TypeError, ValueError) as e:
                return f"its match rule cannot read this problem ({type(e).__name__}: {e})"
        return None

    def check_config(self, problem: Problem, config: Config) -> str | None:
        """None when ``config`` can run ``problem``, else why not (``fits``)."""
        if self.fits is None:
            return None
        try:
            return self.fits(problem, config)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            return f"its fits rule cannot read this problem ({type(e).__name__}: {e})"

    def grid_for(self, problem: Problem, config: Config) -> tuple[int, int, int]:
        """The launch grid (in threads) for ``problem`` with ``config``; (1, 1, 1) for a
        microkernel without a grid rule (it launches whatever it launches)."""
        if self.grid is None:
            return (1, 1, 1)
        g = tuple(int(v) for v in self.grid(problem, config))
        return g + (1,) * (3 - len(g))  # type: ignore[return-value]


@dataclass(eq=False)
class Op:
    """An operation and its implementations; the selection stage picks one per problem.

    ``key`` names the problem features a decision depends on (see ``KeySpec``): decisions are
    cached, stored in the tuning database and looked up in tables under that key. ``identity``
    names what its tuning records are bound to (an autotuned kernel: a digest of its spec and
    config list; built-in ops: "", their kernels change only with kernelkit's version, which
    the record's environment holds): a record of another identity is never served.

    Example::

        >>> from kernelkit._select.records import Config
        >>> op = Op("scale", key=["x.dtype", "x.shape[0]:pow2"])
        >>> impl = op.register(Implementation(
        ...     "loop", run=lambda choice, call: None, grid=lambda p, c: (p.arg("x").shape[0],),
        ...     configs=(Config(threadgroup=(128,)), Config(threadgroup=(256,)))))
        >>> [i.name for i in op.implementations]
        ['loop']
    """

    name: str
    key: KeySpec | Sequence[str] = ()
    implementations: list[Implementation] = field(default_factory=list)
    identity: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.key, KeySpec):
            self.key = KeySpec.parse(list(self.key))
        impls, self.implementations = list(self.implementations), []
        for impl in impls:
            self.register(impl)
        self._lock = threading.Lock()
        self._decisions: dict[Any, Any] = {}  # (key, target, switches) -> KernelChoice
        self.generation = 0  # bumped by forget(): callers' own caches of decisions expire

    def register(self, impl: Implementation) -> Implementation:
        """Add an implementation (names are unique within the op); returns it."""
        if any(i.name == impl.name for i in self.implementations):
            raise ArgumentError(f"[{self.name}] implementation {impl.name!r} is registered twice")
        self.implementations.append(impl)
        self.forget()
        return impl

    def get(self, name: str) -> Implementation | None:
        """The implementation called ``name`` (or ``"<op>/<name>"``), or None."""
        short = name.removeprefix(f"{self.name}/")
        return next((i for i in self.implementations if i.name == short), None)

    def impl_id(self, impl: Implementation) -> str:
        return f"{self.name}/{impl.name}"

    def by_kind(self, kind: str) -> Iterable[Implementation]:
        """Implementations of ``kind``, highest priority first (registration order on ties)."""
        found = [i for i in self.implementations if i.kind == kind]
        return sorted(found, key=lambda i: -i.priority)

    def forget(self) -> None:
        """Drop cached decisions (after registering, tuning or importing records)."""
        if hasattr(self, "_decisions"):
            with self._lock:
                self._decisions.clear()
                self.generation += 1
