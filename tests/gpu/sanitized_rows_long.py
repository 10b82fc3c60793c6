"""The long-row kernels (rows_smem, rows_cluster, rows_split) once each on small awkward
shapes, for compute-sanitizer: every op, float32 and bfloat16, the vector and the element path,
every cluster size, rows_split's unrolls and both cache hints, NaN-poisoned outputs checked
against float64. Exits 1 naming the failed cases.

    PYTHONPATH=src python3 tests/gpu/sanitized_rows_long.py [OP ...]
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 PYTHONPATH=src compute-sanitizer --tool memcheck \\
        --report-api-errors no --leak-check no python3 tests/gpu/sanitized_rows_long.py
"""

from __future__ import annotations

import sys

import torch

from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops._rows_long import CLUSTER_SIZES

F = torch.nn.functional
TOL = {torch.float32: 2e-5, torch.bfloat16: 1.6e-2}


def case(name: str, n: int, rows: int, dtype: torch.dtype, cl: int, block: int, u: int = 0,
         hint: int = 1) -> bool:  # fmt: skip
    """cl: blocks a row (rows_smem, rows_cluster); u > 0: rows_split with U = u, HINT = hint."""
    g = torch.Generator(device="cuda").manual_seed(n * 31 + cl)
    x = torch.randn(rows, n, device="cuda", generator=g).to(dtype)
    w = torch.randn(n, device="cuda", generator=g).to(dtype)
    b = torch.randn(n, device="cuda", generator=g).to(dtype)
    xd, wd, bd = x.double(), w.double(), b.double()
    fn, args, ref = {
        "softmax": (ops.softmax, (x,), torch.softmax(xd, -1)),
        "rms_norm": (ops.rms_norm, (x, w, 1e-5), F.rms_norm(xd, (n,), wd, 1e-5)),
        "layer_norm": (ops.layer_norm, (x, w, b, 1e-5), F.layer_norm(xd, (n,), wd, bd, 1e-5)),
    }[name]
    out = torch.full_like(x, float("nan"))
    impl = "rows_smem" if cl == 1 else "rows_cluster"
    values = {"BLOCK": block, "CL": cl, "threadgroup": (block,)}
    if u:
        impl, values = "rows_split", {"BLOCK": block, "U": u, "HINT": hint, "threadgroup": (block,)}
    with force(name, impl, values):
        fn(*args, out=out)
    torch.cuda.synchronize()
    err = ((out.double() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
    ok = bool(torch.isfinite(out).all()) and err <= TOL[dtype]
    how = f"U={u} HINT={hint}" if u else f"CL={cl}"
    print(f"{name:<11}{n:>7} x {rows} {str(dtype)[6:]:<9} {how} BLOCK={block}: err {err:.1e}"
          f"{'' if ok else '  FAILED'}")  # fmt: skip
    return ok


def main(names: list[str]) -> int:
    """Every case of the ops named (all three when none is)."""
    ops_all = ("softmax", "rms_norm", "layer_norm")
    if unknown := set(names) - set(ops_all):
        print(f"unknown ops {sorted(unknown)}: choose from {ops_all}")
        return 2
    cases = []
    for name in names or ops_all:
        for dtype in (torch.float32, torch.bfloat16):
            cases += [(name, 1000, 3, dtype, 1, 128), (name, 1001, 2, dtype, 1, 64)]
            cases += [(name, 4099, 2, dtype, cl, 64) for cl in CLUSTER_SIZES]
            cases += [(name, 4096, 3, dtype, cl, 128) for cl in CLUSTER_SIZES]
            cases.append((name, 7, 2, dtype, 8, 32))  # ranks past the row hold nothing
            cases += [(name, n, 3, dtype, 1, 64, u, h) for n in (4099, 40000) for u in (2, 8)
                      for h in (0, 1)]  # fmt: skip
    failed = [c for c in cases if not case(*c)]
    print(f"{len(cases)} cases, {len(failed)} failed;")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
