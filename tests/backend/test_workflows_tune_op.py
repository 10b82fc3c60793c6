"""``kernelkit.tune_op`` and ``kernelkit tune OP --dims ...`` on the CPU backend (NumPy arrays and
torch CPU tensors): the winner is a config the op has, checked against a float64 reference; the
records replay in a fresh lookup without timing; the table written loads back, drives the
selection (explain says "table") and covers the key's bucket; damaged rows are passed over with
why; the command line end to end. Tiny shapes, two configs per implementation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import CPU_AVAILABLE

import kernelkit
from kernelkit import _config, ops
from kernelkit._select import tables
from kernelkit._select.decide import decide
from kernelkit._select.tables import Table
from kernelkit._select.tuning import db as tuning
from kernelkit._tune import timing
from kernelkit._workflows.op_cases import make_case, op_object
from kernelkit.cli import main

SRC = str(Path(kernelkit.__file__).parents[1])  # this checkout's, in child processes too

pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A private tuning database (the compile cache stays shared)."""
    store = tuning.TuningDB(tmp_path / "tuning")
    monkeypatch.setattr(tuning, "_current", (_config.config, store))
    return store


@pytest.fixture
def shipped(monkeypatch):
    """``install(path)`` makes the table at ``path`` the shipped tables (restored after)."""

    def install(path: Path | None) -> Table:
        t = Table.load([path] if path else [])
        monkeypatch.setattr(tables, "_shipped", t)
        for name in ("matmul", "softmax", "rms_norm", "layer_norm"):
            op_object(name).forget()
        return t

    yield install
    for name in ("matmul", "softmax", "rms_norm", "layer_norm"):
        op_object(name).forget()


def decision(op: str, dims: tuple, dtype="float32", framework=None, transpose_b=True):
    """What ``decide`` chooses (through the stores) for a problem, as the op's calls would."""
    sel = make_case(op, dims, dtype, framework=framework, transpose_b=transpose_b).explain()
    from kernelkit._backends import registry as _registry

    return decide(op_object(op), sel.problem, sel.target, _registry.get_backend("cpu"))


CASES = [
    ("softmax", "8x64,3x100", "float32", None, True),
    ("rms_norm", "4x32,2x48", "float32", "torch", True),
    ("matmul", "2x16x32,20x8x16", "float32", None, True),
    ("matmul", "3x8x16", "bfloat16", "torch", True),
    ("matmul", "5x8x16", "float32", None, False),  # b as [K, N]
]


@pytest.mark.parametrize(("op", "dims", "dtype", "framework", "transpose_b"), CASES)
def test_tune_op_stores_configs_that_exist_and_a_fresh_lookup_replays_them(
    db, monkeypatch, op, dims, dtype, framework, transpose_b
):
    t = kernelkit.tune_op(
        op, dims, dtype, framework=framework, transpose_b=transpose_b, limit=2, quiet=True
    )
    assert len(t.results) == len(dims.split(",")) and len(t.records) == len(t.results)
    the_op = op_object(op)
    for r in t.results:
        impl = the_op.get(r.record.impl)
        assert impl is not None and r.winner.impl == r.record.impl
        assert r.record.config in impl.configs or r.record.config == impl.default
        case = make_case(op, r_dims(r), dtype, framework=framework, transpose_b=transpose_b)
        assert r.record.key == r.key == the_op.key.of(case.explain().problem)
        statuses = {c.status for c in r.candidates}
        assert "ok" in statuses and statuses <= {"ok", "skipped"}, r.report()
        assert "*" in r.report()
    # a fresh database object on the same files, decisions forgotten: replayed, nothing timed
    monkeypatch.setattr(tuning, "_current", (_config.config, tuning.TuningDB(db.root)))
    the_op.forget()
    before = timing.count()
    for r in t.results:
        choice = decision(op, r_dims(r), dtype, framework, transpose_b)
        assert (choice.source, choice.impl, choice.config) == (
            "database",
            r.record.impl,
            r.record.config,
        )
    assert timing.count() == before


def r_dims(result) -> tuple[int, ...]:
    return tuple(int(d) for d in result.label.split()[0].split("x"))


