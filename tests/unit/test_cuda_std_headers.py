"""Standard C/C++ headers under NVRTC (kernelkit's std/ directory over libcu++): a header a body
includes, with the names real kernels use from it, compiles for sm_90 without a GPU."""

from __future__ import annotations

import pytest
from std_header_uses import USES

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

F32 = DTYPES["float32"]


@pytest.mark.parametrize("header", sorted(USES))
def test_standard_header_compiles_under_nvrtc(cuda, header):
    if "sm_90" not in cuda.compile_targets():
        pytest.skip("this NVRTC cannot target sm_90")
    k = kernelkit.kernel(
        "std_" + header.replace(".", "_"), ["x"], ["y"], USES[header], header=f"#include <{header}>"
    )
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [("array", F32)], [F32], (), False
    )
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.binary


USING_STD = """
#include <cmath>
#include <algorithm>
using namespace std;
"""


def test_using_namespace_std_keeps_min_max_unambiguous(cuda):
    """``using namespace std;`` then unqualified max/min (CUDA's non-template overloads win)."""
    body = "y[0] = max(x[0], x[1]) + min(1, 2) + std::sqrt(x[2]);"
    k = kernelkit.kernel("std_using", ["x"], ["y"], body, header=USING_STD)
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch("sm_90"), [("array", F32)], [F32], (), False
    )
    assert cuda.compile(req).binary


def test_standard_headers_join_the_cache_key(cuda):
    """A body that includes a header carries a digest of kernelkit's std/ headers and CCCL's
    version; one that includes nothing does not."""
    target = cuda.target_for_arch("sm_90")
    plain = kernelkit.kernel("std_key", ["x"], ["y"], "y[0] = x[0];")
    inc = kernelkit.kernel("std_key", ["x"], ["y"], "y[0] = x[0];", header="#include <cmath>")
    reqs = [
        render_request(k.spec, cuda, target, [("array", F32)], [F32], (), False)[1]
        for k in (plain, inc)
    ]
    assert [n for n, _ in reqs[0].headers] == []
    assert [n for n, _ in reqs[1].headers] == ["std/"]
