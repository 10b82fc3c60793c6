"""The CUDA driver through cuda-bindings: devices, primary contexts, module load, launch."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..._errors import BackendError, LaunchError
from ..._records import TensorMapRequest
from . import deps

_lock = threading.Lock()
_forked_after_init = False  # this process was forked from one that had initialized CUDA

FORK_MESSAGE = (
    "[backend cuda] CUDA was initialized before this process was forked, and a forked child "
    "cannot use it: start worker processes with the 'spawn' method (the CPU backend keeps "
    "working in forked children)"
)


def _mark_fork() -> None:
    global _forked_after_init
    if init.cache_info().currsize:
        _forked_after_init = True


def check_not_forked() -> None:
    """BackendError when CUDA was initialized in a parent of this forked process."""
    if _forked_after_init:
        raise BackendError(FORK_MESSAGE)


@functools.cache
def drv():  # noqa: ANN201 - the cuda.bindings.driver module
    return deps.require("cuda.bindings.driver")


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-bindings result; BackendError naming the call on failure."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        name = drv().cuGetErrorName(err)[1]
        raise BackendError(f"[backend cuda] {what} failed: {name.decode() if name else err!r}")
    return rest[0] if len(rest) == 1 else rest


@functools.cache
def init() -> int:
    """cuInit once; returns the number of devices (0 when there is no driver or GPU)."""
    try:
        mod = drv()
        if int(mod.cuInit(0)[0]) != 0:
            return 0
        return int(check(mod.cuDeviceGetCount(), "cuDeviceGetCount"))
    except (BackendError, RuntimeError, OSError):
        return 0


def driver_version() -> tuple[int, int]:
    v = int(check(drv().cuDriverGetVersion(), "cuDriverGetVersion"))
    return v // 1000, (v % 1000) // 10


def attribute(device: int, name: str) -> int:
    mod = drv()
    attr = getattr(mod.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
    return int(check(mod.cuDeviceGetAttribute(attr, device), f"cuDeviceGetAttribute({name})"))


def device_name(device: int) -> str:
    raw = check(drv().cuDeviceGetName(256, device), "cuDeviceGetName")
    return raw.split(b"\x00")[0].decode()


@functools.cache
def primary_context(device: int) -> Any:
    """The device's primary context (the one torch, CuPy and JAX use)."""
    return check(drv().cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")


@contextmanager
def on_device(device: int) -> Iterator[None]:
    """Run with the device's primary context current, and leave the caller's current context as
    it was (torch and CuPy keep the current device in it): a thread with none keeps ours."""
    mod = drv()
    ctx = primary_context(device)
    current = check(mod.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if int(current) == int(ctx):
        yield
    elif int(current) == 0:
        check(mod.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        yield
    else:
        check(mod.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
        try:
            yield
        finally:
            check(mod.cuCtxPopCurrent(), "cuCtxPopCurrent")


@contextmanager
def outside_capture() -> Iterator[None]:
    """Let this thread load, unload and configure modules while a stream capture is under way
    (``torch.cuda.graph`` captures in global mode, where the driver refuses such calls, and a
    refused call invalidates the capture). None of them is stream work, so nothing is captured:
    the thread's capture mode is relaxed around them, as torch's allocator does."""
    mod = drv()
    exchange = getattr(mod, "cuThreadExchangeStreamCaptureMode", None)
    if exchange is None:
        yield
        return
    err, previous = exchange(mod.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    if int(err) != 0:
        yield
        return
    try:
        yield
    finally:
        exchange(previous)


@dataclass
class Program:
    """A loaded module and its kernel function on one device, with the kernel's own limits."""

    module: Any
    function: Any
    device: int
    entry: str
    registers: int
    static_shared_bytes: int
    max_threads_per_block: int
    local_bytes: int
    dynamic_shared_limit: int = 0  # 48 KB less the static bytes; raised, never lowered

    def __post_init__(self) -> None:
        self.dynamic_shared_limit = max(0, 48 * 1024 - self.static_shared_bytes)


def _func_attr(fn: Any, name: str) -> int:
    mod = drv()
    attr = getattr(mod.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
    return int(check(mod.cuFuncGetAttribute(attr, fn), f"cuFuncGetAttribute({name})"))


def load(binary: bytes, entry: str, device: int, ptx_hint: str = "") -> Program:
    check_not_forked()
    mod = drv()
    with _lock, on_device(device), outside_capture():
        err, module = mod.cuModuleLoadData(binary)
        if int(err) != 0:
            name = mod.cuGetErrorName(err)[1].decode()
            raise BackendError(
                f"[backend cuda] loading the kernel failed: {name}. {ptx_hint}".strip()
            )
        fn = check(mod.cuModuleGetFunction(module, entry.encode()), "cuModuleGetFunction")
    program = Program(
        module=module,
        function=fn,
        device=device,
        entry=entry,
        registers=_func_attr(fn, "NUM_REGS"),
        static_shared_bytes=_func_attr(fn, "SHARED_SIZE_BYTES"),
        max_threads_per_block=_func_attr(fn, "MAX_THREADS_PER_BLOCK"),
        local_bytes=_func_attr(fn, "LOCAL_SIZE_BYTES"),
    )
    # the module's GPU memory goes when the last specialization using it does (not at exit:
    # the driver frees everything then, and may already be shutting down)
    weakref.finalize(program, _unload, module, device, os.getpid()).atexit = False
    return program


def _unload(module: Any, device: int, pid: int) -> None:
    if pid != os.getpid():  # a forked child never owns its parent's modules
        return
    try:  # no _lock: a finalizer may run inside a locked section of this same thread
        with on_device(device), outside_capture():  # a finalizer may run during a capture
            drv().cuModuleUnload(module)
    except Exception:  # noqa: BLE001 - best effort from a finalizer
        pass


def allow_dynamic_shared(program: Program, nbytes: int) -> None:
    """Raise the kernel's dynamic shared-memory limit to at least ``nbytes`` (needed above
    48 KB); a limit already raised higher stays (other geometries may use it)."""
    if nbytes <= program.dynamic_shared_limit:
        return
    mod = drv()
    attr = mod.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    with _lock, on_device(program.device), outside_capture():
        check(mod.cuFuncSetAttribute(program.function, attr, nbytes), "cuFuncSetAttribute")
    program.dynamic_shared_limit = nbytes


def make_launcher(program: Program):  # noqa: ANN201 - a backend.Launcher
    """The hot-path launch: one cuLaunchKernel on prepacked arguments. When the calling thread's
    current context is not this device's (a fresh thread, another device current), the launch
    fails cheaply and is retried inside ``on_device``, which restores the caller's context."""
    launch = drv().cuLaunchKernel
    fn, device = program.function, program.device

    def launcher(params: int, stream: int, geometry: tuple) -> None:
        gx, gy, gz, bx, by, bz, shared = geometry
        (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
        if err:
            check_not_forked()
            with on_device(device):
                (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
            if err:
                name = drv().cuGetErrorName(err)[1].decode()
                raise LaunchError(
                    f"[{program.entry}] launch failed: {name} (grid {(gx, gy, gz)}, "
                    f"block {(bx, by, bz)}, shared {shared} bytes)"
                )

    launcher.program = program  # type: ignore[attr-defined]  # keeps the module loaded
    return launcher


_TMA_DTYPES = {  # kernelkit dtype -> CUtensorMapDataType member
    "uint8": "UINT8", "int8": "UINT8", "bool": "UINT8", "uint16": "UINT16", "int16": "UINT16",
    "uint32": "UINT32", "int32": "INT32", "uint64": "UINT64", "int64": "INT64",
    "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
}  # fmt: skip


def encode_tensor_map(r: TensorMapRequest) -> bytes:
    """``cuTensorMapEncodeTiled`` for a row-major array (dimensions reversed: the driver's first
    is the contiguous one), zero fill past the edges, L2 promotion of 256 bytes."""
    mod = drv()
    device, address, dtype, shape = r.device, r.address, r.dtype, r.shape
    strides_bytes, box, swizzle = r.strides_bytes, r.box, r.swizzle
    if dtype not in _TMA_DTYPES:
        raise TypeError(f"tensor maps take {sorted(_TMA_DTYPES)}, not {dtype}")
    u32, u64 = mod.cuuint32_t, mod.cuuint64_t
    swz = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[swizzle]
    check_not_forked()
    init()
    with on_device(device):
        tmap = check(
            mod.cuTensorMapEncodeTiled(
                getattr(mod.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_DTYPES[dtype]}"),
                len(shape),
                address,
                [u64(n) for n in reversed(shape)],
                [u64(s) for s in reversed(strides_bytes[:-1])],
                [u32(b) for b in reversed(box)],
                [u32(1)] * len(shape),
                mod.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                getattr(mod.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swz}"),
                mod.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                mod.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            ),
            "cuTensorMapEncodeTiled",
        )
    return ctypes.string_at(tmap.getPtr(), 128)


os.register_at_fork(after_in_child=_mark_fork)
