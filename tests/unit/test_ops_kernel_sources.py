"""The text every built-in kernel compiles, pinned: for a representative set of problems and
configs of every implementation (matmul's gemv, gemv_tc, gemv_slab, gemv_slab_tc, wgmma, mma,
tiled; the row ops in every dtype; elementwise's flat and strided bodies) the
sha256 of the backend-neutral kernel source (header, body, template, parameters, attributes)
that the op's own ``prepare`` hands the kernel API. Moving the C++ between files must leave
every hash as it is; a kernel that is retired leaves the table with its own line.

The pins are in ``kernel_source_hashes.json`` beside this file (case -> the first 16 hex
digits of the sha256); to pin a deliberate change of a kernel's text, from the repository root:
``PYTHONPATH=src python3 tests/unit/test_ops_kernel_sources.py > tests/unit/kernel_source_hashes.json``
"""  # noqa: E501

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_ops_matmul_mma import problem

from kernelkit._errors import KernelkitError
from kernelkit._pipeline import render as _render
from kernelkit._pipeline.codegen import make_source, template_params
from kernelkit._records import Problem, Target
from kernelkit._select.records import Config
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _norms, _softmax
from kernelkit.ops._elementwise import elementwise

SM80 = frozenset({"fp16", "bf16", "cp_async", "mma_sync"})
SM90 = SM80 | {"tma", "clusters", "arch_specific"}


def _target(arch: str, features: frozenset[str]) -> Target:
    return Target("cuda", 0, arch, "test", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
                  48 * 1024, 227 * 1024, 32, frozenset(features), 132)  # fmt: skip


TARGETS = {"sm_90": _target("sm_90", SM90), "sm_80": _target("sm_80", SM80)}


def _matmul_problem(m: int, n: int, k: int, dtype: str, bias: str | None, act: str | None,
                    transpose_b: bool = True) -> Problem:  # fmt: skip
    return problem(m, n, k, dtype, transpose_b, bias, act)


MATMUL_PROBLEMS = {
    "m1": _matmul_problem(1, 4096, 4096, "bfloat16", None, None),
    "m4-f16-bias-silu": _matmul_problem(4, 4096, 14336, "float16", "float16", "silu"),
    "m16-gelu": _matmul_problem(16, 8192, 8192, "bfloat16", "float32", "gelu"),
    "m128": _matmul_problem(128, 4096, 4096, "bfloat16", None, "relu"),
    "m1000-f16": _matmul_problem(1000, 14336, 4096, "float16", "float16", None),
    "m64-kn": _matmul_problem(64, 4096, 4096, "bfloat16", None, None, transpose_b=False),
    "m8-f32": _matmul_problem(8, 4096, 4096, "float32", None, None),
    "m300-f32-kn": _matmul_problem(300, 1000, 72, "float32", "float32", "relu", False),
}


