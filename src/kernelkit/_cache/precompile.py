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

from .._declare import Declaration, declared
from .._errors import CompileError
from .._plan import render_request
from .._records import CompileRequest
from .._registry import backends, get_backend
from .bundles import write_bundle
from .entry import encode
from .keys import cache_key

__all__ = ["BuiltEntry", "build_entries", "load_declarations", "precompile"]


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


def _request(decl: Declaration, arch: str) -> CompileRequest:
    """The declaration's request for ``arch``; for a backend without ``target_for_arch``, the
    target of a local device of that arch (a host backend such as cpu compiles for itself)."""
    try:
        return decl.request(arch)
    except NotImplementedError:
        for backend in backends().values():
            for target in backend.targets():
                if target.arch == arch:
                    return render_request(
                        decl.kernel.spec,
                        backend,
                        target,
                        decl.inputs,
                        decl.outputs,
                        decl.template,
                        False,
                    )[1]
        raise


def _build_one(decl: Declaration, arch: str) -> BuiltEntry:
    request = _request(decl, arch)
    backend = get_backend(request.backend)
    key = cache_key(request, backend.compiler_identity(), backend.version)
    artifact = backend.compile(request)
    return BuiltEntry(
        key.digest,
        encode(key, request.kernel, request.backend, artifact),
        f"{decl.describe()} for {arch}",
    )


def build_entries(
    decls: Sequence[Declaration], archs: Sequence[str], jobs: int = 1, progress: bool = True
) -> list[BuiltEntry]:
    """Compile every declaration for every arch (``jobs`` at a time), with a progress bar."""
    from tqdm import tqdm

    work = [(d, a) for d in decls for a in archs]
    built: list[BuiltEntry] = []
    with tqdm(total=len(work), desc="precompile", unit="kernel", disable=not progress) as bar:
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
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
    except CompileError as e:
        print(f"[precompile] {e}", file=sys.stderr)
        return 1
    except (ValueError, NotImplementedError) as e:
        print(f"[precompile] {e}", file=sys.stderr)
        return 2
    manifest = write_bundle(output, [(b.digest, b.data) for b in built])
    size = os.path.getsize(output)
    print(
        f"wrote {output}: {len(manifest['entries'])} entries ({len(decls)} declarations x "
        f"{len(archs)} archs), {size} bytes"
    )
    return 0
