"""The prelude's names never collide with a kernel's own: WARP_SIZE declared by PyTorch-style code
works, a body may still use the prelude's WARP_SIZE, and CUDA's version macros are those of a
recent CUDA on every backend (Apex's `#if CUDA_VERSION >= 9000` shuffle helper)."""

from __future__ import annotations

import numpy as np
import prelude_names_cases as cases

import kernelkit

X = np.random.default_rng(7).standard_normal(256).astype(np.float32)


def _call(k, arrays):
    (y,) = k(
        [arrays.put(X)],
        out=[arrays.put(np.zeros_like(X))],
        grid=(256, 1, 1),
        threadgroup=(64, 1, 1),
    )
    return arrays.get(y).astype(np.float64)


def test_apex_shuffle_helper_with_a_static_const_warp_size(arrays, backend):
    k = kernelkit.kernel("pn_apex", ["x"], ["y"], cases.APEX_BODY, header=cases.APEX_HEADER)
    ref = np.repeat(X.astype(np.float64).reshape(-1, 32).sum(axis=1), 32)
    np.testing.assert_allclose(_call(k, arrays), ref, rtol=1e-5, atol=1e-5)


def test_warp_size_declared_in_the_body_and_as_a_template_parameter(arrays, backend):
    k = kernelkit.kernel("pn_body", ["x"], ["y"], cases.BODY_DECLARES, header=cases.TEMPLATE_HEADER)
    np.testing.assert_allclose(_call(k, arrays), X.astype(np.float64) * 32, rtol=1e-6)


def test_body_uses_the_preludes_warp_size_and_version_macros(arrays, backend):
    k = kernelkit.kernel("pn_uses", ["x"], ["y"], cases.USES_PRELUDE)
    np.testing.assert_allclose(_call(k, arrays), X.astype(np.float64) + 32, rtol=1e-6)
