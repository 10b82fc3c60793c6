"""A kernelkit kernel inside ``jax.jit``: ``Kernel.as_jax_callable(...)``, through XLA's FFI.

At trace time the callable sees only shapes and dtypes. It specializes the kernel for them on
the CPU backend (compiling through the usual caches), then emits one ``jax.ffi.ffi_call`` whose
attributes carry everything fixed for that specialization: the loaded library's launch entry
address, the launch geometry and the argument pack (CUDA's kernelParams layout, the layout every
backend launches from) with its constant slots (shapes, strides, ndim, scalars) filled in and
its array slots naming XLA buffers. At run time XLA calls the handler of a small C++ shim
(``jax_ffi_shim.cc``), built once from jaxlib's FFI headers (``jax.ffi.include_dir()``) with the
CPU backend's C++ compiler and kept as a cache product (``<cache dir>/jax-ffi/``), which copies
the pack, writes the buffer pointers into it and calls the entry: no Python, no copy, no sync.

``jax.vmap`` runs the call once per batch element (``vmap_method="sequential"``): the kernel
is specialized for one element's shapes. Only XLA's CPU platform has a handler for now; the
CUDA path needs a second handler that takes XLA's stream (``PlatformStream<cudaStream_t>``) and
``cuLaunchKernel``s the loaded CUfunction with the same pack, registered for platform "CUDA".
JAX is imported when a callable is made, never at kernelkit's import.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._codegen import extent_param, metadata_param
from .._errors import ArgumentError, ArgumentTypeError, BackendError
from .._pack import ArgPack, scalar_bits
from .._records import MAX_NDIM

if TYPE_CHECKING:
    from .._api import Kernel

__all__ = ["JaxCallable", "as_jax_callable"]

TARGET = "kernelkit_cpu_launch"
SHIM_SOURCE = Path(__file__).with_name("jax_ffi_shim.cc")
AREA = "jax-ffi"  # the shim's cache-product area
_SYMBOL = "kk_jax_cpu_launch"
_FLAGS = ("-std=c++17", "-O2", "-shared", "-fPIC")
_lock = threading.Lock()
_registered = False
_shim: ctypes.CDLL | None = None
# Every loaded program a traced call refers to stays loaded: a compiled XLA executable may call
# its entry at any later time (kernelkit's own plans may be evicted meanwhile).
_keep: dict[int, Any] = {}


def _build_shim(include: str, directory: Path) -> bool:
    from .._backends.cpu._toolchain import find_compiler

    cmd = [
        find_compiler(),
        *_FLAGS,
        "-I",
        include,
        str(SHIM_SOURCE),
        "-o",
        str(directory / "shim.so"),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        raise BackendError(f"[jax] cannot build the XLA FFI shim: {e}") from None
    if done.returncode != 0:
        raise BackendError(
            f"[jax] building the XLA FFI shim failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}"
        )
    return True


def _ensure_registered() -> None:
    """Build (once, cached) and load the shim, and register its handler with XLA (once)."""
    global _registered, _shim
    with _lock:
        if _registered:
            return
        import jax

        from .._backends.cpu._toolchain import compiler_identity, find_compiler
        from .._cache import products

        include = jax.ffi.include_dir()
        header = Path(include, "xla", "ffi", "api", "ffi.h")
        digest = hashlib.sha256()
        for part in (
            SHIM_SOURCE.read_bytes(),
            header.read_bytes(),
            compiler_identity(find_compiler()).encode(),
            repr(_FLAGS).encode(),
        ):
            digest.update(part)
        name = digest.hexdigest()[:24]
        found = products.get(AREA, name, lambda d: _build_shim(include, d))
        if found is None:
            raise BackendError("[jax] the XLA FFI shim could not be built or stored")
        _shim = ctypes.CDLL(str(found / "shim.so"))
        handler = getattr(_shim, _SYMBOL)
        jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(handler), platform="cpu")
        _registered = True


def _resolve(value: Any, inputs: tuple, what: str) -> Any:
    if callable(value) and not isinstance(value, type):
        return value(*inputs)
    return value


def _row_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


class JaxCallable:
    """``f(*inputs)`` -> the kernel's outputs (a list) as JAX arrays; usable inside ``jax.jit``
    and ``jax.vmap``. Array inputs are JAX arrays (or anything ``jnp.asarray`` takes); scalar
    inputs are Python numbers, fixed when the call is traced."""

    def __init__(
        self,
        kernel: Kernel,
        output_shapes: Any,
        output_dtypes: Any,
        grid: Any,
        threadgroup: Any,
        template: Any,
        shared_memory: Any,
    ) -> None:
        self.kernel = kernel
        self._rules = (output_shapes, output_dtypes, grid, threadgroup, template, shared_memory)
        self._calls: dict[Any, tuple[Callable[..., Any], tuple[int, ...]]] = {}

    def __repr__(self) -> str:
        return f"JaxCallable({self.kernel.name!r})"

    def __call__(self, *inputs: Any) -> list[Any]:
        import jax
        import jax.numpy as jnp
        import numpy as np

        name = self.kernel.name
        n_in = len(self.kernel.spec.input_names)
        if len(inputs) != n_in:
            raise ArgumentError(
                f"[{name}] expected {n_in} inputs {list(self.kernel.spec.input_names)}, "
                f"got {len(inputs)}"
            )
        arrays, described = [], []
        for x in inputs:
            if x is None or isinstance(x, int | float | bool):
                described.append(x)
                continue
            if not hasattr(x, "shape") or not hasattr(x, "dtype"):
                x = jnp.asarray(x)
            arrays.append(x)
            described.append(jax.ShapeDtypeStruct(tuple(x.shape), np.dtype(x.dtype)))
        key = tuple(
            (tuple(d.shape), str(d.dtype)) if isinstance(d, jax.ShapeDtypeStruct) else (type(d), d)
            for d in described
        )
        found = self._calls.get(key)
        if found is None:
            found = self._specialize(tuple(described))
            self._calls[key] = found
        call, positions = found
        results = call(*(arrays[i] for i in positions))
        return list(results)

    def _specialize(self, described: tuple) -> tuple[Callable[..., Any], tuple[int, ...]]:
        """The ffi_call for these input shapes and dtypes (once per specialization)."""
        import jax
        import numpy as np

        from .._backends.cpu._program import worker_count
        from .._key import CallArgs

        _ensure_registered()
        spec, name = self.kernel.spec, self.kernel.name
        shapes_rule, dtypes_rule, grid_r, tg_r, template_r, shared_r = self._rules
        out_shapes = _resolve(shapes_rule, described, "output_shapes")
        out_dtypes = _resolve(dtypes_rule, described, "output_dtypes")
        if not isinstance(out_shapes, list | tuple) or not isinstance(out_dtypes, list | tuple):
            raise ArgumentTypeError(
                f"[{name}] output_shapes and output_dtypes must be lists (or functions of the "
                "inputs returning lists)"
            )
        if len(out_shapes) != len(spec.output_names) or len(out_dtypes) != len(out_shapes):
            raise ArgumentError(
                f"[{name}] needs {len(spec.output_names)} output shapes and dtypes, got "
                f"{len(out_shapes)} and {len(out_dtypes)}"
            )
        out_shapes = [tuple(int(d) for d in s) for s in out_shapes]
        out_dtypes = [np.dtype(d) for d in out_dtypes]
        grid = tuple(_resolve(grid_r, described, "grid"))
        threadgroup = tuple(_resolve(tg_r, described, "threadgroup"))
        template = _resolve(template_r, described, "template")
        shared = _resolve(shared_r, described, "shared_memory")

        # Specialize through the ordinary path with placeholder host arrays of the traced
        # shapes (never written or read: nothing is launched here).
        dummies = [
            np.empty(d.shape, d.dtype) if isinstance(d, jax.ShapeDtypeStruct) else d
            for d in described
        ]
        args = CallArgs(
            dummies, out_shapes, out_dtypes, grid, threadgroup, template, None, None, None,
            "cpu", None, shared,
        )  # fmt: skip
        plan = self.kernel._specialize(args, False)
        loaded = plan.loaded
        geo = loaded.geometries(grid, threadgroup, shared)
        program = loaded.program

        # The argument pack with its constant slots filled; array slots name XLA buffers
        # (the traced array inputs first, then the outputs, in ffi_call's order).
        layouts: dict[str, tuple[tuple[int, ...], int]] = {}  # array name -> (shape, buffer)
        positions, buffer = [], 0
        for i, (iname, d) in enumerate(zip(spec.input_names, described)):
            if isinstance(d, jax.ShapeDtypeStruct):
                layouts[iname] = (tuple(d.shape), buffer)
                positions.append(i)
                buffer += 1
        for oname, shape in zip(spec.output_names, out_shapes):
            layouts[oname] = (shape, buffer)
            buffer += 1
        scalars = {n: d for n, d in zip(spec.input_names, described) if d is not None}
        pack = ArgPack(plan.params)
        buffers = []
        for p, slot in zip(plan.params, pack.slots):
            buffers.append(-1)
            if p.kind in ("array", "scalar_array"):
                if p.name in layouts:
                    buffers[-1] = layouts[p.name][1]
                continue
            if p.kind == "scalar":
                slot.value = scalar_bits(scalars[p.name], p.dtype)
                continue
            for array, (shape, _) in layouts.items():
                if len(shape) > MAX_NDIM:
                    raise ArgumentError(
                        f"[{name}] {array!r} has {len(shape)} dimensions; at most {MAX_NDIM}"
                    )
                strides = _row_strides(shape)
                if p.name == metadata_param(array, "shape"):
                    slot[: len(shape)] = shape
                elif p.name == metadata_param(array, "strides"):
                    slot[: len(strides)] = strides
                elif p.name == metadata_param(array, "ndim"):
                    slot.value = len(shape)
                elif p.name == extent_param(array):
                    slot.value = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
                    if not all(shape):
                        slot.value = 0
        blob, offsets = bytearray(), []
        for slot in pack.slots:
            raw = bytes(slot)
            offsets.append(len(blob))
            blob += raw + b"\0" * (-len(raw) % 8)  # every slot 8-byte aligned
        entry = ctypes.cast(program.entry, ctypes.c_void_p).value or 0
        fault = ctypes.cast(program.fault_text, ctypes.c_void_p).value or 0
        _keep[entry] = loaded
        attributes = {
            "entry": np.uint64(entry),
            "fault_text": np.uint64(fault),
            "geometry": np.array([*geo, worker_count()], dtype=np.int64),
            "pack": np.frombuffer(bytes(blob) or b"\0" * 8, dtype=np.int64).copy(),
            "offsets": np.array(offsets, dtype=np.int64),
            "buffers": np.array(buffers, dtype=np.int64),
        }
        results = [jax.ShapeDtypeStruct(s, d) for s, d in zip(out_shapes, out_dtypes)]
        call = jax.ffi.ffi_call(TARGET, results, has_side_effect=False, vmap_method="sequential")

        def run(*arrays: Any) -> Any:
            return call(*arrays, **attributes)

        return run, tuple(positions)


def as_jax_callable(
    kernel: Kernel,
    *,
    output_shapes: Any,
    output_dtypes: Any,
    grid: Any,
    threadgroup: Sequence[int] | Callable[..., Any] = (256, 1, 1),
    template: Any = None,
    shared_memory: Any = None,
) -> JaxCallable:
    """See ``Kernel.as_jax_callable``."""
    if kernel.spec.backend not in (None, "cpu"):
        raise ArgumentError(
            f"[{kernel.name}] as_jax_callable runs on the CPU backend for now; this kernel is "
            f"pinned to backend {kernel.spec.backend!r}"
        )
    return JaxCallable(
        kernel, output_shapes, output_dtypes, grid, threadgroup, template, shared_memory
    )
