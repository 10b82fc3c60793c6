"""Hostile and damaged cache files (issue 24, items 5, 6 and 13): a FIFO or ``/dev/zero`` where an
entry should be never hangs or exhausts memory, a garbled checksum list is a rebuild, and a cache
directory, entry or build product that another user could have written is not trusted."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from test_cache_products import Builder
from test_cache_support import (  # noqa: F401
    SRC,
    FakeBackend,
    cache_dir,
    expected,
    make_request,
    worker_env,
)

from kernelkit import _config
from kernelkit._cache import clear_memory, compile_cached, disk, files, products
from kernelkit._cache.keys import cache_key
from kernelkit._cache.lookup import get_product
from kernelkit.cli import main

_AS_LIMIT_BYTES = 1 << 30  # an unbounded read of /dev/zero dies here instead of taking the host


def _entry_path(root: Path, i: int = 0) -> Path:
    key = cache_key(make_request(i), FakeBackend().identity, FakeBackend.version)
    return root / "entries" / f"{key.digest}{disk.SUFFIX}"


def _child(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child with cache ``root``, 1 GiB of address space and 60 s."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (_AS_LIMIT_BYTES, _AS_LIMIT_BYTES))

    prelude = f"import sys; sys.path[:0] = [{str(SRC)!r}, {str(Path(__file__).parent)!r}]\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=worker_env(root),
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )


COMPILE = """
import warnings
from test_cache_support import FakeBackend, expected, make_request
from kernelkit._cache import compile_cached
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert compile_cached(FakeBackend(), make_request(0)) == expected(make_request(0))
print("|".join(str(w.message) for w in caught))
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_an_entry_that_is_not_a_regular_file_is_compiled_again(tmp_path, kind) -> None:
    root = tmp_path / "kkcache"
    path = _entry_path(root)
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)  # open() of it blocks for ever without O_NONBLOCK
    else:
        path.symlink_to("/dev/zero")  # an unbounded read fills memory
    try:
        done = _child(root, COMPILE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"compiling over a {kind} entry hung")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "not a regular file" in done.stdout and "compiled again" in done.stdout
    assert path.is_file() and not path.is_symlink()  # replaced by a real entry


def test_cache_commands_report_special_files_without_hanging(tmp_path) -> None:
    root = tmp_path / "kkcache"
    fifo, zero = _entry_path(root, 0), _entry_path(root, 1)
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    zero.symlink_to("/dev/zero")
    os.mkfifo(root / "stats.json")
    code = (
        "from kernelkit.cli import main\n"
        f"assert main(['cache', 'export', '-o', {str(tmp_path / 'b.kkb')!r}]) == 0\n"
        "assert main(['cache', 'info']) == 0 and main(['cache', 'list']) == 0\n"
        "raise SystemExit(main(['cache', 'verify']))"
    )
    try:
        done = _child(root, code)
    except subprocess.TimeoutExpired:
        pytest.fail("a kernelkit cache command hung on a FIFO")
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stdout.count("not a regular file") == 2, done.stdout
    assert not fifo.exists() and not zero.is_symlink()  # removed (the link, not /dev/zero)


def test_a_bundle_path_that_is_a_fifo_warns(tmp_path) -> None:
    root = tmp_path / "kkcache"
    os.mkfifo(tmp_path / "b.kkb")
    env = f"import os; os.environ['KERNELKIT_BUNDLE_PATH'] = {str(tmp_path / 'b.kkb')!r}\n"
    try:
        done = _child(root, env + COMPILE)
    except subprocess.TimeoutExpired:
        pytest.fail("opening a FIFO named as a bundle hung")
    assert done.returncode == 0 and "not a regular file" in done.stdout, done.stderr[-2000:]


def test_an_entry_larger_than_the_cap_is_not_read(cache_dir, monkeypatch) -> None:  # noqa: F811
    path = _entry_path(cache_dir)
    path.parent.mkdir(parents=True)
    with open(path, "wb") as f:
        f.truncate(1 << 40)  # sparse: a terabyte that costs no disk
    monkeypatch.setattr(disk.DiskCache, "read_bytes", _no_large_reads(disk.DiskCache.read_bytes))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compile_cached(FakeBackend(), make_request(0)) == expected(make_request(0))
    assert any("larger than" in str(w.message) for w in caught)


def _no_large_reads(read):
    def checked(self, path):
        real = os.read

        def small(fd: int, n: int) -> bytes:
            assert n <= 1 << 31, "read the whole entry"
            return real(fd, n)

        os.read = small
        try:
            return read(self, path)
        finally:
            os.read = real

    return checked


# item 6: a checksum list that does not decode ------------------------------------------------


