"""The built-in ops' repeated-call path (``ops._common``): after its first call, an op signature
launches its kernel's hot path directly and validates nothing again; these tests check that a
call whose arguments differ in any way the signature holds (dtype, shape, strides, out=, scalar
values and types, pointer alignment) is still validated and computed as its own, on every
backend and framework."""

from __future__ import annotations

import math

import numpy as np
import pytest

import kernelkit
from kernelkit import ops
from kernelkit._api import Kernel

RNG = np.random.default_rng(5)


def _rms(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def _rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def _calls_through_kernel(monkeypatch):
    """A counter of calls that go through ``Kernel.__call__`` (the checked path)."""
    calls = {"n": 0}
    original = Kernel.__call__

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Kernel, "__call__", counting)
    return calls


def test_repeated_op_calls_skip_the_kernel_check(arrays, monkeypatch):
    x = arrays.put(RNG.standard_normal((5, 40)).astype(np.float32) + 0.5)
    w = arrays.put(RNG.standard_normal(40).astype(np.float32))
    ops.rms_norm(x, w, 1e-5)  # compiles, binds, decides
    calls = _calls_through_kernel(monkeypatch)
    for eps in (1e-5, 0.25, 3.0):  # a scalar's value is no part of the signature
        y = arrays.get(ops.rms_norm(x, w, eps))
        assert _rel(y, _rms(arrays.get(x), arrays.get(w), eps)) < 1e-5
    assert calls["n"] == 0


def test_a_new_signature_takes_its_own_specialization(arrays):
    base = RNG.standard_normal((6, 64)).astype(np.float32) + 0.5
    w = RNG.standard_normal(64).astype(np.float32)
    ref = _rms(base, w, 1e-6)
    for _ in range(2):
        assert _rel(arrays.get(ops.rms_norm(arrays.put(base), arrays.put(w), 1e-6)), ref) < 1e-5
    strided = arrays.put(np.repeat(base, 2, axis=1))[:, ::2]  # the same values, stride 2
    for _ in range(2):
        assert _rel(arrays.get(ops.rms_norm(strided, arrays.put(w), 1e-6)), ref) < 1e-5
    half = arrays.put(base.astype(np.float16))
    y = ops.rms_norm(half, arrays.put(w.astype(np.float16)), 1e-6)
    assert str(y.dtype).endswith("float16")
    assert _rel(arrays.get(y).astype(np.float64), ref) < 2e-3
    out = arrays.put(np.full((6, 64), np.nan, np.float32))
    for _ in range(2):
        ops.rms_norm(arrays.put(base), arrays.put(w), 1e-6, out=out)
        assert _rel(arrays.get(out), ref) < 1e-5


@pytest.mark.parametrize("eps", [-1.0, math.nan, True, "1e-5", None])
def test_a_bad_eps_is_refused_after_good_calls(arrays, eps):
    x = arrays.put(RNG.standard_normal((3, 16)).astype(np.float32))
    w = arrays.put(np.ones(16, np.float32))
    ops.rms_norm(x, w, 1e-5)
    with pytest.raises(kernelkit.ArgumentError, match="eps"):
        ops.rms_norm(x, w, eps)
    ops.rms_norm(x, w, 2)  # an int eps is taken as a float
    y = arrays.get(ops.rms_norm(x, w, 1e-5))
    assert _rel(y, _rms(arrays.get(x), 1.0, 1e-5)) < 1e-5


