"""Memory handed to a C API is kernelkit's own: after every path that lets NVRTC, the driver or
ctypes write into a buffer, the interpreter's shared objects are intact.

Runs in a fresh interpreter: a corrupted one-byte ``bytes`` object poisons the whole process
(``print`` separators, ``import torch``), so the check must not share the test runner's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-bindings (NVRTC) is not installed")

_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import kernelkit
    from kernelkit._backends.cuda import CUDABackend, nvrtc
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.render import render_request

    before = [bytes([i]) for i in range(256)]
    cuda = CUDABackend()
    k = kernelkit.kernel("fk", ["x"], ["y"],
        "uint i = blockIdx.x*blockDim.x+threadIdx.x; if (i < x_shape[0]) y[i] = x[i] + 1;")
    f32 = DTYPES["float32"]
    for arch in ("sm_90", "compute_90"):  # a cubin and PTX; the log is empty (size 1)
        _, req = render_request(k.spec, cuda, cuda.target_for_arch(arch), [("array", f32)],
                                [f32], (), False)
        art = cuda.compile(req)
        assert art.binary and art.log == "", (arch, art.log)
    bad = kernelkit.kernel("bad", ["x"], ["y"], "y[0] = undefined_name;")
    _, req = render_request(bad.spec, cuda, cuda.target_for_arch("sm_90"), [("array", f32)],
                            [f32], (), False)
    try:  # a compile error: a log of many bytes
        cuda.compile(req)
    except kernelkit.CompileError:
        pass
    else:
        raise AssertionError("the bad kernel compiled")
    x = np.arange(7, dtype=np.float32)  # and the CPU backend's ctypes path
    k([x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(7, 1, 1),
      threadgroup=(8, 1, 1))
    broken = [i for i in range(256) if bytes([i])[0] != i or before[i][0] != i]
    assert not broken, f"single-byte bytes objects overwritten: {broken}"
    assert b" ".join([b"a", b"b"]) == b"a b" and "%s %s" % (1, 2) == "1 2"
    print("INTACT")
    """
)


def test_nvrtc_outputs_leave_interpreter_intact(tmp_path):
    env = {**os.environ, "KERNELKIT_CACHE_DIR": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "INTACT" in out.stdout