@pytest.mark.parametrize("garbage", [b"\xff\xfe not utf-8\n", b"\x00" * 64, b"a b\n" * 3])
def test_a_garbled_checksum_list_is_a_rebuild(cache_dir, capsys, garbage) -> None:  # noqa: F811
    build = Builder()
    got = get_product("cpu-pch", "p1", build)
    (got / products.SUMS).write_bytes(garbage)
    assert products.verify(got) is not None
    assert main(["cache", "verify", "--keep"]) == 1
    out = capsys.readouterr()
    assert "build product" in out.out and "Traceback" not in out.err
    assert get_product("cpu-pch", "p1", build) == got and build.calls == 2
    assert products.verify(got) is None


# item 13: what another user could have written -----------------------------------------------


def test_a_file_planted_in_a_product_is_a_rebuild(cache_dir, capsys) -> None:  # noqa: F811
    build = Builder()
    got = get_product("cpu-pch", "p1", build)
    (got / "kk_cpu.h").write_text("__attribute__((constructor)) void planted() {}\n")
    assert "kk_cpu.h" in str(products.verify(got))
    assert main(["cache", "verify", "--keep"]) == 1
    assert "does not name: kk_cpu.h" in capsys.readouterr().out
    assert get_product("cpu-pch", "p1", build) == got and build.calls == 2
    assert not (got / "kk_cpu.h").exists()


def _memory_only_warning(root: Path) -> list[str]:
    disk._current = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compile_cached(FakeBackend(), make_request(0)) == expected(make_request(0))
    return [str(w.message) for w in caught]


def test_a_cache_dir_writable_by_others_is_not_used(cache_dir, monkeypatch, capsys) -> None:  # noqa: F811
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o777)
    messages = _memory_only_warning(cache_dir)
    assert len(messages) == 1 and "writable by its group or others" in messages[0]
    assert "memory only" in messages[0] and not (cache_dir / "entries").exists()
    assert main(["cache", "verify", "--keep"]) == 1
    assert "writable by its group or others" in capsys.readouterr().out
    monkeypatch.setenv("KERNELKIT_CACHE_TRUST_SHARED", "1")
    _config.reload()
    clear_memory()
    messages = _memory_only_warning(cache_dir)  # accepted, with a warning
    assert len(messages) == 1 and "KERNELKIT_CACHE_TRUST_SHARED=1" in messages[0]
    assert _entry_path(cache_dir).is_file()


def test_a_cache_dir_of_another_user_is_not_used(cache_dir, monkeypatch) -> None:  # noqa: F811
    cache_dir.mkdir()
    if os.geteuid() == 0:
        os.chown(cache_dir, 4242, 4242)
    else:  # a file of this user, seen as another user sees it
        monkeypatch.setattr(files, "_uid", lambda: os.geteuid() + 4242)
    messages = _memory_only_warning(cache_dir)
    assert len(messages) == 1 and "owned by uid" in messages[0]
    assert not (cache_dir / "entries").exists()


@pytest.mark.parametrize("change", ["chmod", "chown"])
def test_an_entry_another_user_could_write_is_compiled_again(cache_dir, change) -> None:  # noqa: F811
    backend = FakeBackend()
    compile_cached(backend, make_request(0))
    path = _entry_path(cache_dir)
    if change == "chmod":
        os.chmod(path, 0o666)
    elif os.geteuid() == 0:
        os.chown(path, 4242, 4242)
    else:
        pytest.skip("changing a file's owner needs root")
    clear_memory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compile_cached(backend, make_request(0)) == expected(make_request(0))
    assert backend.compiles == 2
    assert any("not trusted" in str(w.message) for w in caught)
    st = path.stat()
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o644  # replaced by this user


def test_a_product_dir_writable_by_others_is_a_rebuild(cache_dir) -> None:  # noqa: F811
    build = Builder()
    got = get_product("cpu-pch", "p1", build)
    os.chmod(got, 0o777)
    assert "writable by its group or others" in str(products.verify(got))
    assert get_product("cpu-pch", "p1", build) == got and build.calls == 2
    assert got.stat().st_mode & 0o777 == 0o755


def test_what_kernelkit_makes_under_umask_002_is_trusted(cache_dir) -> None:  # noqa: F811
    old = os.umask(0o002)
    try:
        compile_cached(FakeBackend(), make_request(0))
        got = get_product("cpu-pch", "p1", Builder())
    finally:
        os.umask(old)
    made = [cache_dir, cache_dir / "entries", _entry_path(cache_dir), got.parent, got]
    made += list(got.iterdir())
    assert [p for p in made if files.distrust(p) is not None] == []
    assert main(["cache", "verify", "--keep"]) == 0
