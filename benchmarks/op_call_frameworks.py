"""What does a built-in op call cost on CuPy and JAX arrays, against the framework's own? (issue 26)

Per call, host included: the median over rounds of ``calls`` back-to-back calls followed by one
synchronization of the framework's stream (wall clock / calls). Decode sizes: 1x4096 and
16x4096 (row ops and elementwise), matmul x[M, 4096] @ w[4096, 4096].T at M = 1 and 16, bf16
(CuPy: fp16, CuPy has no bfloat16). Against: CuPy's own (``cupyx.scipy.special.softmax``, a
``cupy.ElementwiseKernel`` for ``a * silu(b)``, ``x @ w.T`` through cuBLAS, the RMS norm as
CuPy expressions) and jitted JAX functions (``jax.nn.softmax``, ``a * jax.nn.silu(b)``, the RMS
norm, ``x @ w.T``), each on its own arrays, in one process.

    python benchmarks/op_call_frameworks.py            # a CUDA GPU with CuPy and/or JAX
    python benchmarks/op_call_frameworks.py --calls 50  # quicker
    python benchmarks/op_call_frameworks.py --frameworks cupy

Without a CUDA GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

SILU_MUL = "y = a * b / (1 + exp(-b))"  # a * silu(b)


def per_call_us(fn: Callable[[], Any], sync: Callable[[], Any], calls: int, rounds: int) -> float:
    for _ in range(10):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def cupy_cases(ops: Any) -> tuple[list[tuple[str, Callable, Callable]], Callable[[], Any]]:
    import cupy as cp
    from cupyx.scipy.special import softmax as cp_softmax

    silu_mul = cp.ElementwiseKernel(
        "T a, T b", "T y", "float bf = (float)b; y = (T)((float)a * bf / (1.0f + expf(-bf)))",
        "kk_bench_silu_mul",
    )  # fmt: skip
    op = ops.elementwise(SILU_MUL)
    rng = cp.random.default_rng(0)
    cases = []
    for rows in (1, 16):
        x = rng.standard_normal((rows, 4096), dtype=cp.float32).astype(cp.float16)
        b = rng.standard_normal((rows, 4096), dtype=cp.float32).astype(cp.float16)
        w = rng.standard_normal(4096, dtype=cp.float32).astype(cp.float16)
        weight = (rng.standard_normal((4096, 4096), dtype=cp.float32) / 64).astype(cp.float16)

        def rms(x: Any = x, w: Any = w) -> Any:
            x32 = x.astype(cp.float32)
            r = cp.sqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6)
            return (x32 / r * w.astype(cp.float32)).astype(x.dtype)

        cases += [
            (f"softmax {rows}x4096", lambda x=x: ops.softmax(x), lambda x=x: cp_softmax(x, -1)),
            (f"rms_norm {rows}x4096", lambda x=x, w=w: ops.rms_norm(x, w, 1e-6), rms),
            (f"a*silu(b) {rows}x4096", lambda x=x, b=b: op(x, b), lambda x=x, b=b: silu_mul(x, b)),
            (f"matmul M={rows} 4096^2", lambda x=x, m=weight: ops.matmul(x, m, transpose_b=True),
             lambda x=x, m=weight: x @ m.T),
        ]  # fmt: skip
    return cases, cp.cuda.get_current_stream().synchronize


def jax_cases(ops: Any) -> tuple[list[tuple[str, Callable, Callable]], Callable[[], Any]]:
    import jax
    import jax.numpy as jnp

    if not any(d.platform == "gpu" for d in jax.devices()):
        raise RuntimeError("JAX sees no GPU")
    op = ops.elementwise(SILU_MUL)
    softmax = jax.jit(lambda x: jax.nn.softmax(x, axis=-1))
    silu_mul = jax.jit(lambda a, b: a * jax.nn.silu(b))
    matmul = jax.jit(lambda x, w: x @ w.T)

    @jax.jit
    def rms(x: Any, w: Any) -> Any:
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt((x32 * x32).mean(-1, keepdims=True) + 1e-6) * w).astype(x.dtype)

    key = jax.random.PRNGKey(0)
    cases = []
    last: list[Any] = [None]
    for rows in (1, 16):
        x = jax.random.normal(key, (rows, 4096), jnp.bfloat16)
        b = jax.random.normal(key, (rows, 4096), jnp.bfloat16)
        w = jax.random.normal(key, (4096,), jnp.bfloat16)
        weight = jax.random.normal(key, (4096, 4096), jnp.bfloat16) / 64

        def keep(fn: Callable[[], Any]) -> Callable[[], Any]:
            def call() -> Any:
                last[0] = fn()
                return last[0]

            return call

        cases += [
            (f"softmax {rows}x4096", keep(lambda x=x: ops.softmax(x)),
             keep(lambda x=x: softmax(x))),
            (f"rms_norm {rows}x4096", keep(lambda x=x, w=w: ops.rms_norm(x, w, 1e-6)),
             keep(lambda x=x, w=w: rms(x, w))),
            (f"a*silu(b) {rows}x4096", keep(lambda x=x, b=b: op(x, b)),
             keep(lambda x=x, b=b: silu_mul(x, b))),
            (f"matmul M={rows} 4096^2",
             keep(lambda x=x, m=weight: ops.matmul(x, m, transpose_b=True)),
             keep(lambda x=x, m=weight: matmul(x, m))),
        ]  # fmt: skip

    def sync() -> None:
        if last[0] is not None:
            jax.block_until_ready(last[0])

    return cases, sync


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--frameworks", default="cupy,jax", help="comma-separated: cupy, jax")
    args = p.parse_args()
    wanted = set(args.frameworks.split(","))
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        (err2, count) = driver.cuDeviceGetCount()
        gpu = int(err) == 0 and int(err2) == 0 and count > 0
    except Exception:  # noqa: BLE001 - no CUDA at all
        gpu = False
    if not gpu:
        print("skip: op_call_frameworks.py needs a CUDA GPU (none is visible), nothing measured")
        return 0
    from kernelkit import ops

    failed = False
    for name, make in (("cupy", cupy_cases), ("jax", jax_cases)):
        if name not in wanted:
            continue
        try:
            cases, sync = make(ops)
        except Exception as e:  # noqa: BLE001 - a framework that is missing is reported
            print(f"{name}: not measured ({type(e).__name__}: {e})")
            continue
        print(f"\n{name}: per call, µs (host included)")
        print(f"{'case':24}{'kernelkit':>11}{name + ' own':>11}{'own/kk':>8}")
        for label, kk, own in cases:
            try:
                t_kk = per_call_us(kk, sync, args.calls, args.rounds)
                t_own = per_call_us(own, sync, args.calls, args.rounds)
            except Exception as e:  # noqa: BLE001 - one failing case does not stop the rest
                print(f"{label:24}  failed: {type(e).__name__}: {e}")
                failed = True
                continue
            print(f"{label:24}{t_kk:11.2f}{t_own:11.2f}{t_own / t_kk:8.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
