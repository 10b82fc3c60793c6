"""Every shipped ``matmul`` table row for the GPU the tests run on, run where it applies: torch
tensors of the row's dtype at both ends of its M range (M = 2048 for an open end), the row's N
and K, weight [N, K]; the selection must take the row (its implementation, from the table) and
the result must match float64, with the output poisoned first. The tuner checks each candidate
when it times it; this checks the rows as shipped, through the selection a user's call takes."""

from __future__ import annotations

import pytest

from kernelkit import ops
from kernelkit._select.tables import shipped_tables

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _rows() -> list:
    """The matmul rows whose device matches this GPU (by name and arch) and whose problem a plain
    ``ops.matmul(x, w, transpose_b=True)`` on torch tensors can make."""
    if not torch.cuda.is_available():
        return []
    name = torch.cuda.get_device_name()
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    found = []
    for e in shipped_tables().entries:
        exact = dict(e.exact)
        if e.op != "matmul" or (e.device_name and e.device_name not in name):
            continue
        if (e.arch and e.arch != arch) or exact.get("framework", "torch") != "torch":
            continue
        if exact.get("bias", "None") != "None" or exact.get("activation", "None") != "None":
            continue
        if exact.get("transpose_b", True) is not True:
            continue
        found.append(e)
    return found


def _ends(entry) -> list[tuple[int, int, int]]:
    spans = {f: (lo, hi) for f, lo, hi in entry.ranges}
    exact = dict(entry.exact)
    lo, hi = spans.get("M", (exact.get("M"), exact.get("M")))
    n, k = int(exact["N"]), int(exact["K"])
    return sorted({(int(lo or 1), n, k), (int(hi or 2048), n, k)})


def _narrowest(m: int, n: int, k: int, dtype: str):
    """The row a call at (m, n, k) takes: of this GPU's rows for (n, k, dtype) whose M range
    holds m, the narrowest (a narrower range is more specific: the tables' rule)."""
    holding = []
    for e in _rows():
        exact, spans = dict(e.exact), {f: (lo, hi) for f, lo, hi in e.ranges}
        lo, hi = spans.get("M", (None, None))
        if (int(exact["N"]), int(exact["K"]), str(exact.get("x.dtype"))) != (n, k, dtype):
            continue
        if (lo is None or lo <= m) and (hi is None or m <= hi):
            holding.append((float("inf") if lo is None or hi is None else hi - lo, e))
    return min(holding, key=lambda h: h[0])[1]


@pytest.mark.parametrize("entry", _rows(), ids=lambda e: e.where)
def test_each_row_of_this_gpu_runs_right_where_it_applies(entry):
    dtype = getattr(torch, str(dict(entry.exact).get("x.dtype", "bfloat16")))
    for m, n, k in _ends(entry):
        torch.manual_seed(m + n + k)
        x = torch.randn(m, k, device="cuda").to(dtype)
        w = (torch.randn(n, k, device="cuda") / k**0.5).to(dtype)
        choice = ops.matmul.explain(x, w, transpose_b=True).choice
        want = _narrowest(m, n, k, str(dtype).split(".")[-1])
        assert (choice.impl, choice.source) == (want.impl, "table"), (m, n, k, choice)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        ops.matmul(x, w, transpose_b=True, out=out)
        ref = x.double() @ w.double().T
        err = ((out.double() - ref).norm() / ref.norm()).item()
        assert err <= 1e-2, (m, n, k, entry.impl, err)
