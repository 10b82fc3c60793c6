"""The kernel suite, run on every backend that runs kernels here (cpu always; cuda with a GPU).

Outputs are poisoned (NaN or a sentinel, through ``out=``) before each run, so an element the
kernel forgot to write shows up; results are compared against float64 NumPy references.
"""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(1234)
GLOBAL_ID = "uint i = blockIdx.x * blockDim.x + threadIdx.x;\n"


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def run(k, arrays, inputs, outs, **kw):
    """Run ``k`` on device copies of ``inputs`` into poisoned device ``outs``; NumPy results.

    On the CPU backend the kernel runs again in checked mode, which must give the same results
    (checking only adds faults)."""
    results = [_run_once(k, arrays, inputs, outs, **kw)]
    if arrays.backend == "cpu" and "check" not in kw:
        results.append(_run_once(k, arrays, inputs, outs, check=True, **kw))
        for a, b in zip(*results):
            np.testing.assert_array_equal(a, b, err_msg="checked mode changed the result")
    return results[0]


def _run_once(k, arrays, inputs, outs, **kw):
    dev_in = [arrays.put(x) if isinstance(x, np.ndarray) else x for x in inputs]
    dev_out = [arrays.put(o.copy()) for o in outs]
    res = k(dev_in, out=dev_out, **kw)
    assert len(res) == len(outs)
    for r, o in zip(res, dev_out):
        assert r is o  # out= arrays are returned as they are
    return [arrays.get(r) for r in res]


# --- basics --------------------------------------------------------------------------------

COPY = kernelkit.kernel("t_copy", ["x"], ["y"], GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i];")


def test_copy_over_several_blocks(arrays):
    x = rand(1000)
    (y,) = run(
        COPY,
        arrays,
        [x],
        [np.full(1000, np.nan, np.float32)],
        grid=(1000, 1, 1),
        threadgroup=(64, 1, 1),
    )
    np.testing.assert_array_equal(y, x)


def test_outputs_allocated_and_returned_in_the_inputs_framework(arrays):
    x = rand(300)
    (y,) = COPY(
        [arrays.put(x)],
        output_shapes=[(300,)],
        output_dtypes=[np.float32],
        grid=(300, 1, 1),
        threadgroup=(128, 1, 1),
    )
    assert type(y) is type(arrays.put(x))
    assert tuple(y.shape) == (300,)
    np.testing.assert_array_equal(arrays.get(y), x)


MIXED = kernelkit.kernel(
    "t_mixed",
    ["a", "b", "m", "s", "n"],
    ["y", "z"],
    GLOBAL_ID
    + """
if (i < a_shape[0]) {
    T v = (T)(a[i] * s) + (USE_B ? (T)b[i] : (T)0) * (T)K;
    y[i] = m[i] ? v : -v;
    z[i] = (long long)b[i] * n + K;
}
""",
)


@pytest.mark.parametrize("use_b", [True, False])
def test_inputs_of_different_dtypes_templates_scalars_and_two_outputs(arrays, use_b):
    n = 777
    a = rand(n)
    b = RNG.integers(-1000, 1000, n).astype(np.int32)
    m = RNG.random(n) < 0.5
    y0 = np.full(n, np.nan, np.float64)
    z0 = np.full(n, -(2**62), np.int64)
    y, z = run(
        MIXED,
        arrays,
        [a, b, m, 1.5, -3],
        [y0, z0],
        grid=(n, 1, 1),
        threadgroup=(128, 1, 1),
        template=[("T", np.float64), ("USE_B", use_b), ("K", 7)],
    )
    v = (a * np.float32(1.5)).astype(np.float64)  # the body multiplies in float
    v = v + (b.astype(np.float64) * 7 if use_b else 0)
    np.testing.assert_allclose(y, np.where(m, v, -v), rtol=1e-12)
    np.testing.assert_array_equal(z, b.astype(np.int64) * -3 + 7)


