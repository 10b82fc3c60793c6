"""assert() in a kernel on the CPU backend: a failed one is a KernelFault naming it (the GPU's
device assert stops the launch; the C library's would abort the Python process), with or
without an include, and NDEBUG turns it off as in C."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

X = np.array([1.0, 2.0], np.float32)
CALL = {"output_shapes": [(1,)], "output_dtypes": [np.float32], "grid": (1, 1, 1),
        "threadgroup": (1, 1, 1), "backend": "cpu"}  # fmt: skip


@pytest.mark.parametrize("header", ["", "#include <cassert>", "#include <assert.h>"])
def test_a_failed_assert_is_a_fault_naming_it(header):
    k = kernelkit.kernel(f"assert_fails{len(header)}", ["x"], ["y"],
                         "assert(x[0] > 100.0f); y[0] = x[0];", header=header)  # fmt: skip
    with pytest.raises(kernelkit.KernelFault, match=r"assertion `x\[0\] > 100.0f' failed"):
        k([X], **CALL)
    ok = kernelkit.kernel(f"assert_holds{len(header)}", ["x"], ["y"],
                          "assert(x[0] > 0.0f); y[0] = x[0];", header=header)  # fmt: skip
    assert ok([X], **CALL)[0].tolist() == [1.0]  # the process lives on


def test_ndebug_turns_assert_off():
    k = kernelkit.kernel("assert_ndebug", ["x"], ["y"], "assert(x[0] > 100.0f); y[0] = x[0];",
                         header="#define NDEBUG\n#include <cassert>")  # fmt: skip
    assert k([X], **CALL)[0].tolist() == [1.0]
