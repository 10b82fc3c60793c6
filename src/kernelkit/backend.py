"""The backend plugin contract: what a device backend implements, and how kernelkit finds it.

A backend is a class registered in the entry-point group ``kernelkit.backends``. kernelkit's core
owns the API, validation, specialization keys, caches and selection; a backend only probes its
devices, renders its prelude and signature, compiles, loads and launches. ``cuda`` and ``cpu`` are
registered the same way as any third-party backend.

Example (a third-party package's ``pyproject.toml``)::

    [project.entry-points."kernelkit.backends"]
    mydev = "mypkg.backend:MyBackend"
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from ._abi import signature as _signature
from ._abi import template_args as _template_args
from ._abi import template_head as _template_head
from ._dtypes import DTYPES
from ._records import (
    MAX_NDIM,
    Artifact,
    CompileRequest,
    KernelSource,
    Param,
    Target,
    TensorMapRequest,
)

__all__ = [
    "BACKEND_API_VERSION",
    "MAX_NDIM",
    "Artifact",
    "Backend",
    "CompileRequest",
    "Geometry",
    "KernelSource",
    "Launcher",
    "Param",
    "Target",
    "TensorMapRequest",
    "Timer",
    "c_type",
    "render_signature",
    "render_template_args",
    "render_template_head",
]


def render_signature(params: tuple[Param, ...]) -> str:
    """The standard C parameter list for ``params``, using the prelude types every backend
    defines (``kk_dims``, the C spellings of dtypes); scalars by value, 0-d arrays as pointers."""
    return _signature(params)


def render_template_head(source: KernelSource) -> str:
    """``template <int block_size, typename T>`` for the function that holds the body, or ""
    without template values: the body is a function template (``source.template``), so
    ``if constexpr`` discards as in the original kernel."""
    return _template_head(source)


def render_template_args(source: KernelSource) -> str:
    """``<32, float>``: the template arguments where the body's function is called, or ""."""
    return _template_args(source)


def c_type(dtype: str) -> str:
    """The C spelling of a kernelkit dtype name (``"bfloat16"`` -> ``"__nv_bfloat16"``)."""
    return DTYPES[dtype].ctype


# 2: a launcher is made once per loaded program and takes the geometry with each launch.
BACKEND_API_VERSION = 2

# (grid_x, grid_y, grid_z, block_x, block_y, block_z, dynamic shared memory bytes): blocks in the
# grid and threads per block, already checked against the target's and the kernel's limits.
Geometry = tuple[int, int, int, int, int, int, int]

# launcher(params_address, stream, geometry) -> None.
# params_address: a void** to one pointer per parameter, each pointing at the value (CUDA's layout).
Launcher = Callable[[int, int, Geometry], None]


