"""Question: how much does a kernelkit call cost on the host, next to the floor and the peers?

One process, one tiny kernel (out[i] = expf(inp[i]) on 1024 float32 torch CUDA tensors), µs per
call (host wall time over many calls, synchronized per batch, median of 9 interleaved rounds),
each as a ratio to the floor: raw cuLaunchKernel through cuda-bindings with prepacked arguments.
Also a call whose grid is new every time (a server seeing a new sequence length): it must not
compile or load again, only check the new geometry; and the eager call through the kernel's
torch op (``Kernel.as_torch_op``: the dispatcher plus one Python call) next to a Triton kernel
registered with ``torch.library.triton_op`` (target: no slower than the Triton op).
Run: PYTHONPATH=src python3 benchmarks/launch_overhead.py
     PYTHONPATH=src python3 benchmarks/launch_overhead.py --backend cpu   (known vs new size only)
"""

from __future__ import annotations

import ctypes
import itertools
import sys
from collections.abc import Callable

import numpy as np
from _common import cuda_or_skip, interleaved_us, table

import kernelkit
from kernelkit._pipeline.load import loaded_count

N = 1024
SRC = (
    'extern "C" __global__ void kexp(const float* inp, float* out, int n) {'
    " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = expf(inp[i]); }"
)


BODY = (
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < inp_shape[0]) out[i] = expf(inp[i]);"
)


def raw_function():
    import torch
    from cuda.bindings import driver, nvrtc

    major, minor = torch.cuda.get_device_capability()
    err, prog = nvrtc.nvrtcCreateProgram(SRC.encode(), b"k.cu", 0, [], [])
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    assert int(nvrtc.nvrtcCompileProgram(prog, 1, opts)[0]) == 0
    _, size = nvrtc.nvrtcGetCUBINSize(prog)
    cubin = bytearray(size)  # NVRTC writes it: never into a bytes object
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    err, module = driver.cuModuleLoadData(cubin)
    assert int(err) == 0, err
    err, fn = driver.cuModuleGetFunction(module, b"kexp")
    assert int(err) == 0, err
    return fn


def new_grid_every_call(k, inputs, out) -> Callable[[], object]:
    """A call whose grid was never seen before (the kernel guards with inp_shape[0])."""
    grids = itertools.count(N + 1)
    return lambda: k(inputs, grid=(next(grids), 1, 1), threadgroup=(256, 1, 1), out=out)


def autotuned(k):
    """``k`` autotuned over two block sizes, its decision for N already made and stored: a call
    then costs the selection's lookup on top of the kernel call (target: at most 2 µs)."""
    return kernelkit.autotune(
        k,
        configs=[{"threadgroup": (256,)}, {"threadgroup": (128,)}],
        key=["inp.dtype", "inp.shape[0]:pow2"],
        grid="inp",
        quiet=True,
    )


def torch_op(k, name: str):
    """``k`` as a torch op (``kk_bench::<name>``): one thread per element of ``inp``."""
    return k.as_torch_op(
        f"kk_bench::{name}", output_shapes="inp", output_dtypes="inp", grid="inp",
        threadgroup=(256,),
    )  # fmt: skip


