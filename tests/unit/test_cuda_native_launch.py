"""The native CUDA launch (``_backends/cuda/native.py``, ``native/kk_launch.c``), built and run
on the CPU: a ctypes callback with ``cuLaunchKernel``'s signature stands in for the driver, so
the argument marshaling, the fallback on a driver error and the bookkeeping are checked without a
GPU; the build is a checked product of the disk cache, and a damaged one is rebuilt."""

from __future__ import annotations

import ctypes
import sys

import pytest

from kernelkit import _config
from kernelkit._backends.cuda import native
from kernelkit._cache import disk, products

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

DRIVER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                          ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)  # fmt: skip


@pytest.fixture
def module(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KERNELKIT_NATIVE_LAUNCH", raising=False)
    _config.reload()
    monkeypatch.setattr(native, "_state", None)
    found, why = native._module()
    yield found, why
    monkeypatch.undo()
    _config.reload()


def _fake_driver(result: int, calls: list):
    def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        calls.append((fn, (gx, gy, gz, bx, by, bz, shared), stream, params, extra))
        return result

    return DRIVER(launch)


def test_a_launch_reaches_the_driver_with_every_argument(module):
    found, why = module
    assert found is not None, why
    calls, last, fallen = [], [""], []
    driver = _fake_driver(0, calls)
    address = ctypes.cast(driver, ctypes.c_void_p).value
    params = (ctypes.c_void_p * 2)()
    geometry = (70000, 3, 2, 256, 1, 1, 49152)
    result = found.launch(address, 0xABC0, last, "k_entry", lambda *a: fallen.append(a),
                          ctypes.addressof(params), 0x7F00, geometry)  # fmt: skip
    assert result is None and not fallen
    assert calls == [(0xABC0, geometry, 0x7F00, ctypes.addressof(params), None)]
    assert last == ["k_entry"]
    found.launch(address, 1, last, "other", None, ctypes.addressof(params), 0, geometry)
    assert calls[-1][2] is None and last == ["other"]  # stream 0: the legacy default stream


def test_a_driver_error_goes_to_the_fallback_whose_result_or_error_comes_back(module):
    found, _ = module
    calls, last = [], ["before"]
    address = ctypes.cast(driver := _fake_driver(700, calls), ctypes.c_void_p).value
    params = (ctypes.c_void_p * 1)()
    got = []
    assert found.launch(address, 5, last, "e", lambda *a: got.append(a) or "again",
                        ctypes.addressof(params), 9, (1, 1, 1, 32, 1, 1, 0)) == "again"  # fmt: skip
    assert got == [(ctypes.addressof(params), 9, (1, 1, 1, 32, 1, 1, 0))]
    assert last == ["before"]  # only a launch that succeeded names the last kernel

    def refuse(*a):
        raise RuntimeError("launch failed: CUDA_ERROR_INVALID_VALUE")

    with pytest.raises(RuntimeError, match="INVALID_VALUE"):
        found.launch(address, 5, last, "e", refuse, ctypes.addressof(params), 9,
                     (1, 1, 1, 32, 1, 1, 0))  # fmt: skip
    del driver


@pytest.mark.parametrize(
    ("geometry", "error"),
    [((1, 1, 1, 32, 1, 1), TypeError), ([1, 1, 1, 32, 1, 1, 0], TypeError),
     ((1, 1, 1, 32, 1, 1, 2**32), OverflowError), ((1, 1, 1, -32, 1, 1, 0), OverflowError),
     ((1, 1, 1, "32", 1, 1, 0), TypeError)],
)  # fmt: skip
def test_a_bad_geometry_is_refused_before_the_driver(module, geometry, error):
    found, _ = module
    calls = []
    address = ctypes.cast(driver := _fake_driver(0, calls), ctypes.c_void_p).value
    params = (ctypes.c_void_p * 1)()
    with pytest.raises(error):
        found.launch(address, 5, [""], "e", None, ctypes.addressof(params), 0, geometry)
    assert not calls
    del driver


@pytest.mark.parametrize("position", [0, 1, 5, 6])
def test_an_argument_that_is_not_an_address_is_refused(module, position):
    found, _ = module
    calls = []
    address = ctypes.cast(driver := _fake_driver(0, calls), ctypes.c_void_p).value
    params = (ctypes.c_void_p * 1)()
    args = [address, 5, [""], "e", None, ctypes.addressof(params), 0, (1, 1, 1, 32, 1, 1, 0)]
    args[position] = "not an int"
    with pytest.raises(TypeError):
        found.launch(*args)
    assert not calls
    del driver


def test_bind_gives_the_launcher_the_hot_path_calls(module, monkeypatch):
    calls, last = [], [""]
    driver = _fake_driver(0, calls)
    address = ctypes.cast(driver, ctypes.c_void_p).value
    monkeypatch.setattr(native, "_driver_launch", lambda: address)
    launch = native.bind(0x1234, last, "bound", None)
    params = (ctypes.c_void_p * 1)()
    launch(ctypes.addressof(params), 3, (2, 1, 1, 64, 1, 1, 0))
    assert calls[0][:3] == (0x1234, (2, 1, 1, 64, 1, 1, 0), 3) and last == ["bound"]
    assert native.status().startswith("native")


def test_a_damaged_build_is_found_and_rebuilt(module, tmp_path, monkeypatch):
    (built,) = (tmp_path / "cache" / native.AREA).glob("kk-launch-*/kk_launch*")
    data = built.read_bytes()
    built.unlink()  # (this process has the file mapped: a new file, not the mapped one cut)
    built.write_bytes(data[:100])  # truncated: its checksum no longer holds
    assert products.verify(built.parent) is not None
    monkeypatch.setattr(native, "_state", None)
    again, why = native._decide()
    assert again is not None, why
    assert products.verify(built.parent) is None  # rebuilt in place


def test_where_it_cannot_be_built_launches_go_through_cuda_bindings(tmp_path, monkeypatch):
    real_compiler = native._compiler
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native, "_state", None)
    monkeypatch.setattr(native, "_compiler", lambda: None)
    _config.reload()
    try:
        assert native.bind(1, [""], "e", None) is None
        assert native.status() == "cuda-bindings (no C compiler (set CC))"
        monkeypatch.setattr(native, "_state", None)
        monkeypatch.setenv("KERNELKIT_NATIVE_LAUNCH", "0")
        _config.reload()
        assert native.status() == "cuda-bindings (KERNELKIT_NATIVE_LAUNCH=0)"
        monkeypatch.setattr(native, "_state", None)
        monkeypatch.setenv("KERNELKIT_NATIVE_LAUNCH", "1")
        monkeypatch.setenv("KERNELKIT_CACHE", "0")
        _config.reload()
        assert "no disk cache" in native.status()
        monkeypatch.setattr(native, "_state", None)
        monkeypatch.setattr(native, "_compiler", real_compiler)
        monkeypatch.setenv("KERNELKIT_CACHE", "1")
        _config.reload()
        disk.current().write_error = "simulated: read-only"  # built nowhere, not per process
        assert native.status() == (
            "cuda-bindings (the disk cache could not keep it (not writable?))"
        )
    finally:
        monkeypatch.undo()
        _config.reload()
