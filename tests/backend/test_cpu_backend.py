"""CPU backend, driven directly (render -> compile -> load -> launch) with hand-packed params."""

from __future__ import annotations

import ctypes
import shutil
import threading

import numpy as np
import pytest

from kernelkit import _config
from kernelkit._backends.cpu import CPUBackend
from kernelkit._errors import BackendError, CompileError, KernelFault
from kernelkit._pipeline.codegen import make_source, scan_body
from kernelkit._pipeline.pack import _SCALAR_CTYPES
from kernelkit._records import KernelSpec, Param

pytestmark = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("clang++")), reason="no C++ compiler"
)

_CTYPES = _SCALAR_CTYPES  # the core packer's layout (half/bf16 are packed as raw bits below)
_RNG = np.random.default_rng(1234)

_BACKEND = CPUBackend()
_TARGET = _BACKEND.targets()[0]


class Kernel:
    """A compiled kernel plus a packer for (name -> value) arguments in param order."""

    def __init__(self, name, params, body, header="", check=False, template=()):
        inputs = tuple(p.name for p in params if p.kind == "array" and not p.is_output)
        outputs = tuple(p.name for p in params if p.is_output)
        refs, attrs = scan_body(body, inputs + outputs)
        spec = KernelSpec(
            name=name,
            input_names=inputs,
            output_names=outputs,
            source=body,
            header=header,
            metadata_refs=refs,
            attribute_refs=attrs,
        )
        if check:  # the core adds one extent param after every array in checked mode
            params = tuple(
                q
                for p in params
                for q in (
                    (p, Param(f"kk_extent_{p.name}", "extent")) if p.kind == "array" else (p,)
                )
            )
        self.params = params
        self.source = make_source(spec, params, list(template))
        self.request = _BACKEND.render(self.source, _TARGET, check=check)
        self.artifact = _BACKEND.compile(self.request)
        self.program = _BACKEND.load(self.artifact, _TARGET)

    def __call__(self, grid, block, shared_bytes=0, **args):
        keep = []
        for p in self.params:
            if p.kind == "array":
                keep.append(ctypes.c_void_p(args[p.name].ctypes.data))
            elif p.kind == "extent":
                keep.append(ctypes.c_longlong(args[p.name[len("kk_extent_") :]].size))
            elif p.kind == "scalar" and p.dtype in ("float16", "bfloat16"):
                keep.append(ctypes.c_uint16(int(args[p.name])))
            elif p.kind == "scalar":
                keep.append(_CTYPES[p.dtype](args[p.name]))
            elif p.kind == "dims":
                keep.append((ctypes.c_longlong * 8)(*args[p.name]))
            else:
                keep.append(ctypes.c_int32(args[p.name]))
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        launch = _BACKEND.launcher(self.program, _TARGET)
        launch(ctypes.addressof(ptrs), 0, (*_dim3(grid), *_dim3(block), shared_bytes))


def _dim3(v):
    return tuple(v) + (1,) * (3 - len(v)) if isinstance(v, tuple) else (v, 1, 1)


def _in(name, dtype="float32"):
    return Param(name, "array", dtype)


def _out(name, dtype="float32"):
    return Param(name, "array", dtype, is_output=True)


def _scalar(name, dtype="int32"):
    return Param(name, "scalar", dtype)


