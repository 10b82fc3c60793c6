"""Tune specs on a Ray cluster (CPU backend; ``ray`` comes with kernelkit[dev]): a local cluster
of two nodes, one offering the device kind ``KA`` and one ``KB`` (the ``accelerator_type:<kind>``
resource a GPU node advertises for its GPUs, given here by hand), each with one CPU.

Checked: a sweep through Ray gives the records of the local pool; a crashing and a hanging
candidate cost only their tasks; a run cut off half way resumes without measuring a candidate
twice (pool and Ray, counted); each device kind's candidates run on that kind's node, and the
run writes one table per kind and one export."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import CPU_AVAILABLE

pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")
ray = pytest.importorskip("ray")

MODULE = '''
import kernelkit

BODY = """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (MODE == 2) { while (true) { } }
if (MODE == 5) { __builtin_trap(); }
for (; i < x_shape[0]; i += STEP) {
    float acc = 0.0f;
    for (int r = 0; r < REPS; ++r) acc += x[i] * (float)r;
    y[i] = (MODE == 3 ? 3.0f : 2.0f) * x[i] + 0.0f * acc;
}
"""
k = kernelkit.kernel("ray_twice", ["x"], ["y"], BODY)
# MODE 0 REPS 0 is the fastest by far, 3 is wrong, 5 kills its worker (SIGILL), 2 hangs
configs = [{"MODE": m, "REPS": r, "STEP": 64, "threadgroup": (64,)}
           for m, r in [(0, 0), (0, 3000), (3, 0), (5, 0), (2, 0)]]
twice = kernelkit.autotune(k, configs=configs[:4], key=["x.shape[0]:pow2"],
                           grid=lambda p, c: (c.threadgroup[0],))
fast = kernelkit.autotune(k, configs=configs[:1], key=["x.shape[0]:pow2"],
                          grid=lambda p, c: (c.threadgroup[0],))
hangs = kernelkit.autotune(k, configs=[configs[0], configs[4]], key=["x.shape[0]:pow2"],
                           grid=lambda p, c: (c.threadgroup[0],))
'''


def _arrived():
    from kernelkit._workflows import tune_run

    return tune_run._Run.arrived


_ARRIVED = _arrived()  # before any test wraps it
SHAPES = [{"inputs": {"x": {"shape": [n]}}, "outputs": {"y": {"shape": [n]}}} for n in (1000, 5000)]


@pytest.fixture(scope="module")
def cluster():
    """Two nodes of one CPU each: KA (the head) and KB. Workers import this checkout's kernelkit."""
    from ray.cluster_utils import Cluster

    import kernelkit

    src = str(Path(kernelkit.__file__).resolve().parents[1])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src + (os.pathsep + old if old else "")
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"accelerator_type:KA": 1}},
    )
    c.add_node(num_cpus=1, resources={"accelerator_type:KB": 1})
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def _spec(folder: Path, obj: str = "twice", **extra) -> Path:
    (folder / "kern.py").write_text(MODULE)
    spec = {"module": "kern.py", "object": obj, "backend": "cpu", "timeout_s": 120}
    spec.update(shapes=SHAPES, **extra)
    path = folder / f"spec.{obj}.json"
    path.write_text(json.dumps(spec))
    return path


def _comparable(record):
    """A record without its timings (which differ run to run)."""
    return (record.op, record.key, record.impl, record.config, record.env, record.candidates)


def _statuses(tuning):
    return [[row[1] for row in r.rows] for r in tuning.results]


class _Cut(BaseException):
    """Stands for Ctrl-C: a BaseException as KeyboardInterrupt (``except Exception`` lets it by)."""


class _Counting:
    """Wraps ``_Run.arrived``: the measurements whose results arrived; raises ``_Cut`` after
    ``stop_after`` of them (a run cut off half way)."""

    def __init__(self, monkeypatch, stop_after=None):
        from kernelkit._workflows import tune_run

        self.seen, self.where, self.stop_after = [], {}, stop_after
        original = _ARRIVED

        def arrived(run, m, result):
            original(run, m, result)
            self.seen.append(m)
            self.where[m] = result.where
            if self.stop_after is not None and len(self.seen) >= self.stop_after:
                raise _Cut

        monkeypatch.setattr(tune_run._Run, "arrived", arrived)


