"""One atomic writer (issue 27): every file kernelkit publishes (cache entries, bundles,
statistics, tuning records and exports, tables, the NVRTC identity record) goes through
``_cache.files.atomic_writer``; no other module renames a temp file into place. (A product
directory is published by ``products.build_into``'s one directory rename.)"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import kernelkit
from kernelkit._cache import files

SRC = Path(kernelkit.__file__).parent
ALLOWED = {("_cache/files.py", "replace"), ("_cache/products.py", "rename")}


def test_only_the_atomic_writer_renames_files_into_place():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("replace", "rename")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
                and (rel, node.attr) not in ALLOWED
            ):
                found.append(f"{rel}:{node.lineno} os.{node.attr}")
    assert not found, f"files published outside _cache/files.atomic_writer: {found}"


def test_the_writer_publishes_whole_files_and_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b" / "record.json"
    files.write_atomic(target, b"first")
    files.write_atomic(target, b"second")
    assert target.read_bytes() == b"second"
    assert os.stat(target.parent).st_mode & 0o777 == 0o755
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"]

    def fail(fd: int, data: bytes) -> None:
        os.write(fd, data[:2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_all", fail)
    with pytest.raises(OSError, match="No space"):
        files.write_atomic(target, b"third")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["record.json"]