def _digest(k: Any, kw: dict[str, Any], problem: Problem, n_maps: int) -> str:
    """sha256 of the kernel source ``k`` compiles with the keywords ``kw`` for ``problem``."""
    spec = k.spec
    inputs, outputs = _render.arg_types(problem)
    if n_maps:  # wgmma's TMA variant: x, w, then a tensor map of each
        inputs = [*inputs[:2], *[("tensor_map", inputs[i][1]) for i in range(n_maps)], *inputs[2:]]
    params = _render.make_params(spec, inputs, outputs, False)
    template = tuple(kw.get("template") or ())
    src = make_source(spec, params, template)
    text = "\0".join([
        src.kernel, src.entry, repr(src.params), src.header, src.preamble, src.body,
        repr(src.template), repr(template_params(template, spec.name)), repr(sorted(src.needs)),
        repr((src.arch_specific, src.launch_bounds, src.cluster_dims, src.cooperative)),
        repr((kw.get("threadgroup"), kw.get("shared_memory"))),
    ])  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Recorder:
    """Stands in for ``kernel_caller`` in every ``kernelkit.ops`` module: keeps what an
    implementation's ``prepare`` would launch, launches nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def __call__(self, k: Any, kw: dict[str, Any]) -> Any:
        self.calls.append((k, kw))

        def call(*args: Any) -> Any:
            raise AssertionError("the source test launches nothing")

        call.direct = {}  # type: ignore[attr-defined]
        call.fixed = (None,) * 4  # type: ignore[attr-defined]
        return call


def _prepared(op: Any, problem: Problem, target: Target, impl: str, config: Config | None,
              dtype: Any, rec: _Recorder) -> tuple[Any, dict[str, Any], Config] | None:  # fmt: skip
    """(kernel, keywords, config) that ``impl`` prepares for ``problem`` with ``config``
    (None: its heuristic's), or None when selection refuses it."""
    try:
        choice = select(op, problem, target, override=Override(impl, config)).choice
    except KernelkitError:
        return None
    rec.calls.clear()
    op.get(impl).prepare(choice, problem, dtype)
    if not rec.calls:
        return None
    (k, kw), = rec.calls  # fmt: skip
    return k, kw, choice.config


def _configs(impl: Any) -> list[Config | None]:
    """None (the heuristic's), the default and every fourth shipped config."""
    return [None, impl.default, *impl.configs[::4]]


def _matmul_table(rec: _Recorder) -> dict[str, str]:
    table: dict[str, str] = {}
    for impl in MM.OP.implementations:
        name = impl.name
        if name == "framework":
            continue
        for pname, p in MATMUL_PROBLEMS.items():
            for tname, t in TARGETS.items():
                for config in _configs(impl):
                    got = _prepared(MM.OP, p, t, name, config, p.arg("x").dtype, rec)
                    if got is None:
                        continue
                    k, kw, chosen = got
                    maps = 2 if chosen.values.get("WS") == 2 else 0
                    case = f"matmul/{name} {pname} {tname} {chosen.describe()}"
                    table[case] = _digest(k, kw, p, maps)
    return table


def _arrays(dtype: str, shape: tuple[int, ...]) -> Any:
    import ml_dtypes

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    return np.zeros(shape, dt)


def _row_table(rec: _Recorder) -> dict[str, str]:
    table: dict[str, str] = {}
    for dtype in ("float16", "bfloat16", "float32"):
        for shape in ((4, 1000), (2, 3, 4096), (1, 50000)):
            x = _arrays(dtype, shape)
            w = _arrays(dtype, shape[-1:])
            b = _arrays(dtype, shape[-1:])
            cases = [
                ("softmax", _softmax.OP, _softmax._RUNNER, [x], {}),
                ("rms_norm", _norms.RMS_OP, _norms._RMS, [x, w, 1e-6], {}),
                ("layer_norm", _norms.LAYER_OP, _norms._LAYER, [x, w, b, 1e-5], {}),
            ]
            for name, op, runner, inputs, options in cases:
                p, _, _ = runner.problem(inputs, x.dtype, None, options)
                impl = op.implementations[0]
                # the heuristic's choice for these few rows, and for as many rows as SMs
                one_sm = replace(TARGETS["sm_90"], multiprocessor_count=1)
                for config, target in [(None, one_sm)] + [
                    (c, TARGETS["sm_90"]) for c in _configs(impl)
                ]:
                    got = _prepared(op, p, target, impl.name, config, dtype, rec)
                    if got is None:
                        continue
                    k, kw, chosen = got
                    case = f"{name}/{impl.name} {dtype} {shape} {chosen.describe()}"
                    table[case] = _digest(k, kw, p, 0)
    return table


def _elementwise_table(rec: _Recorder) -> dict[str, str]:
    table: dict[str, str] = {}
    f = elementwise("y = a * silu(b) + gelu_tanh(c) - 0.5; z = sigmoid(a) * relu(c)")
    for dtype in ("float16", "bfloat16", "float32"):
        a, b = _arrays(dtype, (64, 100)), _arrays(dtype, (64, 100))
        for c, layout in ((_arrays(dtype, (64, 100)), "same"), (_arrays(dtype, (100,)), "bcast")):
            sel = f.explain(a=a, b=b, c=c)
            p = sel.problem
            for impl in f.op.implementations:
                out = next(x.dtype for x in p.args if x.is_output)
                got = _prepared(f.op, p, TARGETS["sm_90"], impl.name, None, out, rec)
                if got is None:
                    continue
                k, kw, chosen = got
                case = f"elementwise/{impl.name} {dtype} {layout} {chosen.describe()}"
                table[case] = _digest(k, kw, p, 0)
    return table


def current_table(monkeypatch: Any) -> dict[str, str]:
    rec = _Recorder()
    for name, module in list(sys.modules.items()):
        if name.startswith("kernelkit.ops") and hasattr(module, "kernel_caller"):
            monkeypatch.setattr(module, "kernel_caller", rec)
    return {**_matmul_table(rec), **_row_table(rec), **_elementwise_table(rec)}


def test_every_kernel_source_is_what_it_was(monkeypatch):
    pinned = json.loads((Path(__file__).parent / "kernel_source_hashes.json").read_text())
    got = current_table(monkeypatch)
    missing = sorted(set(pinned) - set(got))
    new = sorted(set(got) - set(pinned))
    changed = sorted(c for c in set(pinned) & set(got) if pinned[c] != got[c])
    assert not missing, f"{len(missing)} pinned cases no longer prepared, e.g. {missing[:3]}"
    assert not new, f"{len(new)} cases not pinned, e.g. {new[:3]}"
    assert not changed, f"{len(changed)} kernel sources changed, e.g. {changed[:3]}"
    families = {case.split("/")[0] for case in got}
    assert families == {"matmul", "softmax", "rms_norm", "layer_norm", "elementwise"}
    impls = {case.split(" ")[0] for case in got}
    for impl in ("gemv", "gemv_tc", "gemv_slab", "gemv_slab_tc", "wgmma", "mma", "tiled"):
        assert f"matmul/{impl}" in impls


def test_every_kernel_file_ships_and_is_read():
    """Each ``ops/<family>/kernels/*.cuh`` is package data (a pyproject glob names it), and the
    loader reads it byte for byte."""
    import fnmatch

    tomllib = pytest.importorskip("tomllib")

    from kernelkit.ops._kernel_files import source

    root = Path(__file__).parents[2]
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["kernelkit"]
    package = root / "src" / "kernelkit"
    found = sorted((package / "ops").glob("*/kernels/*.cuh"))
    assert len(found) >= 30
    for path in found:
        rel = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} is not package data"
        family, name = path.parent.parent.name, path.stem
        assert source(family, name).encode() == path.read_bytes()


@pytest.mark.parametrize("parts", [("matmul", "../_common"), ("Matmul", "gemv"), ("rows", "")])
def test_the_loader_takes_names_not_paths(parts):
    from kernelkit.ops._kernel_files import source

    with pytest.raises(ValueError, match="lower-case name"):
        source(*parts)


if __name__ == "__main__":
    mp = pytest.MonkeyPatch()
    try:
        table = current_table(mp)
    finally:
        mp.undo()
    sys.stdout.write(json.dumps(table, indent=1, sort_keys=True) + "\n")
