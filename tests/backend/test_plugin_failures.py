"""A plugin that fails while probing, compiling or launching gives one clear error naming it,
and the process and the other backends keep working."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import numpy as np
import pytest

import kernelkit
from kernelkit._backends.cpu import CPUBackend

BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2 * x[i];"


class ProbeFails(CPUBackend):
    name = "probefails"

    def targets(self):
        raise RuntimeError("driver exploded")


class LaunchFails(CPUBackend):
    name = "launchfails"

    def launcher(self, program, target):
        def launch(params: int, stream: int, geometry: tuple) -> None:
            raise OSError("device lost")

        return launch


class CompileFails(CPUBackend):
    name = "compilefails"

    def compile(self, request):
        raise MemoryError("out of compiler memory")


@pytest.fixture
def plugins(patch_entry_points):
    eps = [
        EntryPoint(n, f"{__name__}:{c.__name__}", "kernelkit.backends")
        for n, c in (
            ("probefails", ProbeFails),
            ("launchfails", LaunchFails),
            ("compilefails", CompileFails),
        )
    ]
    patch_entry_points(lambda group=None, **kw: [e for e in eps if group in (None, e.group)])


def _call(k, x, backend):
    return k(
        [x],
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(x.size, 1, 1),
        threadgroup=(64, 1, 1),
        backend=backend,
    )[0]


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (
            "probefails",
            r"\[backend probefails\] probing devices failed: RuntimeError: driver exploded",
        ),
        ("compilefails", r"\[backend compilefails\] compile failed: MemoryError"),
    ],
)
def test_failing_plugin_names_itself_and_cpu_keeps_working(plugins, name, match):
    k = kernelkit.kernel(f"pf_{name}", ["x"], ["y"], BODY)
    x = np.random.default_rng(1).standard_normal(100).astype(np.float32)
    with pytest.raises(kernelkit.BackendError, match=match):
        _call(k, x, name)
    np.testing.assert_array_equal(_call(k, x, "cpu"), 2 * x)
    with pytest.raises(kernelkit.BackendError, match=name):  # and again: still a clear error
        _call(k, x, name)


def test_plugin_failing_at_launch_raises_launch_error_naming_it(plugins):
    k = kernelkit.kernel("pf_launch", ["x"], ["y"], BODY)
    x = np.random.default_rng(2).standard_normal(77).astype(np.float32)
    for _ in range(2):  # first call (slow path) and a repeated call (hot path)
        with pytest.raises(
            kernelkit.LaunchError,
            match=r"backend 'launchfails' failed to launch: OSError: device lost",
        ):
            _call(k, x, "launchfails")
    np.testing.assert_array_equal(_call(k, x, "cpu"), 2 * x)
