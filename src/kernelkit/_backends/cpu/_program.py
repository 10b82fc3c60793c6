"""Load a compiled CPU kernel (a shared object) and launch it through ctypes."""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import threading
import weakref
from _ctypes import dlclose as _dlclose
from dataclasses import dataclass

from ... import _config
from ..._errors import KernelFault, KernelTimeout, LaunchError
from ..._limits import LAUNCH

__all__ = ["CPUProgram", "load_program", "make_launcher", "worker_count"]

_dir_lock = threading.Lock()
_private_dir: str | None = None

_LAUNCH_ARGTYPES = [ctypes.c_void_p] + [ctypes.c_longlong] * 7 + [ctypes.c_int]


@dataclass(frozen=True)
class CPUProgram:
    """A loaded kernel library: its entry point and the name used in fault messages. When the
    last reference goes, the library's helper threads are joined and it is dlclosed."""

    kernel: str
    path: str
    library: ctypes.CDLL
    entry: ctypes._CFuncPtr  # type: ignore[name-defined]
    fault_text: ctypes._CFuncPtr  # type: ignore[name-defined]
    set_time_limit: ctypes._CFuncPtr  # type: ignore[name-defined]


def _unload(library: ctypes.CDLL, path: str, pid: int) -> None:
    """Join the library's threads, free its memory and dlclose it (no code of it runs after).
    In a forked child the library's threads do not exist (joining them would hang): the
    inherited mapping is left as it is."""
    if os.getpid() != pid:
        return
    try:
        library.kk_unload()
        _dlclose(library._handle)
    except (AttributeError, OSError):  # a library without kk_unload: left mapped
        pass
    _unlink(path)


def _library_dir() -> str:
    """A private (0700) directory for this process's loaded libraries, removed at exit."""
    global _private_dir
    with _dir_lock:
        if _private_dir is None:
            _private_dir = tempfile.mkdtemp(prefix="kernelkit-cpu-so-")
            atexit.register(shutil.rmtree, _private_dir, True)
        return _private_dir


def load_program(binary: bytes, symbol: str) -> CPUProgram:
    """Write the bytes to a private file and dlopen it (RTLD_LOCAL: kernels never share symbols)."""
    fd, path = tempfile.mkstemp(suffix=".so", dir=_library_dir())
    with os.fdopen(fd, "wb") as f:
        f.write(binary)
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        entry = getattr(lib, symbol)
        fault_text = lib.kk_fault_text
        lib.kk_kernel_info.restype = ctypes.c_char_p
        kernel = lib.kk_kernel_info().decode().split("\t")[0]
        lib.kk_unload, lib.kk_set_time_limit  # noqa: B018 - present, or refused here
    except (OSError, AttributeError) as e:  # (a library without kk_unload is refused too)
        os.unlink(path)
        raise LaunchError(f"[cpu] cannot load kernel library ({symbol}): {e}") from None
    entry.argtypes = _LAUNCH_ARGTYPES
    entry.restype = ctypes.c_int
    fault_text.argtypes = []
    fault_text.restype = ctypes.c_char_p
    set_limit = lib.kk_set_time_limit
    set_limit.argtypes = [ctypes.c_longlong]
    set_limit.restype = None
    lib.kk_unload.argtypes = []
    lib.kk_unload.restype = None
    program = CPUProgram(kernel, path, lib, entry, fault_text, set_limit)
    # the mapping stays valid once the file is gone; at exit the process unmaps everything
    weakref.finalize(program, _unload, lib, path, os.getpid()).atexit = False
    return program


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def worker_count() -> int:
    """KERNELKIT_CPU_THREADS, or the cores this process may run on."""
    n = _config.config.cpu_threads
    if n > 0:
        return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def make_launcher(program: CPUProgram, nthreads: int):
    """The hot-path callable: one ctypes call (which releases the GIL) per launch."""
    entry, fault_text, kernel = program.entry, program.fault_text, program.kernel
    set_limit, limit = program.set_time_limit, LAUNCH  # the call's timeout=, per thread

    def launch(params_address: int, stream: int, geometry: tuple) -> None:
        gx, gy, gz, bx, by, bz, shared = geometry
        if limit.seconds:
            set_limit(max(1, int(limit.seconds * 1e9)))
        status = entry(params_address, gx, gy, gz, bx, by, bz, shared, nthreads)
        if status:
            _fail(kernel, status, fault_text().decode(errors="replace"))

    launch.program = program  # type: ignore[attr-defined]  # keeps the library alive
    return launch


def _fail(kernel: str, status: int, text: str) -> None:
    if status == 3:  # Python's own handler also heard the SIGINT; this raises if it did not
        raise KeyboardInterrupt(f"[{kernel}] {text}")
    if status == 4:
        raise KernelTimeout(f"[{kernel}] {text}")
    if status == 1:
        raise KernelFault(f"[{kernel}] {text}")
    raise LaunchError(f"[{kernel}] {text}")