def _poisoned(n, dtype=np.float32):
    if np.dtype(dtype).kind == "f":
        return np.full(n, np.nan, dtype)
    return np.full(n, np.iinfo(dtype).max // 3, dtype)


def _run_with_timeout(fn, seconds=60):
    """Run fn in a daemon thread; fail (instead of hanging) if it does not finish."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"launch did not finish within {seconds} s (hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


COPY_BODY = "uint i = blockIdx.x * blockDim.x + threadIdx.x;\nif (i < n) out[i] = inp[i];"


def test_copy_many_blocks():
    k = Kernel("copy", (_in("inp"), _scalar("n"), _out("out")), COPY_BODY)
    n = 10_000 + 7
    a = _RNG.standard_normal(n).astype(np.float32)
    out = _poisoned(n)
    k((n + 255) // 256, 256, inp=a, n=n, out=out)
    np.testing.assert_array_equal(out, a)
    assert k.request.options and ("kk_cpu.h" in k.request.source)
    assert any(name == "kk_cpu.h" for name, _ in k.request.headers)


def test_multi_dim_grid_and_block_indices():
    body = """
    uint bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    uint t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    out[bx * blockDim.x * blockDim.y * blockDim.z + t] = bx * 1000 + t;
    """
    k = Kernel("idx", (_out("out", "int32"),), body)
    out = _poisoned(2 * 3 * 2 * 4 * 2 * 3, np.int32)
    k((2, 3, 2), (4, 2, 3), out=out)
    expect = np.array([b * 1000 + t for b in range(12) for t in range(24)], np.int32)
    np.testing.assert_array_equal(out, expect)


REDUCE_BODY = """
__shared__ float s[256];
uint t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
s[t] = i < n ? inp[i] : 0.0f;
__syncthreads();
for (uint w = blockDim.x / 2; w > 0; w /= 2) {
  if (t < w) s[t] += s[t + w];
  __syncthreads();
}
if (t == 0) out[blockIdx.x] = s[0];
"""


def test_shared_memory_block_reduction():
    k = Kernel("block_sum", (_in("inp"), _scalar("n"), _out("out")), REDUCE_BODY)
    n = 256 * 37 - 11
    a = _RNG.standard_normal(n).astype(np.float32)
    out = _poisoned(37)
    k(37, 256, inp=a, n=n, out=out)
    expect = np.add.reduceat(np.pad(a, (0, 11)), np.arange(0, 256 * 37, 256))
    np.testing.assert_allclose(out, expect, rtol=1e-4, atol=1e-4)


def test_dynamic_shared_memory_reverse():
    body = """
    extern __shared__ __align__(16) float buf[];
    uint t = threadIdx.x, base = blockIdx.x * blockDim.x;
    buf[t] = inp[base + t];
    __syncthreads();
    out[base + t] = buf[blockDim.x - 1 - t];
    """
    k = Kernel("reverse", (_in("inp"), _out("out")), body)
    a = _RNG.standard_normal(128 * 9).astype(np.float32)
    out = _poisoned(a.size)
    k(9, 128, shared_bytes=128 * 4, inp=a, out=out)
    np.testing.assert_array_equal(out, a.reshape(9, 128)[:, ::-1].ravel())


def test_atomics_from_many_blocks():
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
      atomicAdd(&total[0], inp[i]);
      atomicAdd(&count[0], 1);
      atomicMax(&count[1], (int)i);
      atomicMin(&count[2], -(int)i);
      atomicAdd(&hist[i % 16], 1u);
      atomicCAS(&count[3], 0, 7);
      atomicExch(&count[4], 5);
      atomicAdd(&wide[0], 3ull);
      atomicAdd(&dsum[0], (double)inp[i]);
    }
    """
    params = (
        _in("inp"),
        _scalar("n"),
        _out("total"),
        _out("count", "int32"),
        _out("hist", "uint32"),
        _out("wide", "uint64"),
        _out("dsum", "float64"),
    )
    k = Kernel("atomics", params, body)
    n = 50_000
    a = _RNG.integers(-8, 8, n).astype(np.float32)  # integers: the float sum is exact
    total, count = np.zeros(1, np.float32), np.zeros(5, np.int32)
    hist, wide, dsum = np.zeros(16, np.uint32), np.zeros(1, np.uint64), np.zeros(1, np.float64)
    k((n + 127) // 128, 128, inp=a, n=n, total=total, count=count, hist=hist, wide=wide, dsum=dsum)
    assert total[0] == a.sum() and dsum[0] == a.sum()
    assert list(count) == [n, n - 1, -(n - 1), 7, 5]
    np.testing.assert_array_equal(hist, np.bincount(np.arange(n) % 16, minlength=16))
    assert wide[0] == 3 * n


def _warp_reference(vals, op):
    """Python model of each warp intrinsic over one warp of 32 lanes."""
    lanes = np.arange(32)
    if op == "shfl":
        return vals[(lanes * 7 + 3) % 32]
    if op == "shfl_up":
        return np.where(lanes >= 3, vals[np.maximum(lanes - 3, 0)], vals)
    if op == "shfl_down":
        return np.where(lanes + 5 < 32, vals[np.minimum(lanes + 5, 31)], vals)
    if op == "shfl_xor":
        return vals[lanes ^ 6]
    if op == "shfl_w8":  # width 8: source lane wraps inside each group of 8
        return vals[(lanes & ~7) + ((lanes + 1) % 8)]
    raise AssertionError(op)


@pytest.mark.parametrize(
    ("op", "expr"),
    [
        ("shfl", "__shfl_sync(0xffffffffu, v, (lane * 7 + 3) % 32)"),
        ("shfl_up", "__shfl_up_sync(0xffffffffu, v, 3)"),
        ("shfl_down", "__shfl_down_sync(0xffffffffu, v, 5)"),
        ("shfl_xor", "__shfl_xor_sync(0xffffffffu, v, 6)"),
        ("shfl_w8", "__shfl_sync(0xffffffffu, v, lane + 1, 8)"),
    ],
)
def test_warp_shuffles(op, expr):
    body = f"""
    uint i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    float v = inp[i];
    out[i] = {expr};
    """
    k = Kernel(f"warp_{op}", (_in("inp"), _out("out")), body)
    a = _RNG.standard_normal(64 * 3).astype(np.float32)
    out = _poisoned(a.size)
    k(3, 64, inp=a, out=out)
    expect = np.concatenate([_warp_reference(w, op) for w in a.reshape(-1, 32)])
    np.testing.assert_array_equal(out, expect)


def test_warp_votes_and_syncwarp():
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    int p = inp[i] > 0;
    unsigned m = __activemask();
    out[4 * i + 0] = __ballot_sync(m, p);
    out[4 * i + 1] = __any_sync(0xffffffffu, p);
    out[4 * i + 2] = __all_sync(0xffffffffu, p || (threadIdx.x & 1));
    __syncwarp();
    out[4 * i + 3] = m;
    """
    k = Kernel("votes", (_in("inp", "int32"), _out("out", "uint32")), body)
    a = _RNG.integers(-3, 3, 96).astype(np.int32)
    a[32:64] = -1  # a warp where nobody votes yes
    a[64:96:2] = 5  # a warp where every even lane says yes (odd lanes pass in 'all')
    out = np.zeros(4 * 96, np.uint32)
    k(1, 96, inp=a, out=out)
    out = out.reshape(96, 4)
    for w in range(3):
        preds = a[32 * w : 32 * w + 32] > 0
        ballot = sum(1 << j for j in range(32) if preds[j])
        odd_ok = np.all(preds | (np.arange(32) & 1).astype(bool))
        assert (out[32 * w : 32 * w + 32, 0] == ballot).all()
        assert (out[32 * w : 32 * w + 32, 1] == int(preds.any())).all()
        assert (out[32 * w : 32 * w + 32, 2] == int(odd_ok)).all()
        assert (out[32 * w : 32 * w + 32, 3] == 0xFFFFFFFF).all()


def test_warp_reduction_partial_last_warp():
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = inp[i];
    for (int o = 8; o > 0; o /= 2) v += __shfl_down_sync(__activemask(), v, o, 16);
    if ((threadIdx.x & 15) == 0) out[i / 16] = v;
    """
    k = Kernel("warp_sum", (_in("inp"), _out("out")), body)
    a = _RNG.integers(-9, 9, 48).astype(np.float32)
    out = _poisoned(3)
    k(1, 48, inp=a, out=out)  # the second warp has only 16 lanes: it must not wait for 32
    np.testing.assert_array_equal(out, a.reshape(3, 16).sum(1))


def test_cooperative_groups_reduce():
    body = """
    auto block = cg::this_thread_block();
    auto tile = cg::tiled_partition<32>(block);
    uint i = blockIdx.x * blockDim.x + block.thread_rank();
    float v = inp[i];
    float s = cg::reduce(tile, v, cg::plus<float>());
    float mx = cg::reduce(tile, v, cg::greater<float>());
    auto t8 = cg::tiled_partition<8>(block);
    float s8 = cg::reduce(t8, v, cg::plus<float>());
    block.sync();
    if (tile.thread_rank() == 0) { out[2 * (i / 32)] = s; out[2 * (i / 32) + 1] = mx; }
    if (t8.thread_rank() == 0) out8[i / 8] = s8;
    grank[i] = cg::this_grid().thread_rank();
    """
    k = Kernel("cgred", (_in("inp"), _out("out"), _out("out8"), _out("grank", "int64")), body)
    a = _RNG.integers(-50, 50, 128).astype(np.float32)
    out, out8, grank = _poisoned(8), _poisoned(16), np.zeros(128, np.int64)
    k(2, 64, inp=a, out=out, out8=out8, grank=grank)
    w = a.reshape(4, 32)
    np.testing.assert_array_equal(out.reshape(4, 2)[:, 0], w.sum(1))
    np.testing.assert_array_equal(out.reshape(4, 2)[:, 1], w.max(1))
    np.testing.assert_array_equal(out8, a.reshape(16, 8).sum(1))
    np.testing.assert_array_equal(grank, np.arange(128))


def test_half_and_bfloat16():
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    __half h = __float2half(x[i]);
    __nv_bfloat16 b = __float2bfloat16(x[i]);
    hout[i] = h * __half(2.0f) + hin[i];
    bout[i] = b + bin[i];
    fout[2 * i] = __half2float(h);
    fout[2 * i + 1] = __bfloat162float(b);
    cmp[i] = (h > hin[i]) + 2 * (b < bin[i]);
    """
    params = (
        _in("x"),
        _in("hin", "float16"),
        _in("bin", "uint16"),
        _out("hout", "float16"),
        _out("bout", "uint16"),
        _out("fout"),
        _out("cmp", "int32"),
    )
    # bfloat16 arrays travel as raw uint16 bits here (numpy has no bfloat16)
    params = tuple(
        Param(p.name, p.kind, "bfloat16", p.is_output) if p.dtype == "uint16" else p for p in params
    )
    k = Kernel("halves", params, body)
    n = 256
    x = (_RNG.standard_normal(n) * 100).astype(np.float32)
    x[:4] = [65504.0, 1e-6, -0.0, 70000.0]  # max half, half subnormal, -0, overflow to inf
    hin = _RNG.standard_normal(n).astype(np.float16)
    bf = _RNG.standard_normal(n).astype(np.float32)
    bin_bits = (bf.view(np.uint32) >> 16).astype(np.uint16)  # truncation: exact bf16 values
    hout, bout = np.zeros(n, np.float16), np.zeros(n, np.uint16)
    fout, cmp = _poisoned(2 * n), np.zeros(n, np.int32)
    k(1, n, x=x, hin=hin, bin=bin_bits, hout=hout, bout=bout, fout=fout, cmp=cmp)

    with np.errstate(over="ignore"):
        h = x.astype(np.float16)
        h2 = (h.astype(np.float32) * 2 + hin).astype(np.float16)
    np.testing.assert_array_equal(fout[0::2], h.astype(np.float32))
    np.testing.assert_array_equal(hout, h2)
    bits = x.view(np.uint32).astype(np.uint64)
    b_rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    b32 = (b_rne.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(fout[1::2], b32)
    bin32 = (bin_bits.astype(np.uint32) << 16).view(np.float32)
    expect_b = (b32 + bin32).view(np.uint32).astype(np.uint64)
    expect_b = ((expect_b + 0x7FFF + ((expect_b >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(bout, expect_b)
    np.testing.assert_array_equal(cmp, (h > hin).astype(np.int32) + 2 * (b32 < bin32))


@pytest.mark.parametrize("check", [False, True])
def test_bfloat16_arrays_as_pointers_in_both_modes(check):
    # llm.c's spellings on bf16 arrays: casts of elements, a vector view, a helper taking T*
    header = """
    template <class T>
    __device__ float sum2(const T* p) { return (float)p[0] + (float)p[1]; }
    """
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(x);
    float2 f = __bfloat1622float2(x2[i]);
    float a = (float)x[2 * i], b = static_cast<float>(x[2 * i + 1]);
    out[i] = a * b + f.x - f.y + sum2(x + 2 * i);
    y[i] = __float2bfloat16(a + b);
    float back = (float)y[i];
    out[i] += back;
    """
    bf16 = lambda name, out=False: Param(name, "array", "bfloat16", out)
    k = Kernel(
        "bf16ptr", (bf16("x"), _scalar("n"), _out("out"), bf16("y", True)), body, header, check
    )
    n = 99
    xf = _RNG.standard_normal(2 * n).astype(np.float32)
    bits = (xf.view(np.uint32) >> 16).astype(np.uint16)  # exact bf16 values
    out, y = _poisoned(n), np.zeros(n, np.uint16)
    k(1, 128, x=bits, n=n, out=out, y=y)
    v = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(n, 2)
    s = (v[:, 0] + v[:, 1]).astype(np.float32)
    s_bits = s.view(np.uint32).astype(np.uint64)
    y_ref = ((s_bits + 0x7FFF + ((s_bits >> 16) & 1)) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(y, y_ref)
    back = (y_ref.astype(np.uint32) << 16).view(np.float32)
    ref = v[:, 0] * v[:, 1] + v[:, 0] - v[:, 1] + v[:, 0] + v[:, 1] + back
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_functions_match_numpy(dtype):
    c = "float" if dtype == "float32" else "double"
    f = "f" if dtype == "float32" else ""
    body = f"""
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    {c} v = x[i], p = fabs(v) + ({c})0.5;
    out[16 * i + 0] = exp{f}(v);
    out[16 * i + 1] = log{f}(p);
    out[16 * i + 2] = sqrt{f}(p);
    out[16 * i + 3] = tanh{f}(v);
    out[16 * i + 4] = pow{f}(p, ({c})1.7);
    out[16 * i + 5] = erf{f}(v);
    out[16 * i + 6] = floor{f}(v);
    out[16 * i + 7] = ceil{f}(v);
    out[16 * i + 8] = fma{f}(v, v, ({c})1);
    out[16 * i + 9] = min(v, ({c})0.25);
    out[16 * i + 10] = max(v, 0);
    out[16 * i + 11] = rsqrt{f}(p);
    out[16 * i + 12] = sin{f}(v) + cos{f}(v);
    out[16 * i + 13] = metal::precise::exp(v) - metal::fast::exp(v)
                       + metal::clamp(v, ({c})-1, ({c})1);
    out[16 * i + 14] = __expf(({c})v * 0.5f) + __fdividef(1.0f, (float)p) + __saturatef(v);
    out[16 * i + 15] = __popc((unsigned)i) + __clz((int)i + 1) + __ffs((int)i);
    """
    k = Kernel(f"math_{dtype}", (_in("x", dtype), _out("out", dtype)), body)
    n = 128
    x = _RNG.uniform(-3, 3, n).astype(dtype)
    out = np.full(16 * n, np.nan, dtype)
    k(2, 64, x=x, out=out)
    out = out.reshape(n, 16)
    p = np.abs(x) + 0.5
    import math

    i = range(n)
    ffs = np.array([(v & -v).bit_length() for v in i])
    ref = [
        np.exp(x),
        np.log(p),
        np.sqrt(p),
        np.tanh(x),
        p**1.7,
        np.array([math.erf(v) for v in x]),
        np.floor(x),
        np.ceil(x),
        x * x + 1,
        np.minimum(x, 0.25),
        np.maximum(x, 0),
        1 / np.sqrt(p),
        np.sin(x) + np.cos(x),
        np.clip(x, -1, 1),
        np.exp(x * 0.5) + 1 / p.astype(np.float32) + np.clip(x, 0, 1),
        np.array([bin(v).count("1") + (32 - (v + 1).bit_length()) for v in i]) + ffs,
    ]
    tol = 2e-6 if dtype == "float32" else 1e-13
    for j, r in enumerate(ref):
        np.testing.assert_allclose(
            out[:, j], r, rtol=max(tol, 1e-6 if j == 14 else tol), atol=1e-6, err_msg=f"column {j}"
        )


def test_printf(capfd):
    body = 'if (threadIdx.x == 3 && blockIdx.x == 1) printf("hello %d %.2f\\n", n, 1.5);'
    k = Kernel("hello", (_scalar("n"),), body)
    k(2, 8, n=42)
    assert "hello 42 1.50" in capfd.readouterr().out


def test_scalars_dims_template_and_metal_attributes():
    body = """
    uint i = thread_position_in_grid.x;
    if (i >= (uint)x_shape[0]) return;
    out[i] = alpha * x[elem_to_loc(i, x_shape, x_strides, x_ndim)] + (float)K + (flag ? 1 : 0);
    lanes[i] = thread_index_in_simdgroup + 100 * simdgroup_index_in_threadgroup;
    """
    params = (
        _in("x"),
        Param("x_shape", "dims"),
        Param("x_strides", "dims"),
        Param("x_ndim", "ndim"),
        _scalar("alpha", "float32"),
        _scalar("flag", "bool"),
        _out("out"),
        _out("lanes", "int32"),
    )
    k = Kernel("axpb", params, body, template=[("K", 3)])
    base = _RNG.standard_normal((10, 2)).astype(np.float32)
    x = base[:, 0].copy()  # strided view emulated through strides = 2 on the base buffer
    out, lanes = _poisoned(10), np.zeros(10, np.int32)
    k(
        1,
        64,
        x=base.ravel(),
        x_shape=[10] + [1] * 7,
        x_strides=[2] + [0] * 7,
        x_ndim=1,
        alpha=2.0,
        flag=True,
        out=out,
        lanes=lanes,
    )
    np.testing.assert_allclose(out, 2 * x + 4, rtol=1e-6)
    np.testing.assert_array_equal(lanes, np.arange(10))


def test_checked_mode_out_of_bounds_write():
    body = "uint i = blockIdx.x * blockDim.x + threadIdx.x;\nout[i] = inp[i % 1024];"
    k = Kernel("copy", (_in("inp"), _out("out")), body, check=True)
    a = _RNG.standard_normal(1024).astype(np.float32)
    out = _poisoned(1024)
    k(4, 256, inp=a, out=out)  # in bounds: runs normally
    np.testing.assert_array_equal(out, a)
    with pytest.raises(KernelFault) as e:
        k(5, 256, inp=a, out=out)  # block 4 writes past the end
    msg = str(e.value)
    assert msg.startswith("[copy] out-of-bounds write to 'out' at index 1024 (extent 1024)")
    assert "by block (4,0,0) thread (0,0,0) at copy:2" in msg


def test_checked_mode_out_of_bounds_read_names_thread_and_line():
    body = """
    uint i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = 0;
    if (threadIdx.y == 1 && i == 37)
      v = inp[i + 100];
    out[i] = v;
    """
    k = Kernel("peek", (_in("inp"), _out("out")), body, check=True)
    a, out = _RNG.standard_normal(128).astype(np.float32), _poisoned(128)
    with pytest.raises(KernelFault) as e:
        k(2, (64, 2), inp=a, out=out)
    assert (
        "out-of-bounds read of 'inp' at index 137 (extent 128) by block (0,0,0) "
        "thread (37,1,0) at peek:5"
    ) in str(e.value)


def test_checked_mode_pointer_arithmetic_and_atomics():
    body = """
    auto row = out + blockIdx.x * 4;
    row[threadIdx.x] = 1.0f;
    atomicAdd(&total[threadIdx.x], 1.0f);
    """
    k = Kernel("rows", (_out("out"), _out("total")), body, check=True)
    out, total = np.zeros(8, np.float32), np.zeros(4, np.float32)
    k(2, 4, out=out, total=total)
    assert out.sum() == 8 and total.sum() == 8
    with pytest.raises(KernelFault, match=r"'total' at index 4 \(extent 4\).*at rows:4"):
        k(2, 5, out=np.zeros(10, np.float32), total=total)


@pytest.mark.parametrize("check", [False, True])
def test_divergent_barrier_is_reported_not_hung(check):
    # lanes 16.. of each warp still run: they wait at a warp operation with the barrier's lanes
    body = """
    uint t = threadIdx.x;
    if (t % 32 >= 16) { out[t] = __shfl_sync(0xffffffffu, 1.0f, 0); return; }
    __syncthreads();
    out[t] = 1;
    """
    k = Kernel("diverge", (_out("out"),), body, check=check)
    out = _poisoned(128)
    with pytest.raises(KernelFault) as e:
        _run_with_timeout(lambda: k(3, 128, out=out))
    msg = str(e.value)
    assert msg.startswith("[diverge] divergent __syncthreads() at diverge:4 in block (")
    assert "64 of 128 threads arrived, 0 returned without reaching it, 64 wait at a warp" in msg


@pytest.mark.parametrize("check", [False, True])
def test_threads_that_returned_no_longer_hold_a_barrier_back(check):
    body = """
    uint t = threadIdx.x;
    if (t >= 96) return;
    __syncthreads();
    out[t] = 1;
    """
    k = Kernel("exited", (_out("out"),), body, check=check)
    out = _poisoned(128)
    _run_with_timeout(lambda: k(3, 128, out=out))
    assert (out[:96] == 1).all() and np.isnan(out[96:]).all()


def test_fault_stops_the_launch_and_the_library_stays_usable():
    body = "if (threadIdx.x < n) __syncthreads();\nelse __syncwarp();\nout[blockIdx.x] = 1;"
    k = Kernel("maybe", (_scalar("n"), _out("out")), body)
    out = np.zeros(64, np.float32)
    with pytest.raises(KernelFault):
        _run_with_timeout(lambda: k(64, 32, n=5, out=out))
    k(64, 32, n=32, out=out)
    assert out.sum() == 64


def test_compile_error_shows_user_line():
    body = "uint i = threadIdx.x;\nout[i] = 1;\nout[i] = undefined_name + 2;"
    with pytest.raises(CompileError) as e:
        Kernel("broken", (_out("out"),), body)
    assert "broken:3" in e.value.log and "undefined_name" in e.value.log
    assert "kk_cpu.h" in e.value.source and e.value.options


def test_compile_error_in_header_shows_header_line():
    with pytest.raises(CompileError) as e:
        Kernel("hdr", (_out("out"),), "out[0] = f();", header="int f() {\n  return nope;\n}")
    assert "hdr.header:2" in e.value.log


def test_missing_compiler_raises_backend_error(monkeypatch):
    monkeypatch.setenv("KERNELKIT_CXX", "/nonexistent/kk-g++")
    _config.reload()
    try:
        with pytest.raises(BackendError, match="apt install g\\+\\+"):
            Kernel("nocc", (_out("out"),), "out[0] = 1;")
        with pytest.raises(BackendError):
            _BACKEND.compiler_identity()
    finally:
        monkeypatch.delenv("KERNELKIT_CXX")
        _config.reload()


def test_artifact_is_self_contained_and_keyed_by_headers():
    k = Kernel("copy", (_in("inp"), _scalar("n"), _out("out")), COPY_BODY)
    assert k.artifact.kind == "so" and k.artifact.binary[:4] == b"\x7fELF"
    again = _BACKEND.load(k.artifact, _TARGET)  # a second, independent copy of the library
    launch = _BACKEND.launcher(again, _TARGET)
    a, out = _RNG.standard_normal(300).astype(np.float32), _poisoned(300)
    keep = [ctypes.c_void_p(a.ctypes.data), ctypes.c_int32(300), ctypes.c_void_p(out.ctypes.data)]
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in keep])
    launch(ctypes.addressof(ptrs), 0, (2, 1, 1, 256, 1, 1, 0))
    np.testing.assert_array_equal(out, a)
    names = [n for n, _ in k.request.headers]
    assert "kk_cpu.h" in names and "kk_cpu_sched.h" in names
    assert _BACKEND.compiler_identity() in k.artifact.metadata["compiler"]


def test_threads_of_a_block_run_concurrently_with_other_launches():
    k = Kernel("block_sum", (_in("inp"), _scalar("n"), _out("out")), REDUCE_BODY)
    n = 256 * 64
    a = _RNG.integers(-4, 4, n).astype(np.float32)
    results = [_poisoned(64) for _ in range(4)]
    threads = [
        threading.Thread(target=k, args=(64, 256), kwargs=dict(inp=a, n=n, out=r)) for r in results
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r in results:
        np.testing.assert_array_equal(r, a.reshape(64, 256).sum(1))
