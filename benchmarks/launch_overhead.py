"""Question: how much does a kernelkit call cost on the host, next to the floor and the peers?

One process, one tiny kernel (out[i] = expf(inp[i]) on 1024 float32 torch CUDA tensors), µs per
call (host wall time over many calls, synchronized per batch, median of 5), each as a ratio to
the floor: raw cuLaunchKernel through cuda-bindings with prepacked arguments.
Run: PYTHONPATH=src python3 benchmarks/launch_overhead.py
"""

from __future__ import annotations

import ctypes
import sys

import torch
from _common import per_call_us, table
from cuda.bindings import driver, nvrtc

import kernelkit

N = 1024
SRC = 'extern "C" __global__ void kexp(const float* inp, float* out, int n) {' \
      " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = expf(inp[i]); }"


def raw_function():
    major, minor = torch.cuda.get_device_capability()
    err, prog = nvrtc.nvrtcCreateProgram(SRC.encode(), b"k.cu", 0, [], [])
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    assert int(nvrtc.nvrtcCompileProgram(prog, 1, opts)[0]) == 0
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    err, module = driver.cuModuleLoadData(cubin)
    assert int(err) == 0, err
    err, fn = driver.cuModuleGetFunction(module, b"kexp")
    assert int(err) == 0, err
    return fn


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 1
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize
    rows: list[tuple[str, float | None, str]] = []

    fn = raw_function()
    a_in, a_out, a_n = ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(y.data_ptr()), ctypes.c_int(N)
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in (a_in, a_out, a_n)])
    addr = ctypes.addressof(params)
    stream = torch.cuda.current_stream().cuda_stream
    launch = driver.cuLaunchKernel

    def raw():
        launch(fn, 4, 1, 1, 256, 1, 1, 0, stream, addr, 0)

    floor = per_call_us(raw, sync)
    rows.append(("raw cuLaunchKernel, prepacked (floor)", floor, ""))

    def raw_alloc():
        torch.empty(N, device="cuda")
        launch(fn, 4, 1, 1, 256, 1, 1, 0, stream, addr, 0)

    floor_alloc = per_call_us(raw_alloc, sync)
    rows.append(("floor + torch.empty", floor_alloc, ""))

    k = kernelkit.kernel("kexp", ["inp"], ["out"],
                         "uint i = blockIdx.x * blockDim.x + threadIdx.x;"
                         " if (i < inp_shape[0]) out[i] = expf(inp[i]);")
    k([x], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[y])
    torch.testing.assert_close(y, torch.exp(x))
    kk_out = per_call_us(lambda: k([x], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[y]), sync)
    shapes, dtypes = [(N,)], [torch.float32]
    kk_alloc = per_call_us(lambda: k([x], output_shapes=shapes, output_dtypes=dtypes,
                                     grid=(N, 1, 1), threadgroup=(256, 1, 1)), sync)
    rows.append(("kernelkit, out=", kk_out, "target <= 1.3x floor"))
    rows.append(("kernelkit, allocating", kk_alloc,
                 f"target <= 1.3x (floor + torch.empty) = {1.3 * floor_alloc:.2f} us"))

    try:
        import cupy

        rk = cupy.RawKernel(SRC, "kexp")
        cx, cy = cupy.asarray(x), cupy.asarray(y)
        rk((4,), (256,), (cx, cy, cupy.int32(N)))
        rows.append(("CuPy RawKernel, CuPy arrays",
                     per_call_us(lambda: rk((4,), (256,), (cx, cy, cupy.int32(N))), sync), ""))
        rows.append(("CuPy RawKernel, torch tensors",
                     per_call_us(lambda: rk((4,), (256,), (cupy.asarray(x), cupy.asarray(y),
                                                          cupy.int32(N))), sync), ""))
    except ImportError:
        rows.append(("CuPy RawKernel", None, "cupy not installed"))

    try:
        import triton
        import triton.language as tl

        @triton.jit
        def texp(inp, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + offs, tl.exp(tl.load(inp + offs, mask=mask)), mask=mask)

        texp[(4,)](x, y, N, BLOCK=256)
        rows.append(("Triton @jit", per_call_us(lambda: texp[(4,)](x, y, N, BLOCK=256), sync), ""))
    except ImportError:
        rows.append(("Triton @jit", None, "triton not installed"))

    rows.append(("torch.exp(x, out=y)", per_call_us(lambda: torch.exp(x, out=y), sync), ""))
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"kernelkit {kernelkit.__version__}")
    table(rows, "us/call", floor)
    print(f"kernelkit out= / floor: {kk_out / floor:.2f}x; "
          f"allocating / (floor + torch.empty): {kk_alloc / floor_alloc:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
