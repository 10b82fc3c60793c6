"""The load stage and launch geometry: one loaded program per (binary, device), shared by every
specialization and every problem size that compiles to it; geometries checked once each.

A server sees many sizes (sequence lengths, batch sizes), each with its own grid. The grid is
therefore not part of what is compiled or loaded: it travels with each launch, and each program
keeps a small table of the geometries it has already checked.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._backends.registry import backend_call
from .._cache import compile_cached, recompile_refused
from .._errors import ArgumentError, KernelkitError
from .._records import CompileRequest, Target
from ..backend import Backend, Geometry, Launcher

__all__ = ["Geometries", "LoadedProgram", "geometry", "load", "require_geometry"]

MAX_GEOMETRIES = 4096  # checked geometries kept per program (the table restarts when full)


def require_geometry(name: str, grid: Any, threadgroup: Any) -> None:
    """Refuse a call that gives no ``grid`` or no ``threadgroup`` (there is no default: one
    thread would run, and the outputs would hold uninitialized memory)."""
    missing = [w for w, v in (("grid", grid), ("threadgroup", threadgroup)) if v is None]
    if missing:
        raise ArgumentError(
            f"[{name}] {' and '.join(missing)} required: pass grid=(threads_x, threads_y, "
            "threads_z) (threads, as in MLX) and threadgroup=(x, y, z) (the block shape)"
        )


def geometry(
    name: str,
    grid: Any,
    threadgroup: Any,
    shared_bytes: Any,
    target: Target,
    limits: dict[str, int],
) -> Geometry:
    """Blocks, threads per block and dynamic shared memory from MLX's thread-count grid,
    checked against the device's and the kernel's limits."""
    require_geometry(name, grid, threadgroup)
    g, t = _dims3(name, "grid", grid), _dims3(name, "threadgroup", threadgroup)
    block = tuple(min(a, b) for a, b in zip(t, g))
    blocks = tuple(-(-a // b) for a, b in zip(g, block))
    max_threads = min(
        target.max_threads_per_block,
        limits.get("max_threads_per_block", target.max_threads_per_block),
    )
    # the threadgroup as given, not as clipped to a smaller grid: a launch that runs for
    # one size and not for a larger one is refused for both (as MLX and CUDA would)
    total = t[0] * t[1] * t[2]
    if total > max_threads:
        raise ArgumentError(
            f"[{name}] threadgroup {t} has {total} threads per block; this kernel "
            f"allows at most {max_threads} on {target.name}"
        )
    for axis, (b, lim) in enumerate(zip(t, target.max_block_dims)):
        if b > lim:
            raise ArgumentError(
                f"[{name}] threadgroup[{axis}] = {b} exceeds the device limit {lim}"
            )
    for axis, (b, lim) in enumerate(zip(blocks, target.max_grid_dims)):
        if b > lim:
            raise ArgumentError(
                f"[{name}] grid[{axis}] = {g[axis]} needs {b} blocks; the device allows {lim}"
            )
        c = limits.get(f"cluster_{'xyz'[axis]}", 1)
        if b % c:
            raise ArgumentError(
                f"[{name}] grid[{axis}] = {g[axis]} makes {b} blocks, not a whole number of "
                f"clusters of cluster_dims[{axis}] = {c}"
            )
    if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, int) or shared_bytes < 0:
        raise ArgumentError(
            f"[{name}] shared_memory must be a non-negative int (bytes), got {shared_bytes!r}"
        )
    static = limits.get("static_shared_bytes", 0)
    if shared_bytes + static > target.max_shared_memory_optin_bytes:
        raise ArgumentError(
            f"[{name}] shared_memory = {shared_bytes} bytes (+{static} static) exceeds the "
            f"{target.max_shared_memory_optin_bytes} bytes {target.name} allows per block"
        )
    return (*blocks, *block, shared_bytes)  # type: ignore[return-value]


def _dims3(name: str, what: str, value: Any) -> tuple[int, int, int]:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 3:
        raise ArgumentError(
            f"[{name}] {what} must be a tuple of 1 to 3 positive ints, got {value!r}"
        )
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArgumentError(f"[{name}] {what} must hold positive ints, got {value!r}")
        out.append(v)
    return tuple(out + [1] * (3 - len(out)))  # type: ignore[return-value]


@dataclass(eq=False)
class Geometries:
    """The checked geometries of one program, keyed by the call's ``(grid, threadgroup,
    shared_memory)`` as given. ``table`` is read on the hot path; a miss calls this object,
    which checks a geometry of plain int tuples with the limits read once (``quick``: a
    kernel called with a new grid every time, as an attention kernel over a growing cache
    is) and anything else, or anything refused, through ``geometry`` (which names it)."""

    name: str
    target: Target
    limits: dict[str, int]
    default_shared_bytes: int
    reserve: Callable[[int], None]  # backend.reserve_shared_memory for this program
    table: dict[Any, Geometry] = field(default_factory=dict)
    _reserved: int = 0
    _bounds: tuple = ()

    def __post_init__(self) -> None:
        t, lim = self.target, self.limits
        self._bounds = (
            min(t.max_threads_per_block, lim.get("max_threads_per_block", t.max_threads_per_block)),
            *t.max_block_dims,
            *t.max_grid_dims,
            *(lim.get(f"cluster_{a}", 1) for a in "xyz"),
            t.max_shared_memory_optin_bytes - lim.get("static_shared_bytes", 0),
        )

    def __call__(self, grid: Any, threadgroup: Any, shared_bytes: Any) -> Geometry:
        """Check a geometry not seen before, remember it and return it."""
        nbytes = self.default_shared_bytes if shared_bytes is None else shared_bytes
        geo = self.quick(grid, threadgroup, nbytes)
        if geo is None:
            geo = geometry(self.name, grid, threadgroup, nbytes, self.target, self.limits)
        # the default limit covers static and dynamic shared memory together
        static = self.limits.get("static_shared_bytes", 0)
        if nbytes > self._reserved and nbytes + static > self.target.max_shared_memory_bytes:
            self.reserve(nbytes)
            self._reserved = nbytes
        if len(self.table) >= MAX_GEOMETRIES:
            self.table.clear()
        try:
            self.table[grid, threadgroup, shared_bytes] = geo
        except TypeError:  # grid given as a list: checked again next time
            pass
        return geo

    def of(self, grid: Any, threadgroup: Any, shared_bytes: Any) -> Geometry:
        """The geometry of a call's ``(grid, threadgroup, shared_memory)``: from the table, else
        checked (a call repeated in C with another grid asks this)."""
        try:
            return self.table[grid, threadgroup, shared_bytes]
        except (KeyError, TypeError):
            return self(grid, threadgroup, shared_bytes)

    def bounds(self) -> tuple[int, ...]:
        """What a call repeated in C checks a new geometry against (``kk_launch.c``'s
        ``kk_quick``, the same rules as ``quick``): ``quick``'s limits, the default shared
        memory size, and the most shared memory a launch needs no raised limit for (now)."""
        static = self.limits.get("static_shared_bytes", 0)
        free = max(self._reserved, self.target.max_shared_memory_bytes - static)
        return (*self._bounds, self.default_shared_bytes, free)

    def quick(self, grid: Any, threadgroup: Any, nbytes: Any) -> Geometry | None:
        """``geometry``'s result where ``grid`` and ``threadgroup`` are tuples of 1 to 3 ints
        and the launch is within every limit; None for anything else (``geometry`` then
        names what is wrong, or takes what is unusual)."""
        if grid.__class__ is not tuple or threadgroup.__class__ is not tuple:
            return None
        if nbytes.__class__ is not int or nbytes < 0 or not 0 < len(grid) <= 3:
            return None
        if not 0 < len(threadgroup) <= 3:
            return None
        gx, gy, gz = grid + _ONES[len(grid)]
        tx, ty, tz = threadgroup + _ONES[len(threadgroup)]
        int_ = int
        if not (
            gx.__class__ is int_ and gy.__class__ is int_ and gz.__class__ is int_
            and tx.__class__ is int_ and ty.__class__ is int_ and tz.__class__ is int_
            and gx > 0 and gy > 0 and gz > 0 and tx > 0 and ty > 0 and tz > 0
        ):  # fmt: skip
            return None
        threads, mbx, mby, mbz, mgx, mgy, mgz, cx, cy, cz, shared = self._bounds
        bx, by, bz = min(tx, gx), min(ty, gy), min(tz, gz)
        nx, ny, nz = -(-gx // bx), -(-gy // by), -(-gz // bz)
        if (
            tx * ty * tz > threads or tx > mbx or ty > mby or tz > mbz
            or nx > mgx or ny > mgy or nz > mgz or nx % cx or ny % cy or nz % cz
            or nbytes > shared
        ):  # fmt: skip
            return None
        return (nx, ny, nz, bx, by, bz, nbytes)


_ONES = ((), (1, 1), (1,), ())  # what pads a tuple of n dims to 3


@dataclass(eq=False)
class LoadedProgram:
    """A program loaded on one device, its launcher, its limits and its checked geometries."""

    program: Any
    launch: Launcher
    limits: dict[str, int]
    geometries: Geometries


_lock = threading.Lock()
# Kept while some specialization uses it: when the last plan goes, the backend frees the program.
_loaded: weakref.WeakValueDictionary[Any, LoadedProgram] = weakref.WeakValueDictionary()


def load(
    backend: Backend,
    target: Target,
    request: CompileRequest,
    default_shared_bytes: int,
    max_threads: int = 0,
    cluster: tuple[int, ...] = (),
    cooperative: bool = False,
) -> LoadedProgram:
    """The program for ``request`` on ``target``'s device, loaded once per process; the
    caches are asked for its binary only when it is not loaded yet. ``max_threads`` (the
    kernel's launch bounds, 0: none) caps threads per block; ``cluster`` (the kernel's cluster
    dims, (): none) must divide the blocks of every launch; ``cooperative``: launched through
    ``Backend.cooperative_launcher`` (every block resident at once)."""
    key = (
        backend.name, target.device, default_shared_bytes, max_threads, cluster, cooperative,
        request,
    )  # fmt: skip
    found = _loaded.get(key)
    if found is not None:
        return found
    binary = compile_cached(backend, request)  # outside the lock: one thread compiles a key
    with _lock:
        found = _loaded.get(key)
        if found is None:
            args = (
                backend, target, request.kernel, default_shared_bytes, max_threads, cluster,
                cooperative,
            )  # fmt: skip
            try:
                found = _load(binary, *args)
            except KernelkitError as e:  # a bundle's binary the device refuses: compile it here
                binary = recompile_refused(backend, request, binary, e)  # else re-raises e
                found = _load(binary, *args)
            _loaded[key] = found
    return found


def _load(
    binary: Any,
    backend: Backend,
    target: Target,
    name: str,
    default_shared_bytes: int,
    max_threads: int,
    cluster: tuple[int, ...],
    cooperative: bool,
) -> LoadedProgram:
    with backend_call(backend, "load"):
        program = backend.load(binary, target)
        limits = dict(backend.kernel_limits(program))
        make = backend.cooperative_launcher if cooperative else backend.launcher
        launch = make(program, target)
    if max_threads:
        known = limits.get("max_threads_per_block", target.max_threads_per_block)
        limits["max_threads_per_block"] = min(known, max_threads)
    for axis, c in enumerate(cluster):
        limits[f"cluster_{'xyz'[axis]}"] = c

    def reserve(nbytes: int) -> None:
        with backend_call(backend, "reserving shared memory"):
            backend.reserve_shared_memory(program, nbytes)

    geometries = Geometries(name, target, limits, default_shared_bytes, reserve)
    return LoadedProgram(program, launch, limits, geometries)


def loaded_count() -> int:
    """Programs loaded now (for tests and ``kernelkit info``)."""
    return len(_loaded)