def test_matmul_repeats_and_refuses_what_it_refused(arrays, monkeypatch):
    a = RNG.standard_normal((3, 24)).astype(np.float32)
    w = RNG.standard_normal((10, 24)).astype(np.float32)
    ref = a.astype(np.float64) @ w.T.astype(np.float64)
    xa, xw = arrays.put(a), arrays.put(w)
    ops.matmul(xa, xw, transpose_b=True)
    calls = _calls_through_kernel(monkeypatch)
    for _ in range(3):
        assert _rel(arrays.get(ops.matmul(xa, xw, transpose_b=True)), ref) < 1e-5
    assert calls["n"] == 0
    # 1 == True hashes alike: a transpose_b that is not a bool is refused, not looked up
    with pytest.raises(kernelkit.ArgumentError, match="transpose_b"):
        ops.matmul(xa, xw, transpose_b=1)
    with pytest.raises(kernelkit.ArgumentError, match="activation"):
        ops.matmul(xa, xw, transpose_b=True, activation="tanh")
    with pytest.raises(kernelkit.ArgumentError, match="out must have shape"):
        ops.matmul(xa, xw, transpose_b=True, out=arrays.put(np.zeros((3, 9), np.float32)))
    out = arrays.put(np.full((3, 10), np.nan, np.float32))
    for _ in range(2):
        ops.matmul(xa, xw, transpose_b=True, out=out)
        assert _rel(arrays.get(out), ref) < 1e-5
    relu = np.maximum(ref, 0)
    assert _rel(arrays.get(ops.matmul(xa, xw, transpose_b=True, activation="relu")), relu) < 1e-5


def test_matmul_alignment_is_read_per_call(arrays):
    """A view one element into its buffer has the signature of an aligned array: the kernels
    that need 16-byte boundaries must still be refused for it, every time."""
    buf = RNG.standard_normal(3 * 32 + 1).astype(np.float32)
    w = RNG.standard_normal((8, 32)).astype(np.float32)
    aligned = arrays.put(buf[:96].copy()).reshape(3, 32)
    shifted = arrays.put(buf)[1:].reshape(3, 32)
    xw = arrays.put(w)
    for x, host in (
        (aligned, buf[:96]),
        (shifted, buf[1:]),
        (aligned, buf[:96]),
        (shifted, buf[1:]),
    ):
        want = host.reshape(3, 32).astype(np.float64) @ w.T.astype(np.float64)
        assert _rel(arrays.get(ops.matmul(x, xw, transpose_b=True)), want) < 1e-5


def test_elementwise_repeats_through_the_direct_path(arrays, monkeypatch):
    f = ops.elementwise("y = a * b + 1")
    a = RNG.standard_normal((4, 9)).astype(np.float32)
    b = RNG.standard_normal((1, 9)).astype(np.float32)  # broadcast
    xa, xb = arrays.put(a), arrays.put(b)
    f(xa, xb)
    calls = _calls_through_kernel(monkeypatch)
    for _ in range(3):
        assert _rel(arrays.get(f(xa, xb)), a * b + 1) < 1e-6
    assert calls["n"] == 0
    c = RNG.standard_normal((4, 9)).astype(np.float32)
    assert _rel(arrays.get(f(xa, arrays.put(c))), a * c + 1) < 1e-6  # a new signature


# --- bad input found by an independent review: each refused with a named argument -----------


def test_out_of_the_wrong_shape_is_refused_by_the_row_ops(arrays):
    x = arrays.put(RNG.standard_normal((4, 16)).astype(np.float32))
    w = arrays.put(np.ones(16, np.float32))
    for bad in ((1,), (2, 16), (64,), (4, 17)):  # (1,): 4 bytes for 64 floats (heap damage)
        out = arrays.put(np.full(bad, np.nan, np.float32))
        with pytest.raises(kernelkit.ArgumentError, match="out must have shape"):
            ops.softmax(x, out=out)
        with pytest.raises(kernelkit.ArgumentError, match="out must have shape"):
            ops.rms_norm(x, w, 1e-6, out=out)
        with pytest.raises(kernelkit.ArgumentError, match="out must have shape"):
            ops.layer_norm(x, w, w, 1e-6, out=out)
    out = arrays.put(np.full((4, 16), np.nan, np.float32))
    ops.softmax(x, out=out)  # the next call works
    assert np.allclose(arrays.get(out).sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "bool", "float64"])
def test_matmul_refuses_dtypes_it_does_not_compute(arrays, dtype):
    if dtype == "float64" and arrays.use_torch is False and arrays.on_gpu:
        pytest.skip("NumPy arrays run on the CPU backend only")
    a = arrays.put(np.ones((2, 4), dtype))
    with pytest.raises(
        kernelkit.ArgumentTypeError, match=f"a must be float16, bfloat16 or float32, got {dtype}"
    ):
        ops.matmul(a, arrays.put(np.ones((4, 3), dtype)))


