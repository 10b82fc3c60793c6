"""``CPUBackend``: CUDA-style kernels compiled by the host C++ compiler and run on the CPU."""

from __future__ import annotations

import platform
import threading
from typing import Any, ClassVar

from ..._abi import abi_options
from ..._errors import CompileError
from ..._limits import TIME_LIMIT_FEATURE
from ..._records import Artifact, CompileRequest, KernelSource, Target
from ...backend import Backend, Launcher
from . import _toolchain
from ._program import CPUProgram, load_program, make_launcher, worker_count
from ._source import render_source

__all__ = ["CPUBackend"]

# -O2 costs little over -O1 to compile here (the prelude is precompiled) and loops vectorize.
_OPTIONS = (
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-pthread",
    "-fno-math-errno",
)
_CHECKED_OPTIONS = (
    "-std=c++17",
    "-O1",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-pthread",
    "-fno-math-errno",
    "-DKK_CPU_CHECKED=1",
)


class CPUBackend(Backend):
    """Runs kernels on the host: blocks on worker threads, a block's threads as a loop or fibers.

    Example::

        be = CPUBackend()
        target = be.targets()[0]
        program = be.load(be.compile(be.render(source, target)), target)
        be.launcher(program, target)(params_address, 0, (4, 1, 1, 256, 1, 1, 0))
    """

    name: ClassVar[str] = "cpu"
    version: ClassVar[str] = "1"
    dlpack_devices: ClassVar[frozenset[int]] = frozenset({1})
    template_parameters: ClassVar[bool] = True
    struct_params: ClassVar[bool] = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: list[Target] | None = None

    def targets(self) -> list[Target]:
        """The host as one device (limits mirror an H100 so kernels tuned for it launch)."""
        with self._lock:
            if self._targets is None:
                self._targets = [self._host_target()]
            return list(self._targets)

    def _host_target(self) -> Target:
        return Target(
            backend="cpu",
            device=0,
            arch=platform.machine() or "unknown",
            name=_cpu_model(),
            max_threads_per_block=1024,
            max_block_dims=(1024, 1024, 64),
            max_grid_dims=(2**31 - 1, 65535, 65535),
            max_shared_memory_bytes=48 * 1024,
            max_shared_memory_optin_bytes=227 * 1024,
            warp_size=32,
            features=frozenset({"cpu", "clusters", TIME_LIMIT_FEATURE}),
            multiprocessor_count=worker_count(),  # the threads that run blocks at once
        )

    def compiler_identity(self) -> str:
        """The compiler path and the first line of its ``--version`` (cached)."""
        return _toolchain.compiler_identity(_toolchain.find_compiler())

    def render(self, source: KernelSource, target: Target, check: bool = False) -> CompileRequest:
        """The full translation unit; the prelude's header hashes make the cache key."""
        rendered = render_source(source, check)
        return CompileRequest(
            backend=self.name,
            kernel=source.kernel,
            entry=rendered.symbol,
            arch=target.arch,
            source=rendered.text,
            options=(*(_CHECKED_OPTIONS if check else _OPTIONS), *abi_options()),
            headers=_toolchain.header_hashes(),
            param_kinds=tuple(p.kind for p in source.params),
        )

    def compile(self, request: CompileRequest) -> Artifact:
        """Build a shared object; its bytes are self-contained (loadable in another process)."""
        cxx = _toolchain.find_compiler()
        binary, log = _toolchain.build_shared_object(
            cxx, request.source, request.options, request.kernel
        )
        if binary is None:
            raise CompileError(request.kernel, log, request.source, request.options)
        return Artifact(
            kind="so",
            binary=binary,
            entry=request.entry,
            arch=request.arch,
            metadata={"compiler": _toolchain.compiler_identity(cxx), "kernel": request.kernel},
            log=log,
        )

    def load(self, artifact: Artifact, target: Target) -> CPUProgram:
        """dlopen a private copy of the artifact's bytes."""
        return load_program(artifact.binary, artifact.entry)

    def launcher(self, program: Any, target: Target) -> Launcher:
        """A synchronous launcher: returns once the whole grid has run (``stream`` is ignored).

        The worker count (KERNELKIT_CPU_THREADS, default one per core) is read here, once.
        """
        return make_launcher(program, worker_count())

    def cooperative_launcher(self, program: Any, target: Target) -> Launcher:
        """The same launcher: a cooperative kernel's launch entry runs every block on its own
        OS thread (rendered so from ``KernelSource.cooperative``; see kk_cpu_sched.h)."""
        return make_launcher(program, worker_count())

    def resolve_check(self, requested: bool | None) -> bool:
        """``check=`` on the call wins; otherwise KERNELKIT_CPU_CHECK decides."""
        if requested is None:
            from ..._config import config

            return config.cpu_check
        return bool(requested)

    def compile_targets(self) -> list[str]:
        """Only the host's own architecture."""
        return [platform.machine()]

    def target_for_arch(self, arch: str) -> Target:
        """The host target, for precompiling (only the host's own arch is supported)."""
        if arch != platform.machine():
            raise ValueError(f"[backend cpu] can only compile for {platform.machine()}, not {arch}")
        return self.targets()[0]

    def info(self) -> dict[str, Any]:
        """Compiler, prelude and worker facts for ``kernelkit info``."""
        try:
            compiler = self.compiler_identity()
        except Exception as e:  # noqa: BLE001 - info reports, never raises
            compiler = f"unavailable: {e}"
        return {
            "compiler": compiler,
            "include_dir": str(_toolchain.INCLUDE_DIR),
            "threads": worker_count(),
        }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
