"""benchmarks/_common.paired_us on its host-clock path (no device): the functions are timed in
turn, the order rotated every rep, and a slow period that hits one rep leaves the medians and
the rep-by-rep ratios alone (issue 26, decode_block's measurement)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "_common.py"


@pytest.fixture(scope="module")
def common():
    spec = importlib.util.spec_from_file_location("_bench_common_for_test", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building Stats
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


class Host:
    """A fake host clock that the timed functions advance by their cost, times ``slow`` during
    one rep (a slow period of a shared machine)."""

    def __init__(self, n_fns: int, slow_rep: int, slow: float) -> None:
        self.now, self.reads, self.n_fns, self.slow_rep, self.slow = 0.0, 0, n_fns, slow_rep, slow
        self.timing = False

    def clock(self) -> float:
        self.timing = True  # warm-up calls run before the first read
        self.reads += 1
        return self.now

    def fn(self, cost_us: float, log: list[str], name: str):
        def call() -> None:
            log.append(name)
            rep = (self.reads - 1) // (2 * self.n_fns) if self.timing else -1
            self.now += cost_us * 1e-6 * (self.slow if rep == self.slow_rep else 1.0)

        return call


def test_each_rep_times_one_batch_of_each_in_a_rotated_order(common):
    host, log = Host(3, slow_rep=-1, slow=1.0), []
    fns = {name: host.fn(1.0, log, name) for name in "abc"}
    common.paired_us(fns, batch=2, reps=4, cuda=False, clock=host.clock)
    assert log[:9] == list("aaabbbccc")  # three warm-up calls each
    batches = log[9:][::2]
    assert log[9:] == [name for name in batches for _ in range(2)]
    assert batches == [*"abc", *"bca", *"cab", *"abc"]  # rep 3 starts over
    assert all(log.count(name) == 3 + 4 * 2 for name in "abc")


def test_a_slow_rep_moves_neither_the_medians_nor_the_paired_ratio(common):
    host, log = Host(2, slow_rep=2, slow=5.0), []
    fns = {"kk": host.fn(2.0, log, "kk"), "torch": host.fn(6.0, log, "torch")}
    stats = common.paired_us(fns, batch=4, reps=5, cuda=False, clock=host.clock)
    assert stats["kk"].samples == pytest.approx([2.0, 2.0, 10.0, 2.0, 2.0])
    assert stats["torch"].samples == pytest.approx([6.0, 6.0, 30.0, 6.0, 6.0])
    assert (stats["kk"].median, stats["kk"].p25, stats["kk"].p75) == pytest.approx((2, 2, 2))
    ratio = common.paired_ratio(stats["torch"], stats["kk"])
    assert ratio.samples == pytest.approx([3.0] * 5)  # the slow rep scaled both sides


def test_quartiles_and_errors(common):
    stats = common.Stats((5.0, 1.0, 4.0, 2.0, 3.0))
    assert (stats.median, stats.p25, stats.p75) == (3.0, 2.0, 4.0)
    assert (common.Stats((7.0,)).p25, common.Stats((7.0,)).p75) == (7.0, 7.0)
    with pytest.raises(ValueError, match=r"\[paired_ratio\] .* got 2 and 1 reps"):
        common.paired_ratio(common.Stats((1.0, 2.0)), common.Stats((1.0,)))
    with pytest.raises(ValueError, match=r"\[paired_us\] at least one function"):
        common.paired_us({}, cuda=False)
