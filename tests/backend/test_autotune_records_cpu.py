"""Tuning records checked against the kernel as it is now (CPU backend, real kernels): a record
of a changed kernel (body or config list) is never served; a record naming a config the kernel
does not offer (a value outside the list, an unknown or renamed name, a string, 2**62, 10**400)
or a damaged file (nesting too deep, a number beyond a float, a FIFO) is warned about, discarded
and tuned again, and never reaches a kernel call; processes tuning one key tune it once."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import warnings

import numpy as np
import pytest
from conftest import CPU_AVAILABLE

import kernelkit
from kernelkit import _config
from kernelkit._select.records import Config
from kernelkit._select.tuning import db as tuning

pytestmark = pytest.mark.skipif(not CPU_AVAILABLE, reason="the CPU backend does not load here")

STRIDED = "uint i = blockIdx.x * blockDim.x + threadIdx.x; for (; i < x_shape[0]; i += {step}) "
STRIDED += "y[i] = {double};"
# each thread doubles U consecutive elements; the grid rule reads U (as users' rules do)
UNROLLED = """
uint i = (blockIdx.x * blockDim.x + threadIdx.x) * U;
for (uint k = 0; k < U; ++k) if (i + k < x_shape[0]) y[i + k] = 2 * x[i + k];
"""


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A private tuning database for the test (the compile cache stays shared)."""
    store = tuning.TuningDB(tmp_path / "tuning")
    monkeypatch.setattr(tuning, "_current", (_config.config, store))
    return store


def strided(name: str, step: int, threadgroups: list[int], double: str = "2 * x[i]"):
    """A kernel whose body strides by ``step``: right only when the grid has ``step`` threads."""
    k = kernelkit.kernel(name, ["x"], ["y"], STRIDED.format(step=step, double=double))
    configs = [{"threadgroup": (t,)} for t in threadgroups]
    grid = lambda p, c: (c.threadgroup[0],)
    return kernelkit.autotune(k, configs=configs, key=["x.shape[0]:pow2"], grid=grid, quiet=True)


