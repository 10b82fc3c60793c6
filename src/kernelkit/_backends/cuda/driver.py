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
from . import deps, native

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
def drv():
    return deps.require("cuda.bindings.driver")


# Errors after which the process's CUDA context is unusable: a fault inside a kernel. They surface
# at the next call that waits for the device (or the next launch), not at the faulting launch.
FAULTS = frozenset(
    """CUDA_ERROR_ILLEGAL_ADDRESS CUDA_ERROR_MISALIGNED_ADDRESS CUDA_ERROR_ILLEGAL_INSTRUCTION
    CUDA_ERROR_INVALID_ADDRESS_SPACE CUDA_ERROR_INVALID_PC CUDA_ERROR_HARDWARE_STACK_ERROR
    CUDA_ERROR_LAUNCH_FAILED CUDA_ERROR_ASSERT CUDA_ERROR_LAUNCH_TIMEOUT""".split()
)
_last_launch = [""]  # the entry of the last kernel kernelkit launched in this process


def fault_message(error: str, kernel: str, seen_at: str) -> str:
    """The LaunchError text of a device fault that ``seen_at`` reported after ``kernel`` (the last
    kernel kernelkit launched, "" if none) ran."""
    who = f"kernel {kernel!r}" if kernel else "a kernel"
    return (
        f"[{kernel or 'backend cuda'}] device fault {error} in {who} (the last kernel kernelkit "
        f"launched; reported by {seen_at}, which waits for the device). The process's CUDA "
        "context is lost: every later CUDA call in this process fails, so restart it. To find "
        "the faulting access, run the same call on the CPU backend in checked mode "
        "(backend='cpu', check=True): it names the array, the index and the source line."
    )


def _error_name(err: Any) -> str:
    name = drv().cuGetErrorName(err)[1]
    return name.decode() if name else repr(err)


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-bindings result; BackendError naming the call on failure (LaunchError for a
    device fault, naming the kernel that ran last)."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        name = _error_name(err)
        if name in FAULTS:
            raise LaunchError(fault_message(name, _last_launch[0], what))
        raise BackendError(f"[backend cuda] {what} failed: {name}")
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
        try:
            fn = check(mod.cuModuleGetFunction(module, entry.encode()), "cuModuleGetFunction")
            _allow_large_clusters(mod, fn)
        except BaseException:
            mod.cuModuleUnload(module)  # (no program holds it yet)
            raise
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


PORTABLE_CLUSTER = 8  # blocks a cluster may have without the kernel's opt-in


def _allow_large_clusters(mod: Any, fn: Any) -> None:
    """A kernel compiled with ``__cluster_dims__`` of more than PORTABLE_CLUSTER blocks (up to
    16 on sm_90) launches only once it allows a non-portable cluster size: set it here, where
    the binary's own cluster shape is known (a driver that refuses the attribute raises here,
    when the kernel loads; a launch the device cannot place fails with the driver's error)."""
    size = 1
    for dim in ("WIDTH", "HEIGHT", "DEPTH"):
        attr = getattr(mod.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{dim}")
        err, value = mod.cuFuncGetAttribute(attr, fn)
        size *= max(1, int(value)) if int(err) == 0 else 1  # a driver without it: no clusters
    if size > PORTABLE_CLUSTER:
        attr = mod.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        check(mod.cuFuncSetAttribute(fn, attr, 1), "cuFuncSetAttribute")


def _unload(module: Any, device: int, pid: int) -> None:
    if pid != os.getpid():  # a forked child never owns its parent's modules
        return
    try:  # no _lock: a finalizer may run inside a locked section of this same thread
        with on_device(device), outside_capture():  # a finalizer may run during a capture
            drv().cuModuleUnload(module)
    except Exception:  # noqa: BLE001, S110 - best effort from a finalizer
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


def make_launcher(program: Program):
    """The hot-path launch: one cuLaunchKernel on prepacked arguments, through the native
    module (``native.py``: one C call) where it is built, else through cuda-bindings. When the
    calling thread's current context is not this device's (a fresh thread, another device
    current), the launch fails cheaply and is retried inside ``on_device`` (the native launch
    hands a failed launch to this Python launcher), which restores the caller's context."""
    launch = drv().cuLaunchKernel
    fn, device, entry, last = program.function, program.device, program.entry, _last_launch

    def launcher(params: int, stream: int, geometry: tuple) -> None:
        gx, gy, gz, bx, by, bz, shared = geometry
        (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
        if err:
            check_not_forked()
            with on_device(device):
                (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
            if err:
                name = _error_name(err)
                if name in FAULTS:  # an earlier kernel's fault, seen at this launch
                    raise LaunchError(fault_message(name, last[0], f"the launch of {entry!r}"))
                raise LaunchError(
                    f"[{program.entry}] launch failed: {name} (grid {(gx, gy, gz)}, "
                    f"block {(bx, by, bz)}, shared {shared} bytes)"
                )
        last[0] = entry

    launcher.program = program  # type: ignore[attr-defined]  # keeps the module loaded
    fast = native.bind(int(fn), last, entry, launcher)
    if fast is None:
        return launcher
    fast.program = program  # type: ignore[attr-defined]
    return fast


def coresident_blocks(program: Program, threads: int, shared: int) -> int:
    """How many blocks of ``threads`` threads and ``shared`` bytes of dynamic shared memory the
    device keeps resident at once (the occupancy API, times the SM count); 0 when the device
    has no cooperative launch."""
    mod = drv()
    with on_device(program.device):
        if not attribute(program.device, "COOPERATIVE_LAUNCH"):
            return 0
        per_sm = check(
            mod.cuOccupancyMaxActiveBlocksPerMultiprocessor(program.function, threads, shared),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
        )
    return int(per_sm) * attribute(program.device, "MULTIPROCESSOR_COUNT")


def make_cooperative_launcher(program: Program):
    """``cuLaunchCooperativeKernel`` after checking (once per block shape and shared memory)
    that the grid's blocks are all resident at once, as ``grid.sync()`` needs."""
    launch = drv().cuLaunchCooperativeKernel
    fn, device = program.function, program.device
    fits: dict[tuple[int, int], int] = {}

    def launcher(params: int, stream: int, geometry: tuple) -> None:
        gx, gy, gz, bx, by, bz, shared = geometry
        shape = (bx * by * bz, shared)
        limit = fits.get(shape)
        if limit is None:
            limit = fits[shape] = coresident_blocks(program, *shape)
        if gx * gy * gz > limit:
            raise LaunchError(
                f"[{program.entry}] cooperative launch of {gx * gy * gz} blocks: this device "
                f"keeps at most {limit} blocks of {shape[0]} threads and {shared} bytes of "
                "shared memory resident at once (0: no cooperative launch); launch fewer blocks"
            )
        (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params)
        if err:
            check_not_forked()
            with on_device(device):
                (err,) = launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params)
            if err:
                name = drv().cuGetErrorName(err)[1].decode()
                raise LaunchError(
                    f"[{program.entry}] cooperative launch failed: {name} (grid "
                    f"{(gx, gy, gz)}, block {(bx, by, bz)}, shared {shared} bytes)"
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
