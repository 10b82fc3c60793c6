"""``kernelkit.autotune``: a kernel whose template values, block shape, grid and shared memory are
chosen per problem by the selection stage, tuned on first use and remembered in the database.

A call of the returned object: a compiled key function reads the arguments' types, shapes and
dtypes (and the values of int/bool scalars) into one tuple; a dictionary maps it to the launch
settings decided earlier (the hot path: one lookup, then the kernel call). A new tuple takes the
slow path: bind the arguments into a ``Problem``, ``decide`` (override > database > table >
default), tune first when the database has no record for the key and ``KERNELKIT_TUNE=auto``
(once per key across threads and processes: a file lock per key), and remember the settings.
Where the kernel's calls can be repeated in C (``_pipeline/repeat.py``), a call served from a
remembered decision is also kept as a decided call (``decided.py``): tried first, it checks
everything the key reads (and more: strides, scalar values), so a repeated call computes no key.

Records are bound to the kernel they were measured on: ``Op.identity`` is a digest of the kernel's
spec (body, header, names, options) and of the configs it offers, and a record of another
identity, or naming a config the kernel does not offer now, is never served (``unservable``).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from .._api import Kernel
from .._arrays import row_strides
from .._errors import ArgumentError, ArgumentTypeError
from .._pipeline.key import MISS
from .._records import Problem
from .._select.decide import decide, explain_selection
from .._select.override import FORCED, config_of, forced
from .._select.records import Config, KernelChoice
from .._select.registry import Implementation, Op
from .._select.select import Selection, unservable
from .._select.tuning import db as tuning
from .calls import KernelCall, grid_rule, identity, launch_settings, run_choice
from .decided import DecidedCalls
from .keyfn import call_pattern, compile_key, is_int_scalar, no_key
from .tuner import Session, TuneResult, tune_session

__all__ = ["AutotunedKernel", "KernelCall", "autotune"]

MAX_FAST = 4096  # distinct argument layouts remembered per kernel (then forgotten at once)


class _AutotunedOp(Op):
    """An op whose ``forget`` also drops its kernel's remembered launch settings."""

    on_forget: Callable[[], None] | None = None

    def forget(self) -> None:
        super().forget()
        if self.on_forget is not None:
            self.on_forget()


def _configs(configs: Any, name: str) -> tuple[Config, ...]:
    if configs is None or isinstance(configs, Config | Mapping | str):
        raise ArgumentTypeError(f"[{name}] configs must be a list of Config or dicts")
    return tuple(config_of(c, name) for c in configs)  # type: ignore[misc]


