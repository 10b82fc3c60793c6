"""The CUDA backend relaxes the thread's stream-capture mode around module load, unload and
attribute calls (so a first call inside ``torch.cuda.graph`` does not invalidate the capture),
and restores it after, also on errors. Checked against a stand-in driver module: no GPU."""

from __future__ import annotations

import types

import pytest

from kernelkit._backends.cuda import driver


class _FakeDriver:
    CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_RELAXED="relaxed")

    def __init__(self) -> None:
        self.mode = "global"
        self.calls: list[str] = []

    def cuThreadExchangeStreamCaptureMode(self, mode):  # noqa: N802 - the driver's name
        previous, self.mode = self.mode, mode
        self.calls.append(mode)
        return 0, previous


def test_capture_mode_is_relaxed_inside_and_restored_after(monkeypatch):
    fake = _FakeDriver()
    monkeypatch.setattr(driver, "drv", lambda: fake)
    with driver.outside_capture():
        assert fake.mode == "relaxed"
    assert fake.mode == "global" and fake.calls == ["relaxed", "global"]
    with pytest.raises(RuntimeError), driver.outside_capture():
        raise RuntimeError("load failed")
    assert fake.mode == "global"


def test_a_driver_without_the_call_is_left_alone(monkeypatch):
    monkeypatch.setattr(driver, "drv", lambda: types.SimpleNamespace())
    with driver.outside_capture():
        pass
