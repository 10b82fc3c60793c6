"""A pytest plugin for ``tests/unit/test_pipeline_repeat_real_ports.py``: the CPU backend's
launcher gets a ``native_call`` whose driver is a ctypes callback with ``cuLaunchKernel``'s
signature that runs the CPU launch, so a repeated kernel call is launched by ``kk_launch.Call``
as on CUDA; each real-port call whose outputs are new runs twice more with the same kernel (the
second run makes Calls, the third runs through them where they can be made), and must give the
same results; at the end it prints how many Calls were made and used."""

import ctypes
import functools

import kernelkit._arrays._torch  # noqa: F401 - torch's adapter sets its TensorGuards checker
from kernelkit._backends.cpu import _backend as cpu
from kernelkit._backends.cuda import native
from kernelkit._pipeline import repeat

DRIVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)  # fmt: skip
KEEP, MADE = [], []
module, why = native._module()
assert module is not None, why
original = cpu.CPUBackend.launcher


def launcher(self, program, target):
    launch = original(self, program, target)

    def run(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        launch(params, stream or 0, (gx, gy, gz, bx, by, bz, shared))
        return 0

    cb = DRIVER(run)
    KEEP.append(cb)
    wrapped = functools.partial(launch)
    wrapped.native_call = functools.partial(
        module.Call,
        ctypes.cast(cb, ctypes.c_void_p).value,
        1,
        [None],
        "k",
        lambda p, s, g: launch(p, s, g),
    )
    return wrapped


cpu.CPUBackend.launcher = launcher
_push = repeat.Repeats._push


def _keep(self, call):
    MADE.append(call)
    return _push(self, call)


repeat.Repeats._push = _keep


def pytest_configure(config):
    import real_ports

    run = real_ports.Ports.run

    def run_twice(self, port, dtype, values, outs, **kw):
        first = run(self, port, dtype, values, outs, **dict(kw))
        if all(isinstance(o, tuple) for o in outs):
            for _ in range(2):  # the second run makes the Calls, the third one runs them
                again = run(self, port, dtype, values, outs, **dict(kw))
                for a, b in zip(first, again, strict=True):
                    real_ports.agree(port, dtype, self.backend, a, b)
        return first

    real_ports.Ports.run = run_twice
    kernel = real_ports.Port.kernel
    made = {}

    def same_kernel(self, dtype="float32"):  # the two runs of one call share the kernel
        key = (id(self), dtype)
        if key not in made:
            made[key] = (self, kernel(self, dtype))
        return made[key][1]

    real_ports.Port.kernel = same_kernel


def pytest_sessionfinish(session, exitstatus):
    used = [c for c in MADE if c.served]
    print(f"\nkk_launch.Call objects made: {len(MADE)}, used: {len(used)}, "  # noqa: T201
          f"launches: {sum(c.served for c in used)}")  # fmt: skip
