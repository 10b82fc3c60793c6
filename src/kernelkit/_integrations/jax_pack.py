"""The attributes of one kernelkit call through XLA's FFI: everything the shim's handler needs
that is fixed when the call is lowered (or, for an eager call, first seen).

The argument pack is CUDA's kernelParams layout, the one every backend launches from, built
with ``_pipeline.pack.ArgPack`` and flattened into int64 words: each slot 8-byte aligned at
``offsets[i]``, constant slots (shapes, strides, ndim, extents, scalars) filled in, and array
slots named by ``buffers[i]``, the index of the XLA buffer whose address the handler writes
there (inputs in call order, then outputs; -1 for a constant slot). Launch geometry and what to
launch come beside it: the CPU library's entry and fault-text addresses, or, for CUDA, the
loaded ``CUfunction`` in each CUDA context the call may run in.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._abi import extent_param, metadata_param
from .._arrays import row_strides
from .._errors import ArgumentError
from .._pipeline.launch import extent
from .._pipeline.pack import ArgPack, scalar_bits
from .._records import MAX_NDIM, Param

__all__ = ["Packed", "attributes", "cpu_attributes", "cuda_attributes", "pack"]

# Every loaded program an attribute points at stays loaded: a compiled XLA executable may call it
# at any later time (kernelkit's own plans may be evicted meanwhile).
_keep: dict[int, Any] = {}


@dataclass(frozen=True, eq=False)
class Packed:
    """A flattened argument pack (see the module docstring)."""

    words: np.ndarray  # int64
    offsets: np.ndarray  # int64, one per parameter
    buffers: np.ndarray  # int64, one per parameter


def _metadata(
    kernel: str,
    arrays: Mapping[str, tuple[int, ...] | None],
    params: Sequence[Param],
    flat: Collection[str],
) -> dict[str, Any]:
    """Parameter name -> value of every shape/strides/ndim/extent parameter. XLA's arrays are
    row-contiguous; an absent optional input looks as the direct path passes it: shape (0,);
    the arrays named in ``flat`` as their flat views (``KernelSpec.flat_outputs``)."""
    wanted = {p.name for p in params}
    meta: dict[str, Any] = {}
    for array, shape in arrays.items():
        shape = (0,) if shape is None else (math.prod(shape),) if array in flat else shape
        strides = row_strides(shape)
        fields = {
            metadata_param(array, "shape"): shape,
            metadata_param(array, "strides"): strides,
            metadata_param(array, "ndim"): len(shape),
            extent_param(array): extent(shape, strides),
        }
        if len(shape) > MAX_NDIM and wanted & set(fields):
            raise ArgumentError(
                f"[{kernel}] {array!r} has {len(shape)} dimensions; shape/strides support at "
                f"most {MAX_NDIM}"
            )
        meta.update(fields)
    return meta


def pack(
    kernel: str,
    params: Sequence[Param],
    arrays: Mapping[str, tuple[int, ...] | None],
    scalars: Mapping[str, Any],
    flat: Collection[str] = (),
) -> Packed:
    """The pack for one call. ``arrays`` maps each array argument's name to its shape (None:
    an absent optional input, a null pointer), in XLA's buffer order: array inputs as the call
    passes them, then the outputs; ``scalars`` maps each scalar input's name to its value;
    ``flat`` names the arrays whose metadata are their flat views'."""
    buffer_of, n = {}, 0
    for name, shape in arrays.items():
        if shape is not None:
            buffer_of[name], n = n, n + 1
    meta = _metadata(kernel, arrays, params, flat)
    slots = ArgPack(params).slots
    buffers = []
    for p, slot in zip(params, slots):
        buffers.append(buffer_of.get(p.name, -1) if p.kind in ("array", "scalar_array") else -1)
        if p.kind == "scalar":
            slot.value = scalar_bits(scalars[p.name], p.dtype)  # type: ignore[arg-type]
        elif p.kind == "dims":
            dims = meta[p.name]
            slot[: len(dims)] = dims
        elif p.kind in ("ndim", "extent"):
            slot.value = meta[p.name]
    words, offsets = bytearray(), []
    for slot in slots:
        raw = bytes(slot)
        offsets.append(len(words))
        words += raw + b"\0" * (-len(raw) % 8)  # every slot 8-byte aligned
    return Packed(
        np.frombuffer(bytes(words) or b"\0" * 8, dtype=np.int64).copy(),
        np.array(offsets, dtype=np.int64),
        np.array(buffers, dtype=np.int64),
    )


def _address(value: Any) -> int:
    return ctypes.cast(value, ctypes.c_void_p).value or 0


def cpu_attributes(loaded: Any, geometry: Sequence[int], packed: Packed) -> dict[str, Any]:
    """The CPU handler's attributes: ``loaded`` is the CPU backend's ``LoadedProgram``."""
    from .._backends.cpu._program import worker_count

    program = loaded.program
    entry = _address(program.entry)
    _keep[entry] = loaded
    return {
        "entry": np.uint64(entry),
        "fault_text": np.uint64(_address(program.fault_text)),
        "geometry": np.array([*geometry, worker_count()], dtype=np.int64),
        "pack": packed.words,
        "offsets": packed.offsets,
        "buffers": packed.buffers,
    }


def cuda_attributes(
    handles: Sequence[tuple[int, int]], geometry: Sequence[int], packed: Packed
) -> dict[str, Any]:
    """The CUDA handler's attributes: ``handles`` holds a (CUcontext, CUfunction) pair, as
    integers, per device the call may run on (the handler picks its stream's context's)."""

    def words(values: Sequence[int]) -> np.ndarray:  # pointers, bit for bit, as int64
        return np.array(values, dtype=np.uint64).view(np.int64)

    return {
        "functions": words([f for _, f in handles]),
        "contexts": words([c for c, _ in handles]),
        "geometry": np.array(geometry, dtype=np.int64),
        "pack": packed.words,
        "offsets": packed.offsets,
        "buffers": packed.buffers,
    }


def _cuda_handles(loaded: Any) -> tuple[int, int]:
    """(CUcontext, CUfunction) of a program the CUDA backend loaded (in the device's primary
    context, the one XLA runs in), kept loaded."""
    from .._backends.cuda import driver

    program = loaded.program
    function = int(program.function)
    _keep[function] = loaded
    return int(driver.primary_context(program.device)), function


def attributes(
    platform: str,
    plans: Sequence[Any],
    arrays: Mapping[str, tuple[int, ...] | None],
    scalars: Mapping[str, Any],
    launch: tuple[Any, Any, Any],
    flat: Collection[str] = (),
) -> dict[str, Any]:
    """The attributes for ``platform`` ("cpu" or "cuda") from the plans (``_plan.LaunchPlan``)
    of one specialization, one per device it may run on, and ``launch``: the call's grid,
    threadgroup and shared memory, checked (and shared memory reserved) on every device;
    ``flat``: as for ``pack``."""
    first = plans[0]
    geometry = first.loaded.geometries(*launch)
    for plan in plans[1:]:
        plan.loaded.geometries(*launch)
    packed = pack(first.kernel, first.params, arrays, scalars, flat)
    if platform == "cpu":
        return cpu_attributes(first.loaded, geometry, packed)
    return cuda_attributes([_cuda_handles(p.loaded) for p in plans], geometry, packed)
