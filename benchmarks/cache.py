"""How fast is a kernel's first call: compiled, from a warm disk cache, from a bundle?

One run, kernelkit and peers (CuPy, Triton, when importable) side by side on the same tiny kernel,
``out[i] = expf(inp[i])`` on 1024 float32:

* compile: a new kernel in a warm process (the backend already loaded),
* warm disk: the first call in a fresh process whose disk cache holds the kernel (on CUDA also
  with torch imported before kernelkit, as most torch programs do),
* bundle: the first call in a fresh process with an empty cache and a precompiled bundle,

each next to the same process's second call, plus ``python -c "import kernelkit"``.
Targets: warm-disk first call at most 1 ms above the second call; import at most 150 ms.

    python benchmarks/cache.py [--backend cpu|cuda] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BODY = (
    "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < inp_shape[0]) out[i] = expf(inp[i]);"
)

# Runs in a fresh process: time the first and second call, and the cache lookup inside the first.
KK_CHILD = textwrap.dedent("""
    import json, sys, time
    if sys.argv[5:] == ["torch-first"]:  # as most torch programs do: kernelkit sees torch loaded
        import torch
    t_import = time.perf_counter()
    import numpy as np, kernelkit
    from kernelkit._pipeline import bind as _bind, load as _launch, render as _render
    from kernelkit._backends import registry as _registry
    t_import = time.perf_counter() - t_import
    stages = {}  # where the first call's time goes (seconds, first call of each)
    def timed(module, attr, stage):
        inner = getattr(module, attr)
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                stages.setdefault(stage, time.perf_counter() - t)
        setattr(module, attr, wrapper)
    timed(_registry, "_load", "backend import")
    timed(_bind, "_target", "device probe")
    timed(_render, "render_request", "render")
    timed(_launch, "compile_cached", "cache lookup (compiler identity, disk read)")
    timed(_launch, "_load", "module load")
    backend, body, name = sys.argv[1], sys.argv[2], sys.argv[3]
    if backend == "cuda":  # the key's compiler identity and the probe's archs (nvrtc_identity)
        from kernelkit._backends.cuda import nvrtc_identity
        timed(nvrtc_identity, "version", "compiler identity (recorded: no NVRTC load)")
        timed(nvrtc_identity, "supported_archs", "NVRTC archs for the probe")
    def nvrtc_loaded():
        try:
            with open("/proc/self/maps") as f:
                return "libnvrtc" in f.read()
        except OSError:
            return None
    x = np.linspace(-2, 2, 1024, dtype=np.float32)
    if backend == "cuda":
        import torch
        x = torch.from_numpy(x).cuda()
    k = kernelkit.kernel(name, ["inp"], ["out"], body)
    def call():
        (y,) = k([x], output_shapes=[(1024,)], output_dtypes=["float32"], grid=(1024, 1, 1),
                 threadgroup=(256, 1, 1), backend=backend)
        if backend == "cuda":
            torch.cuda.synchronize()
        return y
    if sys.argv[4] == "warm-backend":  # a compiled-before kernel: backend and device are up
        kernelkit.kernel("warmup", ["inp"], ["out"], body)([x], output_shapes=[(1024,)],
            output_dtypes=["float32"], grid=(1024, 1, 1), threadgroup=(256, 1, 1), backend=backend)
    stages.clear()
    t = time.perf_counter(); y = call(); first = time.perf_counter() - t
    loaded = nvrtc_loaded()  # after the first launch: did reaching it load NVRTC?
    t = time.perf_counter(); call(); second = time.perf_counter() - t
    y = y.cpu().numpy() if hasattr(y, "cpu") else np.asarray(y)
    ok = bool(np.allclose(y, np.exp(np.linspace(-2, 2, 1024, dtype=np.float32)), rtol=1e-5))
    lookup = stages.get("cache lookup (compiler identity, disk read)")
    print(json.dumps({"first": first, "second": second, "lookup": lookup, "stages": stages,
                      "nvrtc_loaded": loaded,
                      "stats": kernelkit.cache_stats(), "ok": ok, "import": t_import}))
