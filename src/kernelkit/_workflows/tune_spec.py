"""A tuning spec (``kernelkit tune SPEC``): its file read and checked (``load_spec``), the
autotuned object it names (``load_object``) and a shape's call (``make_call``). Below the runs
(``tune_run``, ``tune_pool``, ``tune_ray``, ``tune_tasks``) and the command (``tune``)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TuneSpec", "load_object", "load_spec", "make_call"]


@dataclass
class TuneSpec:
    """A parsed spec (paths resolved)."""

    module: str
    object: str
    shapes: list[dict[str, Any]]
    backend: str | None = None
    framework: str | None = None
    timeout_s: float = 60.0
    budget_s: float | None = None
    check: bool | None = None
    seed: int = 0
    database: bool = True
    table: str | None = None
    export: str | None = None
    retries: int = 0
    device_kinds: tuple[str, ...] = field(default=())


def load_spec(path: str | Path) -> TuneSpec:
    """Read and check a spec; ``ValueError`` naming what is wrong."""
    path = Path(path)
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError("reading a YAML spec needs PyYAML: pip install pyyaml") from None
        doc = yaml.safe_load(text)
    else:
        doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a tune spec is a mapping")
    known = set(TuneSpec.__dataclass_fields__) | {"output"}
    unknown = set(doc) - known
    if unknown:
        raise ValueError(f"{path}: unknown fields {sorted(unknown)} (known: {sorted(known)})")
    for name in ("module", "object", "shapes"):
        if name not in doc:
            raise ValueError(f"{path}: the spec needs {name!r}")
    if not isinstance(doc["shapes"], list) or not doc["shapes"]:
        raise ValueError(f"{path}: 'shapes' must be a non-empty list")
    module = str(doc["module"])
    if module.endswith(".py") and not os.path.isabs(module):
        module = str((path.parent / module).resolve())
    output = doc.get("output") or {}
    unknown = set(output) - {"database", "table", "export"}
    if unknown:
        raise ValueError(f"{path}: unknown output fields {sorted(unknown)}")
    table, export = (_beside(path, output.get(n)) for n in ("table", "export"))
    return TuneSpec(
        module=module,
        object=str(doc["object"]),
        shapes=doc["shapes"],
        backend=doc.get("backend"),
        framework=doc.get("framework"),
        timeout_s=float(doc.get("timeout_s", 60.0)),
        budget_s=None if doc.get("budget_s") is None else float(doc["budget_s"]),
        check=doc.get("check"),
        seed=int(doc.get("seed", 0)),
        database=bool(output.get("database", True)),
        table=table,
        export=export,
        retries=_count(doc.get("retries", 0), f"{path}: 'retries'"),
        device_kinds=_kinds(doc.get("device_kinds"), path),
    )


def _beside(spec: Path, name: Any) -> str | None:
    """An output path of the spec, relative to the spec's folder."""
    if name is None:
        return None
    text = str(name)
    keep = "/" if text.endswith("/") else ""  # a folder stays one
    return text if os.path.isabs(text) else str((spec.parent / text).resolve()) + keep


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    return value


def _kinds(value: Any, path: Path) -> tuple[str, ...]:
    """The spec's device kinds: Ray accelerator types (H100, A100-80G, L40S...), each once."""
    if value is None:
        return ()
    ok = isinstance(value, list) and all(
        isinstance(k, str) and k and k.replace("-", "").replace("_", "").isalnum() for k in value
    )
    if not ok or len(set(value)) != len(value):
        raise ValueError(
            f"{path}: 'device_kinds' must be a list of distinct accelerator types such as "
            f"[H100, H200] (letters, digits, - and _), got {value!r}"
        )
    return tuple(value)


def load_object(spec: TuneSpec) -> Any:
    """The autotuned kernel the spec names (runs its file or imports its module)."""
    import importlib
    import runpy

    from .._tune.autotune import AutotunedKernel

    if spec.module.endswith(".py"):
        namespace = runpy.run_path(spec.module, run_name="__kernelkit_tune__")
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        namespace = vars(importlib.import_module(spec.module))
    obj = namespace.get(spec.object)
    if not isinstance(obj, AutotunedKernel):
        raise ValueError(
            f"{spec.module} has no autotuned kernel {spec.object!r} "
            f"(got {type(obj).__name__}); make it with kernelkit.autotune(...)"
        )
    return obj


def _array(desc: dict[str, Any], rng: Any, framework: str, device: str | None) -> Any:
    import numpy as np

    shape = tuple(int(v) for v in desc["shape"])
    dtype = str(desc.get("dtype", "float32"))
    host_dtype = "float32" if dtype in ("bfloat16", "float16") else dtype
    if dtype.startswith(("int", "uint")):
        a = rng.integers(int(desc.get("low", 0)), int(desc.get("high", 16)), shape)
    elif dtype == "bool":
        a = rng.integers(0, 2, shape).astype(bool)
    else:
        a = rng.standard_normal(shape)
    a = np.ascontiguousarray(a.astype(host_dtype))
    if framework == "numpy":
        if host_dtype != dtype:
            a = a.astype(dtype)  # needs ml_dtypes for bfloat16
        return a
    import torch

    t = torch.from_numpy(a).to(getattr(torch, dtype))
    return t.to(device) if device else t


def make_call(obj: Any, spec: TuneSpec, index: int) -> dict[str, Any]:
    """Arguments for shape ``index``: random inputs (seeded), output shapes and dtypes."""
    import numpy as np

    entry = spec.shapes[index]
    framework = spec.framework or ("numpy" if spec.backend in (None, "cpu") else "torch")
    device = "cuda" if framework == "torch" and spec.backend != "cpu" else None
    rng = np.random.default_rng(spec.seed + index)
    given = entry.get("inputs", {})
    inputs = []
    for name in obj.kernel.spec.input_names:
        if name not in given:
            raise ValueError(f"shape {index}: no value for input {name!r}")
        v = given[name]
        inputs.append(_array(v, rng, framework, device) if isinstance(v, dict) else v)
    outs = entry.get("outputs", {})
    names = obj.kernel.spec.output_names
    missing = [n for n in names if n not in outs]
    if missing:
        raise ValueError(f"shape {index}: no shape/dtype for outputs {missing}")
    return {
        "inputs": inputs,
        "output_shapes": [tuple(outs[n]["shape"]) for n in names],
        "output_dtypes": [outs[n].get("dtype", "float32") for n in names],
        "backend": spec.backend,
    }