class Timer:
    """Times launches on one stream, for the autotuner (made by ``Backend.timer``).

    The default reads the host clock between two ``Backend.synchronize`` calls: right for
    backends whose launches finish before they return (cpu). A backend with device-side clocks
    overrides ``start``/``stop`` (CUDA: events), and may offer ``capture`` (CUDA: graphs) so that
    kernels of a few microseconds are timed without the launch gaps between them.
    ``cache_bytes`` is the device cache that rotated copies of the inputs must exceed so that a
    timing does not measure the cache (0: the tuner keeps two copies and does not rotate further).
    """

    cache_bytes: int = 0

    def __init__(self, backend: Backend, stream: int = 0) -> None:
        self.backend = backend
        self.stream = stream  # the stream timed launches must go on
        self._t0 = 0.0

    def start(self) -> None:
        """Wait for all work issued so far (restored inputs are in place), then start the clock."""
        self.backend.synchronize(self.stream)
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds from ``start`` until the work issued on ``stream`` since then finished."""
        self.backend.synchronize(self.stream)
        return time.perf_counter() - self._t0

    def capture(self, launches: Callable[[int], None]) -> Callable[[], None] | None:
        """Record ``launches(stream)`` once as a unit that replays without the host (a CUDA
        graph); returns the replay callable (it runs on ``stream``), or None when the backend
        cannot (the default) or the launches could not be captured."""
        return None

    def close(self) -> None:
        """Free what the timer holds (streams, events, graphs)."""


class Backend(ABC):
    """A device backend. Subclasses set the class attributes and implement the abstract methods.

    ``dlpack_devices`` lists the DLPack device types (1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed,
    ...) whose arrays this backend runs on; kernelkit picks a backend for arrays from this.

    ``bundle_portable_parts`` maps an artifact kind to the cache-key parts (labels of
    ``kernelkit._cache.keys``, e.g. ``"compiler"``, ``"headers"``) in which a precompiled
    bundle's entry of that kind may differ from the request and still be served: the parts a
    self-contained binary of that kind does not depend on once built. Default: none, so bundles
    serve exact keys only. What the backend then cannot load is compiled instead, with a warning.

    ``struct_params``: True when ``render`` and ``launch`` pass ``struct`` params (a POD type from
    the kernel's header by value: ``render_signature`` spells it; its ``nbytes`` bytes arrive
    through the kernelParams pointer like any value). Default False: ``check_params`` refuses them.

    ``template_parameters``: True when ``render`` makes the body a function template of
    ``KernelSource.template`` (``render_template_head`` / ``render_template_args``), so that
    ``if constexpr`` discards as in the original kernel; False (the default, for backends written
    before it existed): the template values reach the body as ``constexpr`` locals at the top of
    ``KernelSource.preamble`` and ``KernelSource.template`` is empty.
    """

    name: ClassVar[str]
    template_parameters: ClassVar[bool] = False
    struct_params: ClassVar[bool] = False  # passes ``struct`` params (by value, declared type)
    api_version: ClassVar[int] = BACKEND_API_VERSION
    version: ClassVar[str] = "0"
    dlpack_devices: ClassVar[frozenset[int]] = frozenset()
    bundle_portable_parts: ClassVar[Mapping[str, frozenset[str]]] = MappingProxyType({})

    @abstractmethod
    def targets(self) -> list[Target]:
        """Probe the devices this backend can run on now (may be empty). Called once, lazily."""

    @abstractmethod
    def compiler_identity(self) -> str:
        """Compiler name and version; part of every cache key (a new compiler never hits old
        binaries)."""

    @abstractmethod
    def render(self, source: KernelSource, target: Target, check: bool = False) -> CompileRequest:
        """Assemble prelude, header, signature and body into a complete compile request."""

    @abstractmethod
    def compile(self, request: CompileRequest) -> Artifact:
        """Compile a request; raise ``kernelkit.CompileError`` with the log on failure."""

    @abstractmethod
    def load(self, artifact: Artifact, target: Target) -> Any:
        """Load an artifact on a target; returns an opaque program handle.

        Called once per (binary, device) in a process: every specialization and launch geometry
        that compiles to the same binary shares the program. Free what it holds when the handle
        is garbage-collected."""

    @abstractmethod
    def launcher(self, program: Any, target: Target) -> Launcher:
        """A callable ``launch(params_address, stream, geometry)`` running ``program``.

        Made once per loaded program; it is the hot path, so bind everything that does not
        change per call now. ``geometry`` (see ``Geometry``) changes per call."""

    def reserve_shared_memory(self, program: Any, nbytes: int) -> None:  # noqa: B027 - optional
        """Allow launches of ``program`` with ``nbytes`` of dynamic shared memory, above the
        target's ``max_shared_memory_bytes`` (CUDA: raise the function's limit). Called on the
        slow path, before the first launch that asks for more than any earlier one."""

    def synchronize(self, stream: int) -> None:  # noqa: B027 - optional hook
        """Wait for work on ``stream`` (for frameworks that cannot share a stream, e.g. JAX).
        Backends whose launches are synchronous keep this no-op."""

    def timer(self, target: Target) -> Timer:
        """A ``Timer`` for launches on ``target`` (the autotuner's clock; slow path only).
        Default: the host clock around ``synchronize`` on the default stream."""
        return Timer(self)

    def resolve_check(self, requested: bool | None) -> bool:
        """Whether a launch runs in checked mode (bounds-checked arrays, ``kk_extent_*`` params).

        ``requested`` is the call's ``check=`` (None when not given). Backends without a checked
        mode keep this default, which refuses an explicit request.
        """
        if requested:
            raise NotImplementedError(f"backend {self.name!r} has no checked mode")
        return False

    def compile_targets(self) -> list[str]:
        """Arch names this backend can compile for without a device (for precompiling)."""
        return []

    def target_for_arch(self, arch: str) -> Target:
        """A device-less target for compiling ahead of time for ``arch``."""
        raise NotImplementedError(f"backend {self.name!r} cannot compile ahead of time")

    def kernel_limits(self, program: Any) -> dict[str, int]:
        """Per-kernel limits known after loading; ``max_threads_per_block`` and
        ``static_shared_bytes`` are checked against each launch (default: only the target's)."""
        return {}

    def info(self) -> dict[str, Any]:
        """Facts for ``kernelkit info`` (compiler, paths, ...)."""
        return {}

    def environment_facts(self) -> dict[str, int | str]:
        """Facts about this machine's software, beyond the device and ``compiler_identity``,
        that make a timing taken here invalid elsewhere (the tuning database keeps records per
        environment). ``"driver_major"`` (an int) is the one kernelkit names; other keys are kept
        as they are. Called once per target, never on the hot path; default: none."""
        return {}

    def check_params(self, params: tuple[Param, ...]) -> None:
        """Reject parameter kinds/dtypes this backend cannot pass with a TypeError or ValueError
        naming the parameter (default: all but tensor maps, which only a backend that encodes
        them can pass). Other methods' unexpected exceptions reach the user as ``BackendError``
        naming the backend and the stage. Struct params pass where ``struct_params`` is True."""
        for p in params:
            if p.kind == "tensor_map":
                raise TypeError(f"backend {self.name!r} cannot pass tensor map {p.name!r} (no TMA)")
            if p.kind == "struct" and not self.struct_params:
                raise TypeError(f"backend {self.name!r} cannot pass struct input {p.name!r}")

    def cooperative_launcher(self, program: Any, target: Target) -> Launcher:
        """As ``launcher``, for a kernel defined with ``cooperative=True``
        (``KernelSource.cooperative``): every block of a launch resident at once, so that
        ``cooperative_groups::this_grid().sync()`` works; a grid too large for that is an error
        naming how many blocks fit. Called once per loaded program. Default:
        NotImplementedError (reaches the user as a BackendError)."""
        raise NotImplementedError(f"backend {self.name!r} has no cooperative launch")

    def encode_tensor_map(self, request: TensorMapRequest) -> bytes:
        """The 128 bytes of the tensor map ``request`` describes (``kernelkit.tensor_map``,
        checked there). Called once per distinct map, never on the hot path. Default:
        NotImplementedError (no TMA on this backend), which reaches the user as a
        BackendError."""
        raise NotImplementedError(f"backend {self.name!r} has no tensor maps (TMA)")
