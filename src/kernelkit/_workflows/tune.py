"""``kernelkit tune SPEC`` and ``kernelkit explain SPEC``: offline tuning of an autotuned kernel
over listed shapes, each candidate in a worker process with a timeout (``tune_run.py`` runs it,
``tune_pool.py`` or ``tune_ray.py`` measure). ``kernelkit tune OP --dims ...`` tunes a built-in
op instead (``tune_op.py``), ``kernelkit explain OP --dims ...`` explains one (``explain_op.py``).

A spec (YAML, or JSON)::

    module: mykernels.py        # a .py file (relative to the spec) or an importable module
    object: scale               # the kernelkit.autotune(...) object in it
    backend: cpu                # optional: cuda or cpu (default: the kernel's own choice)
    framework: numpy            # optional: numpy or torch (default: numpy on cpu, else torch)
    timeout_s: 60               # per candidate: a worker that takes longer is killed
    retries: 0                  # Ray only: runs again of a task whose worker died (max_retries)
    budget_s: 600               # optional, per shape: no new candidate starts once spent
    check: false                # run candidates bounds-checked (cpu)
    seed: 0
    device_kinds: [H100, H200] # optional, Ray only: every shape tuned on nodes of each kind
    shapes:
      - inputs: {x: {shape: [4096], dtype: float32}, a: 2.0}
        outputs: {y: {shape: [4096], dtype: float32}}
    output: {database: true, table: scale_table.yaml, export: scale_records.json}

A worker that crashes (a segfault), faults or hangs costs only its candidate, recorded as
failed; a new worker takes the next one. ``--devices 0,1`` runs one local worker per GPU (each
sees only its GPU); ``--ray [ADDRESS]`` runs each candidate as a Ray task instead. Outputs are
compared in the parent, in config order, against the first candidate that ran, so a wrong config
is rejected whatever worker ran it. Results are stored as they arrive: a rerun of a spec that was
cut off measures only the candidates left (``--fresh`` forgets them).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tune_run import ShapeResult

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


def plot(obj: Any, results: list[ShapeResult], path: str) -> None:
    """Time per config (x) for each shape (one line each), the winner marked with a star."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError(
            "--plot needs matplotlib: pip install matplotlib (or kernelkit[dev])"
        ) from None
    configs = obj.impl.configs
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(configs) + 3), 4.5))
    for r in results:
        xs = [c for c, row in enumerate(r.rows) if row[2] is not None]
        ys = [r.rows[c][2] * 1e6 for c in xs]  # type: ignore[operator]
        (line,) = ax.plot(xs, ys, marker="o", label=f"shape {r.index}")
        if r.winner is not None:
            ax.plot(
                [r.winner],
                [float(r.rows[r.winner][2] or 0.0) * 1e6],
                marker="*",
                markersize=16,
                color=line.get_color(),
            )
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([c.describe() for c in configs], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("time per launch (us, log scale)")
    ax.set_yscale("log")  # shapes of very different sizes share one axis
    ax.set_title(f"{obj.name}: time per config and shape (star: chosen)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_tune(args: Any) -> int:
    """``kernelkit tune SPEC``, or ``kernelkit tune OP[,OP...] --dims ...`` for built-in ops."""
    from .._tune import db
    from .op_cases import OPS, not_a_spec
    from .tune_run import tune_parsed

    names = [n.strip() for n in args.spec.split(",")]
    if all(n in OPS for n in names):
        from .tune_op import main_tune_op

        given = [f for f, on in (("--ray", args.ray is not None), ("--fresh", args.fresh),
                                 ("--export", args.export)) if on]  # fmt: skip
        if given:
            print(f"kernelkit tune: {', '.join(given)} are for tune specs", file=sys.stderr)
            return 2
        return main_tune_op(args)
    if (why := not_a_spec("tune", args.spec)) is not None:
        print(why, file=sys.stderr)
        return 2
    try:
        spec = load_spec(args.spec)
        devices = [d.strip() for d in args.devices.split(",")] if args.devices else None
        if args.timeout is not None:
            spec.timeout_s = args.timeout
        obj = load_object(spec)
        ray = None if args.ray is None else (args.ray or True)
        tuning = tune_parsed(
            spec,
            obj,
            ray=ray,
            devices=devices,
            store=not args.no_database,
            table=args.table,
            export=args.export,
            fresh=args.fresh,
            quiet=args.quiet,
        )
    except (ValueError, OSError) as e:
        print(f"kernelkit tune: {e}", file=sys.stderr)
        return 2
    print(tuning.report())
    stored = len(tuning.results) * len(obj.impl.configs) - tuning.measured
    if stored:
        print(f"{stored} candidate result(s) read back from an earlier run of this spec")
    if spec.database and not args.no_database:
        print(f"{len(tuning.records)} record(s) stored in the tuning database ({db.current_db()})")
    for path in tuning.tables:
        print(f"table written to {path}")
    if tuning.export is not None:
        print(f"{len(tuning.records)} record(s) exported to {tuning.export}")
    if args.plot:
        try:
            plot(obj, list(tuning.results), args.plot)
        except ValueError as e:
            print(f"kernelkit tune: {e}", file=sys.stderr)
            return 2
        print(f"plot written to {args.plot}")
    return 0 if len(tuning.records) == len(tuning.results) else 1


def main_explain(args: Any) -> int:
    """``kernelkit explain SPEC [--shape I]``: the choice for each shape and why; or
    ``kernelkit explain OP --dims ... [--dtype] [--device]`` for a built-in op."""
    from .explain_op import OPS, explain_ops
    from .op_cases import not_a_spec

    if args.spec in OPS:
        try:
            found = explain_ops(
                args.spec,
                args.dims or "",
                args.dtype,
                args.device,
                args.transpose_b,
                args.framework,
            )
        except (ValueError, ImportError) as e:
            print(f"kernelkit explain: {e}", file=sys.stderr)
            return 2
        for label, selection in found:
            print(
                f"{args.spec} {label}:\n{selection.explain()}"
                if len(found) > 1
                else selection.explain()
            )
        return 0
    if (why := not_a_spec("explain", args.spec)) is not None:
        print(why, file=sys.stderr)
        return 2
    try:
        spec = load_spec(args.spec)
        obj = load_object(spec)
        indices = [args.shape] if args.shape is not None else range(len(spec.shapes))
        for i in indices:
            call = make_call(obj, spec, i)
            print(f"shape {i}:")
            print(obj.explain(**call).explain())
    except (ValueError, OSError, IndexError) as e:
        print(f"kernelkit explain: {e}", file=sys.stderr)
        return 2
    return 0


def register(subparsers: Any) -> None:
    """Add ``tune`` and ``explain`` to the ``kernelkit`` parser."""
    from .op_cases import add_arguments as add_problem_arguments
    from .tune_op import add_arguments as add_tune_op_arguments

    p = subparsers.add_parser(
        "tune", help="tune an autotuned kernel over a spec's shapes, or built-in ops over --dims"
    )
    p.add_argument("spec", help="a YAML or JSON tune spec, or built-in ops: matmul,softmax,...")
    p.add_argument("--devices", help="GPUs to use, one worker each (e.g. 0,1)")
    p.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="tune specs: each candidate a Ray task holding one GPU, on the cluster at ADDRESS "
        "(default: RAY_ADDRESS, else a new local one); needs pip install kernelkit[ray]",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="tune specs: forget the results an earlier run of this spec stored (it resumes)",
    )
    p.add_argument(
        "--export", help="tune specs: also write the run's records to this file, to ship"
    )
    p.add_argument("--timeout", type=float, help="seconds per candidate (overrides the spec)")
    p.add_argument(
        "--table",
        help="also write a shippable table (.yaml or .json) here; for "
        "built-in ops a folder takes <op>.<device>.yaml (existing rows are updated)",
    )
    p.add_argument("--plot", help="write a PNG of time per config and shape (needs matplotlib)")
    p.add_argument("--no-database", action="store_true", help="do not store records")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_problem_arguments(p)
    add_tune_op_arguments(p)
    p.set_defaults(func=main_tune)
    p = subparsers.add_parser(
        "explain", help="print the choice for a tune spec's shapes, or a built-in op's, and why"
    )
    p.add_argument("spec", help="a tune spec, or a built-in op: softmax, rms_norm, ...")
    p.add_argument("--shape", type=int, help="only this shape (index in the spec)")
    add_problem_arguments(p)
    p.set_defaults(func=main_explain)
