"""Metal kernels (``kernelkit.metal_kernel``) run on every backend against float64 NumPy
references: random inputs, outputs poisoned with NaN so an unwritten element fails."""

from __future__ import annotations

import numpy as np
import pytest
from metal_catalog import (
    EXP,
    GATED_DELTA,
    GRID_SAMPLE,
    GRID_SAMPLE_GRAD,
    RMS_NORM,
    RMS_NORM_HEADER,
    ROPE,
    ROW_SUM,
    STRIDED_EXP,
    TOPK_ROUTER,
    UNCHANGED,
)

import kernelkit

RNG = np.random.default_rng(11)


def poisoned(arrays, shape, dtype=np.float32):
    return arrays.full(shape, np.nan, dtype)


def test_every_catalog_kernel_ran_unchanged():
    assert all(UNCHANGED.values()), {k: v for k, v in UNCHANGED.items() if not v}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_exp(arrays, dtype):
    k = kernelkit.metal_kernel("myexp", ["inp"], ["out"], EXP)
    a = RNG.standard_normal((37, 29)).astype(dtype)
    (y,) = k(
        [arrays.put(a)],
        output_shapes=[a.shape],
        output_dtypes=[dtype],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        template=[("T", dtype)],
        out=[poisoned(arrays, a.shape, dtype)],
    )
    rtol = 1e-6 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(arrays.get(y), np.exp(a.astype(np.float64)), rtol=rtol)


def test_exp_in_the_older_dict_form(arrays):
    k = kernelkit.metal_kernel(name="myexp", source=EXP)
    a = RNG.standard_normal(1000).astype(np.float32)
    out = k(
        inputs={"inp": arrays.put(a)},
        template={"T": np.float32},
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes={"out": a.shape},
        output_dtypes={"out": np.float32},
        ensure_row_contiguous=True,
    )
    assert list(out) == ["out"]
    np.testing.assert_allclose(arrays.get(out["out"]), np.exp(a.astype(np.float64)), rtol=1e-6)


def test_strided_exp_reads_a_transposed_view(arrays):
    k = kernelkit.metal_kernel(
        "myexp_strided", ["inp"], ["out"], STRIDED_EXP, ensure_row_contiguous=False
    )
    base = RNG.standard_normal((33, 20)).astype(np.float32)
    a = base.T  # not row-contiguous: the body walks its strides
    (y,) = k(
        [arrays.put(a)],
        output_shapes=[a.shape],
        output_dtypes=[np.float32],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        template=[("T", np.float32)],
        out=[poisoned(arrays, a.shape)],
    )
    np.testing.assert_allclose(arrays.get(y), np.exp(a.astype(np.float64)), rtol=1e-6)


def _grid_sample_ref(x, grid):
    x, grid = x.astype(np.float64), grid.astype(np.float64)
    n, h, w, _ = x.shape
    ix = ((grid[..., 0] + 1) * w - 1) / 2
    iy = ((grid[..., 1] + 1) * h - 1) / 2
    x0, y0 = np.floor(ix).astype(int), np.floor(iy).astype(int)
    out = np.zeros((*grid.shape[:3], x.shape[3]))
    b = np.arange(n)[:, None, None]
    for dx in (0, 1):
        for dy in (0, 1):
            xi, yi = x0 + dx, y0 + dy
            wgt = (1 - np.abs(ix - xi)) * (1 - np.abs(iy - yi))
            ok = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            val = x[b, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)] * ok[..., None]
            out += wgt[..., None] * val
    return out


def _grid_inputs(c=5):
    x = RNG.standard_normal((2, 9, 11, c)).astype(np.float32)
    # sample points whose four corners stay in the image (the forward reads them unmasked)
    g = RNG.uniform(-0.8, 0.8, (2, 4, 6, 2)).astype(np.float32)
    return x, g


def test_grid_sample_forward(arrays):
    k = kernelkit.metal_kernel("grid_sample", ["x", "grid"], ["out"], GRID_SAMPLE)
    x, g = _grid_inputs()
    shape = (*g.shape[:3], x.shape[3])
    (y,) = k(
        [arrays.put(x), arrays.put(g)],
        template=[("T", np.float32)],
        output_shapes=[shape],
        output_dtypes=[np.float32],
        grid=(int(np.prod(shape)), 1, 1),
        threadgroup=(256, 1, 1),
        out=[poisoned(arrays, shape)],
    )
    np.testing.assert_allclose(arrays.get(y), _grid_sample_ref(x, g), rtol=1e-5, atol=1e-5)


