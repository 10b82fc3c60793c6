"""``matmul``: ``a @ b`` (``b`` as [K, N]) or ``a @ b.T`` (``transpose_b=True``: a linear layer's
weight [N, K]), with bias and activation fused, through the selection stage.

Implementations (kernels and registration in ``_matmul_impls``, rules in ``_matmul_rules``
and the modules named below): ``gemv`` for decode shapes (M <= 16, weight [N, K]),
``gemv_tc`` for the same on the tensor cores (sm_80+, float16/bfloat16), ``gemv_slab``
(``_matmul_slab``): M <= 4 on sm_90, whole weight rows moved by the TMA unit's bulk copies,
``gemv_slab_tc`` (``_matmul_slab_tc``): M <= 16 on sm_90, the same rows on the tensor cores,
``tiled`` for everything (any backend, the CPU too),
``mma`` (``_matmul_mma``): tensor cores on sm_80+ for float16/bfloat16, ``wgmma``
(``_matmul_wgmma``): Hopper warpgroup MMA tiles (sm_90a), ``midm`` (``_matmul_midm``): M of
tens to hundreds on the tensor cores (sm_80+), the weight streamed once, K split over a cluster
(sm_90), and the library routes (``_matmul_library``): ``framework`` (torch's cuBLAS for torch
tensors) and ``vendor`` (cuBLASLt through nvmath-python for CuPy and other CUDA arrays,
``jnp.matmul`` for JAX arrays).

Selection (``_select.select``): the ``framework`` microkernel matches torch CUDA tensors and wins
there (microkernels come before heuristics), except at M = 1 in 16 bits on sm_90, where ``gemv``
runs (``_matmul_rules.gemv_first``: 1.08-1.21x cuBLAS on held-out weights, and the other decode
kernels' heuristics step aside); otherwise the generic implementations' heuristics are asked by
priority: ``gemv_slab_tc`` (M <= 16 on sm_90), ``gemv_slab`` (M <= 4),
``gemv_tc`` and ``gemv`` (M <= 16), ``wgmma`` (M > 16 on sm_90), ``mma`` (5: M > 16 on
sm_80+), ``midm`` (3: never reached while mma matches; tables, tuning and force name it), then
``tiled``'s default. A table, the tuning database or ``kernelkit.force`` can name any of them for
torch tensors too (the H100 and H200 tables pick ``gemv``, ``gemv_slab``, ``gemv_slab_tc`` or
``wgmma`` for the decode rows where they beat cuBLAS). ``vendor`` runs only where a table, the
tuning database or ``kernelkit.force`` names it. (``gemv_cluster``, K split over a cluster,
was retired: no table picked it, and in the last decode-block run it was level with
``gemv_slab_tc`` at M = 1 on 4096^2, 14.66 against 14.71 µs a call; its measurement at K =
14336 and 28672,
``benchmarks/gemv_cluster_keep.py``, is in the history, not run on a GPU before the removal.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _config
from .._arrays.lookup import adapter_for
from .._errors import KernelkitError
from .._pipeline.key import MISS
from .._records import Problem
from .._select.select import Selection
from . import _matmul_mma as MMA
from ._common import OpRunner, empty
from ._matmul_args import check_out
from ._matmul_args import prepare as _prepare
from ._matmul_impls import GEMV_KERNEL, OP
from ._prepared import AD, EAGER_SIGNERS, FORCED, SIGNERS, Recent, routed, signature, store

__all__ = ["OP", "eager_matmul", "matmul"]


def _attrs(problem: Problem, options: dict[str, Any]) -> dict[str, Any]:
    x, w = problem.arg("x"), problem.arg("w")
    transpose_b = options["transpose_b"]
    n = w.shape[0] if transpose_b else w.shape[1]
    return {"M": x.shape[0], "K": x.shape[1], "N": n, **options}


# out= is never safely an input: other blocks still read the row it overwrites
_RUNNER = OpRunner(OP, GEMV_KERNEL.spec, _attrs, in_place=False, names=("a", "b", "bias"))


def matmul(
    a: Any,
    b: Any,
    *,
    bias: Any = None,
    activation: str | None = None,
    transpose_b: bool = False,
    out: Any = None,
) -> Any:
    """``activation(a @ b + bias)`` (``b`` [K, N]), or with ``transpose_b=True`` ``a @ b.T`` for
    a linear layer's weight ``b`` [N, K]; ``a`` [M, K] or batched [B, S, K]; float16, bfloat16
    (float32 accumulation) or float32; ``activation`` None, "relu", "silu" or "gelu".

    Example::

        >>> import numpy as np
        >>> from kernelkit import ops
        >>> a, w = np.ones((2, 8), np.float32), np.full((3, 8), 0.5, np.float32)
        >>> ops.matmul(a, w, transpose_b=True).tolist()
        [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]
    """
    extras = (activation.__class__, transpose_b.__class__, activation, transpose_b,
              OP.generation, FORCED.get(), _config.config.select_force,
              AD.module._current_level)  # fmt: skip
    recent = _RECENT[bias is None]
    if out is None:
        for call, kept, rest in recent.calls:
            if kept == extras:
                ys = call([a, b, bias], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, (linear, run) in recent.entries:
            if kept == extras and (check(a, b) if bias is None else check(a, b, bias)):
                if linear is not None:  # torch's own F.linear is the whole call
                    return linear(a, b, bias)
                return run([a, b, bias], None)
    else:
        for check, kept, run in recent.outs:
            if kept == extras and (check(a, b, out) if bias is None else check(a, b, bias, out)):
                return run([a, b, bias], out)
    sign = SIGNERS.get(a.__class__)
    if sign is not None:
        try:
            key = (sign((a, b, bias, out)), *extras)
            run = _TABLE[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if run not in recent.tried:
                arrays = (a, b) if bias is None else (a, b, bias)
                recent.again(arrays, extras, run, _kept(run), out)
            return run([a, b, bias], out)
    return _first(a, b, bias, activation, transpose_b, out, True)


# (signature, activation's class, transpose_b's, activation, transpose_b, generation, forced)
# -> run([a, b, bias], out); the classes first, so that no other object's == is asked
_TABLE: dict[Any, Any] = {}
# the same for the torch op's own calls: a signature kept there was never asked of the
# integrations (it may need autograd), so the public op never looks it up
_EAGER: dict[Any, Any] = {}
# the most recent prepared calls without out=, with a bias ([False]) or without ([True]):
# (check(a, b[, bias]), the key's options as in _TABLE, (F.linear or None, run))
_RECENT, _RECENT_EAGER = (Recent(), Recent()), (Recent(), Recent())


def eager_matmul(
    a: Any, b: Any, bias: Any, activation: str | None, transpose_b: bool, out: Any
) -> Any:
    """``matmul`` without the integrations (what the torch op runs): the same prepared call."""
    extras = (activation.__class__, transpose_b.__class__, activation, transpose_b,
              OP.generation, FORCED.get(), _config.config.select_force,
              AD.module._current_level)  # fmt: skip
    recent = _RECENT_EAGER[bias is None]
    if out is None:
        for call, kept, rest in recent.calls:
            if kept == extras:
                ys = call([a, b, bias], *rest)
                if ys is not MISS:
                    return ys[0]
        for check, kept, (linear, run) in recent.entries:
            if kept == extras and (check(a, b) if bias is None else check(a, b, bias)):
                if linear is not None:  # torch's own F.linear is the whole call
                    return linear(a, b, bias)
                return run([a, b, bias], None)
    else:
        for check, kept, run in recent.outs:
            if kept == extras and (check(a, b, out) if bias is None else check(a, b, bias, out)):
                return run([a, b, bias], out)
    sign = EAGER_SIGNERS.get(a.__class__)
    if sign is not None:
        try:
            key = (sign((a, b, bias, out)), *extras)
            run = _EAGER[key]
        except Exception:  # noqa: BLE001, S110 - a new signature: validated below
            pass
        else:
            if run not in recent.tried:
                arrays = (a, b) if bias is None else (a, b, bias)
                recent.again(arrays, extras, run, _kept(run), out)
            return run([a, b, bias], out)
    return _first(a, b, bias, activation, transpose_b, out, False)


def _first(
    a: Any, b: Any, bias: Any, activation: Any, transpose_b: Any, out: Any, route: bool
) -> Any:
    """A call of a new signature: validate, ask the integrations (``route``), prepare, run."""
    x, lead, n, options = _prepare(a, b, bias, activation, transpose_b)
    if route:
        arrays = (a, b) if bias is None else (a, b, bias)
        result = routed("matmul", arrays, (a, b, bias, activation, transpose_b), out)
        if result is not NotImplemented:
            return result
    if out is not None:
        check_out(out, (*lead, n))
    key = signature((a, b, bias, out), not route)
    extras = (activation.__class__, bool, activation, transpose_b, OP.generation, FORCED.get(),
              _config.config.select_force,
              AD.module._current_level)  # fmt: skip
    if len(lead) == 1 and lead[0] and n and _alignment_free(a, b, bias, out, options):
        # 2-d, no alignment to read per call: the runner's prepared run is the whole call
        y, run = _RUNNER.first([a, b, bias], a.dtype, out, options)
    else:
        run = _prepared_run(lead, n, x.shape[1], options, options["aligned16"] is not None, a, b)
        y = run([a, b, bias], out)
    if key is not None and transpose_b.__class__ is bool:
        store(_TABLE if route else _EAGER, (key, *extras), run)
        if out is None:
            arrays = (a, b) if bias is None else (a, b, bias)
            (_RECENT if route else _RECENT_EAGER)[bias is None].remember(
                arrays, extras, run, _kept(run)
            )
    return y


def _kept(run: Any) -> tuple[Any, Any]:
    """A recent entry's run: (torch's ``F.linear`` where the prepared run is exactly that call
    without out= (``_matmul_library.framework_prepare``), else None; the run)."""
    return getattr(run, "linear", None), run


def _alignment_free(a: Any, b: Any, bias: Any, out: Any, options: dict[str, Any]) -> bool:
    """Whether the 16-byte alignment of a and b (which no signature holds) changes nothing: no
    kernel asks it (``aligned16`` None), or the decision is the same kernel, config and grid
    either way (torch's own matmul, say), so a call need not read the pointers. ``options``
    then holds the actual alignment, which the decision was made with."""
    if options["aligned16"] is None:
        return True
    try:
        choices = [
            _RUNNER.choose([a, b, bias], a.dtype, out, {**options, "aligned16": al})[1]
            for al in (False, True)
        ]
    except KernelkitError:  # one alignment refused (a forced kernel that needs 16 bytes)
        return False
    same = len({(c.impl, c.config, c.grid) for c in choices}) == 1
    if same:
        options["aligned16"] = MMA.aligned16(a, b)
    return same


def _prepared_run(
    lead: tuple, n: int, k: int, options: dict[str, Any], mma_dtype: bool, a: Any, b: Any
) -> Callable[[Any, Any], Any]:
    """``run([a, b, bias], out)`` for one signature: the flattening fixed, the 16-byte
    alignment of x and w (which selects among kernels, and no signature holds) read per call
    from the pointers, and a run per alignment prepared by the runner on first use."""
    three_d = len(lead) == 2
    rows = lead[0] * lead[1] if three_d else lead[0]
    if rows == 0 or n == 0:  # no elements: nothing to launch

        def run_empty(arrays: Any, out: Any) -> Any:
            return out if out is not None else empty(arrays[0], (*lead, n))

        return run_empty
    ptr_x, ptr_w = adapter_for(a, "a").pointer, adapter_for(b, "b").pointer
    runs: dict[Any, Any] = {}
    if not three_d and mma_dtype:  # a 2-d a: the arrays go to the runner's run as they are

        def run_aligned(arrays: Any, out: Any) -> Any:
            aligned = not ((ptr_x(arrays[0]) | ptr_w(arrays[1])) & 15)
            launch = runs.get(aligned)
            if launch is None:
                opts = {**options, "aligned16": aligned}
                y, runs[aligned] = _RUNNER.first(arrays, arrays[0].dtype, out, opts)
                return y
            return launch(arrays, out)

        return run_aligned

    def run_3d(arrays: Any, out: Any) -> Any:  # a 3-d a (2-d calls take the runs above)
        a, b, bias = arrays
        x = a.reshape(rows, k)
        flat_out = out.reshape(rows, n) if out is not None else None
        aligned = not ((ptr_x(x) | ptr_w(b)) & 15) if mma_dtype else None
        launch = runs.get(aligned)
        if launch is None:
            opts = {**options, "aligned16": aligned}
            y, runs[aligned] = _RUNNER.first([x, b, bias], x.dtype, flat_out, opts)
        else:
            y = launch([x, b, bias], flat_out)
        return out if out is not None else y.reshape(*lead, n)

    return run_3d


def _explain(
    a: Any, b: Any, *, bias: Any = None, activation: str | None = None, transpose_b: bool = False
) -> Selection:
    """The choice ``matmul`` makes for these arguments, and why."""
    x, _, _, options = _prepare(a, b, bias, activation, transpose_b)
    if options["aligned16"] is not None:
        options["aligned16"] = MMA.aligned16(x, b)
    return _RUNNER.explain([x, b, bias], x.dtype, None, options)


def routes(
    a: Any, b: Any, bias: Any = None, activation: str | None = None, transpose_b: bool = False
) -> frozenset[str]:
    """The implementations (``"framework"``, ``"gemv"``, ...) that ``matmul`` chooses for
    arguments like these over every 16-byte alignment of their pointers, which it reads per
    call (here none is read: for tracers, whose arrays have no data)."""
    x, _, _, options = _prepare(a, b, bias, activation, transpose_b)
    aligns = (None,) if options["aligned16"] is None else (False, True)
    return frozenset(
        _RUNNER.explain(
            [x, b, bias], x.dtype, None, {**options, "aligned16": al}
        ).choice.impl.split("/")[-1]
        for al in aligns
    )


matmul.explain = _explain  # type: ignore[attr-defined]
