"""The parity kernels' runner: a kernel that writes result k of thread t to r[k, t] (64-bit
integers), run on one backend into a poisoned array, its rows by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def results(
    kernel: Any,
    arrays: Sequence[Any],
    names: Sequence[str],
    device: str,
    threadgroup: int = 256,
    template: Sequence[tuple[str, Any]] = (),
) -> dict[str, np.ndarray]:
    import torch

    n = arrays[0].numel()
    r = torch.full((len(names), n), -7, dtype=torch.int64, device=device)  # poisoned
    kernel(list(arrays), out=[r], grid=(n, 1, 1), threadgroup=(threadgroup, 1, 1),
           template=list(template), backend="cuda" if device == "cuda" else "cpu")  # fmt: skip
    got = r.cpu().numpy()
    return {name: got[k] for k, name in enumerate(names)}