def test_grid_sample_backward_with_atomic_outputs(arrays):
    k = kernelkit.metal_kernel(
        "grid_sample_grad",
        ["x", "grid", "cotangent"],
        ["x_grad", "grid_grad"],
        GRID_SAMPLE_GRAD,
        atomic_outputs=True,
    )
    x, g = _grid_inputs(c=5)
    cot = RNG.standard_normal((*g.shape[:3], x.shape[3])).astype(np.float32)
    c_padded = 32
    x_grad, grid_grad = k(
        [arrays.put(x), arrays.put(g), arrays.put(cot)],
        template=[("T", np.float32)],
        output_shapes=[x.shape, g.shape],
        output_dtypes=[np.float32, np.float32],
        grid=(int(np.prod(g.shape[:3])) * c_padded, 1, 1),
        threadgroup=(256, 1, 1),
        init_value=0,
    )
    # reference gradients by central differences of the float64 forward (it is piecewise
    # bilinear; points stay off the pixel lines, so the difference is exact up to rounding)
    x64, g64, c64 = x.astype(np.float64), g.astype(np.float64), cot.astype(np.float64)
    ref_x = np.zeros_like(x64)
    eye = np.eye(x64.size).reshape(x64.size, *x64.shape)
    for i in range(x64.size):  # the forward is linear in x
        ref_x.flat[i] = np.sum(_grid_sample_ref(eye[i], g64) * c64)
    ref_g = np.zeros_like(g64)
    eps = 1e-6
    for i in range(g64.size):
        d = np.zeros_like(g64)
        d.flat[i] = eps
        up = np.sum(_grid_sample_ref(x64, g64 + d) * c64)
        down = np.sum(_grid_sample_ref(x64, g64 - d) * c64)
        ref_g.flat[i] = (up - down) / (2 * eps)
    np.testing.assert_allclose(arrays.get(x_grad), ref_x, rtol=1e-4, atol=1e-4)
    # MLX's kernel scales by W / 2 and H / 2 in integer arithmetic (the documentation's body)
    w, h = x.shape[2], x.shape[1]
    scale = np.array([(w // 2) / (w / 2), (h // 2) / (h / 2)])
    np.testing.assert_allclose(arrays.get(grid_grad), ref_g * scale, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("threads", [256, 96])
def test_row_sum_threadgroup_memory_and_simd_sum(arrays, threads):
    k = kernelkit.metal_kernel("row_sum", ["x"], ["out"], ROW_SUM)
    x = RNG.standard_normal((7, 1000)).astype(np.float32)
    (y,) = k(
        [arrays.put(x)],
        template=[("T", np.float32)],
        output_shapes=[(7,)],
        output_dtypes=[np.float32],
        grid=(threads, 7, 1),
        threadgroup=(threads, 1, 1),
        out=[poisoned(arrays, (7,))],
    )
    np.testing.assert_allclose(arrays.get(y), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)


def test_rms_norm_with_simd_sums_scalar_and_0d_inputs(arrays):
    k = kernelkit.metal_kernel(
        "rms_norm", ["x", "w", "eps", "scale"], ["y"], RMS_NORM, header=RMS_NORM_HEADER
    )
    x = RNG.standard_normal((5, 512)).astype(np.float32)
    w = RNG.standard_normal(512).astype(np.float32)
    scale = np.array(1.5, dtype=np.float32)  # 0-d: Metal reads it as `const constant float&`
    (y,) = k(
        [arrays.put(x), arrays.put(w), 1e-5, arrays.put(scale)],
        template=[("T", np.float32)],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(128, 5, 1),
        threadgroup=(128, 1, 1),
        out=[poisoned(arrays, x.shape)],
    )
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64**2).mean(1, keepdims=True) + 1e-5) * 1.5 * w
    np.testing.assert_allclose(arrays.get(y), ref, rtol=1e-5, atol=1e-5)


def test_topk_router_with_simd_max(arrays):
    k = kernelkit.metal_kernel("topk_router", ["logits"], ["indices", "weights"], TOPK_ROUTER)
    tokens, experts, top = 6, 64, 4
    logits = RNG.standard_normal((tokens, experts)).astype(np.float32)
    idx, wts = k(
        [arrays.put(logits)],
        template=[("T", np.float32), ("E", experts), ("K", top)],
        output_shapes=[(tokens, top), (tokens, top)],
        output_dtypes=[np.int32, np.float32],
        grid=(32, tokens, 1),
        threadgroup=(32, 1, 1),
        out=[arrays.full((tokens, top), 7777, np.int32), poisoned(arrays, (tokens, top))],
    )
    ref_idx = np.argsort(-logits.astype(np.float64), axis=1, kind="stable")[:, :top]
    sel = np.take_along_axis(logits.astype(np.float64), ref_idx, 1)
    ref_w = np.exp(sel - sel[:, :1]) / np.exp(sel - sel[:, :1]).sum(1, keepdims=True)
    np.testing.assert_array_equal(arrays.get(idx).astype(np.int64), ref_idx)
    np.testing.assert_allclose(arrays.get(wts), ref_w, rtol=1e-5, atol=1e-6)


def test_rope_with_simd_shuffle_xor(arrays):
    k = kernelkit.metal_kernel("rope", ["x", "base", "offset"], ["out"], ROPE)
    tokens, heads, dims = 5, 3, 64
    x = RNG.standard_normal((tokens, heads, dims)).astype(np.float32)
    (y,) = k(
        [arrays.put(x), 10000.0, 7],
        template=[("T", np.float32)],
        output_shapes=[x.shape],
        output_dtypes=[np.float32],
        grid=(dims, heads, tokens),
        threadgroup=(dims, 1, 1),
        out=[poisoned(arrays, x.shape)],
    )
    x64 = x.astype(np.float64)
    pos = (np.arange(tokens) + 7)[:, None, None]
    inv = 10000.0 ** (-np.arange(0, dims, 2) / dims)
    th = pos * inv[None, None, :]
    even, odd = x64[..., 0::2], x64[..., 1::2]
    ref = np.empty_like(x64)
    ref[..., 0::2] = even * np.cos(th) - odd * np.sin(th)
    ref[..., 1::2] = odd * np.cos(th) + even * np.sin(th)
    np.testing.assert_allclose(arrays.get(y), ref, rtol=1e-4, atol=1e-4)


def test_gated_delta_recurrent_step_keeps_lane_state(arrays):
    names = ["q", "k", "v", "g", "beta", "state_in"]
    k = kernelkit.metal_kernel("gated_delta", names, ["y", "state_out"], GATED_DELTA)
    b, t, hh, n_per, dv = 2, 6, 3, 2, 8
    dk = 32 * n_per
    q = RNG.standard_normal((b, t, hh, dk)).astype(np.float32) / 8
    kk = RNG.standard_normal((b, t, hh, dk)).astype(np.float32) / 8
    v = RNG.standard_normal((b, t, hh, dv)).astype(np.float32)
    g = RNG.uniform(0.8, 1.0, (b, t, hh)).astype(np.float32)
    beta = RNG.uniform(0.1, 0.9, (b, t, hh)).astype(np.float32)
    s0 = RNG.standard_normal((b, hh, dv, dk)).astype(np.float32) / 4
    y, s1 = k(
        [arrays.put(a) for a in (q, kk, v, g, beta, s0)],
        template=[("N_PER", n_per)],
        output_shapes=[v.shape, s0.shape],
        output_dtypes=[np.float32, np.float32],
        grid=(32, dv, b * hh),
        threadgroup=(32, 1, 1),
        out=[poisoned(arrays, v.shape), poisoned(arrays, s0.shape)],
    )
    s = s0.astype(np.float64).copy()
    ref_y = np.zeros(v.shape)
    for ti in range(t):
        s *= g[:, ti, :, None, None]
        kv = np.einsum("bhvk,bhk->bhv", s, kk[:, ti].astype(np.float64))
        delta = (v[:, ti] - kv) * beta[:, ti, :, None]
        s += delta[..., None] * kk[:, ti, :, None, :]
        ref_y[:, ti] = np.einsum("bhvk,bhk->bhv", s, q[:, ti].astype(np.float64))
    np.testing.assert_allclose(arrays.get(y), ref_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(arrays.get(s1), s, rtol=1e-4, atol=1e-5)


# Every catalog kernel also compiles with NVRTC (no GPU needed), so a GPU run is not the first
# time its CUDA translation meets the CUDA compiler.
F32, I32 = "float32", "int32"
NVRTC_CASES = {
    "features": (
        "FEATURES",
        "",
        ["inp"],
        ["out", "counts", "fmax_out"],
        [F32],
        [F32, I32, F32],
        [],
    ),
    "exp": (EXP, "", ["inp"], ["out"], [F32], [F32], [("T", F32)]),
    "exp_half": (EXP, "", ["inp"], ["out"], ["float16"], ["float16"], [("T", "float16")]),
    "grid_sample": (GRID_SAMPLE, "", ["x", "grid"], ["out"], [F32, F32], [F32], [("T", F32)]),
    "grid_sample_grad": (
        GRID_SAMPLE_GRAD,
        "",
        ["x", "grid", "cotangent"],
        ["x_grad", "grid_grad"],
        [F32] * 3,
        [F32, F32],
        [("T", F32)],
    ),
    "row_sum": (ROW_SUM, "", ["x"], ["out"], [F32], [F32], [("T", F32)]),
    "rms_norm": (
        RMS_NORM,
        RMS_NORM_HEADER,
        ["x", "w", "eps", "scale"],
        ["y"],
        [F32, F32, ("scalar", F32), ("scalar_array", F32)],
        [F32],
        [("T", F32)],
    ),
    "topk_router": (
        TOPK_ROUTER,
        "",
        ["logits"],
        ["indices", "weights"],
        [F32],
        [I32, F32],
        [("T", F32), ("E", 64), ("K", 4)],
    ),
    "rope": (
        ROPE,
        "",
        ["x", "base", "offset"],
        ["out"],
        [F32, ("scalar", F32), ("scalar", I32)],
        [F32],
        [("T", F32)],
    ),
    "gated_delta": (
        GATED_DELTA,
        "",
        ["q", "k", "v", "g", "beta", "state_in"],
        ["y", "state_out"],
        [F32] * 6,
        [F32, F32],
        [("N_PER", 2)],
    ),
    **{  # `c ? half : float` promotes under NVRTC's cuda_fp16.h / cuda_bf16.h too
        f"cond_sizes_{h}": ("COND_SIZES", "", ["x"], ["y"], [h], [I32], [("T", h)])
        for h in ("float16", "bfloat16")
    },
    **{
        f"cond_scale_{h}": (
            "BITLINEAR_SCALE",
            "",
            ["x", "weight_scale", "invert_weight_scales"],
            ["out"],
            [h, h, ("scalar", "bool")],
            [h],
            [("T", h)],
        )
        for h in ("float16", "bfloat16")
    },
}


@pytest.mark.parametrize("case", sorted(NVRTC_CASES))
def test_catalog_kernel_compiles_with_nvrtc(cuda, case):
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.render import render_request

    source, header, ins, outs, in_types, out_types, template = NVRTC_CASES[case]
    if source in ("FEATURES", "COND_SIZES", "BITLINEAR_SCALE"):  # defined below the table
        source = globals()[source]
    mk = kernelkit.metal_kernel(f"mtl_{case}", ins, outs, source, header=header)
    zero_d = tuple(n for n, t in zip(ins, in_types) if isinstance(t, tuple) and t[0] != "scalar")
    k = mk._kernel(tuple(ins), tuple(outs), zero_d, True)
    kinds = [t if isinstance(t, tuple) else ("array", t) for t in in_types]
    kinds += [("scalar", I32)] * 3  # the grid
    _, req = render_request(
        k.spec,
        cuda,
        cuda.target_for_arch("sm_80"),
        [(kind, DTYPES[d]) for kind, d in kinds],
        [DTYPES[d] for d in out_types],
        [(n, DTYPES[v] if isinstance(v, str) else v) for n, v in template],
        False,
    )
    artifact = cuda.compile(req)
    assert artifact.binary


# One SIMD-group exercising the rest of the subset; each output row is one feature.
FEATURES = """
    uint lane = thread_index_in_simdgroup;
    float x = inp[lane];
    float4 v = float4(x, 2.0f * x, float2(x + 1, x - 1));
    v.zw = v.xy * 0.5f;
    v.xy += float2(1);
    float3 c = v.xyz;
    out[0 * 32 + lane] = dot(c, float3(1, 2, 3)) + length(float2(3, 4));
    out[1 * 32 + lane] = clamp(x, -0.5f, 0.5f) + mix(0.0f, 10.0f, 0.25f)
                        + select(1.0f, 2.0f, x > 0);
    out[2 * 32 + lane] = simd_prefix_inclusive_sum(x);
    out[3 * 32 + lane] = simd_prefix_exclusive_sum(x);
    out[4 * 32 + lane] = simd_shuffle_up(x, 3) + simd_shuffle_down(x, 5) + simd_broadcast(x, 7);
    out[5 * 32 + lane] = float(simd_any(x > 1.0f)) + 2 * float(simd_all(x > -100.0f))
                        + 4 * float(static_cast<simd_vote::vote_t>(simd_ballot(lane < 4)) == 15);
    out[6 * 32 + lane] = as_type<float>(as_type<uint>(x)) + numeric_limits<float>::max() / 1e38f
                        + float(isnan(numeric_limits<float>::quiet_NaN()));
    half h = static_cast<half>(x) * 2.0h;
    half4 hv = half4(h);
    out[7 * 32 + lane] = float(hv.w) + float(metal::max(simd_max(x), simd_min(x)));
    atomic_fetch_add_explicit(&counts[lane % 4], 1, memory_order_relaxed);
    atomic_fetch_max_explicit(&fmax_out[0], x, memory_order_relaxed);
"""


def test_the_rest_of_the_msl_subset(arrays):
    k = kernelkit.metal_kernel(
        "features", ["inp"], ["out", "counts", "fmax_out"], FEATURES, atomic_outputs=True
    )
    x = RNG.standard_normal(32).astype(np.float32)
    out, counts, fmax = k(
        [arrays.put(x)],
        output_shapes=[(8, 32), (4,), (1,)],
        output_dtypes=[np.float32, np.int32, np.float32],
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        init_value=0,
    )
    out, x64 = arrays.get(out), x.astype(np.float64)
    v = np.stack([x64 + 1, 2 * x64 + 1, x64 / 2, x64])
    lane = np.arange(32)
    want = np.zeros((8, 32))
    want[0] = v[0] + 2 * v[1] + 3 * v[2] + 5
    want[1] = np.clip(x64, -0.5, 0.5) + 2.5 + np.where(x64 > 0, 2, 1)
    want[2] = np.cumsum(x64)
    want[3] = np.cumsum(x64) - x64
    want[4] = (
        x64[np.where(lane >= 3, lane - 3, lane)] + x64[np.where(lane + 5 < 32, lane + 5, lane)]
    )
    want[4] += x64[7]
    want[5] = float((x64 > 1).any()) + 2 + 4
    want[6] = x64 + np.float32(3.4028235e38) / np.float32(1e38) + 1
    want[7] = (x.astype(np.float16) * 2).astype(np.float64) + x64.max()
    np.testing.assert_allclose(out, want, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(arrays.get(counts), [8, 8, 8, 8])
    assert arrays.get(fmax)[0] == x.max()


def test_compile_errors_point_at_metal_lines(backend, arrays):
    k = kernelkit.metal_kernel(
        "broken",
        ["x"],
        ["y"],
        "uint i = thread_position_in_grid.x;\n\ny[i] = x[i] + undefined_name;",
    )
    x = arrays.put(np.ones(4, np.float32))  # on the backend's own memory (CUDA: a GPU tensor)
    with pytest.raises(kernelkit.CompileError) as e:
        k(
            [x], output_shapes=[x.shape], output_dtypes=[x.dtype], grid=(4, 1, 1),
            threadgroup=(4, 1, 1), backend=backend,
        )  # fmt: skip
    assert "Metal source line 3: y[i] = x[i] + undefined_name;" in str(e.value)


def test_verbose_prints_metal_and_cuda(capsys):
    k = kernelkit.metal_kernel("verbose_exp", ["inp"], ["out"], EXP)
    x = np.ones(4, np.float32)
    k([x], [x.shape], [x.dtype], (4, 1, 1), (4, 1, 1), [("T", np.float32)], verbose=True)
    printed = capsys.readouterr().out
    assert "T tmp = inp[elem];" in printed  # the Metal body
    assert "out[elem] = metal::exp(tmp);" in printed
    assert "kk_metal_grid_x" in printed  # the CUDA it became


def test_mlx_arrays_and_dtypes_are_accepted(monkeypatch):
    """Duck-typed: MLX arrays go through NumPy and come back as MLX arrays (a stand-in module
    here, MLX itself being Apple-only)."""
    import sys
    import types

    core = types.ModuleType("mlx.core")

    class array:  # noqa: N801 - MLX's name
        def __init__(self, data):
            self.data = np.asarray(data)

        def __array__(self, dtype=None, copy=None):
            return self.data

        ndim = property(lambda self: self.data.ndim)

    class Dtype:
        def __init__(self, name):
            self.name_ = name

        def __str__(self):
            return f"mlx.core.{self.name_}"

    array.__module__ = Dtype.__module__ = "mlx.core"
    core.array, core.float32 = array, Dtype("float32")
    mlx = types.ModuleType("mlx")
    mlx.core = core
    monkeypatch.setitem(sys.modules, "mlx", mlx)
    monkeypatch.setitem(sys.modules, "mlx.core", core)
    k = kernelkit.metal_kernel("mlx_exp", ["inp"], ["out"], EXP)
    a = core.array(np.zeros(5, np.float32))
    (y,) = k([a], [(5,)], [core.float32], (5, 1, 1), (32, 1, 1), [("T", core.float32)])
    assert isinstance(y, array)
    np.testing.assert_array_equal(np.asarray(y), np.ones(5, np.float32))
    x = np.zeros(5, np.float32)
    for _ in range(2):  # the second call takes the remembered path: MLX dtypes still convert
        (y,) = k([x], [(5,)], [core.float32], (5, 1, 1), (32, 1, 1), [("T", core.float32)])
        np.testing.assert_array_equal(y, np.ones(5, np.float32))


def _run1(k, arrays, x, **kw):
    (y,) = k([arrays.put(x)], output_shapes=[x.shape], output_dtypes=[x.dtype],
             grid=(x.size, 1, 1), threadgroup=(32, 1, 1), **kw)  # fmt: skip
    return arrays.get(y)


def test_a_module_with_one_refused_kernel_still_runs_the_others(arrays):
    # mlx-vlm defines a steel GEMM (simdgroup_matrix) beside plain kernels at import: the refusal
    # comes at that kernel's first call, naming the construct and its line (issue 25 item 8)
    plain = "uint i = thread_position_in_grid.x;\ny[i] = x[i] * 2;"
    first = kernelkit.metal_kernel("mod_first", ["x"], ["y"], plain)
    gemm = kernelkit.metal_kernel(
        "mod_gemm", ["x"], ["y"], "uint i = thread_position_in_grid.x;\n\n"
        "simdgroup_matrix<float, 8, 8> m;\ny[i] = x[i];",
    )  # fmt: skip
    last = kernelkit.metal_kernel("mod_last", ["x"], ["y"], plain.replace("2", "3"))
    x = RNG.standard_normal(40).astype(np.float32)
    np.testing.assert_array_equal(_run1(first, arrays, x), x * 2)
    with pytest.raises(kernelkit.ArgumentError, match=r"simdgroup_matrix' at line 3 of the sou"):
        _run1(gemm, arrays, x)
    np.testing.assert_array_equal(_run1(last, arrays, x), x * 3)


@pytest.mark.parametrize(
    "first", ["#define SCALE 2.0f", "#if 1\n#define SCALE 2.0f\n#endif", "#pragma once\n"]
)
def test_a_body_whose_first_line_is_a_preprocessor_directive(arrays, first):
    # issue 24 item 12: the translator's declarations went on line 1, before the `#`
    src = first + "\nuint i = thread_position_in_grid.x;\ny[i] = x[i] * SCALE;"
    if "SCALE" not in first:
        src = src.replace("SCALE", "2.0f")
    k = kernelkit.metal_kernel("pp_first_" + str(len(first)), ["x"], ["y"], src)
    x = RNG.standard_normal(70).astype(np.float32)
    np.testing.assert_array_equal(_run1(k, arrays, x), x * 2)
    # line numbers stay the user's: an error on the last line is named by that line
    bad = kernelkit.metal_kernel("pp_first_bad", ["x"], ["y"], src + "\ny[i] = nope;")
    with pytest.raises(kernelkit.CompileError) as e:
        _run1(bad, arrays, x)
    n = src.count("\n") + 2
    assert f"Metal source line {n}: y[i] = nope;" in str(e.value)


def test_a_body_with_a_0d_input_and_a_directive_on_line_1(arrays):
    src = "#define OFF 1.0f\nuint i = thread_position_in_grid.x;\ny[i] = x[i] * s + OFF;"
    k = kernelkit.metal_kernel("pp_first_0d", ["x", "s"], ["y"], src)
    x = RNG.standard_normal(33).astype(np.float32)
    s = np.array(3.0, np.float32)
    (y,) = k([arrays.put(x), arrays.put(s)], output_shapes=[x.shape], output_dtypes=[x.dtype],
             grid=(x.size, 1, 1), threadgroup=(32, 1, 1))  # fmt: skip
    np.testing.assert_allclose(arrays.get(y), x * 3 + 1, rtol=1e-6, atol=1e-6)  # an FMA on the GPU


@pytest.mark.parametrize(
    ("src", "message"),
    [
        ("uint i = thread_position_in_grid.x;\nif (i < 4) {\n  y[i] = x[i];\n",
         "'{' at line 2 is never closed"),
        ("uint i = thread_position_in_grid.x;\ny[i] = x[i];\n}\ny[0] = 1;",
         "'}' at line 3 closes nothing"),
        ("uint i = thread_position_in_grid.x;\nif (i < 4) {\n  y[i] = (x[i];\n}",
         "'}' at line 4 closes '(' of line 3"),
    ],
)  # fmt: skip
def test_unbalanced_brackets_name_the_users_lines(arrays, src, message):
    # issue 24 item 12: the compiler named only generated lines (the body sits in a function)
    k = kernelkit.metal_kernel("unbalanced", ["x"], ["y"], src)
    with pytest.raises(kernelkit.ArgumentError, match="unbalanced brackets in the Metal source"):
        _run1(k, arrays, np.ones(4, np.float32))
    with pytest.raises(kernelkit.ArgumentError) as e:
        _run1(k, arrays, np.ones(4, np.float32))
    assert message in str(e.value)


def test_unbalanced_brackets_in_the_header_say_header(arrays):
    k = kernelkit.metal_kernel("unbalanced_h", ["x"], ["y"], "y[0] = x[0];",
                               header="float f(float a) {\n  return a;\n\n")  # fmt: skip
    with pytest.raises(kernelkit.ArgumentError, match=r"'{' at line 1 is never closed"):
        _run1(k, arrays, np.ones(1, np.float32))


COND_SIZES = """
    uint i = thread_position_in_grid.x;
    T h = x[i];
    bool c = i % 2 == 0;
    y[0] = sizeof(c ? h : 1.0f);        // Metal: float
    y[1] = sizeof(c ? 1.0f : h);        // float
    y[2] = sizeof(c ? h : 1);           // half (the integer converts)
    y[3] = sizeof(c ? 0 : h);           // half
    y[4] = sizeof(c ? h : h);           // half
    y[5] = sizeof(c ? float(h) : 2);    // float: no 16-bit type, C++'s rules as written
    y[6] = sizeof(c ? h : (c ? 1.0f : h));  // nested: float
    y[7] = c ? h : 1;
"""
BITLINEAR_SCALE = """
    uint i = thread_position_in_grid.x;
    float scale = invert_weight_scales ? 1 / weight_scale[0] : weight_scale[0];
    T v = x[i] > 0 ? x[i] : 0;
    out[i] = static_cast<T>(v * scale);
"""


def _sixteen(dt):
    if dt == "bfloat16":
        return np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    return np.dtype(dt)


def _put(arrays, a):
    """``arrays.put``, with bfloat16 through its bits (torch cannot take an ml_dtypes array)."""
    if a.dtype.name != "bfloat16" or not arrays.use_torch:
        return arrays.put(a)
    return arrays.put(a.view(np.uint16)).view(arrays.torch.bfloat16)


def _get(arrays, y):
    if hasattr(y, "dtype") and str(y.dtype) == "torch.bfloat16":
        y = y.float()
    return arrays.get(y)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_a_conditional_mixing_a_16_bit_value_promotes_as_metal_does(arrays, dt):
    # Metal: half : float -> float, half : int -> half; kernelkit's 16-bit types are classes, and
    # C++ found both conversions and refused (issue 25 item 8; mlx-lm's BitLinear weight scale)
    d = _sixteen(dt)
    k = kernelkit.metal_kernel("cond_sizes", ["x"], ["y"], COND_SIZES)
    x = np.full(1, 3.0, d)
    (y,) = k([_put(arrays, x)], output_shapes=[(8,)], output_dtypes=[np.int32],
             grid=(1, 1, 1), threadgroup=(1, 1, 1), template=[("T", dt)])  # fmt: skip
    np.testing.assert_array_equal(arrays.get(y), [4, 4, 2, 2, 2, 4, 4, 3])


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("invert", [True, False])
def test_bitlinear_weight_scale_conditional_in_16_bits(arrays, dt, invert):
    d = _sixteen(dt)
    k = kernelkit.metal_kernel("cond_scale", ["x", "weight_scale", "invert_weight_scales"],
                               ["out"], BITLINEAR_SCALE)  # fmt: skip
    x = RNG.standard_normal(100).astype(d)
    w = np.array([0.37], d)
    (y,) = k([_put(arrays, x), _put(arrays, w), invert], output_shapes=[x.shape],
             output_dtypes=[dt], grid=(100, 1, 1), threadgroup=(32, 1, 1),
             template=[("T", dt)])  # fmt: skip
    w64 = float(w.astype(np.float64)[0])
    want = np.maximum(x.astype(np.float64), 0) * (1 / w64 if invert else w64)
    np.testing.assert_allclose(_get(arrays, y).astype(np.float64), want, rtol=1e-2, atol=1e-2)


def test_conditionals_in_template_arguments_and_constants_are_left_alone(arrays):
    src = """
    constexpr int N = sizeof(T) == 2 ? 2 : 4;
    uint i = thread_position_in_grid.x;
    y[i] = metal::min<float>(x[i], N > 3 ? 4.0f : 1.0f) + (i < 2 ? N : 0);
    """
    k = kernelkit.metal_kernel("cond_const", ["x"], ["y"], src)
    x = np.full(4, 9.0, np.float32)
    (y,) = k([arrays.put(x)], output_shapes=[x.shape], output_dtypes=[x.dtype],
             grid=(4, 1, 1), threadgroup=(4, 1, 1), template=[("T", np.float32)])  # fmt: skip
    np.testing.assert_array_equal(arrays.get(y), [8, 8, 4, 4])


@pytest.mark.parametrize("proxied", ["template", "outputs"])
def test_a_non_dict_mapping_on_the_warm_call(arrays, proxied):
    # The fast path took any argument whose type is not dict as a list: a MappingProxyType on
    # the second call (geometry seen) was iterated as its keys.
    from types import MappingProxyType as Proxy

    k = kernelkit.metal_kernel("myexp_proxy", ["inp"], ["out"], EXP)
    a = RNG.standard_normal(64).astype(np.float32)
    kw = {"template": [("T", np.float32)], "output_shapes": [a.shape], "output_dtypes": [a.dtype]}
    if proxied == "template":
        kw["template"] = Proxy({"T": np.float32})
    else:
        kw.update(output_shapes=Proxy({"out": a.shape}), output_dtypes=Proxy({"out": a.dtype}))
    for _ in range(2):
        out = k([arrays.put(a)], grid=(a.size, 1, 1), threadgroup=(64, 1, 1), **kw)
        y = out["out"] if isinstance(out, dict) else out[0]
        np.testing.assert_allclose(arrays.get(y), np.exp(a.astype(np.float64)), rtol=1e-6)