def unrolled(name: str):
    k = kernelkit.kernel(name, ["x"], ["y"], UNROLLED)
    configs = [{"U": 2, "threadgroup": (64,)}, {"U": 4, "threadgroup": (64,)}]
    grid = lambda p, c: (-(-p.arg("x").shape[0] // c.values["U"]),)
    return kernelkit.autotune(k, configs=configs, key=["x.shape[0]:pow2"], grid=grid, quiet=True)


def run(tuned, x):
    (y,) = tuned([x], output_shapes=[x.shape], output_dtypes=[x.dtype])
    return y


def source(tuned, x) -> str:
    return tuned.explain([x], output_shapes=[x.shape], output_dtypes=[x.dtype]).choice.source


@pytest.mark.parametrize(
    ("step", "threadgroups", "double"),
    [(256, [256], "2 * x[i]"), (64, [64], "x[i] + x[i]"), (64, [64, 128], "2 * x[i]")],
    ids=["body-and-configs", "body-only", "configs-only"],
)
def test_a_record_of_a_changed_kernel_is_never_served(db, step, threadgroups, double) -> None:
    x = np.arange(1000, dtype=np.float32)
    old = strided("at_changed", 64, [64])  # tuned: threadgroup 64, its body strides by 64
    np.testing.assert_array_equal(run(old, x), 2 * x)
    assert [r.config.threadgroup[0] for r in db.records()] == [64]

    new = strided("at_changed", step, threadgroups, double)  # same name, changed
    # both calls in the block: the test is that the warning comes once over two calls
    with pytest.warns(RuntimeWarning, match="another version of this kernel") as caught:  # noqa: PT031
        y = run(new, x)
        np.testing.assert_array_equal(run(new, x), 2 * x)
    np.testing.assert_array_equal(y, 2 * x)
    assert sum("not served" in str(w.message) for w in caught) == 1  # warned once
    assert new.tunings == 1 and source(new, x) == "database"
    (record,) = db.records()
    assert record.config.threadgroup[0] in threadgroups

    db.refresh()  # a new process: reads the replaced record, serves it without tuning
    fresh = strided("at_changed", step, threadgroups, double)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(run(fresh, x), 2 * x)
    assert fresh.tunings == 0


def test_serve_mode_runs_the_default_for_a_changed_kernel(db, clean_state) -> None:
    tuning._current = (_config.config, db)  # clean_state reloaded the configuration
    x = np.arange(1000, dtype=np.float32)
    run(strided("at_serve", 64, [64]), x)
    assert len(db.records()) == 1
    clean_state.setenv("KERNELKIT_TUNE", "serve")
    _config.reload()
    tuning._current = (_config.config, db)
    new = strided("at_serve", 256, [256])
    with pytest.warns(RuntimeWarning, match="another version of this kernel"):
        np.testing.assert_array_equal(run(new, x), 2 * x)
    assert new.tunings == 0 and source(new, x) == "default"


BAD_CONFIGS = {
    "zero": Config({"U": 0}, (64,)),
    "not offered": Config({"U": 3}, (64,)),
    "unknown name": Config({"V": 4}, (64,)),
    "renamed": Config({"UNROLL": 4}, (64,)),
    "string": Config({"U": "float32"}, (64,)),
    "2**62": Config({"U": 2**62}, (64,)),
    "10**400": Config({"U": 10**400}, (64,)),
    "other threadgroup": Config({"U": 4}, (32,)),
}


@pytest.mark.parametrize("bad", list(BAD_CONFIGS), ids=list(BAD_CONFIGS))
def test_a_record_naming_a_config_the_kernel_does_not_offer_is_discarded(db, bad) -> None:
    x = np.arange(1000, dtype=np.float32)
    tuned = unrolled("at_offered")
    np.testing.assert_array_equal(run(tuned, x), 2 * x)
    (good,) = db.records()
    db.put(dataclasses.replace(good, config=BAD_CONFIGS[bad]))  # a valid file, a bad config
    db.refresh()

    fresh = unrolled("at_offered")
    with pytest.warns(RuntimeWarning, match=r"not served: config \[.*\] is not one of"):
        np.testing.assert_array_equal(run(fresh, x), 2 * x)
    assert fresh.tunings == 1
    assert db.records()[0].config in fresh.impl.configs  # replaced by a tuned one


def _nested(path) -> None:
    path.write_text("[" * 100_000)


def _beyond_float(path) -> None:
    doc = json.loads(path.read_text())
    doc["record"]["best_us"] = 10**400
    path.write_text(json.dumps(doc))


def _fifo(path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("damage", "why"),
    [(_nested, "RecursionError"), (_beyond_float, "best_us"), (_fifo, "not a regular file")],
    ids=["nested", "10**400", "fifo"],
)
def test_a_damaged_record_file_is_a_warning_and_a_new_tuning(db, damage, why) -> None:
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(run(unrolled("at_damaged"), x), 2 * x)
    (good,) = db.records()
    damage(db.path(good.op, good.env, good.key))
    db.refresh()
    fresh = unrolled("at_damaged")
    with pytest.warns(RuntimeWarning, match=f"unusable.*{why}"):
        np.testing.assert_array_equal(run(fresh, x), 2 * x)
    assert fresh.tunings == 1


def _tune_in_child(root: str, barrier, results) -> None:
    """One of several processes calling one autotuned kernel on one key at once."""
    from kernelkit import _config
    from kernelkit._select.tuning import db as tuning

    tuning._current = (_config.config, tuning.TuningDB(root))
    tuned = strided("at_flight", 64, [64, 128])
    x = np.arange(1000, dtype=np.float32)
    barrier.wait(timeout=300)
    y = run(tuned, x)
    results.put((tuned.tunings, bool((y == 2 * x).all()), source(tuned, x)))


def test_processes_tuning_one_key_tune_it_once(db, tmp_path) -> None:
    x = np.arange(1000, dtype=np.float32)
    strided("at_flight", 64, [64, 128]).tune([x], [x.shape], [x.dtype], store=False)  # compiled
    n = 8
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [
        ctx.Process(target=_tune_in_child, args=(str(tmp_path / "shared"), barrier, results))
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    try:
        found = [results.get(timeout=600) for _ in range(n)]
    finally:
        for p in procs:
            p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    assert sum(t for t, _, _ in found) == 1, found  # one process tuned; the others read it
    assert all(ok and src == "database" for _, ok, src in found), found
    assert len(tuning.TuningDB(tmp_path / "shared").records()) == 1
