"""The CUDA backend: NVRTC compiles for the exact device, the driver API loads and launches."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib.resources import files
from typing import Any, ClassVar

from ..._abi import (
    abi_options,
    cluster_dims,
    launch_bounds,
    prelude_undefs,
    signature,
    template_args,
    template_head,
)
from ..._errors import BackendError
from ..._records import Artifact, CompileRequest, KernelSource, Param, Target, TensorMapRequest
from ...backend import Backend, Launcher, Timer
from . import driver, native, nvrtc, nvrtc_identity

__all__ = ["CUDABackend"]


@functools.cache
def _text(name: str) -> str:
    return (files(__package__) / "include" / name).read_text()


def _kernel_function(source: KernelSource) -> list[str]:
    """The kernel: the body inside it, or, with template values, the body as a device function
    template that the kernel instantiates (so ``if constexpr`` discards, as in the original)."""
    kernel = (
        f'extern "C" __global__ void {launch_bounds(source)}{cluster_dims(source)}'
        f"{source.entry}({signature(source.params)})"
    )
    inner = [source.preamble, f'#line 1 "{source.kernel}"', source.body, "}"]
    if not source.template:
        return [kernel + " {", *inner]
    args = ", ".join(p.name for p in source.params)
    return [
        template_head(source),
        f"__device__ __forceinline__ void kk_body({signature(source.params, for_body=True)}) {{",
        *inner,
        f"{kernel} {{ kk_body{template_args(source)}({args}); }}",
    ]


# SMs of each arch's data-centre part (A100 108, H100/H200 132, B200 148), for a target made
# without a device (``target_for_arch``): heuristics size one wave of blocks by it.
_TYPICAL_SMS = {80: 108, 90: 132, 100: 148}


class CUDABackend(Backend):
    """NVIDIA GPUs through NVRTC (compile) and the CUDA driver API (load, launch)."""

    name: ClassVar[str] = "cuda"
    version: ClassVar[str] = "1"
    template_parameters: ClassVar[bool] = True
    struct_params: ClassVar[bool] = True
    dlpack_devices: ClassVar[frozenset[int]] = frozenset({2, 3, 13})  # CUDA, host-pinned, managed
    # A cubin is SASS for its exact arch and self-contained: a bundle's cubin serves whatever NVRTC
    # and CUDA headers this node has. PTX is JIT-compiled by the driver: exact keys only.
    bundle_portable_parts: ClassVar[Mapping[str, frozenset[str]]] = {
        "cubin": frozenset({"compiler", "headers"})
    }

    def __init__(self) -> None:
        self._targets: list[Target] | None = None

    # probe ---------------------------------------------------------------------------------
    def targets(self) -> list[Target]:
        if self._targets is None:
            self._targets = [self._probe(i) for i in range(driver.init())]
        return self._targets

    def _probe(self, device: int) -> Target:
        a = functools.partial(driver.attribute, device)
        major, minor = a("COMPUTE_CAPABILITY_MAJOR"), a("COMPUTE_CAPABILITY_MINOR")
        arch = self.arch_for(major * 10 + minor)
        return Target(
            backend=self.name,
            device=device,
            arch=arch,
            name=driver.device_name(device),
            max_threads_per_block=a("MAX_THREADS_PER_BLOCK"),
            max_block_dims=(a("MAX_BLOCK_DIM_X"), a("MAX_BLOCK_DIM_Y"), a("MAX_BLOCK_DIM_Z")),
            max_grid_dims=(a("MAX_GRID_DIM_X"), a("MAX_GRID_DIM_Y"), a("MAX_GRID_DIM_Z")),
            max_shared_memory_bytes=a("MAX_SHARED_MEMORY_PER_BLOCK"),
            max_shared_memory_optin_bytes=a("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
            warp_size=a("WARP_SIZE"),
            features=self._features(major * 10 + minor),
            multiprocessor_count=a("MULTIPROCESSOR_COUNT"),
        )

    @staticmethod
    def arch_for(cc: int) -> str:
        """``sm_XY`` when this NVRTC knows the device, else PTX for the newest arch it knows."""
        known = nvrtc_identity.supported_archs()  # recorded: a warm start loads no NVRTC
        if cc in known:
            return f"sm_{cc}"
        older = [a for a in known if a <= cc]
        if not older:
            raise ValueError(f"[backend cuda] NVRTC {nvrtc.version()} cannot target sm_{cc}")
        return f"compute_{max(older)}"

    @staticmethod
    def _features(cc: int) -> frozenset[str]:
        feats = {"fp16"}
        if cc >= 80:
            feats |= {"bf16", "cp_async", "mma_sync"}  # mma.sync m16n8k16 f16/bf16
        if cc >= 90:
            feats |= {"tma", "clusters", "arch_specific"}
        return frozenset(feats)

    def compile_targets(self) -> list[str]:
        return [f"sm_{a}" for a in nvrtc.supported_archs()]

    def target_for_arch(self, arch: str) -> Target:
        """A device-less target for compiling ahead of time: an H100's limits, and the SM
        count of the arch's data-centre part (``_TYPICAL_SMS``)."""
        cc = int(arch.removeprefix("sm_").removeprefix("compute_").rstrip("af"))
        return Target(
            self.name,
            -1,
            arch.rstrip("af"),
            f"(no device, {arch})",
            1024,
            (1024, 1024, 64),
            (2**31 - 1, 65535, 65535),
            48 * 1024,
            227 * 1024,
            32,
            self._features(cc),
            _TYPICAL_SMS.get(cc // 10 * 10, 1),
        )

    def compiler_identity(self) -> str:
        return "nvrtc-%d.%d" % nvrtc_identity.version()  # recorded: a warm start loads no NVRTC

    def environment_facts(self) -> dict[str, int | str]:
        return {"driver_major": driver.driver_version()[0]}

    # render + compile ----------------------------------------------------------------------
    def render(self, source: KernelSource, target: Target, check: bool = False) -> CompileRequest:
        arch = target.arch
        if source.arch_specific and arch.startswith("sm_") and int(arch[3:]) >= 90:
            arch += "a"
        parts = [nvrtc.includes_for(source.needs), _text("kernelkit_prelude.cuh")]
        if source.needs & {"fp16", "bf16"}:
            parts.append(_text("kernelkit_half.cuh"))  # half OP number, as the CPU backend
        parts.append(nvrtc.std_includes(source.needs))
        if "metal" in source.needs:
            parts.append(_text("kernelkit_metal.cuh"))
        if "cg" in source.needs:
            parts.append("namespace cg = cooperative_groups;")
        parts.append(prelude_undefs(source))
        if source.header:
            parts += [f'#line 1 "{source.kernel}.header"', source.header]
        parts += _kernel_function(source)
        # Harmless PCH noise: 20283 "PCH creation disabled because #line directive encountered",
        # 629 "the command line options do not match those used when precompiled header file
        # ... was created" (a header parsed for another arch, e.g. sm_90 next to sm_90a), 630
        # "the initial sequence of preprocessing directives is not compatible with those of
        # precompiled header file ..." (another kernel's leading includes: NVRTC makes another)
        options = [
            f"--gpu-architecture={arch}",
            "--std=c++17",
            "-default-device",
            "-diag-suppress=20283,629,630",
            *nvrtc.version_macros(),
            *abi_options(),
        ]
        if source.needs & {"fp16", "bf16", "cg"}:
            options.append("-pch")  # NVRTC reuses parsed CUDA headers within the process
        return CompileRequest(
            backend=self.name,
            kernel=source.kernel,
            entry=source.entry,
            arch=arch,
            source="\n".join(parts) + "\n",
            options=tuple(options),
            headers=self._header_digests(source),
            param_kinds=tuple(p.kind for p in source.params),
        )

    @staticmethod
    def _header_digests(source: KernelSource) -> tuple[tuple[str, str], ...]:
        digests = nvrtc.header_digests(source.needs)
        if nvrtc.includes_anything(source.header) or nvrtc.includes_anything(source.body):
            digests += nvrtc.std_digest()
        return digests

    def compile(self, request: CompileRequest) -> Artifact:
        return nvrtc.compile_request(request)

    def check_params(self, params: tuple[Param, ...]) -> None:
        """Every kind passes, tensor maps included (``__grid_constant__``, sm_90+)."""

    def encode_tensor_map(self, request: TensorMapRequest) -> bytes:
        return driver.encode_tensor_map(request)

    # load + launch -------------------------------------------------------------------------
    def load(self, artifact: Artifact, target: Target) -> Any:
        hint = ""
        if artifact.kind == "ptx":
            drv_v, rtc_v = driver.driver_version(), nvrtc.version()
            if rtc_v > drv_v:
                hint = (
                    f"This PTX comes from NVRTC {rtc_v[0]}.{rtc_v[1]}, newer than the driver "
                    f"(CUDA {drv_v[0]}.{drv_v[1]}) accepts: install an NVRTC no newer than the "
                    f"driver (pip install 'nvidia-cuda-nvrtc=={drv_v[0]}.{drv_v[1]}.*') or "
                    "update the NVIDIA driver."
                )
        return driver.load(artifact.binary, artifact.entry, target.device, hint)

    def launcher(self, program: Any, target: Target) -> Launcher:
        return driver.make_launcher(program)

    def cooperative_launcher(self, program: Any, target: Target) -> Launcher:
        return driver.make_cooperative_launcher(program)

    def reserve_shared_memory(self, program: Any, nbytes: int) -> None:
        driver.allow_dynamic_shared(program, nbytes)

    def synchronize(self, stream: int) -> None:
        driver.check(driver.drv().cuStreamSynchronize(stream), "cuStreamSynchronize")

    def timer(self, target: Target) -> Timer:
        from .timing import CUDATimer

        return CUDATimer(self, target)

    def kernel_limits(self, program: Any) -> dict[str, int]:
        return {
            "max_threads_per_block": program.max_threads_per_block,
            "static_shared_bytes": program.static_shared_bytes,
            "registers": program.registers,
            "local_bytes": program.local_bytes,
        }

    def info(self) -> dict[str, Any]:
        try:
            v = "%d.%d" % nvrtc.version()
        except Exception as e:  # noqa: BLE001 - info must never fail
            v = f"unavailable ({e})"
        try:
            dirs: list[str] | str = list(nvrtc.include_dirs())
            archs: list[str] | str = self.compile_targets()
        except BackendError as e:  # the cuda extra is not installed: say what to install
            dirs = archs = str(e)
        return {
            "compiler": f"NVRTC {v}",
            "nvrtc_library": nvrtc.library_path(),
            "include_dirs": dirs,
            "compile_targets": archs,
            "launcher": native.status(),
        }
