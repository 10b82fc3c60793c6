"""An autotuned kernel's stored decisions repeated in C (``_tune/decided.py``, made by
``Repeats.call_for(decided=)``), run on the CPU through the stand-in driver (``native_driver``):
a call served from a stored decision launches from C with no key computed; another size of the
same key bucket, a forced choice or a new decision never gets an old one's launch settings
(``blockDim.x`` is in the result); the decided calls kept, dropped and made again."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")


import kernelkit  # noqa: E402
from kernelkit._tune import decided as dc  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


# blockDim.x is in the result, so a call launched with another decision's settings is seen
TUNED = """/* repeat tests */
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) y[i] = a * x[i] + (float)(n + (int)blockDim.x);
"""


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A private tuning database, served only (a missing key runs the default: no timing)."""
    from kernelkit import _config
    from kernelkit._select.tuning import db as tuning

    monkeypatch.setenv("KERNELKIT_TUNE", "serve")
    _config.reload()
    store = tuning.TuningDB(tmp_path / "tuning")
    monkeypatch.setattr(tuning, "_current", (_config.config, store))
    yield store
    monkeypatch.undo()
    _config.reload()


def _tuned(tag: str):
    k = kernelkit.kernel(f"rep_tuned_{tag}", ["x", "a", "n"], ["y"], TUNED + f"// {tag}\n")
    configs = [{"threadgroup": (32,)}, {"threadgroup": (64,)}]
    return kernelkit.autotune(
        k, configs=configs, key=["x.shape[0]:pow2", "n"], grid="x", default=configs[0],
        quiet=True,
    )  # fmt: skip


def _tuned_expect(x, a, n, block):
    return (a * x.double() + n + block).float()


def _count_keys(tuned) -> list:
    counted: list = []
    for pattern, fn in list(tuned._keys.items()):

        def counting(*args, fn=fn):
            counted.append(1)
            return fn(*args)

        tuned._keys[pattern] = counting
        if tuned._fast_key is fn:
            tuned._fast_key = counting
    return counted


def test_an_autotuned_kernel_s_stored_decision_launches_from_c(driver, served):
    tuned = _tuned("stored")
    x = torch.randn(1000)
    y = torch.empty_like(x)
    for _ in range(3):  # decided, then kept as a decided call
        tuned([x, 2.0, 3], out=[y])
        tuned([x, 2.0, 3], output_shapes=[x.shape], output_dtypes=[x.dtype])
    assert tuned._decided.head is not None and len(tuned._decided.calls) == 2
    keys, before = _count_keys(tuned), driver.launches
    for a in (2.0, 2.0, 2.0):
        y.fill_(float("nan"))
        (got,) = tuned([x, a, 3], out=[y])
        assert got is y
        torch.testing.assert_close(y, _tuned_expect(x, a, 3, 32))
        (made,) = tuned([x, a, 3], output_shapes=[x.shape], output_dtypes=[x.dtype])
        torch.testing.assert_close(made, _tuned_expect(x, a, 3, 32))
    assert driver.launches - before == 6 and not keys  # no key computed: the Calls took them
    y.fill_(float("nan"))
    tuned([x, 0.5, 3], out=[y])  # another float scalar: the keys, then the kernel's own path
    torch.testing.assert_close(y, _tuned_expect(x, 0.5, 3, 32))
    assert keys


def test_decided_calls_never_serve_another_size_of_the_same_bucket(driver, served):
    """1000 and 1024 share a key bucket (one decision) but not a grid (one thread per element):
    a Call made for one is never launched for the other."""
    tuned = _tuned("bucket")
    xs = [torch.randn(1000), torch.randn(1024), torch.randn(2000)[::2]]  # (the last strided)
    for _ in range(4):
        for x in xs:
            y = torch.full_like(x, float("nan"))
            tuned([x, 1.5, 0], out=[y])
            torch.testing.assert_close(y, _tuned_expect(x, 1.5, 0, 32))
    assert len(tuned._decided.calls) == 2  # the strided input is copied by the run: never a Call


def test_a_new_stored_decision_or_a_forced_one_replaces_the_decided_calls(driver, served):
    tuned = _tuned("replace")
    x = torch.randn(300)
    y = torch.empty_like(x)
    for _ in range(3):
        tuned([x, 1.0, 2], out=[y])
    torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 32))
    assert tuned._decided.head is not None
    with kernelkit.force(tuned.name, "generic", {"threadgroup": (64,)}):
        for _ in range(2):
            y.fill_(float("nan"))
            tuned([x, 1.0, 2], out=[y])
            torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 64))
    y.fill_(float("nan"))
    tuned([x, 1.0, 2], out=[y])  # the stored decision again
    torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 32))
    # a tuning that stores another winner forgets the decisions and the Calls made with them
    result = tuned.tune([x, 1.0, 2], out=[y], configs=[{"threadgroup": (64,)}], quiet=True)
    assert result.record is not None and tuned._decided.head is None
    for _ in range(4):
        y.fill_(float("nan"))
        tuned([x, 1.0, 2], out=[y])
        torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 64))
    assert tuned._decided.head is not None


