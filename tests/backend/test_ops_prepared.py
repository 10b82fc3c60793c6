"""The built-in ops' most recent prepared calls (``ops._prepared.Recent``, issue 26): a warm call on
torch tensors is served by a check made in C (torch's ``TensorGuards``) before any signature is
built, and such a check serves only arrays like the ones its call was prepared for."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit import ArgumentError, ops
from kernelkit.ops import _matmul, _norms, _prepared, _softmax

torch = pytest.importorskip("torch")
F = torch.nn.functional

from profiled import entered  # noqa: E402

import kernelkit._integrations.torch_ops  # noqa: E402 - the torch ops and the checker


def _device(backend: str) -> str:
    return "cuda" if backend == "cuda" else "cpu"


def _called(fn) -> list[str]:
    """The Python functions one call of ``fn`` enters."""
    return entered(fn)[1]


def _calls(dev: str) -> dict:
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(dev) for s in ((6, 64), (64,), (64,)))
    weight = torch.randn(24, 64, generator=g).to(dev)
    bias = torch.randn(24, generator=g).to(dev)
    K = torch.ops.kernelkit
    silu_mul = ops.elementwise("y = a * silu(b)")
    return {
        "elementwise": lambda: silu_mul(x, x + 1),
        "softmax": lambda: ops.softmax(x),
        "rms_norm": lambda: ops.rms_norm(x, w, 1e-6),
        "layer_norm": lambda: ops.layer_norm(x, w, b, 1e-5),
        "matmul": lambda: ops.matmul(x, weight, transpose_b=True),
        "matmul bias": lambda: ops.matmul(x, weight, bias=bias, transpose_b=True),
        "torch op softmax": lambda: K.softmax_inference.default(x, -1),
        "torch op rms_norm": lambda: K.rms_norm_inference.default(x, w, 1e-6),
        "torch op matmul": lambda: K.matmul_runtime.default(x, weight, None, None, True),
    }


def _checker():
    """torch's TensorGuards checker, None where this torch has none that passes the probe."""
    from kernelkit._arrays._torch import checker

    return checker()


def test_the_checker_refuses_what_it_cannot_serve():
    from kernelkit._arrays._torch import checker as made

    checker = made()
    if checker is None:
        pytest.skip("this torch has no usable TensorGuards")
    x = torch.zeros(4, 8)
    check = checker((x,))
    assert check(torch.ones(4, 8))
    for other in (x.t(), x[:, :4], x.double(), torch.zeros(4, 8, 1), torch.nn.Parameter(x),
                  x.numpy(), None, 3.0, torch.zeros(4, 8, requires_grad=True)):  # fmt: skip
        assert not check(other), other
    assert checker((torch.zeros(2, requires_grad=True),)) is None  # the route serves those


def test_no_checker_where_torch_has_no_tensor_guards(monkeypatch):
    from torch._C._dynamo import guards

    from kernelkit._arrays._torch import _checker

    monkeypatch.delattr(guards, "TensorGuards")
    assert _checker() is None

    def wrong(*tensors, **kwargs):  # a changed TensorGuards that accepts everything
        return type("G", (), {"check": staticmethod(lambda *a: True)})()

    monkeypatch.setattr(guards, "TensorGuards", wrong, raising=False)
    assert _checker() is None  # the probe finds it out


@pytest.mark.parametrize("case", sorted(_calls("cpu")))
def test_a_warm_call_on_torch_tensors_builds_no_signature(backend, case):
    """Fails where the recent calls are not asked first: the signer runs on every warm call."""
    if _checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    fn = _calls(_device(backend))[case]
    for _ in range(3):
        fn()
    names = _called(fn)
    assert "torch_signature" not in names, names


