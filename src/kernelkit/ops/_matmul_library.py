"""``matmul`` through a library instead of kernelkit's kernels: every such route, in one place.

=============  ==========================================  ====================================
route          arrays                                      what it calls
=============  ==========================================  ====================================
framework      torch CUDA tensors                          torch's own matmul (cuBLAS)
vendor         JAX arrays (eager)                          ``jnp.matmul``, jitted once per
                                                           signature (XLA's GEMM: cuBLAS(Lt)
                                                           or its Triton GEMM, whichever its
                                                           autotuner timed faster; on XLA's
                                                           stream)
vendor         CuPy arrays, and any other CUDA array       cuBLASLt through nvmath-python's
               (``__cuda_array_interface__``, DLPack)      bindings (``_matmul_cublaslt``), on
                                                           the framework's current stream
=============  ==========================================  ====================================

When: ``framework`` is a microkernel, so it runs every torch CUDA call that no table, tuning
record or ``kernelkit.force`` sends to one of kernelkit's kernels (the shipped tables do for the
decode rows where those measured ahead), except M = 1 in 16 bits on sm_90, which it defers to
gemv (``_matmul_rules.gemv_first``). ``vendor`` is ``listed_only``: it runs only where a
table row (or a tuning record, or ``kernelkit.force("matmul/vendor")``) names it, that is where
it measured ahead of kernelkit's kernels; everywhere else those run. Both take what cuBLAS
computes as it is: float32 accumulation, no TF32 for float32 (exact float32 products).

Fallback: where the vendor route cannot run a call (nvmath-python missing or unable to load
cuBLASLt, an activation, a bias of another dtype), its match rule says why, a table row naming
it is passed over with that reason (``ops.matmul.explain`` prints it) and the next rule picks
one of kernelkit's kernels.
"""

from __future__ import annotations

from typing import Any

from .._errors import ArgumentError
from .._records import Problem, Target
from .._select.records import KernelChoice
from . import _matmul_cublaslt as LT
from ._matmul_rules import cuda_cc

__all__ = [
    "ROUTES",
    "framework_match",
    "framework_prepare",
    "framework_run",
    "vendor_binding",
    "vendor_match",
    "vendor_prepare",
]

JAX = ("jax", "jaxlib")  # the module a JAX array's class comes from (jax.Array, ArrayImpl)
# (route, arrays' framework or None for any other CUDA array) -> what runs the call
ROUTES: dict[tuple[str, str | None], str] = {
    ("framework", "torch"): "torch's matmul (cuBLAS)",
    **{("vendor", f): "jnp.matmul (XLA's GEMM, on XLA's stream)" for f in JAX},
    ("vendor", None): "cuBLASLt through nvmath-python, on the framework's current stream",
}
VENDOR_PADS = "a library's matmul: " + "; ".join(
    f"{what} for {f or 'other'} arrays" for (r, f), what in ROUTES.items() if r == "vendor"
)


def vendor_binding(framework: str) -> str:
    """What the vendor route calls for arrays of ``framework``."""
    return ROUTES.get(("vendor", framework), ROUTES[("vendor", None)])


# --- framework: torch's own matmul --------------------------------------------------------------


def framework_match(p: Problem, t: Target) -> str | None:
    # On an H100 (benchmarks/decode_sweep.py) cuBLAS reads the weight at 65-97% of the copy rate
    # for M <= 16, ahead of the decode kernels' heuristic configs at M = 2-16 on weights no table
    # covers; so torch CUDA tensors take the framework's kernel by rule (tables name kernelkit's
    # kernels where they measured ahead; M = 1 in 16 bits on sm_90 is deferred to gemv, 1.08-1.21x
    # cuBLAS there), and the gemv kernels serve the other frameworks (CuPy, JAX) and the CPU.
    if p.attr("framework") != "torch" or p.device_type != 2:
        return "only for torch CUDA tensors"
    dtype, bias = p.arg("x").dtype, p.attr("bias")
    if bias is not None and bias != dtype:  # torch's matmul refuses mixed dtypes
        return f"adds a bias of x's dtype ({dtype}) only, got {bias}: kernelkit's kernels do"
    return None


def framework_run(choice: KernelChoice, call: Any) -> Any:
    import torch
    import torch.nn.functional as F

    problem, (x, w, bias), _, out = call
    act = problem.attr("activation")
    if out is not None and act is None and out.is_contiguous():
        return _writer()(x, w.t() if problem.attr("transpose_b") else w, bias, out)
    y = F.linear(x, w, bias) if problem.attr("transpose_b") else torch.matmul(x, w)
    if problem.attr("transpose_b") is False and bias is not None:
        y = y + bias
    if act is not None:
        activate: Any = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu}[act]
        y = activate(y)
    if out is not None:
        out.copy_(y)
        return out
    return y