def test_matmul_refuses_an_out_it_cannot_write_in_place(arrays):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    xa, xb = arrays.put(a), arrays.put(b)
    base = arrays.put(np.full((3, 2, 5), np.nan, np.float32))
    strided = base.permute(1, 0, 2) if hasattr(base, "permute") else base.transpose(1, 0, 2)
    with pytest.raises(kernelkit.ArgumentError, match="3-D out must be row-contiguous"):
        ops.matmul(xa, xb, out=strided)
    sq = arrays.put(RNG.standard_normal((6, 6)).astype(np.float32))
    with pytest.raises(kernelkit.ArgumentError, match=r"out= overlaps input .a."):
        ops.matmul(sq, arrays.put(np.eye(6, dtype=np.float32)), out=sq)
    out = arrays.put(np.full((2, 3, 5), np.nan, np.float32))
    ops.matmul(xa, xb, out=out)  # the next call works
    assert _rel(arrays.get(out), a.astype(np.float64) @ b) < 1e-5


def test_ops_name_arguments_of_the_wrong_kind(arrays):
    x = arrays.put(np.ones((2, 4), np.float32))
    w = arrays.put(np.ones(4, np.float32))
    cases = [
        (lambda: ops.rms_norm(x, None, 1e-6), kernelkit.ArgumentTypeError, "weight must be an"),
        (lambda: ops.rms_norm(x, 1.0, 1e-6), kernelkit.ArgumentTypeError, "weight must be an"),
        (lambda: ops.layer_norm(x, w, None, 1e-5), kernelkit.ArgumentTypeError, "bias must be"),
        (lambda: ops.rms_norm(x, arrays.put(np.arange(1, 5, dtype=np.int32)), 1e-6),
         kernelkit.ArgumentTypeError, "weight must be float16"),
        (lambda: ops.matmul(x, arrays.put(np.ones((4, 2), np.float32)), bias=1.0),
         kernelkit.ArgumentTypeError, "bias must be an array"),
        (lambda: ops.matmul(None, x), kernelkit.ArgumentTypeError, "a must be an array"),
        (lambda: ops.softmax([[1.0, 2.0]]), kernelkit.ArgumentTypeError, "x must be an array"),
        (lambda: ops.matmul(x, x, transpose_b=True, activation=["relu"]),
         kernelkit.ArgumentError, "activation"),
        (lambda: ops.rms_norm(x, w, 10**400), kernelkit.ArgumentError, "eps"),
    ]  # fmt: skip
    for call, error, match in cases:
        with pytest.raises(error, match=match):
            call()
    y = arrays.get(ops.rms_norm(x, w, np.float32(1e-6)))  # a NumPy float is a float
    assert np.allclose(y, 1.0, atol=1e-5)


def test_big_endian_numpy_arrays_are_refused():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], ">f4")
    with pytest.raises(kernelkit.ArgumentTypeError, match="non-native byte order"):
        ops.softmax(x)
    y = ops.softmax(x.astype(x.dtype.newbyteorder("=")))
    assert np.allclose(y, np.exp(x - 4) / np.exp(x - 4).sum(), rtol=1e-6)


def test_out_with_autograd_is_refused_as_torch_does():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(kernelkit.ArgumentError, match="out= does not take part in autograd"):
        ops.softmax(x, out=torch.empty(2, 3))
    with torch.no_grad():
        y = ops.softmax(x, out=torch.empty(2, 3))
    assert torch.allclose(y, torch.softmax(x.detach(), -1), atol=1e-6)