def _variants(dev: str) -> list[tuple[str, object, object]]:
    """(what, kernelkit call, float64 reference) over arrays that a wrong recent call would
    serve with another's prepared run: shapes, dtypes, strides, classes, options."""
    g = torch.Generator().manual_seed(1)

    def rand(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dev, dtype)

    x, xl, xt = rand(5, 48), rand(3, 48), rand(48, 7).t()  # xt: [7, 48], not contiguous
    h = rand(5, 48, dtype=torch.float16)
    w, w16, bias = rand(48) + 1.5, rand(48, dtype=torch.float16) + 1.5, rand(48)
    p = torch.nn.Parameter(w.clone(), requires_grad=False)
    m, mt = rand(20, 48), rand(48, 20)
    d = lambda a: a.double()
    rms = lambda a, v, e: d(a) * torch.rsqrt(d(a).pow(2).mean(-1, keepdim=True) + e) * d(v)
    silu_mul = ops.elementwise("y = a * silu(b)")
    silu = lambda a, b: d(a) * d(b) * torch.sigmoid(d(b))
    out = []
    for name, a in (("x", x), ("x rows", xl), ("x strided", xt), ("x float16", h)):
        b2 = torch.randn(*a.shape, generator=g).to(dev, a.dtype)
        out.append((f"elementwise {name}", lambda a=a, b=b2: silu_mul(a, b),
                    lambda a=a, b=b2: silu(a, b)))  # fmt: skip
        out.append((f"softmax {name}", lambda a=a: ops.softmax(a), lambda a=a: d(a).softmax(-1)))
        out.append((f"softmax dim {name}", lambda a=a: ops.softmax(a, 1),
                    lambda a=a: d(a).softmax(-1)))  # fmt: skip
        v = w16 if a.dtype == torch.float16 else w
        for eps in (1e-6, 0.5):
            out.append((f"rms_norm {name} eps {eps}", lambda a=a, v=v, e=eps: ops.rms_norm(a, v, e),
                        lambda a=a, v=v, e=eps: rms(a, v, e)))  # fmt: skip
        if a.dtype == torch.float32:
            out.append((f"rms_norm {name} parameter", lambda a=a: ops.rms_norm(a, p, 1e-6),
                        lambda a=a: rms(a, p.detach(), 1e-6)))  # fmt: skip
            out.append((f"layer_norm {name}", lambda a=a: ops.layer_norm(a, w, bias, 1e-5),
                        lambda a=a: F.layer_norm(d(a), (48,), d(w), d(bias), 1e-5)))  # fmt: skip
            for act in (None, "relu"):
                f = (lambda y: y) if act is None else torch.relu
                out.append((f"matmul {name} {act}",
                            lambda a=a, act=act: ops.matmul(a, m, activation=act, transpose_b=True),
                            lambda a=a, f=f: f(d(a) @ d(m).t())))  # fmt: skip
                out.append((f"matmul {name} {act} [K, N]",
                            lambda a=a, act=act: ops.matmul(a, mt, activation=act),
                            lambda a=a, f=f: f(d(a) @ d(mt))))  # fmt: skip
                out.append((f"matmul {name} {act} bias",
                            lambda a=a, act=act: ops.matmul(a, m, bias=bias[:20], activation=act,
                                                            transpose_b=True),
                            lambda a=a, f=f: f(d(a) @ d(m).t() + d(bias[:20]))))  # fmt: skip
    return out


def test_recent_calls_serve_only_arrays_like_their_own(backend):
    """Every variant, called in turn three times over (many more signatures than the recent
    calls keep), gives its own result: a recent call that served another's arrays, options or
    eps would fail here."""
    variants = _variants(_device(backend))
    for rnd in range(3):
        for what, kk, want in variants:
            y, ref = kk(), want()
            assert y.shape == ref.shape, what
            tol = 2e-2 if y.dtype == torch.float16 else 2e-5
            np.testing.assert_allclose(y.double().cpu().numpy(), ref.cpu().numpy(), rtol=tol,
                                       atol=tol, err_msg=f"{what} (round {rnd})")  # fmt: skip
    for recent in (_softmax._RECENT, _norms._RMS_RECENT, *_matmul._RECENT):
        assert len(recent.entries) <= _prepared.Recent.LIMIT