def test_the_table_drives_the_selection_and_covers_the_bucket(db, shipped, tmp_path, capsys):
    t = kernelkit.tune_op("matmul", "3x8x16,20x8x16", limit=2, quiet=True, store=False)
    path = t.write_table(f"{tmp_path}/tables/")  # a folder: <op>.<device>.yaml
    target = t.results[0].target
    slug = "-".join("".join(c if c.isalnum() else " " for c in target.name.lower()).split())
    assert path == tmp_path / "tables" / f"matmul.{slug}.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc["op"] == "matmul" and doc["device"] == {"arch": target.arch, "name": target.name}
    assert [e["match"]["M"] for e in doc["entries"]] == [[3, 4], [17, 64]]  # the buckets
    loaded = shipped(path)
    assert loaded.problems == () and len(loaded.entries) == 2
    assert db.records() == []  # store=False: the choice below comes from the table
    for m, row in [(4, 0), (3, 0), (64, 1)]:
        choice = decision("matmul", (m, 8, 16))
        expected = loaded.entries[row]
        assert (choice.source, choice.impl, choice.config) == (
            "table",
            expected.impl,
            expected.config,
        )
    assert decision("matmul", (5, 8, 16)).source != "table"  # M = 5: another bucket
    assert main(["explain", "matmul", "--dims", "4x8x16"]) == 0
    out = capsys.readouterr().out
    assert "from table" in out and f"{path.name} entry 0" in out
    # the op itself runs the table's choice, correctly
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_allclose(ops.matmul(x, w, transpose_b=True), x @ w.T, rtol=1e-5, atol=1e-5)
    # tuning again updates the rows of the same buckets and keeps the others
    again = kernelkit.tune_op("matmul", "4x8x16,1x8x16", limit=1, quiet=True, store=False)
    again.write_table(path)
    ms = [e["match"]["M"] for e in yaml.safe_load(path.read_text())["entries"]]
    assert ms == [[17, 64], [3, 4], [1, 1]]


