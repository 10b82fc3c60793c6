"""SimBackend: render with its own tiny prelude, compile with g++, load with ctypes, and run
blocks and threads one after another. Uses only the public plugin contract."""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from typing import Any, ClassVar

import kernelkit
from kernelkit.backend import (
    BACKEND_API_VERSION,
    MAX_NDIM,
    Artifact,
    Backend,
    CompileRequest,
    KernelSource,
    Launcher,
    Param,
    Target,
    c_type,
    render_signature,
)

ENTRY = "kk_sim_launch"
OPTIONS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-w")

PRELUDE = r"""
#include <cmath>
#include <cstdint>
#define KERNELKIT_SIM 1
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define WARP_SIZE 32
typedef unsigned int uint;
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
static inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static thread_local uint3 threadIdx, blockIdx;
static thread_local dim3 blockDim, gridDim;
static const int warpSize = 32;
struct kk_dims {
  long long v[KK_MAX_NDIM];
  operator const long long*() const { return v; }
  const long long* data() const { return v; }
};
static inline unsigned kk_linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static inline long long elem_to_loc(long long elem, const long long* shape,
                                    const long long* strides, int ndim) {
  long long loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) {
    loc += (elem % shape[i]) * strides[i];
    elem /= shape[i];
  }
  return loc;
}
// threads run one at a time: an atomic is a plain read-modify-write
template <class T, class U> static inline T atomicAdd(T* p, U v) { T o = *p; *p = o + v; return o; }
"""

LAUNCH = r"""
extern "C" void kk_sim_launch(void** a, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned bz) {
  gridDim = dim3(gx, gy, gz);
  blockDim = dim3(bx, by, bz);
  for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y)
  for (unsigned x = 0; x < gx; ++x) {
    blockIdx = uint3{x, y, z};
    for (unsigned tz = 0; tz < bz; ++tz) for (unsigned ty = 0; ty < by; ++ty)
      for (unsigned tx = 0; tx < bx; ++tx) {
        threadIdx = uint3{tx, ty, tz};
        kk_sim_kernel(%s);
      }
  }
}
"""

_UNSUPPORTED = {"float16", "bfloat16"}


def _unpack(i: int, p: Param) -> str:
    """C expression reading parameter ``i`` from CUDA's kernelParams layout (void** to values)."""
    if p.kind == "array":
        return f"*({c_type(p.dtype)}**)a[{i}]"  # type: ignore[arg-type]
    if p.kind == "scalar":
        return f"*({c_type(p.dtype)}*)a[{i}]"  # type: ignore[arg-type]
    if p.kind == "scalar_array":
        return f"*(const {c_type(p.dtype)}**)a[{i}]"  # type: ignore[arg-type]
    if p.kind == "dims":
        return f"*(kk_dims*)a[{i}]"
    if p.kind == "ndim":
        return f"*(int*)a[{i}]"
    return f"*(long long*)a[{i}]"


@functools.cache
def _cxx() -> str:
    found = shutil.which(os.environ.get("CXX", "") or "g++") or shutil.which("g++")
    if not found:
        raise kernelkit.BackendError("[backend sim] no C++ compiler (g++) found")
    return found


class SimBackend(Backend):
    """Runs each block and each thread in turn on the calling thread."""

    name: ClassVar[str] = "sim"
    api_version: ClassVar[int] = BACKEND_API_VERSION
    version: ClassVar[str] = "0.1"
    dlpack_devices: ClassVar[frozenset[int]] = frozenset({1})  # host memory

    def targets(self) -> list[Target]:
        return [self.target_for_arch("host-sim")]

    def target_for_arch(self, arch: str) -> Target:
        return Target(
            backend=self.name,
            device=0,
            arch=arch,
            name="sequential simulator",
            max_threads_per_block=1024,
            max_block_dims=(1024, 1024, 64),
            max_grid_dims=(2**31 - 1, 65535, 65535),
            max_shared_memory_bytes=0,
            max_shared_memory_optin_bytes=0,
            warp_size=32,
        )

    def compile_targets(self) -> list[str]:
        return ["host-sim"]

    @functools.cache  # noqa: B019 - one backend instance per process
    def compiler_identity(self) -> str:
        out = subprocess.run([_cxx(), "--version"], capture_output=True, text=True, check=False)
        return out.stdout.splitlines()[0] if out.stdout else _cxx()

    def check_params(self, params: tuple[Param, ...]) -> None:
        super().check_params(params)  # no tensor maps
        for p in params:
            if p.dtype in _UNSUPPORTED:
                raise TypeError(
                    f"[backend sim] {p.name!r} has dtype {p.dtype}, which the sim "
                    "backend does not support"
                )

    def render(self, source: KernelSource, target: Target, check: bool = False) -> CompileRequest:
        if check:
            raise NotImplementedError("backend 'sim' has no checked mode")
        parts = [f"#define KK_MAX_NDIM {MAX_NDIM}", PRELUDE]
        if source.header:
            parts += [f'#line 1 "{source.kernel}.header"', source.header]
        parts += [
            f"static void kk_sim_kernel({render_signature(source.params)}) {{",
            source.preamble,
            f'#line 1 "{source.kernel}"',
            source.body,
            "}",
            LAUNCH % ", ".join(_unpack(i, p) for i, p in enumerate(source.params)),
        ]
        return CompileRequest(
            backend=self.name,
            kernel=source.kernel,
            entry=ENTRY,
            arch=target.arch,
            source="\n".join(parts),
            options=OPTIONS,
            param_kinds=tuple(p.kind for p in source.params),
        )

    def compile(self, request: CompileRequest) -> Artifact:
        with tempfile.TemporaryDirectory(prefix="kk_sim_") as d:
            src, lib = os.path.join(d, "k.cpp"), os.path.join(d, "k.so")
            with open(src, "w") as f:
                f.write(request.source)
            res = subprocess.run(
                [_cxx(), *request.options, src, "-o", lib],
                capture_output=True,
                text=True,
                check=False,
            )
            if res.returncode != 0:
                raise kernelkit.CompileError(
                    request.kernel, res.stderr, request.source, request.options
                )
            with open(lib, "rb") as f:
                binary = f.read()
        return Artifact(
            kind="so", binary=binary, entry=request.entry, arch=request.arch, log=res.stderr
        )

    def load(self, artifact: Artifact, target: Target) -> Any:
        fd, path = tempfile.mkstemp(prefix="kk_sim_", suffix=".so")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(artifact.binary)
            lib = ctypes.CDLL(path)
        finally:
            os.unlink(path)  # the mapping stays valid after the file is gone
        fn = getattr(lib, artifact.entry)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 6
        return (lib, fn)

    def launcher(self, program: Any, target: Target) -> Launcher:
        fn = program[1]

        def launch(params: int, stream: int, geometry: tuple) -> None:
            fn(params, *geometry[:6])

        return launch

    def info(self) -> dict[str, Any]:
        try:
            compiler = self.compiler_identity()
        except Exception as e:  # noqa: BLE001 - info never fails
            compiler = f"unavailable ({e})"
        return {"compiler": compiler, "execution": "sequential, one thread at a time"}