class AutotunedKernel:
    """A kernel with its launch settings selected per problem (see ``kernelkit.autotune``)."""

    def __init__(
        self,
        kernel: Kernel,
        configs: Sequence[Config | Mapping[str, Any]],
        key: Sequence[str],
        grid: Any,
        *,
        default: Config | Mapping[str, Any] | None = None,
        name: str | None = None,
        budget_s: float | None = None,
        quiet: bool = False,
    ) -> None:
        if not isinstance(kernel, Kernel):
            raise ArgumentTypeError(
                f"[autotune] expects a kernelkit kernel, got {type(kernel).__name__}"
            )
        self.kernel = kernel
        self.name = name or kernel.name
        self.budget_s = budget_s
        self.quiet = quiet
        spec = kernel.spec
        args = (*spec.input_names, *spec.output_names)
        tuned = _configs(configs, self.name)
        fallback = config_of(default, self.name) if default is not None else None
        if not tuned:
            warnings.warn(
                f"[{self.name}] autotune got an empty config list: every call runs the default "
                f"config ({(fallback or Config()).describe()}) and nothing is tuned",
                RuntimeWarning,
                stacklevel=3,
            )
            fallback = fallback or Config()
        self.op = _AutotunedOp(self.name, key=key, identity=identity(spec, tuned, fallback))
        self.impl = self.op.register(
            Implementation(
                "generic",
                run=functools.partial(run_choice, kernel),
                grid=grid_rule(grid, args),
                configs=tuned,
                default=fallback,
            )
        )
        self._fast: dict[Any, tuple] = {}
        self._fast_key: Callable[..., Any] = no_key
        self._keys: dict[tuple, Callable[..., Any]] = {}  # argument pattern -> key function
        self._locks: dict[Any, threading.Lock] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._decided = DecidedCalls()  # stored decisions' calls repeated in C
        self.op.on_forget = self._forget
        self.tunings = 0  # tunings this object ran (tests, benchmarks)

    def __repr__(self) -> str:
        return (
            f"AutotunedKernel({self.name!r}, configs={len(self.impl.configs)}, "
            f"key={list(self.op.key.texts)})"  # type: ignore[union-attr]
        )

    # the hot path ------------------------------------------------------------------------------
    def __call__(
        self,
        inputs: Sequence[Any],
        output_shapes: Sequence[Sequence[int]] | None = None,
        output_dtypes: Sequence[Any] | None = None,
        out: Sequence[Any] | None = None,
        stream: Any = None,
        init_value: float | int | None = None,
        backend: str | None = None,
        check: bool | None = None,
        verbose: bool = False,
    ) -> list[Any]:
        """Run the kernel with the launch settings selected for these arguments. Takes the
        kernel's call arguments, less ``template``, ``threadgroup``, ``grid`` and
        ``shared_memory`` (the config decides them)."""
        decided = self._decided
        head = decided.head
        if head is not None and not verbose and not FORCED.get():  # decided calls, in C
            result = head(
                inputs, output_shapes, output_dtypes, None, None, None, init_value, stream,
                out, backend, check, None,
            )  # fmt: skip
            if result is not MISS:
                return result
            decided.missed += 1
        generation = decided.generation  # (a forget from now on: this call is not kept)
        try:
            hit = self._fast.get(self._fast_key(inputs, out, output_shapes, output_dtypes, backend))
        except Exception:  # noqa: BLE001 - an unusual call is understood on the slow path
            hit = None
        if hit is None and len(self._keys) > 1:
            hit = self._other_pattern(inputs, out, output_shapes, output_dtypes, backend)
        known = hit is not None
        if hit is None or FORCED.get():
            known = False
            hit = self._settle(
                inputs, output_shapes, output_dtypes, out, init_value, backend, check
            )
        template, threadgroup, grid, shared = hit
        args = (
            inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value,
            stream, out, backend, check, shared,
        )  # fmt: skip
        if verbose:  # (the kernel's own call prints its source)
            return self.kernel(*args[:7], True, *args[7:])
        result = self.kernel._last(*args)  # the kernel's last specialization, as its call does
        if result is MISS:
            result = self.kernel(*args[:7], False, *args[7:])
        if known and decided.wants():
            decided.keep(self.kernel, args, generation)
        return result

    def _forget(self) -> None:
        """The remembered decisions dropped, and the calls repeated with them."""
        self._decided.forget(self._fast.clear)

    # the slow path -----------------------------------------------------------------------------
    def problem(
        self,
        inputs: Sequence[Any],
        output_shapes: Any = None,
        output_dtypes: Any = None,
        out: Any = None,
        backend: str | None = None,
    ) -> tuple[Problem, Any]:
        """The call's ``Problem`` (named after this op; int/bool scalars are attributes, so a
        key or a grid rule can read them) and the bind result (backend, target, adapters)."""
        from .._pipeline.bind import bind

        bound = bind(self.kernel.spec, inputs, output_dtypes, out, backend)
        p = bound.problem
        attrs = tuple(
            (n, x if isinstance(x, bool) else int(x))
            for n, x in zip(self.kernel.spec.input_names, inputs)
            if is_int_scalar(x)
        )
        args = list(p.args)
        if out is None and output_shapes is not None:
            outs = [i for i, a in enumerate(args) if a.is_output]
            if len(outs) == len(output_shapes):
                for i, shape in zip(outs, output_shapes):
                    s = tuple(int(v) for v in shape)
                    args[i] = replace(args[i], shape=s, strides=row_strides(s))
        return replace(p, name=self.name, args=tuple(args), attrs=p.attrs + attrs), bound

    def _settle(
        self,
        inputs: Any,
        output_shapes: Any,
        output_dtypes: Any,
        out: Any,
        init_value: Any,
        backend: Any,
        check: Any,
    ) -> tuple:
        problem, bound = self.problem(inputs, output_shapes, output_dtypes, out, backend)
        call = KernelCall(
            inputs, output_shapes, output_dtypes, out, None, init_value, backend, check
        )
        choice, generation = self._choose(problem, bound, call)
        settings = launch_settings(choice)
        if forced(self.op.name) is None:
            self._remember(inputs, out, output_shapes, output_dtypes, backend, settings, generation)
        return settings

    def _choose(self, problem: Problem, bound: Any, call: KernelCall) -> tuple[KernelChoice, int]:
        """The choice for ``problem`` (tuned first where nothing stored serves it and tuning
        is on), and the count of forgets it was decided at (``DecidedCalls.record``)."""
        generation = self._decided.generation
        try:
            key = self.op.key.of(problem)  # type: ignore[union-attr]
        except KeyError as e:
            return self._without_key(problem, e), generation
        choice = decide(self.op, problem, bound.target, bound.backend)
        untuned = choice.source in ("heuristic", "default") and self.impl.configs
        if untuned and tuning.tune_mode() == "auto":
            self._tune_once(key, problem, bound, call)  # (forgets what was decided before)
            generation = self._decided.generation
            choice = decide(self.op, problem, bound.target, bound.backend)
        return choice, generation

    def _without_key(self, problem: Problem, error: KeyError) -> KernelChoice:
        why = str(error.args[0]) if error.args else str(error)
        if why not in self._warned:
            self._warned.add(why)
            warnings.warn(
                f"[{self.name}] cannot compute the tuning key for this call ({why}); running "
                "the default config, untuned",
                RuntimeWarning,
                stacklevel=5,
            )
        config = self.impl.default or Config()
        return KernelChoice(
            self.name,
            self.op.impl_id(self.impl),
            config,
            self.impl.grid_for(problem, config),
            "default",
            reason=f"key not computable: {why}",
        )

    def _tune_once(self, key: Any, problem: Problem, bound: Any, call: KernelCall) -> None:
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            store = tuning.current_db()
            env = tuning.Environment.of(bound.backend, bound.target)
            if not self._served(store.get(self.name, env, key)):
                with store.lock(self.name, env, key):  # another process may be tuning it
                    if not self._served(store.reload(self.name, env, key)):
                        self._tune_and_store(store, problem, bound, call)
            self.op.forget()  # the decision made before tuning (or another's) is replaced

    def _served(self, record: tuning.TuningRecord | None) -> bool:
        """Whether ``record`` is one this kernel serves as it is now."""
        return record is not None and (
            unservable(self.op, record.impl, record.config, record.identity) is None
        )

    def _tune_and_store(
        self, store: tuning.TuningDB, problem: Problem, bound: Any, call: KernelCall
    ) -> None:
        try:
            result = self._tune_problem(problem, bound, call, budget_s=self.budget_s)
        except Exception as e:  # noqa: BLE001 - a failed tuning runs the default
            warnings.warn(
                f"[{self.name}] tuning failed ({type(e).__name__}: {e}); running the "
                "default config",
                RuntimeWarning,
                stacklevel=7,
            )
            return
        if result.record is None:
            warnings.warn(
                f"[{self.name}] no candidate config ran correctly for this problem "
                f"({result.note}); running the default config:\n{result.table()}",
                RuntimeWarning,
                stacklevel=7,
            )
            return
        store.put(result.record)

    def _tune_problem(
        self,
        problem: Problem,
        bound: Any,
        call: KernelCall,
        configs: Sequence[Config] | None = None,
        budget_s: float | None = None,
        quiet: bool | None = None,
    ) -> TuneResult:
        session = self.session(problem, bound, call)
        self.tunings += 1
        try:
            return tune_session(
                session,
                self.impl.configs if configs is None else configs,
                budget_s=budget_s,
                quiet=self.quiet if quiet is None else quiet,
            )
        finally:
            session.close()

    def session(self, problem: Problem, bound: Any, call: KernelCall) -> Session:
        """A tuning session over copies of ``call``'s arguments (outputs allocated when the call
        gives no ``out=``)."""
        outputs = list(call.out) if call.out is not None else self._allocate(problem, bound)
        backend, check = call.backend, call.check

        def make_call(ins: list[Any], outs: list[Any], stream: int) -> KernelCall:
            return KernelCall(ins, None, None, outs, stream, None, backend, check)

        return Session(
            self.op,
            self.impl,
            problem,
            bound.target,
            bound.backend,
            list(call.inputs),
            outputs,
            make_call,
            fill=call.init_value,
        )

    def _allocate(self, problem: Problem, bound: Any) -> list[Any]:
        from .._dtypes import normalize_dtype

        adapter = bound.adapters.result
        outs = []
        for a in problem.args:
            if a.is_output:
                alloc = adapter.allocator(
                    normalize_dtype(a.dtype), problem.device_type, problem.device_index
                )
                outs.append(alloc(a.shape))
        return outs

    def _other_pattern(self, *args: Any) -> tuple | None:
        """A call of another argument pattern than the last (``out=`` and allocating calls
        alternate): its key function becomes the first one tried."""
        for fn in self._keys.values():
            if fn is self._fast_key:
                continue
            try:
                hit = self._fast.get(fn(*args))
            except Exception:  # noqa: BLE001, S112 - a key function that does not fit: try the next
                continue
            if hit is not None:
                self._fast_key = fn
                return hit
        return None

    def _remember(
        self,
        inputs: Any,
        out: Any,
        shapes: Any,
        dtypes: Any,
        backend: Any,
        s: tuple,
        generation: int,
    ) -> None:
        """Remember the settings ``s`` decided at ``generation`` for calls with this call's
        key, unless the decisions were forgotten since (one replaced meanwhile, by another
        thread's tuning, is not remembered)."""
        pattern = call_pattern(inputs, out, shapes, dtypes)
        fn = self._keys.get(pattern)
        if fn is None:
            if len(self._keys) >= 8:  # call patterns are few; more means something odd
                self._keys.clear()
                self._forget()
            texts = self.op.key.texts  # type: ignore[union-attr]
            fn = self._keys[pattern] = compile_key(pattern, texts, len(self._keys))
        self._fast_key = fn
        try:
            k = self._fast_key(inputs, out, shapes, dtypes, backend)
        except Exception:  # noqa: BLE001
            return
        if len(self._fast) >= MAX_FAST:
            self._forget()  # (this call's settings are then remembered by its next call)
        self._decided.record(generation, functools.partial(self._fast.__setitem__, k, s))

    # explain and explicit tuning ---------------------------------------------------------------
    def explain(
        self,
        inputs: Sequence[Any],
        output_shapes: Any = None,
        output_dtypes: Any = None,
        out: Any = None,
        backend: str | None = None,
    ) -> Selection:
        """The ``Selection`` a call with these arguments gets (choice and every rule consulted);
        tunes nothing, runs nothing."""
        problem, bound = self.problem(inputs, output_shapes, output_dtypes, out, backend)
        return explain_selection(self.op, problem, bound.target, bound.backend)

    def tune(
        self,
        inputs: Sequence[Any],
        output_shapes: Any = None,
        output_dtypes: Any = None,
        out: Any = None,
        *,
        init_value: Any = None,
        backend: str | None = None,
        configs: Sequence[Config | Mapping[str, Any]] | None = None,
        budget_s: float | None = None,
        store: bool = True,
        quiet: bool | None = None,
    ) -> TuneResult:
        """Tune now for these arguments (whatever the database holds) and store the winner
        (``store=False``: only report). Returns every candidate's result. Configs given here
        that the kernel does not offer can only be measured (``store=False``): a record is
        served only with one of the kernel's configs."""
        chosen = None if configs is None else _configs(configs, self.name)
        offered = (self.impl.default, *self.impl.configs)
        extra = [c for c in chosen or () if c not in offered]
        if store and extra:
            raise ArgumentError(
                f"[{self.name}] tune(configs=...) with store=True needs configs the kernel "
                f"offers; got [{extra[0].describe()}], not one of its {len(offered) - 1} "
                "configs. Add it to autotune's configs, or pass store=False to only measure"
            )
        problem, bound = self.problem(inputs, output_shapes, output_dtypes, out, backend)
        call = KernelCall(inputs, output_shapes, output_dtypes, out, None, init_value, backend)
        result = self._tune_problem(problem, bound, call, chosen, budget_s, quiet)
        if store and result.record is not None:
            tuning.current_db().put(result.record)
            self.op.forget()
        return result


