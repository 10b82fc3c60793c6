"""``rows_stream`` without a device: listed only (the rules never choose it), its configs
refused by name where two slices do not fit or a value is not offered, its grid (ceil(rows / R)
clusters), and every cluster size's kernel compiled by NVRTC for sm_90 (the bulk-copy path)
without spills, in each op and dtype."""

from __future__ import annotations

import pytest
from test_ops_rows_long_select import H100, problem
from test_ops_rows_split_compile import ALIGNED, OPS, _problem

from kernelkit._select.records import Config
from kernelkit._select.select import select
from kernelkit.ops import _rows_stream, _softmax
from kernelkit.ops._rows_stream import config


def test_listed_only_configs_refused_by_name_and_the_grid():
    p = problem(64, 262144)
    assert select(_softmax.OP, p, H100).choice.impl != "softmax/rows_stream"
    assert "bytes of slices" in (_rows_stream.fits(p, config(512, 1, 4)) or "")
    assert _rows_stream.fits(problem(64, 65536), config(512, 1, 1)) is None  # one slice: 128 KiB
    assert _rows_stream.fits(problem(64, 65536), config(512, 1, 2)) is not None
    refused = (((512, 8, 5), "R = 5"), ((512, 5, 2), "CL = 5"), ((100, 8, 2), "BLOCK = 100"))
    for values, said in refused:
        c = Config(dict(zip(("BLOCK", "CL", "R"), values, strict=True)), (values[0],))
        assert said in (_rows_stream.fits(p, c) or ""), values
    assert _rows_stream.fits(p, config(512, 8, 4)) is None  # two slices of 32 KiB
    assert _rows_stream.grid(p, config(512, 8, 4)) == (16 * 8 * 512, 1, 1)
    assert _rows_stream.grid(problem(9, 4096), config(256, 2, 4)) == (3 * 2 * 256, 1, 1)
    # float32 rows of 262144 fit only clusters of 16 (two slices of 64 KiB)
    p32 = problem(64, 262144, "float32")
    assert _rows_stream.fits(p32, config(512, 8, 4)) is not None
    assert _rows_stream.fits(p32, config(512, 16, 4)) is None
    assert _rows_stream.match(problem(1, 1 << 21, "float32"), H100) is not None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_kernel_compiles_for_sm_90_without_spills(cuda, dtype):
    from test_ops_matmul_mma import ptxas_report

    for name, inputs in OPS.items():
        kernels = _rows_stream._kernels(name, inputs, ALIGNED[name])
        for cl in (1, 4, 16):
            block = 512
            template = [("BLOCK", block), ("CL", cl), ("ND", 2), ("T", dtype), ("WT", dtype)]
            p = _problem(kernels[cl].name, inputs, ["y"], dtype, 262144, rows=64)
            _, report = ptxas_report(cuda, kernels[cl], p, template, "sm_90")
            assert report.get("bytes spill stores", 0) == 0, (name, cl, report)
            assert report.get("bytes stack frame", 0) == 0, (name, cl, report)
