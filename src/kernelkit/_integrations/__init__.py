"""Framework integrations above the public API: kernels as framework ops (``torch_op``),
gradients (``torch_vjp``), kernelkit's built-in ops as torch ops (``torch_ops``). Nothing here
imports a framework at import time: torch is imported when an op is registered."""

from typing import Any


def install() -> None:
    """Wire the integrations into the layers below them (called by ``kernelkit/__init__``),
    importing none of the heavy modules: the built-in ops ask ``torch_route`` whether torch must
    see a call; plans over JAX arrays launch through ``jax_eager`` (XLA's FFI) where they can."""
    from .. import _api, _arrays
    from . import jax_ffi, torch_op, torch_route

    torch_route.install()
    _arrays.RUNS_FOR["jax"] = _jax_run_for
    _api.WRAPPERS.update(as_torch_op=torch_op.as_torch_op, as_jax_callable=jax_ffi.as_jax_callable)


def _jax_run_for(plan: Any, bound: Any, guard: Any) -> Any:
    from .jax_eager import run_for  # imported by the first plan over JAX arrays

    return run_for(plan, bound, guard)
