"""Objects that only speak an interchange protocol (__dlpack__, __cuda_array_interface__,
__array_interface__): viewed without a copy through an installed framework, whose arrays the
results then are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import DLPACK_CPU, Adapter


def view(x: Any) -> Any:
    """A framework array sharing ``x``'s memory."""
    if hasattr(x, "__cuda_array_interface__"):
        try:
            import cupy

            return cupy.asarray(x)
        except ImportError:
            import torch

            return torch.as_tensor(x, device="cuda")
    if hasattr(x, "__dlpack__"):
        device_type = x.__dlpack_device__()[0] if hasattr(x, "__dlpack_device__") else DLPACK_CPU
        if device_type == DLPACK_CPU:
            import numpy as np

            return np.from_dlpack(x)
        try:
            import torch

            return torch.from_dlpack(x)
        except ImportError:
            import cupy

            return cupy.from_dlpack(x)
    import numpy as np

    return np.asarray(x)


class GenericAdapter(Adapter):
    framework = "generic"
    shape_attribute = False

    def __init__(self, adapter_for: Callable[[Any, str], Adapter]) -> None:
        self._adapter_for = adapter_for  # lookup.adapter_for (which imports this module)

    def layout(self, x: Any) -> Any:
        a, v = self._inner(x)
        return a.layout(v)

    def _inner(self, x: Any) -> tuple[Adapter, Any]:
        v = view(x)
        return self._adapter_for(v, "array"), v

    def key(self, x: Any) -> Any:
        a, v = self._inner(x)
        return (type(v), a.key(v))

    def info(self, x: Any, what: str) -> Any:
        a, v = self._inner(x)
        return a.info(v, what)

    def pointer(self, x: Any) -> int:
        a, v = self._inner(x)
        return a.pointer(v)

    def output_pointer(self, what: str) -> Any:
        def pointer(x: Any) -> int:
            a, v = self._inner(x)
            return a.output_pointer(what)(v)

        return pointer

    def is_contiguous(self, x: Any) -> bool:
        a, v = self._inner(x)
        return a.is_contiguous(v)

    def contiguous(self, x: Any) -> Any:
        a, v = self._inner(x)
        return a.contiguous(v)

    def prepare(self, x: Any) -> Any:
        return view(x)