""")


def _child(code: str, args: list[str], env: dict[str, str]) -> dict:
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    full = dict(os.environ, PYTHONPATH=path, **env)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)  # a real file: Triton's @jit reads its function's source from it
    try:
        out = subprocess.run(
            [sys.executable, f.name, *args], env=full, capture_output=True, text=True, timeout=600
        )
    finally:
        os.unlink(f.name)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def bench_import(repeat: int) -> dict[str, float]:
    """Wall time of ``python -c pass`` and ``python -c "import kernelkit"`` (median, ms)."""

    def wall(code: str) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", code], check=True, env=dict(os.environ, PYTHONPATH=str(SRC))
            )
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e3

    return {"python": wall("pass"), "kernelkit": wall("import kernelkit")}


def bench_kernelkit(backend: str, repeat: int) -> list[tuple[str, float, float, str]]:
    """(scenario, first call ms, second call ms, note) rows for kernelkit."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache, empty = Path(tmp) / "cache", Path(tmp) / "empty"
        name = f"bench_exp_{uuid.uuid4().hex[:8]}"
        body = BODY.replace("expf(inp[i])", f"expf(inp[i]) + 0.0f * {len(name)}")
        env = {"KERNELKIT_CACHE_DIR": str(cache)}
        r = _child(KK_CHILD, [backend, body, name, "warm-backend"], env)
        rows.append(
            (
                "compile (new kernel, warm process)",
                r["first"] * 1e3,
                r["second"] * 1e3,
                f"ok={r['ok']} compiles={r['stats']['compiles']}",
            )
        )
        runs = [_child(KK_CHILD, [backend, body, name, "cold"], env) for _ in range(repeat)]
        rows.append(_row("warm disk, fresh process", runs, "disk_hits"))
        if backend == "cuda":  # its arrays are torch tensors: also with torch imported first
            args = [backend, body, name, "cold", "torch-first"]
            runs = [_child(KK_CHILD, args, env) for _ in range(repeat)]
            rows.append(_row("warm disk, fresh process, torch imported first", runs, "disk_hits"))
        runs = [_child(KK_CHILD, [backend, body, name, "warm-backend"], env) for _ in range(repeat)]
        rows.append(_row("warm disk, fresh process, backend up", runs, "disk_hits"))
        bundle = Path(tmp) / "b.kkb"
        subprocess.run(
            [sys.executable, "-m", "kernelkit", "cache", "export", "-o", str(bundle)],
            check=True,
            capture_output=True,
            env=dict(os.environ, PYTHONPATH=str(SRC), **env),
        )
        env = {
            "KERNELKIT_CACHE_DIR": str(empty),
            "KERNELKIT_CACHE": "0",
            "KERNELKIT_BUNDLE_PATH": str(bundle),
        }
        runs = [_child(KK_CHILD, [backend, body, name, "cold"], env) for _ in range(repeat)]
        rows.append(_row("bundle, fresh process, no disk cache", runs, "bundle_hits"))
    return rows


def _row(label: str, runs: list[dict], hit: str) -> tuple[str, float, float, str]:
    first, second = _median(runs, "first") * 1e3, _median(runs, "second") * 1e3
    hits = sum(r["stats"][hit] for r in runs)
    ok = all(r["ok"] for r in runs) and all(r["stats"]["compiles"] == 0 for r in runs)
    loaded = sorted({str(r.get("nvrtc_loaded")) for r in runs})
    names = {name for r in runs for name in r["stages"]}
    stages = ", ".join(
        f"{name} {statistics.median(r['stages'].get(name, 0.0) for r in runs) * 1e3:.2f}"
        for name in sorted(names)
    )
    return (
        label,
        first,
        second,
        f"{hit}={hits}/{len(runs)}, ok={ok}, NVRTC loaded by the first launch: "
        f"{'/'.join(loaded)}; first call's stages, ms: {stages}",
    )


