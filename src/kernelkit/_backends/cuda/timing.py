"""The autotuner's clock on NVIDIA GPUs: CUDA events on a private stream, and CUDA graphs.

Events measure device time between two points of a stream, so host-side work (Python, argument
packing) outside the launches is not counted. A kernel of a few microseconds is shorter than the
host needs to launch it, so timing launches one by one measures the host; ``capture`` records
many launches as one graph that the device replays back to back, and the tuner divides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._records import Target
from ...backend import Backend, Timer
from . import driver

__all__ = ["CUDATimer"]


class CUDATimer(Timer):
    """Events on a non-blocking stream of the target's device; graphs for ``capture``."""

    def __init__(self, backend: Backend, target: Target) -> None:
        mod = driver.drv()
        self.device = target.device
        with driver.on_device(self.device):
            flags = mod.CUstream_flags.CU_STREAM_NON_BLOCKING
            self._stream = driver.check(mod.cuStreamCreate(flags), "cuStreamCreate")
            event = mod.CUevent_flags.CU_EVENT_DEFAULT
            self._start = driver.check(mod.cuEventCreate(event), "cuEventCreate")
            self._end = driver.check(mod.cuEventCreate(event), "cuEventCreate")
        super().__init__(backend, int(self._stream))
        self.cache_bytes = driver.attribute(self.device, "L2_CACHE_SIZE")
        self._graphs: list[tuple[Any, Any]] = []

    def start(self) -> None:
        mod = driver.drv()
        with driver.on_device(self.device):
            # every stream: restored inputs and copies come from the framework's own stream
            driver.check(mod.cuCtxSynchronize(), "cuCtxSynchronize")
            driver.check(mod.cuEventRecord(self._start, self._stream), "cuEventRecord")

    def stop(self) -> float:
        mod = driver.drv()
        with driver.on_device(self.device):
            driver.check(mod.cuEventRecord(self._end, self._stream), "cuEventRecord")
            driver.check(mod.cuEventSynchronize(self._end), "cuEventSynchronize")
            ms = driver.check(mod.cuEventElapsedTime(self._start, self._end), "cuEventElapsedTime")
        return float(ms) / 1e3

    def capture(self, launches: Callable[[int], None]) -> Callable[[], None] | None:
        mod = driver.drv()
        mode = mod.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        with driver.on_device(self.device):
            driver.check(mod.cuCtxSynchronize(), "cuCtxSynchronize")
            driver.check(mod.cuStreamBeginCapture(self._stream, mode), "cuStreamBeginCapture")
            try:
                launches(self.stream)
            except Exception:  # noqa: BLE001 - not capturable (a sync, an allocation): no graph
                mod.cuStreamEndCapture(self._stream)
                mod.cuCtxSynchronize()
                return None
            err, graph = mod.cuStreamEndCapture(self._stream)
            if int(err) != 0:
                return None
            err, graph_exec = mod.cuGraphInstantiate(graph, 0)
            if int(err) != 0:
                mod.cuGraphDestroy(graph)
                return None
        self._graphs.append((graph_exec, graph))
        launch, stream, device = mod.cuGraphLaunch, self._stream, self.device

        def replay() -> None:
            with driver.on_device(device):
                driver.check(launch(graph_exec, stream), "cuGraphLaunch")

        return replay

    def close(self) -> None:
        mod = driver.drv()
        try:
            with driver.on_device(self.device):
                mod.cuCtxSynchronize()
                for graph_exec, graph in self._graphs:
                    mod.cuGraphExecDestroy(graph_exec)
                    mod.cuGraphDestroy(graph)
                self._graphs.clear()
                mod.cuEventDestroy(self._start)
                mod.cuEventDestroy(self._end)
                mod.cuStreamDestroy(self._stream)
        except Exception:  # noqa: BLE001, S110 - best effort: a faulted context cannot free anything
            pass
