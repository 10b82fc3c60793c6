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

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tune_run import ShapeResult

from .tune_spec import TuneSpec, load_object, load_spec, make_call

__all__ = ["TuneSpec", "load_object", "load_spec", "make_call"]


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
    from .._select.tuning import db
    from .op_cases import OPS, not_a_spec
    from .tune_run import tune_parsed

    names = [n.strip() for n in args.spec.split(",")]
    if all(n in OPS for n in names):
        from .tune_op import main_tune_op

        given = [f for f, on in (("--fresh", args.fresh), ("--export", args.export)) if on]
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
        help="each candidate (tune specs) or problem (built-in ops) a Ray task holding one GPU, "
        "on the cluster at ADDRESS (default: RAY_ADDRESS, else a new local one); needs "
        "pip install kernelkit[ray]",
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