def test_a_recent_call_follows_force_and_gradients(backend):
    dev = _device(backend)
    x, m = torch.randn(32, 16, device=dev), torch.randn(8, 16, device=dev)
    for _ in range(3):
        ops.matmul(x, m, transpose_b=True)
    with kernelkit.force("matmul", "gemv"), pytest.raises(ArgumentError, match="M = 32 > 16"):
        ops.matmul(x, m, transpose_b=True)  # the forced choice is part of the recent call's key
    w = torch.ones(16, device=dev)
    for _ in range(3):
        ops.rms_norm(x, w, 1e-6)
    xg = x.clone().requires_grad_()
    y = ops.rms_norm(xg, w, 1e-6)  # needs a gradient: the torch op with autograd, not the run
    assert y.grad_fn is not None
    y.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


def test_a_warm_call_inside_a_torch_func_transform_is_refused_as_a_cold_one(backend):
    dev = _device(backend)
    y = torch.randn(4, 8, device=dev)
    for _ in range(3):
        ops.softmax(y)  # warm for y's signature

    def inside(row):
        return row + ops.softmax(y)  # y is not batched, but the transform is running

    with pytest.raises(ArgumentError, match=r"torch\.func transforms"):
        torch.func.vmap(inside)(torch.randn(3, 4, 8, device=dev))


def test_a_compiled_graphs_op_call_builds_no_signature(backend):
    """A compiled graph's first run calls the torch op inside a dispatch mode's handler, where
    no entry serves later calls: the second call's warm path makes one (fails without
    ``Recent.again``: every later call of the graph builds the signature)."""
    if _checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    dev = _device(backend)
    x, w = torch.randn(16, 64, device=dev), torch.randn(64, device=dev)
    f = torch.compile(lambda x: ops.rms_norm(x, w, 1e-6), fullgraph=True)
    with torch.no_grad():
        for _ in range(3):
            f(x)
        names = _called(lambda: f(x))
    assert "eager_rms_norm" in names, names  # the graph calls the op, not a decomposition
    assert "torch_signature" not in names, names


def test_more_signatures_than_kept_make_no_check_on_every_call(backend, monkeypatch):
    """Calls cycling over more signatures than ``Recent.LIMIT`` keeps take the signature
    path; each run tries once to be remembered, not on every call."""
    checker = _prepared.CHECKERS.get(torch.Tensor)
    if checker is None or _checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    made: list[int] = []

    def counting(arrays):
        made.append(1)
        return checker(arrays)

    monkeypatch.setitem(_prepared.CHECKERS, torch.Tensor, counting)
    monkeypatch.setattr(_softmax, "_RECENT", _prepared.Recent())
    dev = _device(backend)
    xs = [torch.randn(2, 8 + i, device=dev) for i in range(2 * _prepared.Recent.LIMIT)]
    for _ in range(2):
        for x in xs:
            ops.softmax(x)
    before = len(made)
    for _ in range(3):
        for x in xs:
            torch.testing.assert_close(ops.softmax(x), x.softmax(-1))
    assert len(made) == before


def test_recent_calls_keep_no_tensor_alive(backend):
    """An entry holds a check of the tensors' metadata, not the tensors: a model's weights
    freed by their owner are freed."""
    import gc
    import weakref

    dev = _device(backend)
    x, w = torch.randn(8, 32, device=dev), torch.randn(32, device=dev)
    m = torch.randn(16, 32, device=dev)
    for _ in range(3):
        ops.rms_norm(x, w, 1e-6)
        ops.matmul(x, m, transpose_b=True)
    refs = [weakref.ref(t) for t in (x, w, m)]
    del x, w, m
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_recent_call_on_torch_s_own_matmul_is_f_linear_itself(backend, monkeypatch):
    """Where the prepared run is torch's ``F.linear`` and nothing else (the framework route, no
    activation, no out=), a recent entry calls it directly: no kernelkit frame below the op.
    The route is made to match CPU tensors here (it serves torch CUDA tensors)."""
    import dataclasses

    from kernelkit.ops import _matmul_impls

    if _checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    op = _matmul_impls.OP
    i = next(i for i, im in enumerate(op.implementations) if im.name == "framework")
    anywhere = dataclasses.replace(op.implementations[i], match=None, defers=None)
    impls = list(op.implementations)
    impls[i] = anywhere
    monkeypatch.setattr(op, "implementations", impls)
    monkeypatch.setattr(op, "generation", op.generation + 1)  # decisions made before: stale
    monkeypatch.setattr(_matmul, "_RECENT", (_prepared.Recent(), _prepared.Recent()))
    dev = _device(backend)
    x, w, bias = (torch.randn(*s, device=dev) for s in ((3, 32), (12, 32), (12,)))
    assert ops.matmul.explain(x, w, transpose_b=True).choice.impl == "matmul/framework"
    for b in (None, bias):
        for _ in range(3):
            y = ops.matmul(x, w, bias=b, transpose_b=True)
        torch.testing.assert_close(y, F.linear(x, w, b))
        names = _called(lambda b=b: ops.matmul(x, w, bias=b, transpose_b=True))
        assert names[1:] == ["matmul"], names  # the lambda, the op, then torch's C function
    relu = lambda: ops.matmul(x, w, activation="relu", transpose_b=True)
    for _ in range(3):
        relu()
    assert "framework_run" in _called(relu)  # not F.linear alone: the general path