def test_numpy_scalars_and_small_int_types(arrays):
    k = kernelkit.kernel(
        "t_small", ["x", "s"], ["y"], GLOBAL_ID + "if (i < x_shape[0]) y[i] = (uint8_t)(x[i] + s);"
    )
    x = RNG.integers(0, 100, 50).astype(np.int16)
    (y,) = run(
        k,
        arrays,
        [x, np.int16(5)],
        [np.full(50, 255, np.uint8)],
        grid=(50, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(y, (x + 5).astype(np.uint8))


def test_header_helper_function(arrays):
    k = kernelkit.kernel(
        "t_header",
        ["x"],
        ["y"],
        GLOBAL_ID + "if (i < x_shape[0]) y[i] = poly(x[i]);",
        header="__device__ inline float poly(float v) { return 3.0f * v * v - v + 0.5f; }\n",
    )
    x = rand(100)
    (y,) = run(
        k, arrays, [x], [np.full(100, np.nan, np.float32)], grid=(100, 1, 1), threadgroup=(32, 1, 1)
    )
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, 3 * x64 * x64 - x64 + 0.5, rtol=1e-5, atol=1e-6)


# --- strides -------------------------------------------------------------------------------

VIEWS = {
    "transposed": lambda: rand(13, 7).T,
    "strided": lambda: rand(9, 20)[:, 1::3],
    "reversed-ish 3d": lambda: rand(4, 5, 6).transpose(2, 0, 1)[:, ::2],
}


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
def test_non_contiguous_input_made_contiguous(arrays, view):
    x = VIEWS[view]()
    assert not x.flags.c_contiguous
    k = kernelkit.kernel(
        "t_flat", ["x"], ["y"], GLOBAL_ID + "if (i < N) y[i] = x[i];", ensure_row_contiguous=True
    )
    (y,) = run(
        k,
        arrays,
        [x],
        [np.full(x.size, np.nan, np.float32)],
        grid=(x.size, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("N", x.size)],
    )
    np.testing.assert_array_equal(y, x.ravel(order="C"))


STRIDED = kernelkit.kernel(
    "t_strided",
    ["x"],
    ["y", "st"],
    GLOBAL_ID
    + """
long long n = 1;
for (int d = 0; d < x_ndim; ++d) n *= x_shape[d];
if (i < n) y[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)];
if (i < x_ndim) st[i] = x_strides[i];
""",
    ensure_row_contiguous=False,
)


@pytest.mark.parametrize("view", list(VIEWS), ids=list(VIEWS))
def test_non_contiguous_input_read_through_its_strides(arrays, view):
    x = VIEWS[view]()
    y, st = run(
        STRIDED,
        arrays,
        [x],
        [np.full(x.size, np.nan, np.float32), np.full(x.ndim, -1, np.int64)],
        grid=(x.size, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(st, [s // x.itemsize for s in x.strides])
    np.testing.assert_array_equal(y, x.ravel(order="C"))


def test_strides_of_a_contiguous_input(arrays):
    x = rand(3, 4, 5)
    y, st = run(
        STRIDED,
        arrays,
        [x],
        [np.full(60, np.nan, np.float32), np.zeros(3, np.int64)],
        grid=(60, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(st, [20, 5, 1])
    np.testing.assert_array_equal(y, x.ravel())


# --- thread geometry -----------------------------------------------------------------------

ATTRS = kernelkit.kernel(
    "t_attrs",
    ["w"],
    ["out"],
    """
uint3 g = thread_position_in_grid;
uint gx = threads_per_grid.x, gy = threads_per_grid.y;
uint* o = out + ((size_t)(g.z * gy + g.y) * gx + g.x) * W;
uint3 vals[6] = {thread_position_in_grid, threads_per_threadgroup, thread_position_in_threadgroup,
                 threadgroup_position_in_grid, threads_per_grid, threadgroups_per_grid};
for (int v = 0; v < 6; ++v) {
    o[3 * v] = vals[v].x; o[3 * v + 1] = vals[v].y; o[3 * v + 2] = vals[v].z;
}
o[18] = thread_index_in_threadgroup;
o[19] = thread_index_in_simdgroup;
o[20] = simdgroup_index_in_threadgroup;
o[21] = threads_per_simdgroup;
o[22] = blockDim.x;
o[23] = blockDim.y * 100 + blockDim.z;
o[24] = gridDim.x * 10000 + gridDim.y * 100 + gridDim.z;
o[25] = kk_linear_tid();
""",
)
W = 26


def _expected_attrs(grid, tg):
    gx, gy, gz = grid
    bx, by, bz = tg
    nb = (gx // bx, gy // by, gz // bz)
    z, y, x = np.meshgrid(np.arange(gz), np.arange(gy), np.arange(gx), indexing="ij")
    ones = np.ones_like(x)
    tx, ty, tz = x % bx, y % by, z % bz
    lin = tx + bx * (ty + by * tz)
    cols = [
        x,
        y,
        z,
        bx * ones,
        by * ones,
        bz * ones,
        tx,
        ty,
        tz,
        x // bx,
        y // by,
        z // bz,
        gx * ones,
        gy * ones,
        gz * ones,
        nb[0] * ones,
        nb[1] * ones,
        nb[2] * ones,
        lin,
        lin % 32,
        lin // 32,
        32 * ones,
        bx * ones,
        (by * 100 + bz) * ones,
        (nb[0] * 10000 + nb[1] * 100 + nb[2]) * ones,
        lin,
    ]
    return np.stack(cols, axis=-1).astype(np.uint32)


@pytest.mark.parametrize(
    ("grid", "tg"), [((40, 6, 2), (8, 3, 2)), ((64, 1, 1), (64, 1, 1)), ((6, 9, 4), (2, 3, 4))]
)
def test_builtins_and_every_metal_attribute(arrays, grid, tg):
    gx, gy, gz = grid
    poison = np.full((gz, gy, gx, W), 0xDEADBEEF, np.uint32)
    (out,) = run(
        ATTRS,
        arrays,
        [np.zeros(1, np.float32)],
        [poison],
        grid=grid,
        threadgroup=tg,
        template=[("W", W)],
    )
    expected = _expected_attrs(grid, tg)
    for col in range(W):
        np.testing.assert_array_equal(out[..., col], expected[..., col], err_msg=f"column {col}")


TRANSPOSE = kernelkit.kernel(
    "t_transpose",
    ["x"],
    ["y"],
    """
uint c = blockIdx.x * blockDim.x + threadIdx.x;
uint r = blockIdx.y * blockDim.y + threadIdx.y;
if (r < x_shape[0] && c < x_shape[1]) y[c * x_shape[0] + r] = x[r * x_shape[1] + c];
""",
)


@pytest.mark.parametrize("shape", [(37, 29), (1, 1), (64, 16)])
def test_2d_grid(arrays, shape):
    x = rand(*shape)
    rows, cols = shape
    (y,) = run(
        TRANSPOSE,
        arrays,
        [x],
        [np.full((cols, rows), np.nan, np.float32)],
        grid=(cols, rows, 1),
        threadgroup=(16, 16, 1),
    )
    np.testing.assert_array_equal(y, x.T)


# --- math ----------------------------------------------------------------------------------

METAL_MATH = kernelkit.kernel(
    "t_metal_math",
    ["x"],
    ["y"],
    GLOBAL_ID
    + """
if (i < x_shape[0]) {
    float v = x[i];
    float a = metal::abs(v);
    y[5 * i + 0] = metal::exp(v);
    y[5 * i + 1] = metal::sqrt(a) + metal::log(a + 1.0f);
    y[5 * i + 2] = metal::max(v, 0.25f) + metal::min(v, -0.25f);
    y[5 * i + 3] = metal::precise::tanh(v) + metal::clamp(v, -0.5f, 0.5f);
    y[5 * i + 4] = metal::fast::exp(v * 0.5f) + metal::floor(v * 3.0f);
}
""",
)


def test_metal_math(arrays):
    x = rand(257)
    (y,) = run(
        METAL_MATH,
        arrays,
        [x],
        [np.full(5 * 257, np.nan, np.float32)],
        grid=(257, 1, 1),
        threadgroup=(64, 1, 1),
    )
    v = x.astype(np.float64)
    a = np.abs(v)
    ref = np.stack(
        [
            np.exp(v),
            np.sqrt(a) + np.log(a + 1),
            np.maximum(v, 0.25) + np.minimum(v, -0.25),
            np.tanh(v) + np.clip(v, -0.5, 0.5),
            np.exp(v * 0.5) + np.floor(v * 3),
        ],
        axis=-1,
    ).ravel()
    np.testing.assert_allclose(y, ref, rtol=2e-5, atol=2e-5)


# --- specialization and redefinition -------------------------------------------------------

AFFINE = kernelkit.kernel(
    "t_affine",
    ["x"],
    ["y"],
    GLOBAL_ID + "if (i < x_shape[0]) y[i] = (T)((float)x[i] * 2.0f + 1.0f);",
)


def test_one_kernel_on_float16_and_float32(arrays):
    for dtype in (np.float16, np.float32, np.float16):
        x = rand(99, dtype=dtype)
        (y,) = run(
            AFFINE,
            arrays,
            [x],
            [np.full(99, np.nan, dtype)],
            grid=(99, 1, 1),
            threadgroup=(32, 1, 1),
            template=[("T", dtype)],
        )
        assert y.dtype == dtype
        ref = (x.astype(np.float64) * 2 + 1).astype(dtype)
        np.testing.assert_allclose(
            y.astype(np.float64), ref.astype(np.float64), rtol=1e-3 if dtype == np.float16 else 1e-6
        )


def test_kernel_redefined_under_the_same_name_never_runs_stale_code(arrays):
    x = rand(50)
    out = [np.full(50, np.nan, np.float32)]
    kw = dict(grid=(50, 1, 1), threadgroup=(32, 1, 1))
    body = GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i] + {};"
    first = kernelkit.kernel("t_redefined", ["x"], ["y"], body.format("1.0f"))
    np.testing.assert_allclose(run(first, arrays, [x], out, **kw)[0], x + 1, rtol=1e-6)
    second = kernelkit.kernel("t_redefined", ["x"], ["y"], body.format("2.0f"))
    np.testing.assert_allclose(run(second, arrays, [x], out, **kw)[0], x + 2, rtol=1e-6)
    np.testing.assert_allclose(run(first, arrays, [x], out, **kw)[0], x + 1, rtol=1e-6)


def test_compile_error_then_a_working_kernel(arrays):
    bad = kernelkit.kernel("t_broken", ["x"], ["y"], "uint i = threadIdx.x;\ny[i] = x[i] +* ;\n")
    x = arrays.put(rand(8))
    for _ in range(2):  # a failure is not cached as a success
        with pytest.raises(kernelkit.CompileError) as info:
            bad(
                [x],
                output_shapes=[(8,)],
                output_dtypes=[np.float32],
                grid=(8, 1, 1),
                threadgroup=(8, 1, 1),
            )
        assert "t_broken" in str(info.value)
        assert "y[i] = x[i] +* ;" in info.value.source
        assert "2" in info.value.log  # the user's line number
    (y,) = run(
        COPY,
        arrays,
        [rand(8)],
        [np.full(8, np.nan, np.float32)],
        grid=(8, 1, 1),
        threadgroup=(8, 1, 1),
    )
    assert not np.isnan(y).any()


# --- outputs -------------------------------------------------------------------------------

HIST = kernelkit.kernel(
    "t_hist", ["x"], ["h"], GLOBAL_ID + "if (i < x_shape[0]) atomicAdd(&h[x[i]], 1);"
)


def test_init_value_with_atomic_add_histogram(arrays):
    x = RNG.integers(0, 37, 10007).astype(np.int32)
    (h,) = HIST(
        [arrays.put(x)],
        output_shapes=[(37,)],
        output_dtypes=[np.int32],
        grid=(x.size, 1, 1),
        threadgroup=(256, 1, 1),
        init_value=0,
    )
    np.testing.assert_array_equal(arrays.get(h), np.bincount(x, minlength=37))
    # init_value also resets a given out= array
    dirty = arrays.put(np.full(37, 12345, np.int32))
    (h2,) = HIST(
        [arrays.put(x)], out=[dirty], grid=(x.size, 1, 1), threadgroup=(256, 1, 1), init_value=0
    )
    np.testing.assert_array_equal(arrays.get(h2), np.bincount(x, minlength=37))


def test_float_atomic_add_with_a_nonzero_init_value(arrays):
    k = kernelkit.kernel(
        "t_fsum", ["x"], ["s"], GLOBAL_ID + "if (i < x_shape[0]) atomicAdd(&s[0], x[i]);"
    )
    x = RNG.integers(-50, 50, 1000).astype(np.float32)  # exact in float32 in any order
    (s,) = k(
        [arrays.put(x)],
        output_shapes=[(1,)],
        output_dtypes=[np.float32],
        grid=(1000, 1, 1),
        threadgroup=(128, 1, 1),
        init_value=10.0,
    )
    assert arrays.get(s)[0] == 10.0 + x.sum()


SHARED_FLOATS = 16384  # 64 KB of float: above the 48 KB a block gets without opting in
REVERSE = kernelkit.kernel(
    "t_shared_reverse",
    ["x"],
    ["y"],
    """
extern __shared__ float buf[];
size_t base = (size_t)blockIdx.x * S;
for (uint j = threadIdx.x; j < S; j += blockDim.x) buf[j] = x[base + j];
__syncthreads();
for (uint j = threadIdx.x; j < S; j += blockDim.x) y[base + j] = buf[S - 1 - j];
""",
    shared_memory=SHARED_FLOATS * 4,
)


def test_dynamic_shared_memory_over_48kb(arrays):
    x = rand(2 * SHARED_FLOATS)
    (y,) = run(
        REVERSE,
        arrays,
        [x],
        [np.full(x.size, np.nan, np.float32)],
        grid=(2 * 256, 1, 1),
        threadgroup=(256, 1, 1),
        template=[("S", SHARED_FLOATS)],
    )
    ref = x.reshape(2, SHARED_FLOATS)[:, ::-1].ravel()
    np.testing.assert_array_equal(y, ref)


def test_out_in_place(arrays):
    k = kernelkit.kernel(
        "t_inplace", ["x"], ["y"], GLOBAL_ID + "if (i < y_shape[0]) y[i] = x[i] * 2.0f + 1.0f;"
    )
    host = rand(513)
    x = arrays.put(host.copy())
    (y,) = k([x], out=[x], grid=(513, 1, 1), threadgroup=(64, 1, 1))
    assert y is x
    np.testing.assert_allclose(arrays.get(x), host.astype(np.float64) * 2 + 1, rtol=1e-6)


def test_zero_d_array_input(arrays):
    k = kernelkit.kernel(
        "t_zero_d", ["x", "s"], ["y"], GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i] * s[0] + s[0];"
    )
    x = rand(40)
    s = np.array(2.5, np.float32)
    (y,) = run(
        k,
        arrays,
        [x, s],
        [np.full(40, np.nan, np.float32)],
        grid=(40, 1, 1),
        threadgroup=(32, 1, 1),
    )
    # float32 x * 2.5 + 2.5 cancels near x = -1: an absolute bound there (a few ulps of 2.5)
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.5 + 2.5, rtol=1e-6, atol=1e-6)
    # a new value in the 0-d array is read at run time (not baked in)
    (y,) = run(
        k,
        arrays,
        [x, np.array(-1.0, np.float32)],
        [np.full(40, np.nan, np.float32)],
        grid=(40, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_allclose(y, -x.astype(np.float64) - 1, rtol=1e-6, atol=1e-6)


POLY = kernelkit.kernel(
    "t_poly",
    ["x", "c"],
    ["y"],
    GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i] * x[i] * 0.5f + c * x[i];",
)


@pytest.mark.parametrize("n", [1, 31, 1000003])
def test_odd_sizes(arrays, n):
    x = rand(n)
    (y,) = run(
        POLY,
        arrays,
        [x, -0.75],
        [np.full(n, np.nan, np.float32)],
        grid=(n, 1, 1),
        threadgroup=(256, 1, 1),
    )
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, x64 * x64 * 0.5 - 0.75 * x64, rtol=1e-5, atol=1e-6)


def test_threads_beyond_the_data_do_not_write(arrays):
    sentinel = np.full(40, -7.0, np.float32)
    x = rand(31)
    out = sentinel.copy()
    dev_out = arrays.put(out)
    k = kernelkit.kernel("t_guard", ["x"], ["y"], GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i];")
    k([arrays.put(x)], out=[dev_out], grid=(31, 1, 1), threadgroup=(32, 1, 1))
    y = arrays.get(dev_out)
    np.testing.assert_array_equal(y[:31], x)
    np.testing.assert_array_equal(y[31:], sentinel[31:])


def test_verbose_prints_the_source(arrays, capsys):
    body = "/* kk verbose marker */ " + GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i];"
    k = kernelkit.kernel("t_verbose", ["x"], ["y"], body)
    x = arrays.put(rand(4))
    k(
        [x],
        output_shapes=[(4,)],
        output_dtypes=[np.float32],
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
        verbose=True,
    )
    printed = capsys.readouterr().out
    assert "kk verbose marker" in printed
    assert "t_verbose(" in printed and "const float* x" in printed
    k([x], output_shapes=[(4,)], output_dtypes=[np.float32], grid=(4, 1, 1), threadgroup=(4, 1, 1))
    assert capsys.readouterr().out == ""  # quiet unless asked
    k(
        [x],
        output_shapes=[(4,)],
        output_dtypes=[np.float32],
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
        verbose=True,
    )
    assert "kk verbose marker" in capsys.readouterr().out  # also on a cached plan


def test_kernelkit_verbose_variable_prints_the_source(arrays, capsys, clean_state):
    from kernelkit import _config

    clean_state.setenv("KERNELKIT_VERBOSE", "1")
    _config.reload()
    k = kernelkit.kernel(
        "t_verbose_env", ["x"], ["y"], "/* env verbose marker */ y[threadIdx.x] = x[threadIdx.x];"
    )
    k(
        [arrays.put(rand(4))],
        output_shapes=[(4,)],
        output_dtypes=[np.float32],
        grid=(4, 1, 1),
        threadgroup=(4, 1, 1),
    )
    assert "env verbose marker" in capsys.readouterr().out


# PyTorch's layer-norm kernels call templates such as this one with a scalar argument and an
# element: a Python scalar must deduce as a plain T (it arrives as `const T name`).
TEMPLATE_HEADER = "template <class T> __device__ T axpy(T a, T x, T y) { return a * x + y; }"


def test_python_scalar_deduces_as_plain_type(arrays):
    k = kernelkit.kernel(
        "t_scalar_deduce",
        ["x", "a"],
        ["y"],
        GLOBAL_ID + "if (i < x_shape[0]) y[i] = axpy(a, x[i], x[i]);",
        header=TEMPLATE_HEADER,
    )
    x = rand(45)
    (y,) = run(
        k,
        arrays,
        [x, 1.5],
        [np.full(45, np.nan, np.float32)],
        grid=(45, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.5, rtol=1e-6)


# llm.c- and PyTorch-style optional pointers: `bias != NULL` decides at run time.
BIAS_BODY = GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i] * 2.0f + (bias != NULL ? bias[i] : 0.0f);"


def test_none_input_is_a_null_pointer_of_the_declared_dtype(arrays):
    k = kernelkit.kernel(
        "t_optional_bias", ["x", "bias"], ["y"], BIAS_BODY, optional_inputs={"bias": "float32"}
    )
    x, b = rand(77), rand(77)
    call = dict(grid=(77, 1, 1), threadgroup=(32, 1, 1))
    out = [np.full(77, np.nan, np.float32)]
    (with_bias,) = run(k, arrays, [x, b], out, **call)
    (without,) = run(k, arrays, [x, None], out, **call)
    np.testing.assert_allclose(with_bias, x.astype(np.float64) * 2 + b, rtol=1e-6)
    np.testing.assert_allclose(without, x.astype(np.float64) * 2, rtol=1e-6)
    (with_bias,) = run(k, arrays, [x, b], out, **call)  # alternating: each its own plan
    np.testing.assert_allclose(with_bias, x.astype(np.float64) * 2 + b, rtol=1e-6)
    plain = kernelkit.kernel("t_not_optional", ["x", "bias"], ["y"], BIAS_BODY)
    with pytest.raises(kernelkit.ArgumentError, match="optional_inputs"):
        run(plain, arrays, [x, None], out, **call)
    with pytest.raises(kernelkit.ArgumentError, match="not in input_names"):
        kernelkit.kernel("t_bad_optional", ["x"], ["y"], "", optional_inputs={"b": "float32"})


def test_launch_bounds_cap_threads_per_block(arrays):
    k = kernelkit.kernel(
        "t_bounds",
        ["x"],
        ["y"],
        GLOBAL_ID + "if (i < x_shape[0]) y[i] = x[i];",
        launch_bounds=(64, 2),
    )
    x = rand(200)
    (y,) = run(
        k, arrays, [x], [np.full(200, np.nan, np.float32)], grid=(200, 1, 1), threadgroup=(64, 1, 1)
    )
    np.testing.assert_array_equal(y, x)
    with pytest.raises(kernelkit.ArgumentError, match="at most 64"):
        run(
            k,
            arrays,
            [x],
            [np.full(200, np.nan, np.float32)],
            grid=(200, 1, 1),
            threadgroup=(128, 1, 1),
        )
    for bad in (0, (1, 2, 3, 4), "64", (64.0,)):
        with pytest.raises(kernelkit.ArgumentError, match="launch_bounds"):
            kernelkit.kernel("t_bad_bounds", ["x"], ["y"], "", launch_bounds=bad)


# Each block of a pair reads its partner's shared word through distributed shared memory.
CLUSTER_SWAP = r"""
__shared__ float mine;
unsigned rank, remote;
asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
if (threadIdx.x == 0) mine = x[blockIdx.x];
asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
             ::: "memory");
asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
             : "=r"(remote) : "r"((unsigned)__cvta_generic_to_shared(&mine)), "r"(rank ^ 1u));
float other;
asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(other) : "r"(remote) : "memory");
if (threadIdx.x == 0) y[blockIdx.x] = other;
asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;"
             ::: "memory");
"""


def test_cluster_dims_run_blocks_in_clusters(arrays):
    k = kernelkit.kernel("t_cluster_swap", ["x"], ["y"], CLUSTER_SWAP, cluster_dims=2)
    x = rand(6)
    poisoned = [np.full(6, np.nan, np.float32)]
    if not arrays.on_gpu:  # PTX: the CPU backend emulates clusters through cooperative_groups
        with pytest.raises(kernelkit.KernelkitError, match="PTX"):
            run(k, arrays, [x], poisoned, grid=(6 * 32, 1, 1), threadgroup=(32, 1, 1))
        return
    if arrays.torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("thread-block clusters need sm_90")
    (y,) = run(k, arrays, [x], poisoned, grid=(6 * 32, 1, 1), threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(y, x.reshape(3, 2)[:, ::-1].reshape(6))
    with pytest.raises(kernelkit.ArgumentError, match=r"3 blocks, not a whole number of clusters"):
        run(k, arrays, [x], poisoned, grid=(3 * 32, 1, 1), threadgroup=(32, 1, 1))
    (y,) = run(k, arrays, [x], poisoned, grid=(6 * 32, 1, 1), threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(y, x.reshape(3, 2)[:, ::-1].reshape(6))  # the next call works


def test_cluster_dims_are_checked():
    for bad in (0, (1, 2, 3, 4), "2", (2.0,), (4, 8), 17, True):
        with pytest.raises(kernelkit.ArgumentError, match="cluster_dims"):
            kernelkit.kernel("t_bad_cluster", ["x"], ["y"], "", cluster_dims=bad)
    k = kernelkit.kernel("t_cluster", ["x"], ["y"], "", cluster_dims=(2, 1))
    assert k.spec.cluster_dims == (2, 1, 1)
    # up to 16 blocks: 8 is the portable size, 16 the most an sm_90 kernel may opt in to
    k16 = kernelkit.kernel("t_cluster16", ["x"], ["y"], "", cluster_dims=(4, 4))
    assert k16.spec.cluster_dims == (4, 4, 1)
