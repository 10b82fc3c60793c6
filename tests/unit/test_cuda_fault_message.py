"""A device fault on CUDA is a LaunchError that names the kernel, says the CUDA context is lost
and points to the CPU backend's checked mode (formatting and classification, no GPU needed)."""

from __future__ import annotations

import pytest

from kernelkit._errors import BackendError, LaunchError

pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
from kernelkit._backends.cuda import driver


def _result(name: str):
    return (getattr(driver.drv().CUresult, name),)


@pytest.fixture(autouse=True)
def _no_driver_library(monkeypatch):
    """cuGetErrorName needs libcuda; the enum's own name is the same string."""
    monkeypatch.setattr(driver, "_error_name", lambda err: err.name)


def test_a_fault_at_a_sync_names_the_last_kernel_and_the_way_to_find_it(monkeypatch):
    monkeypatch.setattr(driver, "_last_launch", ["grid_sample"])
    with pytest.raises(LaunchError) as e:
        driver.check(_result("CUDA_ERROR_ILLEGAL_ADDRESS"), "cuStreamSynchronize")
    msg = str(e.value)
    assert msg.startswith("[grid_sample] device fault CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "kernel 'grid_sample'" in msg and "cuStreamSynchronize" in msg
    assert "CUDA context is lost" in msg
    assert "backend='cpu', check=True" in msg


@pytest.mark.parametrize("name", sorted(driver.FAULTS))
def test_every_sticky_fault_is_a_launch_error(monkeypatch, name):
    monkeypatch.setattr(driver, "_last_launch", ["k"])
    with pytest.raises(LaunchError, match=r"^\[k\] device fault " + name):
        driver.check(_result(name), "cuMemcpyDtoH")


def test_other_errors_stay_backend_errors():
    with pytest.raises(BackendError, match=r"cuStreamSynchronize failed: CUDA_ERROR_INVALID_VALUE"):
        driver.check(_result("CUDA_ERROR_INVALID_VALUE"), "cuStreamSynchronize")


def test_a_fault_before_any_launch_has_no_kernel_name():
    msg = driver.fault_message("CUDA_ERROR_ASSERT", "", "cuCtxSynchronize")
    assert msg.startswith("[backend cuda] device fault CUDA_ERROR_ASSERT in a kernel")
