"""A kernel that faults on the GPU is reported as a LaunchError naming it, saying the CUDA
context is lost and pointing to the CPU backend's checked mode (in a child process: a fault
leaves the process's CUDA context unusable)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CHILD = textwrap.dedent(
    """
    import sys, time
    import torch, kernelkit
    body = "y[(long long)(threadIdx.x + 1) << 40] = x[0];"  # far past y: a fault
    k = kernelkit.kernel("fault_probe", ["x"], ["y"], body)
    x, y = torch.ones(1, device="cuda"), torch.zeros(1, device="cuda")
    try:
        for _ in range(200):  # the fault surfaces at a later launch or wait
            k([x], out=[y], grid=(32, 1, 1), threadgroup=(32, 1, 1))
            time.sleep(0.01)
    except kernelkit.LaunchError as e:
        print("MSG:" + str(e))
        sys.exit(0)
    sys.exit(3)
    """
)


def test_a_device_fault_names_the_kernel_and_the_way_to_find_it():
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    msg = r.stdout.split("MSG:", 1)[1]
    assert msg.startswith("[fault_probe] device fault CUDA_ERROR_"), msg
    assert "CUDA context is lost" in msg and "check=True" in msg, msg
