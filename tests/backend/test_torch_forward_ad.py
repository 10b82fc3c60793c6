"""Forward-mode AD (``torch.autograd.forward_ad``): the built-in ops have no JVP, so a tensor
that carries a tangent is refused with an error naming it, on the first call and on warm calls
whose signature was prepared outside the level (neither the signature nor torch's C check of the
tensors sees a tangent), and through the ops' torch ops; plain tensors inside a level run (and
prepare nothing); outside a level the prepared calls serve as before."""

from __future__ import annotations

import pytest

import kernelkit
from kernelkit import ops
from kernelkit.ops import _softmax

torch = pytest.importorskip("torch")
forward_ad = torch.autograd.forward_ad
F = torch.nn.functional
F64 = torch.float64

G = torch.Generator().manual_seed(0)
X, B = torch.randn(4, 24, generator=G), torch.randn(4, 24, generator=G)
W, BIAS = torch.rand(24, generator=G) + 0.5, torch.randn(24, generator=G)
WT = torch.randn(8, 24, generator=G)
SWIGLU = ops.elementwise("y = a * b / (1 + exp(-b)) * s")

# (name, call with the arrays at their positions, the arrays, the reference in float64)
CASES = {
    "softmax": (lambda x: ops.softmax(x), [X], lambda x: torch.softmax(x, -1)),
    "rms_norm": (lambda x, w: ops.rms_norm(x, w, 1e-6), [X, W],
                 lambda x, w: F.rms_norm(x, (24,), w, 1e-6)),
    "layer_norm": (lambda x, w, b: ops.layer_norm(x, w, b, 1e-5), [X, W, BIAS],
                   lambda x, w, b: F.layer_norm(x, (24,), w, b, 1e-5)),
    "matmul": (lambda a, b: ops.matmul(a, b, transpose_b=True), [X, WT],
               lambda a, b: a @ b.T),
    "matmul bias": (lambda a, b, c: ops.matmul(a, b, bias=c, transpose_b=True),
                    [X, WT, BIAS[:8]], lambda a, b, c: a @ b.T + c),
    "elementwise": (lambda a, b: SWIGLU(a, b, 2.0), [X, B],
                    lambda a, b: a * F.silu(b) * 2.0),
}  # fmt: skip
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]  # warm CUDA calls: C Calls
NAMES = {
    "softmax": ["x"], "rms_norm": ["x", "weight"], "layer_norm": ["x", "weight", "bias"],
    "matmul": ["a", "b"], "matmul bias": ["a", "b", "bias"], "elementwise": ["a", "b"],
}  # fmt: skip


def _check(case: str, arrays: list) -> None:
    fn, _, ref = CASES[case]
    want = ref(*[a.to(F64) for a in arrays]).float()
    torch.testing.assert_close(fn(*arrays), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_tangent_is_refused_by_name(case, warm, dev):
    fn, arrays, _ = CASES[case]
    arrays = [a.to(dev) for a in arrays]
    if warm:
        for _ in range(3):  # prepared, then served, outside any level
            _check(case, arrays)
    for i, name in enumerate(NAMES[case]):
        with forward_ad.dual_level():
            duals = list(arrays)
            duals[i] = forward_ad.make_dual(arrays[i], torch.ones_like(arrays[i]))
            with pytest.raises(kernelkit.ArgumentError, match=rf"'{name}'.*forward-mode AD"):
                fn(*duals)
            _check(case, arrays)  # plain tensors inside the level run
            with pytest.raises(kernelkit.ArgumentError, match="forward-mode AD"):
                fn(*duals)  # and prepared nothing that would serve a tangent
    _check(case, arrays)  # outside again: as before


def test_the_torch_ops_refuse_a_tangent():
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(X, torch.ones_like(X))
        with pytest.raises(kernelkit.ArgumentError, match=r"'x'.*forward-mode AD"):
            torch.ops.kernelkit.softmax(dual, -1)
        out = torch.empty_like(X)
        with pytest.raises(kernelkit.ArgumentError, match=r"'x'.*forward-mode AD"):
            torch.ops.kernelkit.rms_norm.out(dual, W, 1e-6, y=out)


def test_calls_inside_a_level_keep_nothing_and_warm_calls_outside_still_serve():
    x = torch.randn(3, 40, generator=G)
    for _ in range(3):
        ops.softmax(x)
    kept = (_softmax._RECENT.calls, _softmax._RECENT.entries, len(_softmax._TABLE))
    with forward_ad.dual_level():
        for _ in range(3):
            torch.testing.assert_close(ops.softmax(x), torch.softmax(x.to(F64), -1).float())
        y = torch.randn(5, 40, generator=G)  # a new signature inside the level
        for _ in range(2):
            torch.testing.assert_close(ops.softmax(y), torch.softmax(y.to(F64), -1).float())
    assert (_softmax._RECENT.calls, _softmax._RECENT.entries, len(_softmax._TABLE)) == kept
    torch.testing.assert_close(ops.softmax(x), torch.softmax(x.to(F64), -1).float())


@pytest.mark.parametrize("dev", DEVICES)
def test_a_kernel_s_torch_op_refuses_a_tangent(dev):
    each = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) "
    k = kernelkit.kernel("fwd_ad_scale", ["x", "s"], ["y"], each + "y[i] = s * x[i];")
    op = k.as_torch_op(f"kk_tests::fwd_ad_scale_{dev}", output_shapes="x", output_dtypes="x",
                       grid="x", scalars={"s": float})  # fmt: skip
    x = torch.randn(33, generator=G).to(dev)
    torch.testing.assert_close(op(x, 3.0), 3.0 * x)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(x, torch.ones_like(x))
        with pytest.raises(kernelkit.ArgumentError, match=r"'x'.*forward-mode AD"):
            op(dual, 3.0)
        y = torch.empty_like(x)
        with pytest.raises(kernelkit.ArgumentError, match=r"'x'.*forward-mode AD"):
            op(dual, 3.0, out=y)
        torch.testing.assert_close(op(x, 3.0), 3.0 * x)  # a plain tensor in the level runs