def test_a_warm_call_asks_no_argument_s_own_equality(backend):
    """The recent entries compare an argument's class before its value: an array passed as
    ``dim`` or ``activation`` (whose ``==`` gives an array, and whose truth raises) reaches
    the validating path and its ArgumentError, as on a cold call."""
    dev = _device(backend)
    x, m = torch.randn(4, 8, device=dev), torch.randn(6, 8, device=dev)
    for _ in range(3):
        ops.softmax(x)
        ops.matmul(x, m, transpose_b=True)
    odd = torch.tensor([1, 2], device=dev)
    with pytest.raises(ArgumentError, match="dim"):
        ops.softmax(x, odd)
    with pytest.raises(ArgumentError, match="activation"):
        ops.matmul(x, m, activation=odd, transpose_b=True)


def test_recent_calls_from_several_threads_give_each_call_its_own_result(backend):
    """Threads calling one op with more signatures than the recent entries keep (entries
    replaced and tried while others read them): every result is its own input's."""
    import threading

    dev = _device(backend)
    xs = [torch.randn(3, 16 + 8 * i, device=dev) for i in range(2 * _prepared.Recent.LIMIT)]
    wants = [x.softmax(-1) for x in xs]
    errors: list[str] = []

    def work(k: int) -> None:
        for n in range(60):
            i = (n * (k + 1)) % len(xs)
            y = ops.softmax(xs[i])
            if y.shape != wants[i].shape or not torch.allclose(y, wants[i], atol=1e-6):
                errors.append(f"thread {k}, call {n}: input {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def _out_calls(dev: str) -> dict:
    """Each op called with out= (and a torch op's direct call, as compiled graphs make it)."""
    g = torch.Generator().manual_seed(2)
    x, w, b = (torch.randn(*s, generator=g).to(dev) for s in ((6, 64), (64,), (64,)))
    weight = torch.randn(24, 64, generator=g).to(dev)
    bias = torch.randn(24, generator=g).to(dev)
    o, o24 = torch.empty(6, 64, device=dev), torch.empty(6, 24, device=dev)
    silu_mul = ops.elementwise("y = a * silu(b)")
    x1 = x + 1
    K = torch.ops.kernelkit
    return {
        "elementwise": lambda: silu_mul(x, x1, out=o),
        "softmax": lambda: ops.softmax(x, out=o),
        "rms_norm": lambda: ops.rms_norm(x, w, 1e-6, out=o),
        "layer_norm": lambda: ops.layer_norm(x, w, b, 1e-5, out=o),
        "matmul": lambda: ops.matmul(x, weight, transpose_b=True, out=o24),
        "matmul bias": lambda: ops.matmul(x, weight, bias=bias, transpose_b=True, out=o24),
        "direct rms_norm": lambda: K._direct_v1_rms_norm(x, w, 1e-6, o),
        "direct softmax": lambda: K._direct_v1_softmax(x, -1, o),
    }


@pytest.mark.parametrize("case", sorted(_out_calls("cpu")))
def test_a_warm_out_call_on_torch_tensors_builds_no_signature(backend, case):
    """Fails where calls with out= have no recent entries: the signer runs on every call."""
    if _checker() is None:
        pytest.skip("this torch has no usable TensorGuards")
    fn = _out_calls(_device(backend))[case]
    for _ in range(3):
        fn()
    names = _called(fn)
    assert "torch_signature" not in names, names


def test_recent_out_calls_write_into_their_own_out_and_refuse_overlaps(backend):
    """out= arrays of other shapes, strides and dtypes, cycled past the entries kept: each call
    writes its own out, right against float64; then an out that overlaps its input, of the
    layout a warm entry was made for (so the arrays' check passes it), is refused by name."""
    dev = _device(backend)
    g = torch.Generator().manual_seed(4)
    d = lambda a: a.double()
    cases = []
    shapes = [(5, 48, torch.float32), (3, 48, torch.float32), (5, 40, torch.float32),
              (5, 48, torch.float16), (2, 64, torch.float32)]  # fmt: skip
    for rows, cols, dtype in shapes:
        x = torch.randn(rows, cols, generator=g).to(dev, dtype)
        w = (torch.rand(cols, generator=g) + 0.5).to(dev, dtype)
        m = torch.randn(16, cols, generator=g).to(dev, dtype)
        o = torch.full((rows, cols), float("nan"), device=dev, dtype=dtype)
        om = torch.full((rows, 16), float("nan"), device=dev, dtype=dtype)
        rms = lambda x=x, w=w: d(x) * torch.rsqrt(d(x).pow(2).mean(-1, keepdim=True) + 1e-6) * d(w)
        cases.append((lambda x=x, w=w, o=o: ops.rms_norm(x, w, 1e-6, out=o), o, rms))
        cases.append((lambda x=x, o=o: ops.softmax(x, out=o), o, lambda x=x: d(x).softmax(-1)))
        cases.append((lambda x=x, m=m, om=om: ops.matmul(x, m, transpose_b=True, out=om), om,
                      lambda x=x, m=m: d(x) @ d(m).t()))  # fmt: skip
    for rnd in range(3):
        for i, (call, out, want) in enumerate(cases):
            out.fill_(float("nan"))
            assert call() is out, i
            tol = 2e-2 if out.dtype == torch.float16 else 2e-5
            np.testing.assert_allclose(out.double().cpu().numpy(), want().cpu().numpy(), rtol=tol,
                                       atol=tol, err_msg=f"case {i} (round {rnd})")  # fmt: skip
    for recent in (_softmax._RECENT, _norms._RMS_RECENT, *_matmul._RECENT):
        assert len(recent.outs) <= _prepared.Recent.LIMIT
    # overlaps: x and out are views of one buffer, laid out as a warm entry's arrays
    buf = torch.randn(3 * 64 + 64, device=dev)
    x, w = buf[: 3 * 64].view(3, 64), torch.ones(64, device=dev)
    for _ in range(3):
        ops.rms_norm(x, w, 1e-6, out=torch.empty(3, 64, device=dev))
        ops.softmax(x, out=torch.empty(3, 64, device=dev))
    shifted = buf[64:].view(3, 64)  # rows 1-3 of buf: meets x's rows 1-2
    with pytest.raises(ArgumentError, match=r"\[rms_norm\] out= overlaps input 'x'"):
        ops.rms_norm(x, w, 1e-6, out=shifted)
    with pytest.raises(ArgumentError, match=r"\[softmax\] out= overlaps input"):
        ops.softmax(x, out=shifted)
    strided = torch.empty(64, 3, device=dev).t()  # warm entries' outs are row-contiguous
    with pytest.raises(ArgumentError, match="must be row-contiguous"):
        ops.rms_norm(x, w, 1e-6, out=strided)
    want = d(x) * torch.rsqrt(d(x).pow(2).mean(-1, keepdim=True) + 1e-6)
    assert ops.rms_norm(x, w, 1e-6, out=x) is x  # in place: the input itself, as before
    np.testing.assert_allclose(x.double().cpu().numpy(), want.cpu().numpy(), rtol=2e-5, atol=2e-5)