def autotune(
    kernel: Kernel | None = None,
    *,
    configs: Sequence[Config | Mapping[str, Any]],
    key: Sequence[str] = (),
    grid: Any,
    default: Config | Mapping[str, Any] | None = None,
    name: str | None = None,
    budget_s: float | None = None,
    quiet: bool = False,
) -> Any:
    """A kernel whose config (template values, threadgroup, shared memory) and grid are chosen
    per problem: tuned over ``configs`` on the first call of each ``key`` bucket, then replayed
    from the tuning database.

    ``key`` names what a decision depends on (``"x.dtype"``, ``"x.shape[0]:pow2"``,
    ``"n:ranges(1,1024)"`` for an int scalar ``n``; see ``kernelkit._select.keys``). ``grid``
    is a callable ``(problem, config) -> grid in threads``, a fixed tuple, or an input name (one
    thread per element). A config is a ``kernelkit.Config`` or a dict of template values with
    optional ``threadgroup`` and ``shared_memory``. ``budget_s`` caps the time spent timing
    candidates per key. Without ``kernel``, returns a decorator (for a kernel or a function
    returning one).

    Example::

        >>> import numpy as np, kernelkit
        >>> k = kernelkit.kernel("twice", ["x"], ["y"], "uint i = blockIdx.x * blockDim.x"
        ...     " + threadIdx.x; for (; i < x_shape[0]; i += U) y[i] = 2 * x[i];")
        >>> twice = kernelkit.autotune(k, configs=[{"U": 64, "threadgroup": (64,)},
        ...     {"U": 128, "threadgroup": (128,)}], key=["x.shape[0]:pow2"], grid="x")
        >>> x = np.arange(1000, dtype=np.float32)
        >>> bool((twice([x], output_shapes=[x.shape], output_dtypes=[x.dtype])[0] == 2 * x).all())
        True
    """
    options = dict(
        configs=configs,
        key=key,
        grid=grid,
        default=default,
        name=name,
        budget_s=budget_s,
        quiet=quiet,
    )
    if kernel is None:

        def decorate(obj: Any) -> AutotunedKernel:
            k = obj if isinstance(obj, Kernel) else obj()
            return AutotunedKernel(k, **options)

        return decorate
    return AutotunedKernel(kernel, **options)


def known(ops: Mapping[str, AutotunedKernel]) -> Callable[[str, str], bool]:
    """``known_impl`` for database imports: whether ``impl`` exists in the named op."""

    def check(op: str, impl: str) -> bool:
        obj = ops.get(op)
        return obj is not None and obj.op.get(impl) is not None

    return check