def _writer() -> Any:
    """``into(x, wt, bias, out)``: ``x @ wt (+ bias)`` written into a contiguous ``out`` by
    torch itself, no temporary and no copy (``framework_match`` leaves only a bias of x's dtype
    to this route); torch's functions bound once."""
    import torch

    mm, addmm = torch.mm, torch.addmm

    def into(x: Any, wt: Any, bias: Any, out: Any) -> Any:
        return mm(x, wt, out=out) if bias is None else addmm(bias, x, wt, out=out)

    return into


def framework_prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
    """Decided once per signature: a plain ``F.linear`` where that is the whole call (no
    activation, a weight [N, K], no out=), ``torch.mm``/``addmm`` into a contiguous out=,
    else ``framework_run``'s general path. With a weight [N, K] and no activation the launch
    also offers ``whole_out(x, w, bias, out=out)``: torch's ``linear`` into a contiguous out
    (one C call, no view of w made in Python), which a caller whose signature fixed out's
    layout calls in its place (``OpRunner.first``)."""
    import torch
    import torch.nn.functional as F

    if problem.attr("activation") is None and problem.attr("transpose_b"):
        linear, into = F.linear, _writer()

        def launch(arrays: Any, out: Any) -> Any:
            x, w, bias = arrays
            if out is None:
                return linear(x, w, bias)
            if out.is_contiguous():
                return into(x, w.t(), bias, out)
            return framework_run(choice, (problem, arrays, output_dtype, out))

        launch.linear = linear  # type: ignore[attr-defined]  # a recent call's whole call
        # aten::linear.out (torch's nn namespace; mm or addmm into out, as ``into``)
        launch.whole_out = getattr(torch._C._nn, "linear", None)  # type: ignore[attr-defined]
        return launch
    return lambda arrays, out: framework_run(choice, (problem, arrays, output_dtype, out))


# --- vendor: JAX's own matmul, or cuBLASLt through nvmath-python ------------------------------


def vendor_match(p: Problem, t: Target) -> str | None:
    """None when the vendor route can run ``p`` on ``t``, else why not."""
    framework = p.attr("framework")
    if cuda_cc(t.arch) is None or p.device_type != 2:
        return f"calls a CUDA library: needs CUDA arrays on a CUDA device, not {t.arch}"
    if framework == "torch":
        return "torch tensors take the framework route (torch's cuBLAS)"
    if p.attr("activation") is not None:
        return f"fuses no activation ({p.attr('activation')}): kernelkit's kernels do"
    dtype, bias = p.arg("x").dtype, p.attr("bias")
    if bias is not None and bias != dtype:
        return f"adds a bias of x's dtype ({dtype}) only, got {bias}"
    if p.attr("K") == 0:
        return "K = 0: nothing to multiply (kernelkit's kernels write the bias)"
    if framework not in JAX:
        found = LT.binding()
        if isinstance(found, str):
            return found
    return None


# problem -> its launcher: arrays without a prepared signature (CuPy, JAX) reach ``prepare`` on
# every call, and a launcher holds what must not be made again (cuBLASLt plans, XLA programs)
_launchers: dict[Problem, Any] = {}


def vendor_prepare(choice: KernelChoice, problem: Problem, output_dtype: Any) -> Any:
    """``launch(arrays, out)`` for one signature, through the binding ``ROUTES`` names (one
    launcher a problem, kept)."""
    launch = _launchers.get(problem)
    if launch is None:
        if problem.attr("framework") in JAX:
            launch = _jax_launcher(problem)
        else:
            found = LT.binding()
            if isinstance(found, str):  # the match rule said so first: a lost library
                raise ArgumentError(f"[matmul] the vendor route cannot run: {found}")
            launch = LT.launcher(found, problem)
        if len(_launchers) >= 256:
            _launchers.clear()
        _launchers[problem] = launch
    return launch


def vendor_run(choice: KernelChoice, call: Any) -> Any:
    problem, arrays, output_dtype, out = call
    return vendor_prepare(choice, problem, output_dtype)(arrays, out)


def _jax_launcher(problem: Problem) -> Any:
    """``jnp.matmul`` of x and w as the problem lays them out, jitted (one XLA program a
    signature); float32 at HIGHEST precision (no TF32), as kernelkit computes it."""
    import jax
    import jax.numpy as jnp

    precision = jax.lax.Precision.HIGHEST if problem.arg("x").dtype == "float32" else None
    transpose_b = problem.attr("transpose_b")

    def product(x: Any, w: Any) -> Any:
        return jnp.matmul(x, w.T if transpose_b else w, precision=precision)

    plain = jax.jit(product)
    biased = jax.jit(lambda x, w, b: product(x, w) + b)

    def launch(arrays: Any, out: Any) -> Any:
        if out is not None:
            raise ArgumentError("[matmul] JAX arrays are immutable: out= cannot be written")
        x, w, bias = arrays
        return plain(x, w) if bias is None else biased(x, w, bias)

    return launch
