"""tests/backend/test_prelude_names.py's kernels compile under NVRTC for sm_90 (no GPU), and
WARP_SIZE is #undef'd only for code that declares it."""

from __future__ import annotations

import prelude_names_cases as cases
import pytest

import kernelkit
from kernelkit._dtypes import DTYPES
from kernelkit._pipeline.render import render_request

F32 = DTYPES["float32"]


def _request(cuda, body, header=""):
    k = kernelkit.kernel("pn", ["x"], ["y"], body, header=header)
    target = cuda.target_for_arch("sm_90")
    return render_request(k.spec, cuda, target, [("array", F32)], [F32], (), False)[1]


@pytest.mark.parametrize(
    ("body", "header", "undef"),
    [
        (cases.APEX_BODY, cases.APEX_HEADER, True),
        (cases.BODY_DECLARES, cases.TEMPLATE_HEADER, True),
        (cases.USES_PRELUDE, "", False),
    ],
    ids=["apex_static_const", "body_and_template", "uses_prelude"],
)
def test_compiles_under_nvrtc(cuda, body, header, undef):
    if "sm_90" not in cuda.compile_targets():
        pytest.skip("this NVRTC cannot target sm_90")
    req = _request(cuda, body, header)
    assert ("#undef WARP_SIZE" in req.source) == undef
    assert cuda.compile(req).binary


def test_apex_branch_is_the_sync_one(cuda):
    """Without CUDA_VERSION, NVRTC would take __shfl_xor (no such function on CUDA 9+)."""
    req = _request(cuda, cases.APEX_BODY, cases.APEX_HEADER)
    assert any(
        o.startswith("-DCUDA_VERSION=") and int(o.split("=")[1]) >= 12000 for o in req.options
    )
