"""The CUDA launch as one C call: ``native/kk_launch.c``, built once per cache with the system C
compiler and Python's headers, takes a launch from the hot path straight to the driver's
``cuLaunchKernel``, with no Python frame and no cuda-bindings wrapper in between (on an H200
host: 3.7 µs a launch against 4.4 through cuda-bindings, plus the launcher's own frame).

It is a build product of the disk cache (``_cache/products.py``: published whole by a rename,
checked against its checksums once per process). Where it cannot be had, launches go through
cuda-bindings as before and ``kernelkit info`` says why: no disk cache, or one it cannot
be written to (a product would be rebuilt in every process), ``KERNELKIT_NATIVE_LAUNCH=0``,
not Linux, no C compiler or no ``Python.h``, a build or load that failed.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ... import _arrays, _config

__all__ = ["AREA", "SOURCE", "bind", "build", "load_module", "status"]

AREA = "cuda-native"
SOURCE = Path(__file__).with_name("native") / "kk_launch.c"
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
_log = logging.getLogger("kernelkit")
_lock = threading.Lock()
# (module or None, why not) once decided in this process
_state: tuple[ModuleType | None, str] | None = None


def _compiler() -> list[str] | None:
    """The C compiler Python was built with ($CC first), else cc or gcc: its argv prefix."""
    for text in (os.environ.get("CC", ""), sysconfig.get_config_var("CC") or "", "cc", "gcc"):
        argv = shlex.split(text)
        if argv and shutil.which(argv[0]):
            return argv
    return None


def build(out: Path, compiler: list[str] | None = None) -> str | None:
    """Compile ``SOURCE`` into the extension module ``out``; None, or why it failed."""
    cc = compiler or _compiler()
    if cc is None:
        return "no C compiler (set CC)"
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return f"no Python.h under {include} (install Python's development headers)"
    cmd = [*cc, "-O2", "-shared", "-fPIC", "-I", include, str(SOURCE), "-o", str(out)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # noqa: S603
    except (OSError, subprocess.SubprocessError) as e:
        return f"{cc[0]} could not run: {e}"
    if done.returncode != 0 or not out.is_file():
        return f"{cc[0]} failed: {(done.stdout + done.stderr).strip()[-500:]}"
    return None


def load_module(path: Path) -> ModuleType:
    """Import the built extension at ``path`` (its init function is ``PyInit_kk_launch``)."""
    loader = importlib.machinery.ExtensionFileLoader("kk_launch", str(path))
    spec = importlib.util.spec_from_file_location("kk_launch", path, loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _product_name() -> str:
    text = repr((SOURCE.read_bytes(), _SUFFIX, sysconfig.get_paths()["include"], _compiler()))
    return "kk-launch-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _decide() -> tuple[ModuleType | None, str]:
    from ..._cache import disk
    from ..._cache.lookup import get_product

    if not _config.config.native_launch:
        return None, "KERNELKIT_NATIVE_LAUNCH=0"
    if not sys.platform.startswith("linux"):
        return None, f"built on Linux only, not {sys.platform}"
    if disk.current() is None:
        return None, "no disk cache to keep it in (KERNELKIT_CACHE=0 or an untrusted directory)"
    why: list[str] = []

    def make(directory: Path) -> bool:
        failed = build(directory / f"kk_launch{_SUFFIX}")
        if failed:
            why.append(failed)
        return failed is None

    # never built per process: a cache that cannot keep it means cuda-bindings
    found = get_product(AREA, _product_name(), make, in_process=False)
    if found is None:
        return None, why[0] if why else "the disk cache could not keep it (not writable?)"
    try:
        module = load_module(found / f"kk_launch{_SUFFIX}")
    except (ImportError, OSError) as e:
        return None, f"the built module did not load: {e}"
    if not _arrays.GUARDS:  # CuPy's arrays are checked in C from now on
        _arrays.GUARDS.append(module.Guards)
    return module, ""


def _module() -> tuple[ModuleType | None, str]:
    global _state
    with _lock:
        if _state is None:
            try:
                _state = _decide()
            except Exception as e:  # noqa: BLE001 - any failure: the cuda-bindings launcher
                _state = (None, f"{type(e).__name__}: {e}")
            if _state[0] is None:
                _log.debug("kernelkit: CUDA launches go through cuda-bindings: %s", _state[1])
        return _state


def status() -> str:
    """``native`` or why launches go through cuda-bindings (for ``kernelkit info``)."""
    module, why = _module()
    return "native (kk_launch.c)" if module is not None else f"cuda-bindings ({why})"


@functools.cache
def _driver_launch() -> int:
    """The address of libcuda's ``cuLaunchKernel`` (the library cuda-bindings has loaded)."""
    address = ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value
    if not address:
        raise OSError("libcuda.so.1 has no cuLaunchKernel")
    return address


def bind(
    function: int, last: list, entry: str, fallback: Callable[[int, int, tuple], None]
) -> Callable[[int, int, tuple], Any] | None:
    """``launch(params, stream, geometry)`` for one kernel through the native module, calling
    ``fallback`` with the same arguments when the driver returns an error; None where the
    module is not available (``status`` says why). Its ``native_call`` makes the module's
    ``Call`` for this kernel from the arguments that follow ``fallback``, its ``native_front``
    is the module's ``Front`` (``Kernel.__call__`` in C; both in ``kk_launch.c``)."""
    module, _ = _module()
    if module is None:
        return None
    try:
        driver = _driver_launch()
    except OSError as e:
        _log.debug("kernelkit: CUDA launches go through cuda-bindings: %s", e)
        return None
    launch = functools.partial(module.launch, driver, function, last, entry, fallback)
    # the same launch as a call repeated in C (``_pipeline/repeat.py``)
    launch.native_call = functools.partial(  # type: ignore[attr-defined]
        module.Call, driver, function, last, entry, fallback
    )
    launch.native_front = module.Front  # type: ignore[attr-defined]
    return launch