def test_decided_calls_keep_the_newest_and_are_made_again_only_rarely(driver, served):
    tuned = _tuned("limit")
    xs = [torch.randn(100 + 10 * i) for i in range(6)]
    for _ in range(3):
        for x in xs:
            y = torch.full_like(x, float("nan"))
            tuned([x, 1.0, 0], out=[y])
            torch.testing.assert_close(y, _tuned_expect(x, 1.0, 0, 32))
    # the first four sizes were kept (from their second calls); the other two miss them
    assert len(tuned._decided.calls) == dc.DECIDED and tuned._decided.made == dc.DECIDED
    assert tuned._decided.missed == 2 * (len(xs) - dc.DECIDED)
    last = xs[-1]
    y = torch.empty_like(last)
    for _ in range(dc.RETRY - tuned._decided.missed - 1):
        tuned([last, 1.0, 0], out=[y])  # not among the four: the Python path
    assert tuned._decided.made == dc.DECIDED
    y.fill_(float("nan"))
    tuned([last, 1.0, 0], out=[y])  # the RETRY-th miss: kept, the oldest dropped
    torch.testing.assert_close(y, _tuned_expect(last, 1.0, 0, 32))
    assert tuned._decided.made == dc.DECIDED + 1 and tuned._decided.missed == 0
    assert (
        len(tuned._decided.calls) == dc.DECIDED and tuned._decided.head is tuned._decided.calls[0]
    )
    served = tuned._decided.head.served
    tuned([last, 1.0, 0], out=[y])
    assert tuned._decided.head.served == served + 1


def test_a_decided_call_made_across_a_forget_is_not_kept(driver, served):
    """A call served from a stored decision keeps a Call of it after it launched; where a new
    decision was stored meanwhile (another thread's ``tune(store=True)``, run here at that
    moment), the Call of the old one is dropped, and later calls run the new decision."""
    tuned = _tuned("across")
    x = torch.randn(300)
    y = torch.empty_like(x)
    tuned([x, 1.0, 2], out=[y])  # decided (the default, 32), remembered
    make = tuned.kernel._decided_call
    stored: list = []

    def meanwhile(args, after):
        if not stored:
            stored.append(tuned.tune([x, 1.0, 2], out=[y], configs=[{"threadgroup": (64,)}]))
        return make(args, after)

    tuned.kernel._decided_call = meanwhile
    tuned([x, 1.0, 2], out=[y])  # served with 32, then a Call of it would be made
    assert stored[0].record is not None and tuned._decided.head is None
    for _ in range(4):
        y.fill_(float("nan"))
        tuned([x, 1.0, 2], out=[y])
        torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 64))


def test_decided_calls_are_made_again_after_a_forget(driver, served):
    tuned = _tuned("again")
    xs = [torch.randn(100 + 10 * i) for i in range(dc.DECIDED)]
    for _ in range(2):
        for x in xs:
            tuned([x, 1.0, 0], out=[torch.empty_like(x)])
    assert tuned._decided.made == dc.DECIDED
    x, y = xs[0], torch.empty_like(xs[0])
    tuned.tune([x, 1.0, 0], out=[y], configs=[{"threadgroup": (64,)}])
    assert tuned._decided.head is None
    for _ in range(3):
        tuned([x, 1.0, 0], out=[y])
    assert tuned._decided.head is not None and tuned._decided.made == 1
    served = tuned._decided.head.served
    y.fill_(float("nan"))
    tuned([x, 1.0, 0], out=[y])
    torch.testing.assert_close(y, _tuned_expect(x, 1.0, 0, 64))
    assert tuned._decided.head.served == served + 1


def test_a_decision_replaced_while_it_was_made_is_not_remembered(driver, served):
    """A call decides (the default, 32) and, before it remembers the decision, another thread
    stores a new one (64; run here from inside the decision): the call runs what it decided,
    and no later call runs that replaced decision (neither from the table nor from C)."""
    tuned = _tuned("replaced")
    x = torch.randn(300)
    y = torch.full_like(x, float("nan"))
    choose = tuned._choose
    stored: list = []

    def meanwhile(problem, bound, call):
        found = choose(problem, bound, call)
        if not stored:
            stored.append(tuned.tune([x, 1.0, 2], out=[y], configs=[{"threadgroup": (64,)}]))
        return found

    tuned._choose = meanwhile
    tuned([x, 1.0, 2], out=[y])
    assert stored[0].record is not None
    torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 32))
    for _ in range(5):
        y.fill_(float("nan"))
        tuned([x, 1.0, 2], out=[y])
        torch.testing.assert_close(y, _tuned_expect(x, 1.0, 2, 64))
    assert tuned._decided.head is not None
