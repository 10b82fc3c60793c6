"""Which bundle entry serves a request (issue 7, item 5), with a fake backend: an entry whose key
differs only in parts the backend declares portable for its kind is served; a miss where a
bundle holds the kernel says once which part differed; an entry the backend cannot load is
dropped and compiled."""

from __future__ import annotations

import dataclasses
import json
import warnings
import zipfile
from pathlib import Path
from types import MappingProxyType

import pytest
from test_cache_support import FakeBackend, cache_dir, expected, make_request  # noqa: F401

import kernelkit
from kernelkit._cache import (
    bundles,
    cache_stats,
    clear_memory,
    compile_cached,
    entry,
    keys,
    recompile_refused,
)
from kernelkit._errors import BackendError

BUILD_IDENTITY = "fakecc 13.5"  # the CI machine that builds the bundle
NODE_IDENTITY = "fakecc 13.0"  # the node that uses it


class Portable(FakeBackend):
    """A backend whose "so" artifacts do not depend on the compiler or the headers once built."""

    bundle_portable_parts = MappingProxyType({"so": frozenset({"compiler", "headers"})})


def _bundle(path: Path, requests, identity: str = BUILD_IDENTITY) -> Path:
    pairs = []
    for r in requests:
        key = keys.cache_key(r, identity, "1")
        pairs.append((key.digest, entry.encode(key, r.kernel, r.backend, expected(r))))
    bundles.write_bundle(path, pairs)
    return path


def test_the_manifest_holds_each_keys_labelled_parts(tmp_path) -> None:
    r = make_request(0)
    path = _bundle(tmp_path / "b.kkb", [r])
    with zipfile.ZipFile(path) as zf:
        (item,) = json.loads(zf.read("manifest.json"))["entries"]
    assert [tuple(p) for p in item["parts"]] == list(keys.cache_key(r, BUILD_IDENTITY, "1").parts)


def test_a_bundle_from_another_compiler_serves_a_portable_kind(cache_dir, tmp_path) -> None:  # noqa: F811
    kernelkit.add_bundle(_bundle(tmp_path / "b.kkb", [make_request(0), make_request(1)]))
    node = Portable(NODE_IDENTITY)
    here = dataclasses.replace(make_request(0), headers=(("kk.h", "cd" * 32),))  # node's headers
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compile_cached(node, here)
    assert got == expected(make_request(0)) and node.compiles == 0
    assert cache_stats()["bundle_hits"] == 1  # before the fix: 0 hits, 1 compile, silently


def test_the_exact_key_is_still_served_first(cache_dir, tmp_path) -> None:  # noqa: F811
    r = make_request(0)
    exact = dataclasses.replace(expected(r), log="the exact one")
    other = keys.cache_key(r, BUILD_IDENTITY, "1")
    mine = keys.cache_key(r, NODE_IDENTITY, "1")
    bundles.write_bundle(
        tmp_path / "b.kkb",
        [
            (other.digest, entry.encode(other, r.kernel, r.backend, expected(r))),
            (mine.digest, entry.encode(mine, r.kernel, r.backend, exact)),
        ],
    )
    kernelkit.add_bundle(tmp_path / "b.kkb")
    assert compile_cached(Portable(NODE_IDENTITY), r).log == "the exact one"


def test_without_a_declaration_only_exact_keys_serve_and_the_miss_is_named(
    cache_dir,  # noqa: F811
    tmp_path,
) -> None:
    kernelkit.add_bundle(_bundle(tmp_path / "b.kkb", [make_request(0)]))
    node = FakeBackend(NODE_IDENTITY)
    with pytest.warns(RuntimeWarning, match="differs in compiler") as caught:
        compile_cached(node, make_request(0))
    (w,) = [w for w in caught if "bundle" in str(w.message)]
    message = str(w.message)
    assert "[k0]" in message and "'fakecc 13.5' there, 'fakecc 13.0' here" in message
    assert node.compiles == 1 and cache_stats()["bundle_hits"] == 0


@pytest.mark.parametrize(
    ("field", "value", "label"),
    [
        ("source", "// other\n", "source"),
        ("arch", "fake65", "arch"),
        ("options", ("-O3",), "options"),
    ],
)
def test_a_part_that_is_not_portable_must_match(cache_dir, tmp_path, field, value, label) -> None:  # noqa: F811
    kernelkit.add_bundle(_bundle(tmp_path / "b.kkb", [make_request(0)]))
    node = Portable(NODE_IDENTITY)
    with pytest.warns(RuntimeWarning, match=f"differs in {label} "):
        compile_cached(node, dataclasses.replace(make_request(0), **{field: value}))
    assert node.compiles == 1 and cache_stats()["bundle_hits"] == 0


def test_a_miss_is_explained_once_per_kernel_and_only_for_bundled_kernels(
    cache_dir,  # noqa: F811
    tmp_path,
) -> None:
    kernelkit.add_bundle(_bundle(tmp_path / "b.kkb", [make_request(0)]))
    node = Portable(NODE_IDENTITY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for arch in ("fake65", "fake66"):
            compile_cached(node, dataclasses.replace(make_request(0), arch=arch))
        compile_cached(node, make_request(5))  # a kernel no bundle holds: nothing to say
    assert len([w for w in caught if "none serves" in str(w.message)]) == 1
    assert node.compiles == 3


def test_an_entry_the_backend_cannot_load_is_dropped_and_compiled(cache_dir, tmp_path) -> None:  # noqa: F811
    kernelkit.add_bundle(_bundle(tmp_path / "b.kkb", [make_request(0)]))
    node = Portable(NODE_IDENTITY)
    served = compile_cached(node, make_request(0))
    assert node.compiles == 0
    refused = BackendError("[backend fake] cuModuleLoadData failed: CUDA_ERROR_NO_BINARY_FOR_GPU")
    with pytest.warns(RuntimeWarning, match="could not be loaded .*NO_BINARY_FOR_GPU") as caught:
        fresh = recompile_refused(node, make_request(0), served, refused)
    assert "compiler fakecc 13.5" in str(caught[0].message)
    assert node.compiles == 1 and fresh == expected(make_request(0))
    assert compile_cached(node, make_request(0)) is fresh  # memory now holds the compiled one
    clear_memory()
    compile_cached(node, make_request(0))  # from the disk cache, not the refused bundle entry
    assert cache_stats()["bundle_hits"] == 1 and cache_stats()["disk_hits"] == 1


def test_a_load_failure_of_an_artifact_compiled_here_is_raised(cache_dir) -> None:  # noqa: F811
    node = Portable(NODE_IDENTITY)
    art = compile_cached(node, make_request(0))
    error = BackendError("[backend fake] load failed")
    with pytest.raises(BackendError, match="load failed"):
        recompile_refused(node, make_request(0), art, error)
    assert node.compiles == 1


def test_the_portable_digest_never_equals_an_exact_one() -> None:
    parts = keys.cache_key(make_request(0), "cc").parts
    assert keys.portable_digest(parts, frozenset()) != keys.digest_of(parts)
    a = keys.portable_digest(parts, frozenset({"compiler"}))
    b = keys.portable_digest(
        keys.cache_key(make_request(0), "other cc").parts, frozenset({"compiler"})
    )
    assert a == b and a != keys.portable_digest(parts, frozenset({"compiler", "headers"}))
