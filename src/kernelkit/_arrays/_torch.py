"""PyTorch tensors (CUDA and CPU)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .._dtypes import DType, normalize_dtype
from .._errors import ArgumentTypeError
from . import CHECKERS, CHECKS_BLOCKED, DLPACK_CPU, DLPACK_CUDA, Adapter, ArrayInfo, row_strides

TORCH_DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        TORCH_DTYPES[_name] = getattr(torch, _name)

_CPU = torch.device("cpu")
_EMPTY_LIKE = functools.partial(torch.empty_like, memory_format=torch.contiguous_format)
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


class TorchAdapter(Adapter):
    framework = "torch"
    strides_in_signature = True
    # get_device() is -1 for CPU, meta and other non-CUDA tensors alike: is_cuda/is_cpu tell
    # the layout: a sparse tensor has dtype and device too, but no strides or data pointer
    key_fields = (
        "{x}.dtype",
        "{x}.get_device()",
        "{x}.dim() == 0",
        ("{x}.is_cuda", "{x}.is_cpu"),
        "{x}.layout",
    )

    def info(self, x: torch.Tensor, what: str) -> ArrayInfo:
        if x.layout is not torch.strided:
            raise ArgumentTypeError(
                f"{what} is a {x.layout} torch tensor; kernels take dense (strided) tensors: "
                "pass x.to_dense()"
            )
        dev = x.device
        if dev.type == "cuda":
            dtype_ = DLPACK_CUDA
        elif dev.type == "cpu":
            dtype_ = DLPACK_CPU
        else:
            raise ArgumentTypeError(f"{what} is a torch tensor on {dev}, which no backend runs on")
        return ArrayInfo(
            dtype=normalize_dtype(x.dtype, what),
            shape=tuple(x.shape),
            strides=tuple(x.stride()),
            device_type=dtype_,
            device_index=dev.index or 0,
            contiguous=x.is_contiguous(),
        )

    def layout(self, x: torch.Tensor) -> tuple[Any, Any]:
        return x.shape, x.stride()

    pointer_expr = "{x}.data_ptr()"
    pointer = staticmethod(torch.Tensor.data_ptr)  # type: ignore[assignment]
    is_contiguous = staticmethod(torch.Tensor.is_contiguous)  # type: ignore[assignment]
    contiguous = staticmethod(torch.Tensor.contiguous)  # type: ignore[assignment]

    def allocator(self, dtype: DType, device_type: int, device_index: int) -> Callable[[Any], Any]:
        tdt = TORCH_DTYPES.get(dtype.name)
        if tdt is None:
            raise ArgumentTypeError(f"[kernel] torch has no dtype {dtype.name} for an output")
        device = torch.device("cuda", device_index) if device_type == DLPACK_CUDA else _CPU
        # new_empty of an empty tensor of the dtype and device: no keyword parsing per call
        # (5.2 µs against torch.empty(shape, dtype=, device=)'s 6.5 on an H100 host)
        return torch.empty(0, dtype=tdt, device=device).new_empty

    def like(self, dtype: DType) -> tuple[Any, Callable[[Any], Any]] | None:
        tdt = TORCH_DTYPES.get(dtype.name)
        # contiguous_format: standard strides even where the input's size-1 dims have others
        return None if tdt is None else (tdt, _EMPTY_LIKE)

    plain_like = staticmethod(torch.empty_like)

    def fixed_empty(
        self, dtype: DType, device_type: int, device_index: int, shape: tuple[int, ...]
    ) -> tuple[Callable[[], Any], ...] | None:
        make = _fixed_empties().get(device_type)
        tdt = TORCH_DTYPES.get(dtype.name)
        if make is None or tdt is None or (device_type == DLPACK_CUDA and device_index != 0):
            return None
        size, stride = shape, row_strides(shape)
        device = _CPU if device_type == DLPACK_CPU else torch.device("cuda", 0)
        # torch's own allocators fill new memory with NaN under deterministic algorithms
        # (``torch.utils.deterministic.fill_uninitialized_memory``); Inductor's do not: then
        # torch's (the flags are read in C, by the Call, on every allocation)
        filled = functools.partial(torch.empty_strided, size, stride, dtype=tdt, device=device)
        return functools.partial(make, size, stride, tdt), filled, _deterministic, _fills

    def fill(self, x: torch.Tensor, value: Any) -> None:
        x.fill_(value)

    def stream_getter(self, device_type: int, device_index: int) -> Callable[[], int]:
        if device_type == DLPACK_CUDA and _raw_stream is not None:
            return functools.partial(_raw_stream, device_index)  # no Python frame per call
        return super().stream_getter(device_type, device_index)

    def stream(self, device_index: int) -> int:
        if _raw_stream is not None:
            return _raw_stream(device_index)
        return torch.cuda.current_stream(device_index).cuda_stream


# the two flags (C getters: no Python frame where the Call reads them)
_deterministic = getattr(
    torch._C, "_get_deterministic_algorithms", torch.are_deterministic_algorithms_enabled
)
_fills = getattr(torch._C, "_get_deterministic_fill_uninitialized_memory", lambda: True)


@functools.cache
def _fixed_empties() -> dict[int, Callable[..., Any]]:
    """torch's allocators by (size, stride, dtype) that skip its argument parser and
    dispatcher (Inductor's ``empty_strided_cpu``/``empty_strided_cuda``, in
    ``torch._C._dynamo.guards``: on an H200 host 2.2 µs against ``torch.empty_like``'s 3.6), by
    DLPack device type, each checked once on a probe; none where this torch lacks them or they
    fail the probe (not public API: a release that changes them turns them off, not wrong).
    CUDA's allocates on the current device: kept only where one device is visible (index 0)."""
    found: dict[int, Callable[..., Any]] = {}
    try:
        from torch._C._dynamo import guards
    except ImportError:
        return found
    makers = [(DLPACK_CPU, "_empty_strided_cpu", _CPU)]
    if torch.cuda.is_available() and torch.cuda.device_count() == 1:
        makers.append((DLPACK_CUDA, "_empty_strided_cuda", torch.device("cuda", 0)))
    for device_type, name, device in makers:
        make = getattr(guards, name, None)
        try:
            y = make((2, 3), (3, 1), torch.float16) if make is not None else None
        except Exception:  # noqa: BLE001, S112 - another signature: not used
            continue
        if (
            make is not None
            and isinstance(y, torch.Tensor)
            and y.device == device
            and y.dtype == torch.float16
            and tuple(y.shape) == (2, 3)
            and y.stride() == (3, 1)
            and not y.requires_grad
        ):
            found[device_type] = make
    return found


def _checker() -> Callable[[tuple], Any] | None:
    """``checker(tensors)`` for ``CHECKERS`` (the ops' recent calls, ``ops._prepared.Recent``,
    and the kernels' calls repeated in C, ``_pipeline.repeat``): a check made in C that later
    tensors have these tensors' Python class, dispatch keys (device, and the thread's dispatch
    state: a torch.func transform or inference mode changes them), dtype,
    device index, requires_grad, shape and strides: torch's ``TensorGuards``, with which Dynamo
    guards compiled graphs, every size and stride static. None for tensors of which one requires
    grad (the signature and the route serve those), inside a torch.func transform, or under a
    torch dispatch mode (its keys would be part of the check: it would serve nothing). The
    checker itself is None where this torch has no ``TensorGuards`` that passes a probe (it is
    not public API: a release that changes it turns the recent calls off, not wrong)."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        def checker(tensors: tuple) -> Any:
            if _blocked() or any(t.requires_grad for t in tensors):
                return None
            sizes: Any = [list(t.shape) for t in tensors]  # every one static
            strides: Any = [list(t.stride()) for t in tensors]
            return TensorGuards(
                *tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides
            ).check

        probe = torch.zeros(2, 3)
        check = checker((probe, probe))
        wrong = (probe.t(), torch.zeros(3, 2), probe.double(), probe[:, :2], torch.zeros(2, 3, 1))
        if not check(torch.ones(2, 3), probe) or any(check(probe, w) for w in wrong):
            return None
    except Exception:  # noqa: BLE001 - no usable TensorGuards: no recent calls
        return None
    return checker


_CHECKER: list[Callable[[tuple], Any] | None] = []  # _checker()'s result, once decided


def checker() -> Callable[[tuple], Any] | None:
    """``_checker()``, made (and probed) on first use, not when the adapter is set up (about
    1.3 ms at ``import kernelkit`` on the 2-core VM). A first use under a torch dispatch mode or
    inside a torch.func transform (a compiled graph's first run: its tracer's mode) decides
    nothing: the probe's tensors would be the mode's, and its checks would fail, which kept as
    the answer turned every recent call and every call repeated in C off for the process."""
    if _CHECKER:
        return _CHECKER[0]
    if _blocked():
        return None  # asked again outside
    found = _checker()
    if not _CHECKER:
        _CHECKER.append(found)
    return _CHECKER[0]


def _blocked() -> bool:
    """Under a torch dispatch mode or inside a torch.func transform (``CHECKS_BLOCKED``)."""
    return bool(torch._C._len_torch_dispatch_stack()) or (
        torch._C._functorch.peek_interpreter_stack() is not None
    )


def _first_use(tensors: tuple) -> Any:
    found = checker()
    return None if found is None else found(tensors)


# asked only when a recent call or a call repeated in C is made, never per call
CHECKERS[torch.Tensor] = CHECKERS[torch.nn.Parameter] = _first_use
CHECKS_BLOCKED.append(_blocked)
