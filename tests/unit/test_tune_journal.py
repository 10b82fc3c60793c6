"""A tune-spec run's journal (results stored as they arrive, read back by a rerun) read as
untrusted data; the spec's Ray fields checked; Ray optional (no device needed)."""

from __future__ import annotations

import json
import os
import sys
import warnings

import numpy as np
import pytest

from kernelkit._select.tuning.records import Environment
from kernelkit._workflows.tune import load_spec
from kernelkit._workflows.tune_journal import Journal
from kernelkit._workflows.tune_tasks import Measured, Measurement

ENV = Environment("0.1.0", "cpu", "host", "x86_64", 0, "g++ 12")
KEY = (("x.shape[0]:pow2", "1024"),)


def _ok(value: float) -> Measured:
    out = (np.full(4, value, np.float32),)
    return Measured("ok", 1e-5, "runs", out, KEY, ENV, "node a")


def test_results_round_trip_and_judged_ones_drop_their_outputs(tmp_path):
    j = Journal(tmp_path)
    a, b = Measurement(0, 0), Measurement(0, 1, "H100")
    j.store(a, _ok(1.0))
    j.store(b, Measured.failure("worker died (exit code -4)"))
    got = j.load(a)
    assert got == _ok(1.0) and np.array_equal(got.outputs[0], np.full(4, 1.0, np.float32))
    assert j.load(b) == Measured.failure("worker died (exit code -4)")  # c1 is not c0's
    assert j.load(Measurement(1, 0)) is None
    j.store(a, got.verdict("rejected", "differs"))
    assert j.load(a).status == "rejected" and j.load(a).outputs is None
    assert sorted(os.listdir(tmp_path)) == ["H100.s0.c1.json", "any.s0.c0.json"]


@pytest.mark.parametrize(
    "damage",
    ["not json", "wrong field", "bad status", "truncated outputs", "fifo"],
)
def test_a_damaged_result_is_warned_about_deleted_and_measured_again(tmp_path, damage):
    j = Journal(tmp_path)
    m = Measurement(2, 3)
    j.store(m, _ok(2.0))
    path, outputs = tmp_path / "any.s2.c3.json", tmp_path / "any.s2.c3.npz"
    d = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{")
    elif damage == "wrong field":
        path.write_text(json.dumps({**d, "extra": 1}))
    elif damage == "bad status":
        path.write_text(json.dumps({**d, "status": "great"}))
    elif damage == "truncated outputs":
        outputs.write_bytes(outputs.read_bytes()[:40])
    else:
        path.unlink()
        os.mkfifo(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert j.load(m) is None
    assert any("measured again" in str(w.message) for w in caught)
    assert not path.exists() and not outputs.exists()


def test_no_journal_without_a_database_folder():
    j = Journal(None)
    j.store(Measurement(0, 0), _ok(1.0))
    assert j.load(Measurement(0, 0)) is None


def _write_spec(tmp_path, **extra):
    spec = {"module": "k.py", "object": "k", "shapes": [{}], **extra}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def test_spec_ray_fields_are_checked(tmp_path):
    s = load_spec(_write_spec(tmp_path, device_kinds=["H100", "A100-80G"], retries=1))
    assert s.device_kinds == ("H100", "A100-80G") and s.retries == 1
    for bad in ({"device_kinds": "H100"}, {"device_kinds": ["H100", "H100"]}, {"retries": -1}):
        with pytest.raises(ValueError, match=r"device_kinds|retries"):
            load_spec(_write_spec(tmp_path, **bad))
    s = load_spec(_write_spec(tmp_path, output={"table": "tables/", "export": "r.json"}))
    assert s.table == f"{tmp_path}/tables/" and s.export == str(tmp_path / "r.json")


def test_ray_is_optional_and_named_when_missing(tmp_path, monkeypatch, capsys, own_tuning_db):
    # (that importing kernelkit imports no ray: test_public_api's test_import_is_light)
    (tmp_path / "k.py").write_text(
        "import kernelkit\n"
        "kk = kernelkit.kernel('opt_ray', ['x'], ['y'], 'y[0] = x[0] * V;')\n"
        "k = kernelkit.autotune(kk, configs=[{'V': 1}], key=[], grid=(1,))\n"
    )
    spec = _write_spec(tmp_path, backend="cpu")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    from kernelkit.cli import main

    assert main(["tune", str(spec), "--ray", "--quiet", "--no-database"]) == 2
    assert "pip install kernelkit[ray]" in capsys.readouterr().err


def test_a_kinds_table_rows_name_the_kind_only_when_the_device_name_holds_it():
    from kernelkit._workflows.tune_run import _device_name

    assert _device_name("H100", "NVIDIA H100 80GB HBM3") == "H100"
    assert _device_name("A100-80G", "NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"
    assert _device_name(None, "NVIDIA H100 80GB HBM3") is None
