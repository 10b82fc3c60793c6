"""NVRTC's identity for the cache key without loading NVRTC (issue 26): recorded beside the
disk cache on first use, trusted while the library file and its environment are the same,
discarded (with a warning) when damaged."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelkit import _config
from kernelkit._backends.cuda import nvrtc, nvrtc_identity


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELKIT_CACHE", "1")
    _config.reload()
    _clear()
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
    monkeypatch.undo()  # the real environment and NVRTC first: what is reloaded below reads them
    _clear()
    _config.reload()


def _clear():
    nvrtc_identity._facts.cache_clear()
    nvrtc_identity._recorded.cache_clear()


def _again():
    _clear()  # a new process
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
    [b"{not json", b"[]", json.dumps({"schema": 2, "version": [13, "5"]}).encode(), b"x" * 70000],
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
    assert nvrtc._define(head, "CUDA_VERSION") == "13050"
    assert nvrtc._define(far, "CUDA_VERSION") == "12080"
    assert nvrtc._define(far, "CUDART_VERSION") is None


def test_the_version_define_is_found_without_compiling_a_pattern(tmp_path):
    # two patterns compiled per fresh process: ~0.2 ms of a cold first call's render
    import re

    header = tmp_path / "cuda.h"
    header.write_text("/* CUDA */\n#define CUDA_VERSION 12080\n")

    def refuse(*args, **kwargs):
        raise AssertionError("a regular expression compiled")

    real = re._compile
    re._compile = refuse  # type: ignore[assignment]  # what re.compile and re.search call
    try:
        found = nvrtc._define(header, "CUDA_VERSION")
    finally:
        re._compile = real  # type: ignore[assignment]
    assert found == "12080"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (b"#define CUDA_VERSION 12080\n", "12080"),
        (b"#define\tCUDA_VERSION\t\t13050  \r\n", "13050"),  # tabs, trailing space, CRLF
        (b"#define CUDA_VERSION 13050", "13050"),  # the last line, without a newline
        (b"#if CUDA_VERSION >= 12000\n#define CUDA_VERSION 12040\n", "12040"),
        (b" #define CUDA_VERSION 12080\n", None),  # not at the start of its line
        (b"#define CUDA_VERSION_MAJOR 12\n", None),  # another macro
        (b"#define CUDA_VERSION (12000 + 80)\n", None),  # not a plain number
        (b"#define CUDA_VERSION 12080 // the release\n", None),
        (b"//#define CUDA_VERSION 11000\n#define CUDA_VERSION 12080\n", "12080"),
        (b"#defineCUDA_VERSION 12080\n", None),
    ],
)
def test_version_define_reads_only_a_plain_define_line(text, found):
    # read by byte search (a regular expression compiled for it cost the cold first call
    # ~0.2 ms), with what the pattern `^#define\s+MACRO\s+(\d+)\s*$` accepted
    assert nvrtc._define_value(text, "CUDA_VERSION") == found


_TOKENS = [b"#define", b"CUDA_VERSION", b"CUDA_VERSION_MAJOR", b"#if", b"12080", b"13", b"(12000",
           b"//", b"x", b"#", b"define"]  # fmt: skip
_GAPS = [b" ", b"\t", b"  ", b"\r", b"\x0b", b"\x0c", b""]
_LINE = st.lists(st.tuples(st.sampled_from(_TOKENS), st.sampled_from(_GAPS)), max_size=5).map(
    lambda parts: b"".join(t + g for t, g in parts)
)


def _line_by_line(text: bytes) -> str | None:
    """What ``_define_value`` promises, line by line: the first line that is "#define", the
    name and ASCII digits, with ASCII whitespace between and after, and nothing else."""
    ws = rb"[ \t\r\x0b\x0c]"
    pattern = re.compile(rb"#define" + ws + rb"+CUDA_VERSION" + ws + rb"+([0-9]+)" + ws + rb"*")
    for line in text.split(b"\n"):
        m = pattern.fullmatch(line)
        if m:
            return m.group(1).decode()
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINE, max_size=6))
def test_version_define_agrees_with_a_line_by_line_reading(lines):
    text = b"\n".join(lines)
    assert nvrtc._define_value(text, "CUDA_VERSION") == _line_by_line(text)


def test_include_dirs_come_from_the_record_without_cuda_pathfinder(fresh, monkeypatch):
    # a warm start imported cuda.pathfinder to find cuda.h for CUDA_VERSION: 35-75 ms of an
    # 87 ms first call on an H100 host (the rest of that call: 6 ms)
    tmp, _, _ = fresh
    found = {"n": 0}
    real = nvrtc.found_include_dirs

    def counting():
        found["n"] += 1
        return real() or (str(tmp),)

    monkeypatch.setattr(nvrtc, "found_include_dirs", counting)
    assert nvrtc_identity.include_dirs() and found["n"] == 1  # no record yet: found now
    _again()  # the record is written with them
    assert found["n"] == 2
    rec = json.loads((tmp / nvrtc_identity.RECORD).read_text())
    assert rec["schema"] == 2 and rec["include_dirs"] == list(counting())
    found["n"] = 0
    _clear()
    assert nvrtc_identity.include_dirs() == tuple(rec["include_dirs"]) and found["n"] == 0


@pytest.mark.parametrize("dirs", [["relative/dir"], "not a list", [3], ["/x"] * 17])
def test_recorded_include_dirs_are_checked(fresh, dirs):
    tmp, _, asked = fresh
    _again()
    path = tmp / nvrtc_identity.RECORD
    rec = json.loads(path.read_text())
    rec["include_dirs"] = dirs
    path.write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="discarding"):
        _again()
    assert asked["n"] == 2


def test_a_recorded_include_dir_that_went_away_is_found_again(fresh, monkeypatch):
    tmp, _, _ = fresh
    _again()
    path = tmp / nvrtc_identity.RECORD
    rec = json.loads(path.read_text())
    rec["include_dirs"] = [str(tmp / "gone")]
    path.write_text(json.dumps(rec))
    monkeypatch.setattr(nvrtc, "found_include_dirs", lambda: ("/found/now",))
    _clear()
    assert nvrtc_identity.include_dirs() == ("/found/now",)


def test_a_schema_1_record_is_discarded_and_rebuilt(fresh):
    tmp, _, asked = fresh
    _again()
    path = tmp / nvrtc_identity.RECORD
    rec = json.loads(path.read_text())
    rec["schema"] = 1
    del rec["include_dirs"]
    path.write_text(json.dumps(rec))
    with pytest.warns(UserWarning, match="discarding"):
        _again()
    assert asked["n"] == 2 and json.loads(path.read_text())["schema"] == 2