def triton_ops(kernel, block: int):
    """A Triton kernel registered with ``torch.library.triton_op``: allocating and ``out=``."""
    import torch
    from torch.library import triton_op, wrap_triton

    def triton_exp(x):
        y = torch.empty_like(x)
        wrap_triton(kernel)[(-(-x.numel() // block),)](x, y, x.numel(), BLOCK=block)
        return y

    def triton_exp_out(x, y):
        wrap_triton(kernel)[(-(-x.numel() // block),)](x, y, x.numel(), BLOCK=block)

    # triton_op reads the schema from annotations, which must be types (not this module's strings)
    tensor = torch.Tensor
    triton_exp.__annotations__ = {"x": tensor, "return": tensor}
    triton_exp_out.__annotations__ = {"x": tensor, "y": tensor, "return": None}
    return (
        triton_op("kk_bench::triton_exp", triton_exp, mutates_args=()),
        triton_op("kk_bench::triton_exp_out", triton_exp_out, mutates_args={"y"}),
    )


def cpu_torch_variants(k) -> dict[str, Callable[[], object]]:
    """The bare call and the torch op's eager call on torch CPU tensors (when torch is here)."""
    try:
        import torch
    except ImportError:
        return {}
    x = torch.randn(N)
    y = torch.empty_like(x)
    op = torch_op(k, "kexp_cpu")
    op(x, out=y)
    torch.testing.assert_close(y, torch.exp(x))

    def bare_out(inp: torch.Tensor, out: torch.Tensor) -> None:
        k([inp], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[out])

    # the same call wrapped by torch.library.custom_op: why as_torch_op uses Library directly
    wrapped = torch.library.custom_op(
        "kk_bench::custom_op_exp",
        bare_out,
        mutates_args={"out"},
        schema="(Tensor inp, Tensor(a!) out) -> ()",  # this module's annotations are strings
    )
    return {
        "kernelkit cpu, torch tensors, out=": lambda: bare_out(x, y),
        "torch op, eager, out=": lambda: op(x, out=y),
        "torch op, eager, allocating": lambda: op(x),
        "torch.library.custom_op around the bare call, out=": lambda: wrapped(x, y),
    }


def cpu_main() -> int:
    """Known size vs a new size every call, NumPy arrays on the CPU backend."""
    k = kernelkit.kernel("kexp_cpu", ["inp"], ["out"], BODY)
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    y = np.full(N, np.nan, np.float32)
    k([x], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[y])
    np.testing.assert_allclose(y, np.exp(x.astype(np.float64)), rtol=1e-6)
    tuned = autotuned(k)
    tuned([x], out=[y])  # tunes (or finds the stored decision)
    tg = tuned.explain([x], out=[y]).choice.config.threadgroup
    variants = {
        "kernelkit cpu, out=, known size": lambda: k([x], grid=(N, 1, 1), threadgroup=tg, out=[y]),
        "kernelkit cpu, out=, new grid every call": new_grid_every_call(k, [x], [y]),
        "autotuned, stored decision, out=": lambda: tuned([x], out=[y]),
        **cpu_torch_variants(k),
    }
    us = interleaved_us(variants, lambda: None, calls=2000, rounds=5)
    print(f"kernelkit {kernelkit.__version__}, CPU backend; median of 5 rounds of 2000 calls")
    table([(n, v, "") for n, v in us.items()], "us/call", us["kernelkit cpu, out=, known size"])
    sel = us["autotuned, stored decision, out="] - us["kernelkit cpu, out=, known size"]
    print(f"selection of a stored decision: +{sel:.2f} us per call (target <= 2)")
    if "torch op, eager, out=" in us:
        above = us["torch op, eager, out="] - us["kernelkit cpu, torch tensors, out="]
        print(f"torch op over the bare call (torch tensors, out=): +{above:.2f} us per call")
    print(f"programs loaded: {loaded_count()}; specializations: {len(k._plans)}")
    return 0


def main() -> int:
    if "--backend" in sys.argv and sys.argv[sys.argv.index("--backend") + 1] == "cpu":
        return cpu_main()
    if not cuda_or_skip("launch_overhead.py (or --backend cpu)"):
        return 0
    import torch
    from cuda.bindings import driver

    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    variants: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}

    fn = raw_function()
    a_in, a_out, a_n = ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(y.data_ptr()), ctypes.c_int(N)
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in (a_in, a_out, a_n)])
    addr = ctypes.addressof(params)
    stream = torch.cuda.current_stream().cuda_stream
    launch = driver.cuLaunchKernel
    variants["raw cuLaunchKernel, prepacked (floor)"] = lambda: launch(
        fn, 4, 1, 1, 256, 1, 1, 0, stream, addr, 0
    )

    def raw_alloc():
        torch.empty(N, device="cuda")
        launch(fn, 4, 1, 1, 256, 1, 1, 0, stream, addr, 0)

    variants["floor + torch.empty"] = raw_alloc

    k = kernelkit.kernel("kexp", ["inp"], ["out"], BODY)
    y.fill_(float("nan"))
    k([x], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[y])
    torch.testing.assert_close(y, torch.exp(x))
    shapes, dtypes = [(N,)], [torch.float32]
    variants["kernelkit, out="] = lambda: k([x], grid=(N, 1, 1), threadgroup=(256, 1, 1), out=[y])
    variants["kernelkit, allocating"] = lambda: k(
        [x], output_shapes=shapes, output_dtypes=dtypes, grid=(N, 1, 1), threadgroup=(256, 1, 1)
    )
    variants["kernelkit, out=, new grid every call"] = new_grid_every_call(k, [x], [y])
    tuned = autotuned(k)
    tuned([x], out=[y])  # tunes (or finds the stored decision)
    tg = tuned.explain([x], out=[y]).choice.config.threadgroup
    variants["kernelkit, out=, the autotuned config"] = lambda: k(
        [x], grid=(N, 1, 1), threadgroup=tg, out=[y]
    )
    variants["autotuned, stored decision, out="] = lambda: tuned([x], out=[y])
    op = torch_op(k, "kexp")
    y.fill_(float("nan"))
    op(x, out=y)
    torch.testing.assert_close(y, torch.exp(x))
    variants["torch op, eager, out="] = lambda: op(x, out=y)
    variants["torch op, eager, allocating"] = lambda: op(x)
    notes["torch op, eager, out="] = "target: no slower than the Triton op"
    notes["autotuned, stored decision, out="] = "target <= 2 us over the bare call"
    notes["kernelkit, out="] = "target <= 1.3x floor"
    notes["kernelkit, allocating"] = "target <= 1.3x (floor + torch.empty)"

    try:
        import cupy

        rk = cupy.RawKernel(SRC, "kexp")
        cx, cy = cupy.asarray(x), cupy.asarray(y)
        n32 = cupy.int32(N)
        variants["CuPy RawKernel, CuPy arrays"] = lambda: rk((4,), (256,), (cx, cy, n32))
        variants["CuPy RawKernel, torch tensors"] = lambda: rk(
            (4,), (256,), (cupy.asarray(x), cupy.asarray(y), n32)
        )
    except ImportError:
        notes["CuPy RawKernel"] = "cupy not installed"

    try:
        import triton
        import triton.language as tl

        @triton.jit
        def texp(inp, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            tl.store(out + offs, tl.exp(tl.load(inp + offs, mask=mask)), mask=mask)

        variants["Triton @jit"] = lambda: texp[(4,)](x, y, N, BLOCK=256)
        t_alloc, t_out = triton_ops(texp, 256)
        torch.testing.assert_close(t_alloc(x), torch.exp(x))
        variants["Triton torch.library.triton_op, out="] = lambda: t_out(x, y)
        variants["Triton torch.library.triton_op, allocating"] = lambda: t_alloc(x)
    except ImportError:
        notes["Triton @jit"] = "triton not installed"
        notes["Triton torch.library.triton_op"] = "triton not installed"

    variants["torch.exp(x, out=y)"] = lambda: torch.exp(x, out=y)
    us = interleaved_us(variants, torch.cuda.synchronize)
    floor, floor_alloc = us["raw cuLaunchKernel, prepacked (floor)"], us["floor + torch.empty"]
    print(
        f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"kernelkit {kernelkit.__version__}; median of 9 interleaved rounds of 10000 calls"
    )
    rows = [(name, value, notes.get(name, "")) for name, value in us.items()]
    rows += [(name, None, note) for name, note in notes.items() if name not in us]
    table(rows, "us/call", floor)
    kk_out, kk_alloc = us["kernelkit, out="], us["kernelkit, allocating"]
    kk_new = us["kernelkit, out=, new grid every call"]
    print(
        f"kernelkit out= / floor: {kk_out / floor:.2f}x; "
        f"allocating / (floor + torch.empty): {kk_alloc / floor_alloc:.2f}x; "
        f"new grid / known grid: {kk_new / kk_out:.2f}x"
    )
    sel = us["autotuned, stored decision, out="] - us["kernelkit, out=, the autotuned config"]
    print(f"selection of a stored decision: +{sel:.2f} us per call (target <= 2)")
    for form in ("out=", "allocating"):
        ours = us[f"torch op, eager, {form}"]
        theirs = us.get(f"Triton torch.library.triton_op, {form}")
        versus = f"{ours / theirs:.2f}x the Triton op" if theirs else "no Triton op to compare"
        print(f"torch op, {form}: +{ours - us[f'kernelkit, {form}']:.2f} us over the bare call; "
              f"{versus}")  # fmt: skip
    print(f"programs loaded: {loaded_count()}; specializations: {len(k._plans)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
