"""The ``kernelkit`` command: ``info``, ``demo``, ``cache ...``, ``precompile ...``, ``tune``,
``explain``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["main"]


def _info(args: argparse.Namespace) -> int:
    from . import _config
    from ._backends import registry as _registry
    from ._version import __version__

    report: dict = {"kernelkit": __version__, "python": sys.version.split()[0], "backends": {}}
    report["configuration"] = {
        var.name: getattr(_config.config, field.name)
        for var, field in zip(_config.VARS, dataclasses.fields(_config.Config))
    }
    for name in _registry.registered():
        try:
            backend = _registry.get_backend(name)
        except Exception as e:  # noqa: BLE001 - info reports every backend, broken ones too
            report["backends"][name] = {"error": str(e)}
            continue
        entry: dict = {"version": backend.version, **backend.info()}
        try:
            entry["targets"] = [
                {
                    "device": t.device,
                    "name": t.name,
                    "arch": t.arch,
                    "max_threads_per_block": t.max_threads_per_block,
                    "shared_memory_optin_bytes": t.max_shared_memory_optin_bytes,
                    "features": sorted(t.features),
                }
                for t in backend.targets()
            ]
        except Exception as e:  # noqa: BLE001
            entry["targets"] = f"probe failed: {e}"
        report["backends"][name] = entry
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"kernelkit {report['kernelkit']} (Python {report['python']})")
    print("\nconfiguration (KERNELKIT_* variables; * set in the environment)")
    for name, value in report["configuration"].items():
        mark = "*" if name in os.environ else " "
        print(f" {mark} {name} = {value!r}")
    for name, entry in report["backends"].items():
        print(f"\nbackend {name}")
        for k, v in entry.items():
            if k == "targets" and isinstance(v, list):
                if not v:
                    print("  targets: none (no device found)")
                for t in v:
                    print(
                        f"  device {t['device']}: {t['name']}, compiles for {t['arch']}, "
                        f"features {', '.join(t['features'])}"
                    )
            elif isinstance(v, list):
                print(f"  {k}: {', '.join(map(str, v))}")
            else:
                print(f"  {k}: {v}")
    return 0


DEMO_SOURCE = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) {
    y[i] = scale * expf(x[i]);
}
"""


def _demo(args: argparse.Namespace) -> int:
    import numpy as np

    import kernelkit

    from ._backends import registry as _registry

    k = kernelkit.kernel("demo_scaled_exp", ["x", "scale"], ["y"], DEMO_SOURCE)
    n = 100_003
    x_host = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    ran_on = None
    for name in [args.backend] if args.backend else ["cuda", "cpu"]:
        try:
            backend = _registry.get_backend(name)
            if backend.targets():
                ran_on = (name, backend.targets()[0])
                break
        except kernelkit.BackendError:
            continue
    if ran_on is None:
        print("no backend with a device is available; run `kernelkit info`")
        return 1
    name, target = ran_on
    x: Any = x_host  # a torch tensor on a CUDA backend
    if 2 in _registry.get_backend(name).dlpack_devices:
        import torch

        x = torch.from_numpy(x_host).cuda()
    (y,) = k(
        [x, 2.0],
        output_shapes=[(n,)],
        output_dtypes=[np.float32],
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    y_host = y.cpu().numpy() if hasattr(y, "cpu") else np.asarray(y)
    ref = 2.0 * np.exp(x_host.astype(np.float64))
    err = float(np.max(np.abs(y_host - ref) / np.abs(ref)))
    ok = err < 1e-5
    print(
        f"ran demo_scaled_exp on backend {name}: {target.name} ({target.arch}), "
        f"{n} elements, max relative error {err:.2e}: {'OK' if ok else 'WRONG'}"
    )
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="versions, compiler, backends and devices")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_info)
    p = sub.add_parser("demo", help="run the getting-started example kernel and check it")
    p.add_argument("--backend", default=None)
    p.set_defaults(func=_demo)
    try:
        from ._workflows.commands import register
    except ImportError:
        pass
    else:
        register(sub)
    from ._workflows.tune import register as register_tune

    register_tune(sub)
    sub.choices["tune"].epilog = (
        "kernelkit tune export FILE writes the tuning database to one file; kernelkit tune "
        "import FILE [--any-env] adds such a file's records to it (see kernelkit tune import -h)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kernelkit`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["tune"] and argv[1:2] and argv[1] in _tune_records_commands():
            from ._workflows.tune_records import main as tune_records

            status = tune_records(argv[1:])
        else:
            args = build_parser().parse_args(argv)
            status = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so a closed pipe is caught below and not at exit
    except BrokenPipeError:
        # The reader went away (`kernelkit cache list | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool a closed pipe stopped
    return status


def _tune_records_commands() -> tuple[str, ...]:
    from ._workflows.tune_records import COMMANDS

    return COMMANDS


if __name__ == "__main__":
    sys.exit(main())