def test_a_sweep_on_ray_gives_the_local_pools_records(cluster, tmp_path, own_tuning_db):
    import kernelkit

    spec = _spec(tmp_path, timeout_s=120)
    # no hang here: a cold compile on a loaded CI machine must not meet a short timeout
    local = kernelkit.tune_spec(spec, quiet=True, store=False)
    on_ray = kernelkit.tune_spec(spec, ray=True, quiet=True, store=False, fresh=True)
    assert on_ray.measured == local.measured == 2 * 4
    assert [_comparable(r) for r in on_ray.records] == [_comparable(r) for r in local.records]
    assert len(on_ray.records) == 2 and all(r.config.values["REPS"] == 0 for r in on_ray.records)
    for tuning in (local, on_ray):
        assert _statuses(tuning) == [["ok", "ok", "rejected", "failed"]] * 2
    text = on_ray.report()
    assert "worker died" in text.splitlines()[4], text  # SIGILL: its task only


def test_a_hanging_candidate_costs_only_its_task(cluster, tmp_path, own_tuning_db):
    import kernelkit

    warm = _spec(tmp_path, "fast", timeout_s=120)
    kernelkit.tune_spec(warm, ray=True, quiet=True, store=False)  # compiles MODE 0 for both
    spec = _spec(tmp_path, "hangs", timeout_s=4)
    t = kernelkit.tune_spec(spec, ray=True, quiet=True, store=False)
    assert _statuses(t) == [["ok", "failed"]] * 2
    assert "timed out after 4 s" in t.report()


def test_a_candidate_whose_worker_dies_is_retried_on_a_fresh_one(
    cluster, tmp_path, own_tuning_db, monkeypatch
):
    import kernelkit
    from kernelkit._workflows import tune_ray

    submitted = []
    submit = tune_ray._Dispatch.submit

    def counting(self, m):
        submitted.append(m)
        return submit(self, m)

    monkeypatch.setattr(tune_ray._Dispatch, "submit", counting)
    spec = _spec(tmp_path, retries=1)
    t = kernelkit.tune_spec(spec, ray=True, quiet=True, store=False, fresh=True)
    assert _statuses(t) == [["ok", "ok", "rejected", "failed"]] * 2
    dies = [m for m in submitted if m.config == 3]  # MODE 5: its worker dies of SIGILL
    assert len(dies) == 4 and len(set(dies)) == 2  # each of the 2 shapes: once, then retried
    assert len(submitted) == 2 * 4 + 2
    assert "worker died" in t.report()


@pytest.mark.parametrize("on_ray", [False, True], ids=["pool", "ray"])
def test_an_interrupted_run_resumes_measuring_no_candidate_twice(
    on_ray, cluster, tmp_path, own_tuning_db, monkeypatch
):
    import kernelkit

    spec = _spec(tmp_path, timeout_s=120)
    first = _Counting(monkeypatch, stop_after=3)
    with pytest.raises(_Cut):
        kernelkit.tune_spec(spec, ray=True if on_ray else None, quiet=True)
    second = _Counting(monkeypatch)
    t = kernelkit.tune_spec(spec, ray=True if on_ray else None, quiet=True)
    everything = {(s, c) for s in range(2) for c in range(4)}
    assert len(first.seen) == 3 and t.measured == len(second.seen) == 5
    assert {(m.shape, m.config) for m in first.seen + second.seen} == everything
    assert _statuses(t) == [["ok", "ok", "rejected", "failed"]] * 2
    third = _Counting(monkeypatch)
    again = kernelkit.tune_spec(spec, ray=True if on_ray else None, quiet=True)
    assert third.seen == [] and again.measured == 0
    assert [_comparable(r) for r in again.records] == [_comparable(r) for r in t.records]


def test_each_device_kind_runs_on_its_nodes_and_gets_its_table(
    cluster, tmp_path, own_tuning_db, monkeypatch
):
    import kernelkit

    spec = _spec(tmp_path, device_kinds=["KA", "KB"], timeout_s=120)
    seen = _Counting(monkeypatch)
    t = kernelkit.tune_spec(
        spec, ray=True, quiet=True, table=f"{tmp_path}/tables/", export=tmp_path / "out.json"
    )
    node_of = {}
    for node in ray.nodes():
        for kind in ("KA", "KB"):
            if node["Resources"].get(f"accelerator_type:{kind}"):
                node_of[kind] = node["NodeID"][:12]
    assert len(seen.seen) == 2 * 2 * 4
    crashed = [m for m in seen.seen if m.config == 3]  # its worker died: no word of where
    assert len(crashed) == 4 and all(seen.where[m] == "" for m in crashed)
    for m in set(seen.seen) - set(crashed):
        assert node_of[m.kind] in seen.where[m], (m, seen.where[m], node_of)
    assert [r.kind for r in t.results] == ["KA", "KA", "KB", "KB"]
    assert len(t.records) == 4
    import yaml

    for kind in ("KA", "KB"):
        table = yaml.safe_load((tmp_path / "tables" / f"ray_twice.{kind.lower()}.yaml").read_text())
        # the host's name does not hold "KA": rows name the device measured ("NVIDIA H100 80GB
        # HBM3" holds the kind H100, and rows then name the kind)
        assert table["device"]["name"] == t.records[0].env.device and len(table["entries"]) == 2
    exported = json.loads((tmp_path / "out.json").read_text())
    # on CPU both kinds' records share one environment (the host): one per key survives
    assert exported["kernelkit"] == "tuning-export" and len(exported["records"]) == 2


