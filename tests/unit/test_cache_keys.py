"""Cache keys: every invalidation axis misses, equal requests hit (STYLE.md 7)."""

from __future__ import annotations

import dataclasses

import pytest
from test_cache_support import FakeBackend, cache_dir, expected, make_request  # noqa: F401

from kernelkit._cache import cache_stats, clear_memory, compile_cached, keys
from kernelkit._records import CompileRequest

CHANGED = {
    "backend": "fake2",
    "kernel": "renamed",
    "entry": "kk_other",
    "arch": "fake65",
    "source": "// kernel 0\nout[i] = expf(inp[i]) + 1;\n",
    "options": ("-O3", "-std=c++17"),
    "headers": (("kk.h", "cd" * 32),),
    "param_kinds": ("array", "scalar"),
}


def test_every_request_field_has_a_changed_value_here() -> None:
    # A new CompileRequest field must join the key (and this table) before it can ship.
    assert set(CHANGED) == {f.name for f in dataclasses.fields(CompileRequest)}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_changing_a_request_field_changes_the_key(field: str) -> None:
    base = make_request(0)
    changed = dataclasses.replace(base, **{field: CHANGED[field]})
    assert keys.cache_key(base, "cc 1").digest != keys.cache_key(changed, "cc 1").digest


def test_option_order_and_header_digest_matter() -> None:
    base = make_request(0)
    swapped = dataclasses.replace(base, options=tuple(reversed(base.options)))
    assert keys.cache_key(base, "cc").digest != keys.cache_key(swapped, "cc").digest
    more = dataclasses.replace(base, headers=(*base.headers, ("extra.h", "00" * 32)))
    assert keys.cache_key(base, "cc").digest != keys.cache_key(more, "cc").digest


def test_compiler_identity_and_backend_version_change_the_key() -> None:
    r = make_request(0)
    assert keys.cache_key(r, "g++ 12").digest != keys.cache_key(r, "g++ 13").digest
    assert keys.cache_key(r, "cc", "1").digest != keys.cache_key(r, "cc", "2").digest


def test_kernelkit_version_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    r = make_request(0)
    before = keys.cache_key(r, "cc").digest
    monkeypatch.setattr(keys, "__version__", "99.0.0")
    assert keys.cache_key(r, "cc").digest != before


def test_schema_version_changes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    r = make_request(0)
    before = keys.cache_key(r, "cc").digest
    monkeypatch.setattr(keys, "KEY_SCHEMA_VERSION", keys.KEY_SCHEMA_VERSION + 1)
    assert keys.cache_key(r, "cc").digest != before


def test_parts_do_not_run_into_each_other() -> None:
    a = make_request(0, options=("-Da", "b"))
    b = make_request(0, options=("-Da\x00b",))
    assert keys.cache_key(a, "cc").digest != keys.cache_key(b, "cc").digest


def test_equal_requests_have_equal_keys_and_parts() -> None:
    a, b = make_request(3), make_request(3)
    assert a is not b
    ka, kb = keys.cache_key(a, "cc"), keys.cache_key(b, "cc")
    assert ka == kb
    assert [label for label, _ in ka.parts][:2] == ["schema", "kernelkit"]
    assert "source: " in ka.describe()


def test_key_digest_is_stable_across_processes() -> None:
    import subprocess
    import sys

    from test_cache_support import SRC

    code = (
        "from test_cache_support import make_request; from kernelkit._cache import keys; "
        "print(keys.cache_key(make_request(1), 'cc').digest)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={
            "PYTHONPATH": f"{SRC}:{__file__.rsplit('/', 1)[0]}",
            "PYTHONHASHSEED": "123",
            "PATH": "/usr/bin:/bin",
        },
    )
    assert out.stdout.strip() == keys.cache_key(make_request(1), "cc").digest


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_changed_field_misses_the_disk_cache(cache_dir, field: str) -> None:  # noqa: F811
    backend = FakeBackend()
    compile_cached(backend, make_request(0))
    clear_memory()
    changed = dataclasses.replace(make_request(0), **{field: CHANGED[field]})
    assert compile_cached(backend, changed) == expected(changed)
    assert backend.compiles == 2
    assert cache_stats()["disk_hits"] == 0


def test_a_changed_compiler_misses_the_disk_cache(cache_dir) -> None:  # noqa: F811
    compile_cached(FakeBackend("cc 1"), make_request(0))
    clear_memory()
    newer = FakeBackend("cc 2")
    compile_cached(newer, make_request(0))
    assert newer.compiles == 1


def test_an_equal_request_hits_memory_then_disk(cache_dir) -> None:  # noqa: F811
    backend = FakeBackend()
    first = compile_cached(backend, make_request(5))
    assert compile_cached(backend, make_request(5)) is first
    clear_memory()
    again = compile_cached(backend, make_request(5))
    assert again == first and again.metadata == first.metadata and again.log == first.log
    assert backend.compiles == 1
    s = cache_stats()
    assert (s["memory_hits"], s["disk_hits"], s["compiles"], s["writes"]) == (1, 1, 1, 1)
