"""``kernelkit precompile``: build every declared specialization for listed archs into a bundle,
without a GPU (each backend compiles for an arch through ``target_for_arch``)."""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .._backends.registry import backends
from .._cache.bundles import write_bundle
from .._cache.entry import encode
from .._cache.keys import cache_key
from .._errors import CompileError
from .._pipeline.declare import Declaration, declared
from .._pipeline.render import render_request
from .._records import Target
from ..backend import Backend

__all__ = ["BuiltEntry", "PrecompileFailed", "build_entries", "load_declarations", "precompile"]


@dataclass(frozen=True)
class BuiltEntry:
    """One compiled declaration for one arch, encoded as a cache entry."""

    digest: str
    data: bytes
    what: str


def load_declarations(target: str) -> list[Declaration]:
    """Run a ``.py`` file, or import a module (from the current directory too), and return the
    ``kernel.precompile(...)`` declarations it made."""
    if target.endswith(".py") or os.path.isfile(target):
        if not os.path.isfile(target):
            raise FileNotFoundError(f"[precompile] no such file: {target}")
        runpy.run_path(target, run_name="__kernelkit_precompile__")
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        importlib.import_module(target)
    return declared()


class PrecompileFailed(Exception):
    """One declaration could not be built for one arch: says which, at which stage, and why.
    ``status`` is the command's exit status: 2 for a request nothing can build, else 1."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def _backend_for(arch: str) -> Backend:
    """The installed backend that compiles for ``arch`` without a device, else one with a local
    device of that arch (a host backend such as cpu compiles for itself). A backend that fails
    to answer is skipped, and named if no other backend compiles for ``arch``; the message
    lists the archs that can be built here."""
    problems, known = [], []
    for name, backend in backends().items():
        try:
            offered = list(backend.compile_targets())
            if arch in offered:
                return backend
            known += [f"{a} ({name})" for a in offered]
        except Exception as e:  # noqa: BLE001 - one broken backend must not stop the others
            problems.append(f"backend {name}: compile_targets() failed: {type(e).__name__}: {e}")
    for name, backend in backends().items():
        try:
            if any(t.arch == arch for t in backend.targets()):
                return backend
        except Exception as e:  # noqa: BLE001
            problems.append(f"backend {name}: targets() failed: {type(e).__name__}: {e}")
    valid = f"; valid archs: {', '.join(known)}" if known else "; no backend compiles here"
    why = f" ({'; '.join(problems)})" if problems else ""
    # no "[precompile]" here: _build_one puts the prefix and what was being built before it
    raise ValueError(f"no installed backend compiles for arch {arch!r}{valid}{why}")


def _target(backend: Backend, arch: str) -> Target:
    try:
        return backend.target_for_arch(arch)
    except NotImplementedError:
        return next(t for t in backend.targets() if t.arch == arch)


def _build_one(decl: Declaration, arch: str) -> BuiltEntry:
    what = f"{decl.describe()} for {arch}"
    stage = "finding a backend"
    try:
        backend = _backend_for(arch)
        stage = f"backend {backend.name}: target"
        target = _target(backend, arch)
        stage = f"backend {backend.name}: render"
        _, request = render_request(
            decl.kernel.spec, backend, target, decl.inputs, decl.outputs, decl.template, False
        )
        stage = f"backend {backend.name}: compiler identity"
        key = cache_key(request, backend.compiler_identity(), backend.version)
        stage = f"backend {backend.name}: compile"
        artifact = backend.compile(request)
        stage = "encoding the entry"
        data = encode(key, request.kernel, request.backend, artifact)
    except CompileError as e:
        raise PrecompileFailed(f"[precompile] {what}: {e}") from e
    except (ValueError, TypeError) as e:  # the declaration asks for what cannot be built
        raise PrecompileFailed(f"[precompile] {what}: {e}", status=2) from e
    except Exception as e:
        raise PrecompileFailed(
            f"[precompile] {what}: {stage} failed: {type(e).__name__}: {e}"
        ) from e
    return BuiltEntry(key.digest, data, what)


def build_entries(
    decls: Sequence[Declaration], archs: Sequence[str], jobs: int = 1, progress: bool = True
) -> list[BuiltEntry]:
    """Compile every declaration for every arch (``jobs`` at a time), with a progress bar when
    ``progress`` and stderr is a terminal (never into a log or a pipe)."""
    from tqdm import tqdm

    work = [(d, a) for d in decls for a in archs]
    built: list[BuiltEntry] = []
    off = not progress or not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    with (
        tqdm(total=len(work), desc="precompile", unit="kernel", disable=off) as bar,
        ThreadPoolExecutor(max_workers=max(1, jobs)) as pool,
    ):
        for entry in pool.map(lambda job: _build_one(*job), work):
            built.append(entry)
            bar.update(1)
    return built


def precompile(
    target: str, archs: Sequence[str], output: str, jobs: int = 1, progress: bool = True
) -> int:
    """The command: returns the exit status (0 written, 1 a kernel failed, 2 nothing to do)."""
    decls = load_declarations(target)
    if not decls:
        print(
            f"[precompile] {target} declared no kernels: call kernel.precompile(inputs, "
            "output_dtypes, template) at import",
            file=sys.stderr,
        )
        return 2
    try:
        built = build_entries(decls, archs, jobs, progress)
    except PrecompileFailed as e:
        print(e, file=sys.stderr)
        return e.status
    manifest = write_bundle(output, [(b.digest, b.data) for b in built])
    size = os.path.getsize(output)
    print(
        f"wrote {output}: {len(manifest['entries'])} entries ({len(decls)} declarations x "
        f"{len(archs)} archs), {size} bytes"
    )
    return 0