def test_device_kinds_need_ray(tmp_path, own_tuning_db):
    import kernelkit

    spec = _spec(tmp_path, device_kinds=["KA"])
    with pytest.raises(ValueError, match="--ray"):
        kernelkit.tune_spec(spec, quiet=True)


def test_a_kind_no_node_has_is_named(cluster, tmp_path, own_tuning_db):
    import kernelkit

    spec = _spec(tmp_path, device_kinds=["H100"])
    with pytest.raises(ValueError, match=r"no node of kind 'H100'.*kinds there: KA, KB"):
        kernelkit.tune_spec(spec, ray=True, quiet=True)


def test_the_cli_tunes_on_ray_exports_and_resumes(cluster, tmp_path, own_tuning_db, capsys):
    from kernelkit.cli import main

    spec = _spec(tmp_path, timeout_s=120)
    args = ["tune", str(spec), "--ray", "--quiet", "--export", str(tmp_path / "r.json")]
    assert main([*args, "--table", str(tmp_path / "t.yaml")]) == 0
    out = capsys.readouterr().out
    assert "2 record(s) exported" in out and "read back" not in out
    assert len(json.loads((tmp_path / "r.json").read_text())["records"]) == 2
    assert main(args) == 0  # the same spec again: every result read back, none measured
    assert "8 candidate result(s) read back from an earlier run" in capsys.readouterr().out


def _dies_on_3x100(op, dims, dtype, device, settings):
    """``tune_problem``, except that the worker of problem 3x100 dies (as a GPU fault ends it)."""
    if tuple(dims) == (3, 100):
        os._exit(1)
    from kernelkit._workflows.tune_op import tune_problem

    return tune_problem(op, dims, dtype, device, settings)


def _outline(tuning):
    """What a tuning found, less its timings: per problem the key, the candidates and statuses."""
    return [
        (r.label, r.key, [(c.label, c.status) for c in r.candidates], r.shipped)
        for r in tuning.results
    ]


def test_built_in_op_problems_run_as_ray_tasks(cluster, own_tuning_db, capsys):
    import kernelkit
    from kernelkit.cli import main

    local = kernelkit.tune_op("softmax", "8x64,3x100,5x33", limit=1, quiet=True, store=False)
    on_ray = kernelkit.tune_op("softmax", "8x64,3x100,5x33", limit=1, quiet=True, ray=True)
    assert _outline(on_ray) == _outline(local)  # in the order asked for
    assert all(r.record is not None and r.shipped_over_best for r in on_ray.results)
    stored = {(r.op, r.key, r.impl, r.config) for r in own_tuning_db.records()}
    assert stored == {(r.op, r.key, r.impl, r.config) for r in on_ray.records}
    with pytest.raises(kernelkit.ArgumentError, match="dtype"):  # raised as a local run does
        kernelkit.tune_op("softmax", "8x64", "bfloat16", framework="numpy", quiet=True, ray=True)
    args = ["tune", "softmax", "--dims", "8x64", "--limit", "1", "--ray", "--quiet"]
    assert main([*args, "--no-database"]) == 0
    assert "shipped choice (heuristic): softmax/rows" in capsys.readouterr().out


def test_a_problem_whose_worker_dies_costs_only_itself(cluster):
    from kernelkit._workflows import tune_op as T
    from kernelkit._workflows.tune_op_ray import run_problems

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    settings = T._Settings(None, True, None, 1, None, 0, None)
    shapes = [(3, 100), (8, 64), (5, 33), (2, 16)]
    calls = [("softmax", dims, "float32", "cpu", settings) for dims in shapes]
    seen = []
    results = run_problems(_dies_on_3x100, calls, T._died, "cpu", None, seen.append)
    assert len(seen) == 4 and [r.label for r in results] == [f"{m}x{n} float32" for m, n in shapes]
    # the dead worker's place is taken: every other problem is tuned
    assert results[0].record is None and all(r.record is not None for r in results[1:])
    assert results[0].target is None and "its Ray task died" in results[0].note
    assert "(no device: the task died)" in results[0].report()
