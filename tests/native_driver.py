"""A stand-in for the CUDA driver, for tests of calls repeated in C on the CPU: the CPU backend's
launcher is given a ``native_call`` (``kk_launch.Call``) whose driver is a ctypes callback with
``cuLaunchKernel``'s signature that runs the CPU launch, so a Call's argument block, pointers,
outputs and checks run real kernels. A pytest plugin (``tests/conftest.py`` loads it): a test
that asks for the ``driver`` fixture runs with it (``stand_in``)."""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator

import pytest

from kernelkit._backends.cpu import _backend as cpu
from kernelkit._backends.cuda import native

__all__ = ["DRIVER", "Driver", "driver", "stand_in"]

DRIVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)  # fmt: skip


class Driver:
    """The stand-in driver: counts launches, runs each through the CPU backend's launcher."""

    def __init__(self) -> None:
        self.launches = 0
        self.error = 0  # returned instead of launching, when set
        self.keep: list = []

    def native_call(self, launch):
        def run(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            if self.error:
                return self.error
            self.launches += 1
            launch(params, stream or 0, (gx, gy, gz, bx, by, bz, shared))
            return 0

        callback = DRIVER(run)
        self.keep.append(callback)
        module, why = native._module()
        assert module is not None, why

        def fallback(params, stream, geometry):  # the CPU launcher, as CUDA's retries
            launch(params, stream, geometry)

        address = ctypes.cast(callback, ctypes.c_void_p).value
        return functools.partial(module.Call, address, 1, [None], "k", fallback)


@contextlib.contextmanager
def stand_in() -> Iterator[Driver]:
    """The CPU backend's launchers made while it is open get the stand-in driver's
    ``native_call`` (a test module's ``driver`` fixture opens it); skips without a usable
    ``TensorGuards``."""
    from kernelkit._arrays._torch import checker

    if checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    fake = Driver()
    original = cpu.CPUBackend.launcher

    def launcher(self, program, target):
        launch = original(self, program, target)
        wrapped = functools.partial(launch)  # an attribute of its own
        wrapped.native_call = fake.native_call(launch)
        wrapped.native_front = native._module()[0].Front  # kernels called through it
        return wrapped

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu.CPUBackend, "launcher", launcher)
        yield fake


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    """The stand-in driver for the module's tests (skips without torch's ``TensorGuards``)."""
    pytest.importorskip("torch")
    with stand_in() as fake:
        yield fake
