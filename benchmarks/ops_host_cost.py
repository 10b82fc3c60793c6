"""Question: what does a call of a built-in op cost on the host, over the bare kernel call?

Tiny torch tensors, so that the device work is negligible and the host's cost is what is timed.
``--backend cpu`` (default): the CPU backend with its launch replaced by a no-op (the kernel never
runs), timing the Python path alone: binding, the per-signature caches, the selection replay and
the argument packing. ``--backend cuda``: real launches on tiny CUDA tensors; a call then costs
its host path plus the launch itself (nothing synchronizes in the loop).

    PYTHONPATH=src python3 benchmarks/ops_host_cost.py [--backend cpu|cuda] [--tiny] [--jax]

Prints µs per call (median of 7 rounds of 5,000 calls) for the bare kernel call and each op,
next to torch's own call where there is one. ``--jax`` adds the ops on JAX eager arrays of the
same shapes (the route a JAX eager call takes: an XLA FFI call where kernelkit's shim builds,
else the direct path, inputs waited for and the output allocated by torch and handed to JAX),
next to the same expression jitted (a call of a compiled XLA function, waited for).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from _common import cuda_or_skip


def stub_cpu_launch() -> None:
    """The CPU backend's launcher becomes a no-op (for timing the host path only)."""
    from kernelkit._backends.cpu import _backend

    def make_launcher(program, nthreads):  # noqa: ARG001
        def launch(params_address, stream, geometry):  # noqa: ARG001
            return None

        launch.program = program  # type: ignore[attr-defined]
        return launch

    _backend.make_launcher = make_launcher  # type: ignore[assignment]


def per_call_us(fn, calls: int = 5000, rounds: int = 7, sync=None) -> float:
    for _ in range(200):
        fn()
    if sync:
        sync()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        if sync:
            sync()
    return statistics.median(samples)


def jax_cases(device: str, swiglu) -> list:
    """(name, kernelkit call, reference) on JAX arrays of the torch cases' shapes."""
    import jax
    import jax.numpy as jnp

    from kernelkit import ops

    platform = "gpu" if device == "cuda" else "cpu"
    try:
        jax.devices(platform)
    except RuntimeError:
        print(f"JAX sees no {platform} device: no JAX rows")
        return []
    put = lambda x: jax.device_put(jnp.asarray(x.cpu().numpy()), jax.devices(platform)[0])
    a = put(torch.randn(64, 64))
    v = put(torch.randn(4096))
    ew = jax.jit(lambda a, b: a * jax.nn.silu(b))
    sm = jax.jit(lambda a: jax.nn.softmax(a, -1))
    return [
        ("JAX elementwise 64x64", lambda: swiglu(a, a), lambda: ew(a, a).block_until_ready()),
        ("JAX elementwise 4096", lambda: swiglu(v, v), lambda: ew(v, v).block_until_ready()),
        ("JAX softmax 64x64", lambda: ops.softmax(a), lambda: sm(a).block_until_ready()),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tiny", action="store_true", help="one round of 50 calls (a smoke run)")
    parser.add_argument("--jax", action="store_true", help="also the ops on JAX eager arrays")
    args = parser.parse_args()
    calls, rounds = (50, 1) if args.tiny else (5000, 7)
    if args.backend == "cpu":
        stub_cpu_launch()
        device, sync = "cpu", None
    else:
        if not cuda_or_skip("ops_host_cost.py --backend cuda"):
            return 0
        device, sync = "cuda", torch.cuda.synchronize

    import kernelkit
    from kernelkit import ops

    F = torch.nn.functional
    x = torch.randn(1, 64, device=device)
    w = torch.randn(64, 64, device=device)
    a = torch.randn(64, 64, device=device)
    b = torch.randn(64, 64, device=device)  # distinct: one tensor twice matches no recent call
    wv = torch.randn(64, device=device)
    o_row, o_mm = torch.empty_like(a), torch.empty(1, 64, device=device)
    k = kernelkit.kernel("host_cost", ["x"], ["y"], "if (threadIdx.x == 0) y[0] = x[0];")
    swiglu = ops.elementwise("y = a * silu(b)")
    scale = ops.elementwise("y = a * s")
    heads = torch.randn(2, 3, 4, 16, device=device)[:, 0]  # [2, 4, 16]: rows apart
    w16 = torch.randn(16, device=device)

    def rms16(v):
        return F.rms_norm(v, (16,), w16, 1e-6)

    geo = {"grid": (1, 1, 1), "threadgroup": (32, 1, 1)}
    cases = [
        ("bare kernel, out=", lambda: k([a], out=[o_row], **geo), None),
        (
            "bare kernel, allocating",
            lambda: k([a], output_shapes=[a.shape], output_dtypes=[a.dtype], **geo),
            None,
        ),
        ("softmax", lambda: ops.softmax(a), lambda: torch.softmax(a, -1)),
        ("softmax, out=", lambda: ops.softmax(a, out=o_row), None),
        ("rms_norm", lambda: ops.rms_norm(a, wv, 1e-6), lambda: F.rms_norm(a, (64,), wv, 1e-6)),
        ("elementwise a*silu(b)", lambda: swiglu(a, b), lambda: a * F.silu(b)),
        ("elementwise, out=", lambda: swiglu(a, b, out=o_row), None),
        ("elementwise, bias [N]", lambda: swiglu(a, wv), lambda: a * F.silu(wv)),
        ("elementwise, a number", lambda: scale(a, 0.5), lambda: a * 0.5),
        ("rms_norm, rows apart", lambda: ops.rms_norm(heads, w16, 1e-6), lambda: rms16(heads)),
        ("matmul M=1", lambda: ops.matmul(x, w, transpose_b=True), lambda: F.linear(x, w)),
        ("matmul M=1, out=", lambda: ops.matmul(x, w, transpose_b=True, out=o_mm), None),
    ]
    if args.jax:
        cases += jax_cases(device, swiglu)
    what = "launch stubbed" if args.backend == "cpu" else "real launches"
    print(f"backend {args.backend} ({what}); torch {torch.__version__}; µs per call")
    print(f"{'call':<26}{'kernelkit':>10}{'torch':>8}  (JAX rows: jitted JAX)")
    for name, kk, ref in cases:
        t_kk = per_call_us(kk, calls, rounds, sync)
        t_ref = f"{per_call_us(ref, calls, rounds, sync):8.1f}" if ref else f"{'-':>8}"
        print(f"{name:<26}{t_kk:10.1f}{t_ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
