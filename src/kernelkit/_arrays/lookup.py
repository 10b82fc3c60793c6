"""An array's adapter, found by its type with one dictionary lookup (``BY_TYPE``); the module of
a framework is imported the first time an array of that framework is seen."""

from __future__ import annotations

import sys
from typing import Any

from .._errors import ArgumentTypeError
from . import BY_TYPE, KEY_FN, SIGNERS, Adapter, NumpyScalarAdapter

__all__ = ["adapter_for"]


def adapter_for(x: Any, what: str) -> Adapter:
    """The adapter for ``x``'s type (cached per type); TypeError naming ``what`` if none fits."""
    adapter = BY_TYPE.get(type(x))
    if adapter is None:
        adapter = _resolve(type(x), x, what)
        _register(type(x), adapter)
    return adapter


def _register(tp: type, adapter: Adapter) -> None:
    BY_TYPE[tp] = adapter
    KEY_FN[tp] = adapter.key
    sign = adapter.signer(tp)
    if sign is not None:
        SIGNERS.setdefault(tp, sign)


def preload() -> None:
    """Set up torch's adapter now if torch is already imported (``import kernelkit`` calls it,
    unless ``KERNELKIT_PRELOAD=0``), so that a first call on a tensor imports nothing: ~0.3 ms
    of a cold first call, ~1 ms where Python keeps no bytecode cache. Without torch, nothing."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    if isinstance(tensor, type) and tensor not in BY_TYPE:
        from ._torch import TorchAdapter

        _register(tensor, TorchAdapter())


def _is_numpy_scalar(x: Any) -> bool:
    import numpy as np

    return isinstance(x, np.generic)


def _resolve(tp: type, x: Any, what: str) -> Adapter:
    module = tp.__module__.split(".")[0]
    if _is_numpy_scalar(x):
        return NumpyScalarAdapter()
    if module == "torch":
        from ._torch import TorchAdapter

        return TorchAdapter()
    if module == "cupy":
        from ._cupy import CupyAdapter

        return CupyAdapter()
    if module in ("jax", "jaxlib"):
        from ._jax import JaxAdapter

        return JaxAdapter()
    if tp.__module__ == "kernelkit._arrays._abstract":
        from ._abstract import AbstractAdapter

        return AbstractAdapter()
    import numpy as np

    if issubclass(tp, np.ndarray):
        from ._numpy import NumpyAdapter

        return NumpyAdapter()
    if (
        hasattr(x, "__cuda_array_interface__")
        or hasattr(x, "__dlpack__")
        or hasattr(x, "__array_interface__")
    ):
        from ._generic import GenericAdapter

        return GenericAdapter(adapter_for)
    raise ArgumentTypeError(
        f"{what} has type {tp.__module__}.{tp.__qualname__}, which is not an array "
        "kernelkit understands (torch, CuPy, JAX, NumPy, or anything with __dlpack__, "
        "__cuda_array_interface__ or __array_interface__)"
    )
