"""CPU backend speed against NumPy: an elementwise kernel, a block-sum with barriers, and the
cost of one __syncthreads().

Run: ``PYTHONPATH=src python benchmarks/cpu_backend.py [--tiny]`` (KERNELKIT_CPU_THREADS sets
workers; ``--tiny`` runs small sizes, for the test that keeps this script working). Prints the
median of several runs after a warm-up.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import numpy as np

from kernelkit._backends.cpu import CPUBackend
from kernelkit._pipeline.codegen import make_source
from kernelkit._records import KernelSpec, Param

BE = CPUBackend()
TARGET = BE.targets()[0]


def build(name, params, body):
    """Compile a kernel; returns launch(grid, block, shared_bytes, *values)."""
    ins = tuple(p.name for p in params if p.kind == "array" and not p.is_output)
    outs = tuple(p.name for p in params if p.is_output)
    spec = KernelSpec(name=name, input_names=ins, output_names=outs, source=body)
    prog = BE.load(BE.compile(BE.render(make_source(spec, params, []), TARGET)), TARGET)
    launch = BE.launcher(prog, TARGET)  # one per program, as the hot path does; geometry per call

    def run(grid, block, shared_bytes, *values):
        keep = [ctypes.c_void_p(v.ctypes.data) if isinstance(v, np.ndarray) else v for v in values]
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        launch(ctypes.addressof(ptrs), 0, (grid, 1, 1, block, 1, 1, shared_bytes))

    return run


def median_s(fn, repeat=7):
    """Median wall time of fn() after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(label, kernel_s, numpy_s):
    print(
        f"{label:<42} kernelkit {kernel_s * 1e3:8.2f} ms   numpy {numpy_s * 1e3:8.2f} ms   "
        f"ratio {kernel_s / numpy_s:5.2f}x"
    )


def bench_elementwise(n=16 * 2**20):
    f32 = "float32"
    run = build(
        "fma",
        (
            Param("a", "array", f32),
            Param("b", "array", f32),
            Param("c", "array", f32),
            Param("n", "scalar", "int32"),
            Param("out", "array", f32, is_output=True),
        ),
        "uint i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < n) out[i] = a[i] * b[i] + c[i];",
    )
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    out, ref = np.empty_like(a), np.empty_like(a)
    n32 = ctypes.c_int32(n)
    k = median_s(lambda: run((n + 255) // 256, 256, 0, a, b, c, n32, out))

    def numpy_fma():
        np.multiply(a, b, out=ref)
        np.add(ref, c, out=ref)

    report(f"elementwise a*b+c ({n} f32)", k, median_s(numpy_fma))
    np.testing.assert_allclose(out, a * b + c, rtol=1e-6, atol=1e-6)


BLOCK_SUM = """
__shared__ float s[256];
uint t = threadIdx.x;
float v = 0;
for (uint i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) v += x[i];
s[t] = v;
__syncthreads();
for (uint w = blockDim.x / 2; w > 0; w /= 2) {
  if (t < w) s[t] += s[t + w];
  __syncthreads();
}
if (t == 0) atomicAdd(total, s[0]);
"""

# The common form: one element per thread, as many blocks as it takes.
BLOCK_SUM_ONE = """
__shared__ float s[256];
uint t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
s[t] = i < n ? x[i] : 0.0f;
__syncthreads();
for (uint w = blockDim.x / 2; w > 0; w /= 2) {
  if (t < w) s[t] += s[t + w];
  __syncthreads();
}
if (t == 0) atomicAdd(total, s[0]);
"""

SUM_PARAMS = (
    Param("x", "array", "float32"),
    Param("n", "scalar", "int32"),
    Param("total", "array", "float32", is_output=True),
)


def bench_block_sum(n=4 * 2**20):
    """Tree reduction per block (9 barriers) + atomicAdd: grid-stride with 64 and 4096 blocks of
    256 threads, and one element per thread (n / 256 blocks)."""
    stride = build("block_sum", SUM_PARAMS, BLOCK_SUM)
    one = build("block_sum_one", SUM_PARAMS, BLOCK_SUM_ONE)
    x = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    total = np.zeros(1, np.float32)
    n32 = ctypes.c_int32(n)
    numpy_s = median_s(lambda: x.sum())
    cases = (
        ("grid-stride", stride, 64),
        ("grid-stride", stride, n // 1024),
        ("1 elem/thread", one, n // 256),
    )
    for form, run, blocks in cases:

        def kernel(run=run, blocks=blocks):
            total[0] = 0
            run(blocks, 256, 0, x, n32, total)

        label = f"block sum {n}, {form}, {blocks}x256"
        report(label, median_s(kernel), numpy_s)
        assert abs(total[0] - x.sum(dtype=np.float64)) < 1e-2 * np.sqrt(n)


def bench_barrier(threads=256, barriers=1000, blocks=64):
    run = build(
        "barriers",
        (Param("out", "array", "int32", is_output=True),),
        f"for (int k = 0; k < {barriers}; ++k) __syncthreads();\n"
        "if (threadIdx.x == 0) out[blockIdx.x] = 1;",
    )
    out = np.zeros(blocks, np.int32)
    s = median_s(lambda: run(blocks, threads, 0, out), repeat=3)
    per_block = s / (blocks * barriers) * BE_WORKERS()
    print(
        f"__syncthreads, {threads} threads/block: {per_block * 1e6:6.2f} us per barrier per "
        f"block ({per_block / threads * 1e9:5.1f} ns per thread), {blocks} blocks on "
        f"{BE_WORKERS()} workers"
    )


def BE_WORKERS():  # noqa: N802 - reads like a constant
    from kernelkit._backends.cpu._program import worker_count

    return worker_count()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes (a smoke run)")
    tiny = parser.parse_args().tiny
    print(f"CPU: {TARGET.name}, workers: {BE_WORKERS()}")
    bench_elementwise(2**16 if tiny else 16 * 2**20)
    bench_block_sum(2**16 if tiny else 4 * 2**20)
    bench_barrier(barriers=10 if tiny else 1000, blocks=4 if tiny else 64)
