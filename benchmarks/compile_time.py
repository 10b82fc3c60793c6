"""Question: how long does the first call of a new kernel take, next to CuPy and Triton?

Each sample defines a kernel never seen before (a unique constant in the body, so no cache
can answer) and times its first call (compile + load + launch + sync) in a warm process.
kernelkit runs with KERNELKIT_CACHE=0 (memory only) so the disk cache cannot help it.
Run: PYTHONPATH=src python3 benchmarks/compile_time.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("KERNELKIT_CACHE", "0")

import torch

import kernelkit

N, SAMPLES = 1024, 7
_counter = iter(range(10**9))


def fresh() -> int:
    return 1 + next(_counter) + int(time.time() * 1000) % 100000


def median_ms(first_call) -> float:
    times = []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        first_call(fresh())
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    x = torch.randn(N, device="cuda")
    xb = x.to(torch.bfloat16)
    rows = []

    def kk_f32(c: int) -> None:
        k = kernelkit.kernel(
            f"f32_{c}",
            ["inp"],
            ["out"],
            f"uint i = blockIdx.x * blockDim.x + threadIdx.x;"
            f" if (i < inp_shape[0]) out[i] = expf(inp[i]) + {c}.0f;",
        )
        k(
            [x],
            output_shapes=[(N,)],
            output_dtypes=[torch.float32],
            grid=(N, 1, 1),
            threadgroup=(256, 1, 1),
        )

    def kk_bf16(c: int) -> None:
        k = kernelkit.kernel(
            f"bf16_{c}",
            ["inp"],
            ["out"],
            f"uint i = blockIdx.x * blockDim.x + threadIdx.x;"
            f" if (i < inp_shape[0]) out[i] = __float2bfloat16("
            f"expf(__bfloat162float(inp[i])) + {c}.0f);",
        )
        k(
            [xb],
            output_shapes=[(N,)],
            output_dtypes=[torch.bfloat16],
            grid=(N, 1, 1),
            threadgroup=(256, 1, 1),
        )

    kk_f32(0)  # NVRTC's own first-use start-up, paid once per process by every NVRTC user
    rows.append(("kernelkit float32", median_ms(kk_f32)))
    t0 = time.perf_counter()
    kk_bf16(0)  # the first bf16 kernel of the process also parses cuda_bf16.h into NVRTC's PCH
    torch.cuda.synchronize()
    rows.append(("kernelkit bfloat16, first in process", (time.perf_counter() - t0) * 1e3))
    rows.append(("kernelkit bfloat16", median_ms(kk_bf16)))

    try:
        import cupy

        cx, cy = cupy.asarray(x), cupy.empty(N, dtype=cupy.float32)
        cxb, cyb = cupy.asarray(xb.view(torch.int16)), cupy.empty(N, dtype=cupy.int16)

        def cupy_f32(c: int) -> None:
            src = (
                'extern "C" __global__ void k(const float* inp, float* out, int n) {'
                f" int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = "
                f"expf(inp[i]) + {c}.0f; }}"
            )
            cupy.RawKernel(src, "k")((4,), (256,), (cx, cy, cupy.int32(N)))

        def cupy_bf16(c: int) -> None:
            src = (
                "#include <cuda_bf16.h>\n"
                'extern "C" __global__ void k(const __nv_bfloat16* inp, __nv_bfloat16* out,'
                " int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) "
                f"out[i] = __float2bfloat16(expf(__bfloat162float(inp[i])) + {c}.0f); }}"
            )
            cupy.RawKernel(src, "k")((4,), (256,), (cxb, cyb, cupy.int32(N)))

        cupy_f32(0)
        rows.append(("CuPy RawKernel float32", median_ms(cupy_f32)))
        try:
            rows.append(("CuPy RawKernel bfloat16", median_ms(cupy_bf16)))
        except Exception as e:  # noqa: BLE001 - report, don't fail the run
            rows.append((f"CuPy RawKernel bfloat16 failed: {type(e).__name__}", None))
    except ImportError:
        rows.append(("CuPy (not installed)", None))

    try:
        import triton
        import triton.language as tl  # noqa: F401 - used by the generated source

        y = torch.empty_like(x)

        def triton_f32(c: int) -> None:
            # a new function object with a distinct constant: Triton compiles it anew
            src = (
                "def k(inp, out, n, BLOCK: tl.constexpr):\n"
                "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
                "    m = offs < n\n"
                f"    tl.store(out + offs, tl.exp(tl.load(inp + offs, mask=m)) + {c}.0, mask=m)\n"
            )
            path = f"/tmp/kk_triton_bench_{c}.py"  # noqa: S108 - a name for Triton's source lookup
            with open(path, "w") as f:
                f.write("import triton.language as tl\n" + src)
            ns: dict = {}
            exec(compile("import triton.language as tl\n" + src, path, "exec"), ns)  # noqa: S102 - our text
            triton.jit(ns["k"])[(4,)](x, y, N, BLOCK=256)

        triton_f32(0)
        rows.append(("Triton float32", median_ms(triton_f32)))
    except ImportError:
        rows.append(("Triton (not installed)", None))

    print(f"device: {torch.cuda.get_device_name()}; median of {SAMPLES} first calls, ms")
    cupy_f32_ms = dict(rows).get("CuPy RawKernel float32")
    cupy_bf16_ms = dict(rows).get("CuPy RawKernel bfloat16") or cupy_f32_ms
    for name, ms in rows:
        if ms is None:
            print(f"{name:34s}        n/a")
            continue
        base = cupy_bf16_ms if "bfloat16" in name else cupy_f32_ms
        ratio = f"{ms / base:.2f}x CuPy" if base else ""
        print(f"{name:34s} {ms:9.1f}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