def test_explain_validates_like_the_call(arrays):
    x = arrays.put(np.ones((2, 4), np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="weight must have shape"):
        ops.rms_norm.explain(x, arrays.put(np.ones(3, np.float32)), 1e-6)
    with pytest.raises(kernelkit.ArgumentError, match="eps"):
        ops.layer_norm.explain(
            x, arrays.put(np.ones(4, np.float32)), arrays.put(np.ones(4, np.float32)), "a"
        )


@pytest.mark.parametrize(
    ("sa", "sb"), [((3, 0), (0, 4)), ((2, 3, 0), (0, 4)), ((2, 3, 5), (5, 0)), ((0, 3, 5), (5, 4))]
)
def test_matmul_with_an_empty_dimension_runs_forward_and_backward(sa, sb):
    torch = pytest.importorskip("torch")
    a = torch.randn(*sa, dtype=torch.float64).float().requires_grad_()
    b = torch.randn(*sb, dtype=torch.float64).float().requires_grad_()
    y = ops.matmul(a, b)
    (y * 2).sum().backward()
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    y2 = a2 @ b2
    (y2 * 2).sum().backward()
    assert y.shape == y2.shape and torch.equal(y, y2)  # K = 0: zeros
    assert torch.allclose(a.grad, a2.grad) and torch.allclose(b.grad, b2.grad)


# --- a second review: signatures, overlaps, JAX namespaces, gradients ---------------------------


def test_a_meta_tensor_after_a_cpu_tensor_is_refused_not_run():
    """get_device() is -1 for both: the op signature must still tell them apart (the meta
    call ran the CPU call's kernel on a tensor with no data: a segfault)."""
    torch = pytest.importorskip("torch")
    for call in (
        lambda d: ops.softmax(torch.randn(4, 64, device=d)),
        lambda d: ops.rms_norm(torch.randn(4, 64, device=d), torch.ones(64, device=d), 1e-6),
        lambda d: ops.matmul(torch.randn(3, 8, device=d), torch.randn(8, 5, device=d)),
    ):
        call("cpu")
        with pytest.raises(kernelkit.ArgumentTypeError, match="meta"):
            call("meta")
        call("cpu")


def test_sparse_tensors_are_refused_by_kernels_and_ops():
    torch = pytest.importorskip("torch")
    k = kernelkit.kernel(
        "ops_common_copy", ["x"], ["y"], "if (threadIdx.x < 8) y[threadIdx.x] = x[threadIdx.x];"
    )
    x = torch.ones(8)
    geo = {
        "grid": (8, 1, 1),
        "threadgroup": (8, 1, 1),
        "output_shapes": [(8,)],
        "output_dtypes": [x.dtype],
    }
    k([x], **geo)
    with pytest.raises(kernelkit.ArgumentTypeError, match="dense"):
        k([x.to_sparse()], **geo)
    with pytest.raises(kernelkit.ArgumentTypeError, match="dense"):
        ops.softmax(torch.ones(2, 4).to_sparse())
    assert torch.equal(k([x], **geo)[0], x)


def test_out_overlapping_an_input_is_refused_unless_it_is_the_input(arrays):
    buf = arrays.put(RNG.standard_normal((9, 64)).astype(np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="out= overlaps input 'x'"):
        ops.softmax(buf[:8], out=buf[1:])
    w = arrays.put(np.ones(64, np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="out= overlaps input 'x'"):
        ops.rms_norm(buf[:8], w, 1e-6, out=buf[1:])
    f = ops.elementwise("y = a * 2")
    flat = arrays.put(RNG.standard_normal(1001).astype(np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="out= overlaps input 'a'"):
        f(a=flat[:1000], out=flat[1:])
    g = ops.elementwise("y = a + b")
    o = arrays.put(RNG.standard_normal((4, 8)).astype(np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="out= overlaps input 'b'"):
        g(a=o, b=o[0], out=o)  # b broadcast from a row of out
    # exactly in place: each element is read before it is written
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    xd = arrays.put(x.copy())
    ops.softmax(xd, out=xd)
    assert _rel(arrays.get(xd), e / e.sum(-1, keepdims=True)) < 1e-5
    f(a=flat, out=flat)
    sq = arrays.put(RNG.standard_normal((6, 6)).astype(np.float32))
    with pytest.raises(kernelkit.ArgumentError, match="out= overlaps input 'a'"):
        ops.matmul(sq, arrays.put(np.eye(6, dtype=np.float32)), out=sq)  # never in place


def test_jax_arrays_take_every_path():
    jnp = pytest.importorskip("jax.numpy")
    x = RNG.standard_normal((4, 37)).astype(np.float32)
    got = np.asarray(ops.softmax(jnp.asarray(x), dim=0))  # moveaxis
    e = np.exp(x - x.max(0, keepdims=True))
    assert _rel(got, e / e.sum(0, keepdims=True)) < 1e-5
    f = ops.elementwise("y = a + b")
    got = np.asarray(f(a=jnp.asarray(x), b=jnp.asarray(x[0])))  # broadcast_to
    assert _rel(got, x + x[0]) < 1e-6
    assert ops.softmax(jnp.zeros((0, 5), jnp.float32)).shape == (0, 5)  # empty


def test_elementwise_refuses_inputs_that_need_a_gradient():
    torch = pytest.importorskip("torch")
    f = ops.elementwise("y = a * a")
    x = torch.randn(8, requires_grad=True)
    with pytest.raises(kernelkit.ArgumentError, match="no gradient"):
        f(a=x)
    with torch.no_grad():
        assert torch.allclose(f(a=x), x.detach() ** 2)
    assert torch.allclose(f(a=x.detach()), x.detach() ** 2)


def test_softmax_dim_and_rank_errors():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 3, requires_grad=True)  # the torch op's path validates too
    with pytest.raises(kernelkit.ArgumentError, match="dim must be an int"):
        ops.softmax(x, dim=3)
    with pytest.raises(kernelkit.ArgumentError, match="at least one dimension"):
        ops.softmax(np.float32(1.0) * np.ones((), np.float32))
    y = ops.softmax(np.ones((2, 3), np.float32), dim=np.int64(0))  # a NumPy int is an int
    assert np.allclose(y, 0.5)


# --- a review of the change: signatures that must differ ----------------------------------------


def test_a_sparse_tensor_after_an_expanded_dense_one_is_refused():
    """torch 2.13 gives a COO tensor strides (0, 0), those of an expanded dense tensor: the
    layout must be in the ops' signature too."""
    torch = pytest.importorskip("torch")
    dense = torch.full((1, 1), 3.0).expand(4, 8)
    sparse = torch.arange(32.0).reshape(4, 8).to_sparse()
    for op in (ops.softmax, lambda x: ops.elementwise("y = a * 2")(a=x)):
        op(dense)
        with pytest.raises(kernelkit.ArgumentTypeError):
            op(sparse)


def test_torch_subclasses_are_signed_with_their_strides():
    torch = pytest.importorskip("torch")

    class Tagged(torch.Tensor):
        pass

    f = ops.elementwise("y = a * 2")
    x = torch.arange(16.0).reshape(4, 4).as_subclass(Tagged)
    f(a=x, out=torch.zeros(4, 4).as_subclass(Tagged))
    with pytest.raises(kernelkit.ArgumentError, match="row-contiguous"):
        f(a=x, out=torch.zeros(4, 4).as_subclass(Tagged).t())


def test_elementwise_int_scalars_stay_floats_after_the_choice_is_forgotten():
    f = ops.elementwise("y = a * s")
    x = np.ones(4, np.float32)
    for _ in range(2):
        assert np.allclose(f(a=x, s=2**40), 2.0**40)
    f.op.forget()
    assert np.allclose(f(a=x, s=2**40), 2.0**40)
    with kernelkit.force(f.op, "strided"):
        assert np.allclose(f(a=x, s=2**40), 2.0**40)


def test_outputs_must_not_overlap_each_other(arrays):
    f = ops.elementwise("y = a + 1; z = a * 2")
    a = arrays.put(RNG.standard_normal(8).astype(np.float32))
    buf = arrays.put(np.zeros(9, np.float32))
    with pytest.raises(kernelkit.ArgumentError, match=r"out\[1\] overlaps an earlier out"):
        f(a=a, out=[buf[:8], buf[1:]])
    _y, z = f(a=a, out=[arrays.put(np.zeros(8, np.float32)), arrays.put(np.zeros(8, np.float32))])
    assert np.allclose(arrays.get(z), 2 * arrays.get(a))


# --- a third review: sizes, constant rows, transforms --------------------------------------------


def test_elementwise_index_type_leaves_room_for_the_last_stride():
    from kernelkit.ops._elementwise import index_type

    threads = 65536 * 256  # the largest flat grid
    assert index_type(2**31 - 2**25, threads) == "int32"
    assert index_type(2**31 - 1, threads) == "int64"  # e + stride passed 2**31 - 1: a crash
    assert index_type(2**31 - 2**24 + 1000, threads) == "int64"


def test_layer_norm_of_a_constant_row_is_the_bias(arrays):
    """Statistics of x - x[0]: a constant row's deviations are exact zeros (a float32 mean of
    1000.1 was an ulp off, and the output ±0.02, or ±1 with eps = 0)."""
    for n in (7, 12, 13, 64, 1001):
        x = arrays.put(np.full((3, n), 1000.1, np.float32))
        w = arrays.put(RNG.standard_normal(n).astype(np.float32))
        b = arrays.put(RNG.standard_normal(n).astype(np.float32))
        y = arrays.get(ops.layer_norm(x, w, b, 1e-5))
        assert np.array_equal(y, np.broadcast_to(arrays.get(b), (3, n))), n
        assert np.isnan(arrays.get(ops.layer_norm(x, w, b, 0.0))).all(), n  # 0 / 0, as torch


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_layer_norm_16bit_rows_constant_and_far_from_zero(dtype):
    """16-bit rows sum x and take count * shift off per thread, and centre x by one offset
    (shift + mean): a constant row still gives exactly the bias, and a row whose mean is far
    larger than its spread (1000 + a few ulps) keeps its digits; vector and element paths."""
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, dtype)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    gen = torch.Generator().manual_seed(3)
    for device in devices:
        for n in (13, 64, 1000, 4096):  # 13: the element path; the others: registers
            w = torch.randn(n, generator=gen).to(tdt).to(device)
            b = torch.randn(n, generator=gen).to(tdt).to(device)
            x = torch.full((3, n), 1000.0, dtype=tdt, device=device)
            y = ops.layer_norm(x, w, b, 1e-5)
            assert torch.equal(y, b.expand(3, n)), (device, n)
            ulp = 4.0 if dtype == "bfloat16" else 0.5  # the spacing of 16-bit numbers at 1000
            steps = torch.randint(-3, 4, (3, n), generator=gen).to(torch.float64)
            x = (1000.0 + ulp * steps).to(tdt).to(device)
            ref = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
            y = ops.layer_norm(x, w, b, 1e-5).double()
            err = ((y - ref).norm() / ref.norm()).item()
            assert err <= 1e-2, (device, n, err)


def test_matmul_tiles_past_65535_row_blocks():
    """The tiled kernel's M tiles were on grid.y (at most 65535 blocks)."""
    m = 65535 * 16 + 3
    a = RNG.standard_normal((m, 2)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    config = {"BM": 16, "BN": 64, "BK": 16, "TM": 1, "TN": 4, "threadgroup": (256,)}
    with kernelkit.force("matmul", "tiled", config):
        y = ops.matmul(a, b)
    assert _rel(y, a.astype(np.float64) @ b) < 1e-6


def test_torch_func_transforms_are_refused_by_name():
    torch = pytest.importorskip("torch")
    x = torch.randn(3, 4, 8)
    with pytest.raises(kernelkit.ArgumentError, match=r"torch.func transforms"):
        torch.vmap(ops.softmax)(x)
    with pytest.raises(kernelkit.ArgumentError, match=r"torch.func transforms"):
        torch.vmap(lambda t: ops.elementwise("y = a * 2")(a=t))(x)
    assert ops.softmax(x).shape == x.shape  # the next call works


def test_norms_under_torch_compile_keep_dynamic_shapes():
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    counts = {"graphs": 0}

    def backend(gm, example_inputs):
        counts["graphs"] += 1
        return gm.forward

    f = torch.compile(lambda x, w: ops.rms_norm(x, w, 1e-6), backend=backend, dynamic=True)
    w = torch.ones(16)
    for rows in (3, 5, 7, 9):
        x = torch.randn(rows, 16)
        assert torch.allclose(f(x, w), torch.nn.functional.rms_norm(x, (16,), w, 1e-6), atol=1e-5)
    assert counts["graphs"] == 1
