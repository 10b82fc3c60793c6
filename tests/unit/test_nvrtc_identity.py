"""NVRTC's identity for the cache key without loading NVRTC (issue 26): recorded beside the
disk cache on first use, trusted while the library file and its environment are the same,
discarded (with a warning) when damaged."""

from __future__ import annotations

import json
import os

import pytest

from kernelkit import _config
from kernelkit._backends.cuda import nvrtc, nvrtc_identity


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELKIT_CACHE", "1")
    _config.reload()
    nvrtc_identity._facts.cache_clear()
    lib = tmp_path / "libnvrtc.so.13"
    lib.write_bytes(b"\0" * 10)
    asked = {"n": 0}

    def version():
        asked["n"] += 1
        return (13, 5)

    monkeypatch.setattr(nvrtc, "version", version)
    monkeypatch.setattr(nvrtc, "supported_archs", lambda: (75, 80, 90))
    monkeypatch.setattr(nvrtc, "library_path", lambda: str(lib))
    yield tmp_path, lib, asked
    nvrtc_identity._facts.cache_clear()
    _config.reload()


def _again():
    nvrtc_identity._facts.cache_clear()  # a new process
    return nvrtc_identity.version(), nvrtc_identity.supported_archs()


def test_a_second_process_reads_the_record_without_asking_nvrtc(fresh):
    tmp, _, asked = fresh
    assert _again() == ((13, 5), (75, 80, 90)) and asked["n"] == 1
    assert (tmp / nvrtc_identity.RECORD).is_file()
    assert _again() == ((13, 5), (75, 80, 90)) and asked["n"] == 1  # not asked again


def test_a_changed_library_file_asks_nvrtc_again(fresh):
    _, lib, asked = fresh
    _again()
    lib.write_bytes(b"\0" * 11)  # another size: another library
    _again()
    assert asked["n"] == 2
    os.utime(lib, ns=(1, 1))  # another mtime
    _again()
    assert asked["n"] == 3


def test_a_changed_environment_asks_nvrtc_again(fresh, monkeypatch):
    _, _, asked = fresh
    _again()
    monkeypatch.setenv("LD_LIBRARY_PATH", "/somewhere/else")
    _again()
    assert asked["n"] == 2


@pytest.mark.parametrize(
    "damage",
    [b"{not json", b"[]", json.dumps({"schema": 1, "version": [13, "5"]}).encode(), b"x" * 70000],
)
def test_a_damaged_record_is_discarded_with_a_warning_and_rebuilt(fresh, damage):
    tmp, _, asked = fresh
    _again()
    (tmp / nvrtc_identity.RECORD).write_bytes(damage)
    with pytest.warns(UserWarning, match="discarding"):
        assert _again() == ((13, 5), (75, 80, 90))
    assert asked["n"] == 2
    assert _again() and asked["n"] == 2  # rebuilt


def test_a_record_that_is_a_symlink_is_not_followed(fresh):
    tmp, _, asked = fresh
    _again()
    record = tmp / nvrtc_identity.RECORD
    target = tmp / "elsewhere.json"
    record.rename(target)
    record.symlink_to(target)
    with pytest.warns(UserWarning, match="discarding"):
        _again()
    assert asked["n"] == 2


def test_the_cuda_backend_takes_its_key_identity_from_the_record(fresh):
    from kernelkit._backends.cuda import CUDABackend

    _again()
    assert CUDABackend().compiler_identity() == "nvrtc-13.5"
    assert CUDABackend.arch_for(90) == "sm_90" and fresh[2]["n"] == 1


def test_version_macros_come_from_the_headers_without_loading_nvrtc(monkeypatch):
    # rendering a cached kernel reads CUDA_VERSION from cuda.h: asking NVRTC for its version
    # there loaded the library on every warm start (63 ms of a 95 ms first call on an H100)
    if nvrtc._find_header("cuda.h") is None:
        pytest.skip("no CUDA headers here")

    def refuse():
        raise AssertionError("nvrtc.version() called: NVRTC would be loaded")

    monkeypatch.setattr(nvrtc, "version", refuse)
    nvrtc.version_macros.cache_clear()
    try:
        macros = nvrtc.version_macros()
    finally:
        nvrtc.version_macros.cache_clear()
    assert macros[0].startswith("-DCUDA_VERSION=") and macros[1].startswith("-DCUDART_VERSION=")


def test_version_define_is_read_from_the_head_then_the_rest(tmp_path):
    # a cold first call read all of cuda.h (1.2 MB, ~4 ms) for one line near its top
    head = tmp_path / "head.h"
    head.write_text("#define CUDA_VERSION 13050\n" + "// filler\n" * 200_000)
    far = tmp_path / "far.h"
    far.write_text("// filler\n" * 20_000 + "#define CUDA_VERSION 12080\n")
    m_head, m_far = nvrtc._define(head, "CUDA_VERSION"), nvrtc._define(far, "CUDA_VERSION")
    assert m_head is not None and m_head.group(1) == "13050"
    assert m_far is not None and m_far.group(1) == "12080"
    assert nvrtc._define(far, "CUDART_VERSION") is None