def test_damaged_table_rows_are_passed_over_with_why(db, shipped, tmp_path, capsys):
    sel = make_case("matmul", (20, 8, 16)).explain()
    match = dict(sel.choice.key)  # the key's labels as exact values: this problem only
    name = sel.target.name

    def row(impl: str, template: dict, threadgroup: int = 256, **device) -> dict:
        return {
            "device": {"arch": sel.target.arch, **device},
            "match": match,
            "impl": impl,
            "config": {"template": template, "threadgroup": [threadgroup]},
        }

    tiled = op_object("matmul").get("tiled").configs[1]
    good = dict(tiled.template)
    doc = {
        "kernelkit_table": 1,
        "op": "matmul",
        "entries": [
            row("matmul/splitk", {"BM": 16}, name=name),  # gone
            row("matmul/tiled", {**good, "BM": 48}, name=name),  # not one of tiled's configs
            row("matmul/tiled", {"BLOCK_M": 64}, name=name),  # a renamed template value
            row("matmul/gemv", {"ROWS": 1, "WARPS": 2, "U": 1}, 64, name=name),  # M = 20 > 16
            row("matmul/framework", {}, name=name),  # torch CUDA tensors only
            {"impl": "matmul/tiled", "match": "M"},  # malformed: skipped at load, warned
            row("matmul/tiled", good, tiled.threadgroup[0]),  # good, least specific
        ],
    }
    path = tmp_path / "matmul.damaged.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.warns(RuntimeWarning, match="entry 5"):
        shipped(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing warns at call time
        choice = decision("matmul", (20, 8, 16))
        assert (choice.source, choice.impl, choice.config) == ("table", "matmul/tiled", tiled)
        x = np.ones((20, 16), np.float32)
        y = ops.matmul(x, np.ones((8, 16), np.float32), transpose_b=True)
    assert np.array_equal(y, np.full((20, 8), 16.0, np.float32))
    assert main(["explain", "matmul", "--dims", "20x8x16"]) == 0
    out = capsys.readouterr().out
    assert "from table" in out and "entry 6" in out.splitlines()[0]
    for why in [
        "no implementation 'matmul/splitk'",
        "BM=48",
        "BLOCK_M=64",
        "M = 20 > 16",
        "only for torch CUDA tensors",
    ]:
        (line,) = [ln for ln in out.splitlines() if why in ln]
        assert "table" in line and "refused" in line, out


def test_tune_command_end_to_end(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {SRC!r})
        from kernelkit import _config
        from kernelkit._select.tuning import db
        db._current = (_config.config, db.TuningDB({str(tmp_path / "tuning")!r}))
        from kernelkit.cli import main
        sys.exit(main(sys.argv[1:]))
        """
    )

    def kernelkit_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )

    args = ["tune", "softmax,rms_norm", "--dims", "4x32,2x48", "--limit", "2", "--quiet"]
    args += ["--table", "tables/"]
    try:
        import matplotlib  # noqa: F401

        args += ["--plot", "times.png"]
    except ImportError:
        pass
    run = kernelkit_cli(*args)
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout
    assert run.stdout.count(" * ") == 4 and "record(s) stored" in run.stdout
    written = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert [n.split(".")[0] for n in written] == ["rms_norm", "softmax"]
    for p in (tmp_path / "tables").iterdir():
        assert Table.load([p]).validate() == []
    if "--plot" in args:
        assert (tmp_path / "times.softmax.png").stat().st_size > 1000
    explained = kernelkit_cli("explain", "softmax", "--dims", "3x32,2x48")
    assert explained.returncode == 0, explained.stderr[-3000:]
    assert explained.stdout.count("from database") == 2  # rows:pow2 = 4 covers 3 rows too
    bad = kernelkit_cli("tune", "matmul", "--dims", "4x4")
    assert bad.returncode == 2 and "MxNxK" in bad.stderr
    assert "needs --dims" in kernelkit_cli("tune", "softmax").stderr


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"op": "conv", "dims": "4x4"}, "unknown op 'conv'"),
        ({"op": "matmul", "dims": "4x4"}, "MxNxK"),
        ({"op": "softmax", "dims": "4xa"}, "ROWSxN"),
        ({"op": "softmax", "dims": "4x4", "dtype": "int8"}, "--dtype must name"),
        ({"op": "softmax", "dims": "4x4", "implementations": ["gemv"]}, "no implementation"),
        ({"op": "softmax", "dims": "4x4", "limit": 0}, "positive int"),
        ({"op": "softmax", "dims": "4x4", "framework": "numpy", "dtype": "bfloat16"}, "torch"),
    ],
)
def test_tune_op_refuses_bad_arguments_naming_them(db, kwargs, why):
    with pytest.raises(kernelkit.ArgumentError, match=why):
        kernelkit.tune_op(**kwargs, quiet=True)


def test_the_fastest_candidates_are_timed_again_before_one_is_recorded(db, monkeypatch):
    from kernelkit._workflows import tune_op as T

    first: dict[str, float] = {}  # each candidate's first timing (the final round's medians
    real = T._final_round  # replace the finalists' own, so the ranking is read before it)

    def final_round(bench, runs, results, shipped):
        first.update({c.label: c.time_s for c in results.values() if c.status == "ok"})
        real(bench, runs, results, shipped)

    monkeypatch.setattr(T, "_final_round", final_round)
    before = timing.count()
    t = kernelkit.tune_op("matmul", "3x8x16", limit=3, quiet=True, store=False)
    r = t.results[0]
    ok = [c for c in r.candidates if c.status == "ok"]
    finals = [c for c in ok if "final round" in c.detail]
    assert len(ok) >= 3, r.report()
    # the FINALISTS fastest by their first timing, plus the shipped choice and any microkernel
    # outside them (none on the CPU backend)
    top = sorted(ok, key=lambda c: first[c.label])[: T.FINALISTS]
    shipped = [c for c in ok if c.label == r.shipped]
    assert len(shipped) == 1, r.report()
    assert {c.label for c in finals} == {c.label for c in top} | {r.shipped}, r.report()
    assert all(f"median of {T.FINAL_ROUNDS + 1} timings" in c.detail for c in finals)
    assert timing.count() - before == len(ok) + T.FINAL_ROUNDS * len(finals)
    assert r.winner in finals and r.record.best_us == round(r.winner.time_s * 1e6, 4)


def test_each_problem_times_the_shipped_choice_against_the_best(db, shipped, tmp_path):
    """A table row names a config that ``limit=1`` leaves out: it is added, timed (in the final
    round), and the result says how it compares with the best; without the table, the rules'
    choice is the one compared."""
    from dataclasses import replace

    from kernelkit._workflows.op_results import OpTuning

    two = kernelkit.tune_op("softmax", "8x64", limit=2, quiet=True, store=False)
    r = two.results[0]
    rows = [c for c in r.candidates if c.impl == "softmax/rows" and c.status == "ok"]
    default = op_object("softmax").get("rows").default
    other = next(c for c in rows if c.config != default)
    row = replace(r, record=replace(r.record, impl=other.impl, config=other.config))
    path = OpTuning("softmax", (row,)).write_table(tmp_path / "softmax.yaml")
    shipped(path)
    r = kernelkit.tune_op("softmax", "8x64", limit=1, quiet=True, store=False).results[0]
    assert (r.shipped, r.shipped_from) == (other.label, "table"), r.report()
    mine = next(c for c in r.candidates if c.label == other.label)
    assert mine.status == "ok" and "final round" in mine.detail, r.report()
    assert r.shipped_over_best == mine.time_s / r.winner.time_s >= 1.0
    assert f"shipped choice (table): {other.label}: {r.shipped_over_best:.3f}x" in r.report()
    shipped(None)
    r = kernelkit.tune_op("softmax", "8x64", limit=1, quiet=True, store=False).results[0]
    choice = decision("softmax", (8, 64))
    assert r.shipped_from == choice.source == "heuristic"
    assert r.shipped == f"softmax/rows {choice.config.describe()}", r.report()


def test_a_shipped_choice_outside_the_implementations_asked_for_is_timed_never_chosen(db):
    """On the CPU, matmul's shipped choice at M = 4 is gemv; asked for gemv_slab only (which
    cannot run here: no TMA), gemv is timed for the report and nothing is recorded."""
    t = kernelkit.tune_op("matmul", "4x64x64", implementations=["matmul/gemv_slab"], limit=1,
                          quiet=True)  # fmt: skip
    r = t.results[0]
    first = r.candidates[0]  # the shipped choice comes first (timed whatever the budget)
    assert first.label == r.shipped and first.impl != "matmul/gemv_slab", r.report()
    assert first.status == "ok" and first.compared_only, r.report()
    assert all(c.impl == "matmul/gemv_slab" for c in r.candidates[1:]), r.report()
    assert r.winner is None and r.record is None and t.records == [] and db.records() == []
    assert "(shipped; not asked for, so never chosen)" in r.report()


def test_outputs_on_a_device_are_compared_there(db, monkeypatch):
    """A torch output on a GPU is compared where it lies (``tuner.compare_on_device``), never
    copied to the host: here torch's CPU tensors stand in for a device's. The same candidates
    pass, and one whose output is wrong is still rejected."""
    pytest.importorskip("torch")
    from kernelkit._tune import tuner

    seen = []
    real = tuner.compare_on_device

    def spy(ref, got, dtype):
        seen.append(type(got).__module__)
        return real(ref, got, dtype)

    monkeypatch.setattr(tuner, "on_device", lambda x: hasattr(x, "detach"))
    monkeypatch.setattr(tuner, "compare_on_device", spy)
    t = kernelkit.tune_op("softmax", "8x64", framework="torch", limit=2, quiet=True, store=False)
    r = t.results[0]
    assert seen and all(m.startswith("torch") for m in seen), seen
    timed = [c.status for c in r.candidates if c.status != "skipped"]  # (configs too small)
    assert timed == ["ok"] * len(timed) and len(timed) >= 2, r.report()
    monkeypatch.setattr(
        tuner, "compare_on_device", lambda ref, got, dtype: real(ref, got * 2, dtype)
    )
    r = kernelkit.tune_op("softmax", "8x64", framework="torch", limit=2, quiet=True,
                          store=False).results[0]  # fmt: skip
    assert {c.status for c in r.candidates} - {"skipped"} == {"rejected"}, r.report()