CUPY_CHILD = textwrap.dedent("""
    import json, sys, time
    import cupy as cp
    src = 'extern "C" __global__ void %s(const float* a, float* b, int n) ' % sys.argv[1] + \\
          '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = expf(a[i]); }'
    x = cp.linspace(-2, 2, 1024, dtype=cp.float32); y = cp.empty_like(x)
    def call():
        k = cp.RawKernel(src, sys.argv[1]); k((4,), (256,), (x, y, cp.int32(1024)))
        cp.cuda.runtime.deviceSynchronize()
    t = time.perf_counter(); call(); first = time.perf_counter() - t
    t = time.perf_counter(); call(); second = time.perf_counter() - t
    print(json.dumps({"first": first, "second": second}))
""")

TRITON_CHILD = textwrap.dedent("""
    import json, sys, time
    import torch, triton, triton.language as tl
    @triton.jit
    def kexp(a, b, n, SALT: tl.constexpr, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(b + i, tl.exp(tl.load(a + i, mask=i < n)) + SALT * 0.0, mask=i < n)
    x = torch.linspace(-2, 2, 1024, device="cuda"); y = torch.empty_like(x)
    salt = int(sys.argv[1])
    def call():
        kexp[(4,)](x, y, 1024, SALT=salt, BLOCK=256); torch.cuda.synchronize()
    t = time.perf_counter(); call(); first = time.perf_counter() - t
    t = time.perf_counter(); call(); second = time.perf_counter() - t
    print(json.dumps({"first": first, "second": second}))
""")


def bench_peer(name: str, code: str, cache_var: str, arg: str) -> list[tuple]:
    """Compile then warm-disk rows for CuPy or Triton (same kernel), in fresh processes."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {cache_var: tmp}
        r = _child(code, [arg], env)
        rows.append((f"{name}: compile (fresh process)", r["first"] * 1e3, r["second"] * 1e3, ""))
        r = _child(code, [arg], env)
        rows.append((f"{name}: warm disk, fresh process", r["first"] * 1e3, r["second"] * 1e3, ""))
    return rows


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _pick_backend() -> str:
    sys.path.insert(0, str(SRC))
    from kernelkit._backends.registry import get_backend

    try:
        return "cuda" if get_backend("cuda").targets() else "cpu"
    except Exception:  # noqa: BLE001 - no CUDA here: the CPU backend runs everywhere
        return "cpu"


def main() -> None:
    """Run every scenario once and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["cpu", "cuda"], default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    backend = args.backend or _pick_backend()
    rows = [
        (f"kernelkit[{backend}]: {label}", f, s, n)
        for label, f, s, n in bench_kernelkit(backend, args.repeat)
    ]
    if backend == "cuda" and _importable("cupy"):
        rows += bench_peer("cupy", CUPY_CHILD, "CUPY_CACHE_DIR", f"kexp_{uuid.uuid4().hex[:8]}")
    if backend == "cuda" and _importable("triton"):
        rows += bench_peer("triton", TRITON_CHILD, "TRITON_CACHE_DIR", str(time.time_ns() % 997))
    imp = bench_import(args.repeat)
    width = max(len(r[0]) for r in rows) + 2
    print(
        f"{'scenario':{width}s} {'1st call ms':>12s} {'2nd call ms':>12s} {'1st-2nd ms':>11s}  note"
    )
    for label, first, second, note in rows:
        print(f"{label:{width}s} {first:12.3f} {second:12.3f} {first - second:11.3f}  {note}")
    print(
        f"\npython -c pass: {imp['python']:.1f} ms; python -c 'import kernelkit': "
        f"{imp['kernelkit']:.1f} ms (kernelkit's share {imp['kernelkit'] - imp['python']:.1f} ms;"
        f" target 150 ms total)"
    )


if __name__ == "__main__":
    main()
