"""``rows_split``'s two kernels compiled by NVRTC without a device, for every arch the heuristic
may send them to (sm_75: plain loads; sm_80 and sm_90: the L2 cache hints), with the largest
unroll, without spills."""

from __future__ import annotations

import pytest

from kernelkit._records import ArgFacts, Problem
from kernelkit.ops import _rows_split

OPS = {"softmax": ("x",), "rms_norm": ("x", "w", "eps"), "layer_norm": ("x", "w", "b", "eps")}
ALIGNED = {"softmax": (), "rms_norm": ("w",), "layer_norm": ("w", "b")}


def _problem(name, inputs, outputs, dtype, n, rows=4, chunks=8):
    args = []
    for a in inputs:
        if a == "eps":
            args.append(ArgFacts("eps", "scalar", "float32"))
        elif a == "part":
            args.append(ArgFacts("part", "array", "float32", (rows, chunks, 3), (chunks * 3, 3, 1)))
        elif a == "x":
            args.append(ArgFacts("x", "array", dtype, (rows, n), (n, 1)))
        else:
            args.append(ArgFacts(a, "array", dtype, (n,), (1,)))
    for a in outputs:
        args.append(ArgFacts(a, "array", "float32" if a == "part" else dtype, is_output=True))
    return Problem(name, tuple(args), (("N", n), ("rows", rows)))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_both_kernels_compile_with_nvrtc_without_spills(cuda, arch, dtype):
    from test_ops_matmul_mma import ptxas_report

    for name, inputs in OPS.items():
        stats, apply = _rows_split._kernels(name, inputs, ALIGNED[name])
        # XS = 1 (sm_90): rows at strides, read in place (a 3-d x: one division a row)
        for xs in (0, 1) if arch == "sm_90" else (0,):
            common = [("BLOCK", 512), ("HINT", 1), ("ND", 2 + xs), ("T", dtype), ("U", 8),
                      ("XS", xs)]  # fmt: skip
            for k, ins, outs, template in (
                (stats[xs], ["x"], ["part"], common),
                (apply[xs], [*inputs, "part"], ["y"], [*common, ("WT", dtype)]),
            ):
                p = _problem(k.name, ins, outs, dtype, 262144)
                _, report = ptxas_report(cuda, k, p, template, arch)
                assert report.get("bytes spill stores", 0) == 0, (k.name, arch, xs, report)
                assert report.get("bytes stack frame", 0) == 0, (k.name, arch, xs, report)
