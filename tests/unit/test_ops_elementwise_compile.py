"""Kernels that index an input's shape and strides compile for CUDA without a stack frame
(NVRTC from pip, no GPU): elementwise's strided path, and a user kernel calling
``elem_to_loc(e, x_shape, x_strides, x_ndim)``. A shape or stride array indexed at run time is
copied to local memory in every thread (384 bytes for three inputs): the strided path ran a bias
add 12x slower than torch before its indices were made constants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._records import ArgFacts, Problem


def _problem(sel, dtype):
    args = tuple(
        dataclasses.replace(a, dtype=dtype) if a.kind == "array" else a for a in sel.problem.args
    )
    return dataclasses.replace(sel.problem, args=args)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize(("dtype", "vec"), [("bfloat16", 8), ("float32", 4)])
def test_the_strided_elementwise_kernel_has_no_stack_frame(cuda, arch, nd, dtype, vec):
    from test_ops_matmul_mma import ptxas_report

    f = ops.elementwise("y = a * silu(b) + c")
    shape = (4, 6, 16)[-nd:]
    a = np.ones(shape, np.float32)
    b = np.ones(shape[-1:], np.float32)  # broadcast by the kernel: the strided path
    sel = f.explain(a, b, a)
    assert sel.choice.impl.endswith("/strided")
    k = f._kernel(False, (False, False, False))
    template = [("TY0", dtype), ("IDX", "int32"), *((f"TX{i}", dtype) for i in range(3)),
                ("VEC", vec), ("ND", nd), ("XND0", nd), ("XND1", 1), ("XND2", nd)]  # fmt: skip
    _, report = ptxas_report(cuda, k, _problem(sel, dtype), template, arch)
    assert report.get("bytes stack frame", 0) == 0, report
    assert report.get("bytes spill stores", 0) == 0, report


def test_elem_to_loc_of_an_inputs_own_shape_has_no_stack_frame(cuda):
    from test_ops_matmul_mma import ptxas_report

    k = kernelkit.kernel(
        "elem_to_loc_sum", ["a", "b", "c"], ["y"],
        """
        const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (e < y_shape[0] * y_shape[1])
          y[e] = a[elem_to_loc(e, a_shape, a_strides, a_ndim)] +
                 b[elem_to_loc(e, b_shape, b_strides, b_ndim)] +
                 c[elem_to_loc(e, c_shape, c_strides, c_ndim)];
        """,
    )  # fmt: skip
    args = tuple(ArgFacts(n, "array", "float32", (4, 8), (8, 1)) for n in "abc")
    p = Problem("elem_to_loc_sum", (*args, ArgFacts("y", "array", "float32", is_output=True)))
    _, report = ptxas_report(cuda, k, p, [], "sm_90")
    assert report.get("bytes stack frame", 0) == 0, report
