"""The command line's messages (issue 24, item 14): one-line errors instead of tracebacks, a
closed pipe, misspelt ops, precompile's archs, a wrong bundle path, progress bars only on a
terminal, and ``kernelkit tune export|import``."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import warnings

import pytest
from test_cache_support import SRC, FakeBackend, cache_dir, make_request, worker_env  # noqa: F401
from test_tune_db import ENV, rec

from kernelkit import _config
from kernelkit._cache import bundles, clear_memory, compile_cached
from kernelkit._select.tuning import db as tdb
from kernelkit._workflows import precompile
from kernelkit.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "softmax", "--dims", "64x64", "--device", "cuda"],
        ["tune", "matmul", "--dims", "4x4x4", "--device", "cuda", "--no-database", "--quiet"],
    ],
)
def test_device_cuda_without_a_cuda_torch_is_one_line(monkeypatch, capsys, argv) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a CUDA build of torch" in err, err


def test_a_closed_pipe_ends_the_command_quietly(cache_dir) -> None:  # noqa: F811
    compile_cached(FakeBackend(), make_request(0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kernelkit", "cache", "list"],
        env=worker_env(cache_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # type: ignore[union-attr]  # as `| head` does once it has its lines
    err = proc.stderr.read()  # type: ignore[union-attr]
    assert proc.wait(timeout=120) == 141
    assert "BrokenPipeError" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", ["tune", "explain"])
def test_a_misspelt_op_names_the_ops(capsys, command) -> None:
    assert main([command, "matmull", "--dims", "4x4x4"]) == 2
    err = capsys.readouterr().err
    assert "No such file" not in err and "did you mean matmul" in err and "softmax" in err


def test_precompile_for_an_unknown_arch_lists_the_valid_ones(tmp_path, capsys) -> None:
    module = tmp_path / "decl.py"
    module.write_text(
        "import kernelkit\n"
        'k = kernelkit.kernel("pc", ["x"], ["y"], "uint i = threadIdx.x; y[i] = x[i];")\n'
        'k.precompile(["float32"], ["float32"])\n'
    )
    out = tmp_path / "out.kkb"
    assert main(["precompile", str(module), "--arch", "cpu", "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("[precompile]") == 1 and "valid archs" in err, err
    assert f"{platform.machine()} (cpu)" in err and not out.exists()


def test_no_progress_bar_when_stderr_is_not_a_terminal(monkeypatch, capsys) -> None:
    built = precompile.BuiltEntry("0" * 64, b"", "x")
    monkeypatch.setattr(precompile, "_build_one", lambda decl, arch: built)
    assert precompile.build_entries([object()], ["a", "b"], progress=True) == [built, built]  # type: ignore[list-item]
    assert capsys.readouterr().err == ""


def test_a_wrong_bundle_path_warns_at_the_first_kernel(cache_dir, monkeypatch, tmp_path) -> None:  # noqa: F811
    compile_cached(FakeBackend(), make_request(0))  # on disk now: the next process hits it there
    monkeypatch.setenv("KERNELKIT_BUNDLE_PATH", str(tmp_path / "missing.kkb"))
    _config.reload()
    clear_memory()
    bundles.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile_cached(FakeBackend(), make_request(0))
    assert any("KERNELKIT_BUNDLE_PATH" in str(w.message) for w in caught)


def test_tune_export_and_import(cache_dir, tmp_path, monkeypatch, capsys) -> None:  # noqa: F811
    tdb._current = None
    assert tdb.current_db().put(rec(0)) and tdb.current_db().put(rec(1))
    export = tmp_path / "records.json"
    assert main(["tune", "export", str(export)]) == 0
    assert len(json.loads(export.read_text())["records"]) == 2
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "other"))
    _config.reload()
    tdb._current = None
    monkeypatch.setattr(tdb, "current_environments", lambda: [])  # ENV is another machine's
    capsys.readouterr()
    assert main(["tune", "import", str(export)]) == 1
    err = capsys.readouterr().err
    assert err.count("refused:") == 2 and "--any-env" in err
    assert main(["tune", "import", str(export), "--any-env"]) == 0
    assert "imported 2 record(s)" in capsys.readouterr().out
    assert len(tdb.current_db().records(ENV)) == 2
    tdb._current = None
