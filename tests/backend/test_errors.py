"""Bad calls raise ValueError/TypeError naming the argument, and the next good call still works."""

from __future__ import annotations

import numpy as np
import pytest

import kernelkit
from kernelkit._backends import registry as _registry

N = 40
COPY = kernelkit.kernel(
    "e_copy",
    ["x"],
    ["y"],
    """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) y[i] = x[i];
""",
)
TWO_OUT = kernelkit.kernel(
    "e_two",
    ["x"],
    ["y", "z"],
    """
uint i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < x_shape[0]) { y[i] = x[i]; z[i] = (T)x[i]; }
""",
)


def f32(arrays, n=N):
    return arrays.put(np.arange(n, dtype=np.float32))


def good_call(arrays):
    """A correct call on the same kernel object that the bad call used."""
    (y,) = COPY(
        [f32(arrays)],
        output_shapes=[(N,)],
        output_dtypes=[np.float32],
        grid=(N, 1, 1),
        threadgroup=(32, 1, 1),
    )
    np.testing.assert_array_equal(arrays.get(y), np.arange(N, dtype=np.float32))


TG = (32, 1, 1)


def kw(**over):
    base = dict(
        output_shapes=[(N,)], output_dtypes=[np.float32], grid=(N, 1, 1), threadgroup=(32, 1, 1)
    )
    base.update(over)
    return base


# (id, call(arrays), exception, regex the message must match)
CASES = [
    (
        "too-many-inputs",
        lambda a: COPY([f32(a), f32(a)], **kw()),
        ValueError,
        r"\[e_copy\] expected 1 inputs \['x'\], got 2",
    ),
    ("no-inputs", lambda a: COPY([], **kw()), ValueError, r"expected 1 inputs"),
    ("inputs-not-a-list", lambda a: COPY(f32(a), **kw()), TypeError, r"inputs must be a list"),
    ("input-not-an-array", lambda a: COPY(["abc"], **kw()), TypeError, r"input 'x'"),
    ("int-scalar-too-wide", lambda a: COPY([2**40], **kw()), ValueError, r"input 'x'.*int32"),
    (
        "too-many-output-shapes",
        lambda a: COPY([f32(a)], **kw(output_shapes=[(N,), (N,)])),
        ValueError,
        r"output_shapes",
    ),
    (
        "no-output-shapes",
        lambda a: COPY([f32(a)], **kw(output_shapes=None)),
        ValueError,
        r"output_shapes",
    ),
    (
        "negative-output-shape",
        lambda a: COPY([f32(a)], **kw(output_shapes=[(-1,)])),
        ValueError,
        r"output_shapes\[0\]|output_shapes",
    ),
    (
        "too-few-output-dtypes",
        lambda a: TWO_OUT(
            [f32(a)],
            **kw(output_shapes=[(N,), (N,)], output_dtypes=[np.float32], template=[("T", "int32")]),
        ),
        ValueError,
        r"\[e_two\] expected 2 output_dtypes",
    ),
    (
        "too-many-output-dtypes",
        lambda a: COPY([f32(a)], **kw(output_dtypes=[np.float32, np.float32])),
        ValueError,
        r"output_dtypes",
    ),
    (
        "no-output-dtypes",
        lambda a: COPY([f32(a)], **kw(output_dtypes=None)),
        ValueError,
        r"output_dtypes",
    ),
    (
        "template-float",
        lambda a: COPY([f32(a)], **kw(template=[("T", 1.5)])),
        TypeError,
        r"template 'T'.*float",
    ),
    (
        "template-list",
        lambda a: COPY([f32(a)], **kw(template=[("T", [1, 2])])),
        TypeError,
        r"template 'T'.*list",
    ),
    (
        "template-str-not-a-dtype",
        lambda a: COPY([f32(a)], **kw(template=[("T", "x; exit(1)")])),
        TypeError,
        r"template 'T'",
    ),
    (
        "template-not-pairs",
        lambda a: COPY([f32(a)], **kw(template=[("T",)])),
        TypeError,
        r"template\[0\]",
    ),
    ("template-not-a-list", lambda a: COPY([f32(a)], **kw(template="T")), TypeError, r"template"),
    (
        "template-name-not-identifier",
        lambda a: COPY([f32(a)], **kw(template=[("N", 1), ("bad name", 1)])),
        ValueError,
        r"template name at template\[1\]",
    ),
    (
        "template-name-injection",
        lambda a: COPY(
            [f32(a)], **kw(template=[('T = int; void f() { system("id"); } using U', "float32")])
        ),
        ValueError,
        r"template name at template\[0\]",
    ),
    (
        "template-name-reserved",
        lambda a: COPY([f32(a)], **kw(template=[("kk_n", 1)])),
        ValueError,
        r"template name .*reserved",
    ),
    (
        "template-name-keyword",
        lambda a: COPY([f32(a)], **kw(template=[("int", 1)])),
        ValueError,
        r"template name",
    ),
    (
        "template-name-clashes",
        lambda a: COPY([f32(a)], **kw(template=[("x", 1)])),
        ValueError,
        r"template name 'x'",
    ),
    (
        "threadgroup-too-large",
        lambda a: COPY([f32(a)], **kw(grid=(4096, 1, 1), threadgroup=(2048, 1, 1))),
        ValueError,
        r"threadgroup",
    ),
    (
        "threadgroup-z-too-large",
        lambda a: COPY([f32(a)], **kw(grid=(1, 1, 128), threadgroup=(1, 1, 128))),
        ValueError,
        r"threadgroup\[2\]",
    ),
    (
        "grid-y-too-large",
        lambda a: COPY([f32(a)], **kw(grid=(1, 70000, 1), threadgroup=(1, 1, 1))),
        ValueError,
        r"grid\[1\]",
    ),
    ("grid-zero", lambda a: COPY([f32(a)], **kw(grid=(0, 1, 1))), ValueError, r"grid"),
    ("grid-not-ints", lambda a: COPY([f32(a)], **kw(grid=(4.0, 1, 1))), ValueError, r"grid"),
    (
        "threadgroup-too-many-dims",
        lambda a: COPY([f32(a)], **kw(threadgroup=(1, 1, 1, 1))),
        ValueError,
        r"threadgroup",
    ),
    (
        "complex-input",
        lambda a: COPY([a.put(np.zeros(N, np.complex64))], **kw()),
        TypeError,
        r"input 'x'.*complex64",
    ),
    (
        "complex-output-dtype",
        lambda a: COPY([f32(a)], **kw(output_dtypes=[np.complex64])),
        TypeError,
        r"output_dtypes\[0\]",
    ),
    (
        "out-wrong-count",
        lambda a: COPY([f32(a)], out=[], grid=(N, 1, 1), threadgroup=TG),
        ValueError,
        r"out=",
    ),
    (
        "out-wrong-shape",
        lambda a: COPY(
            [f32(a)],
            out=[a.put(np.zeros(N + 1, np.float32))],
            output_shapes=[(N,)],
            grid=(N, 1, 1),
            threadgroup=TG,
        ),
        ValueError,
        r"out\[0\] has shape",
    ),
    (
        "out-wrong-dtype",
        lambda a: COPY(
            [f32(a)],
            out=[a.put(np.zeros(N, np.float64))],
            output_dtypes=[np.float32],
            grid=(N, 1, 1),
            threadgroup=TG,
        ),
        ValueError,
        r"out\[0\].*float64.*output_dtypes\[0\]",
    ),
    (
        "out-not-contiguous",
        lambda a: COPY(
            [f32(a)],
            out=[a.put(np.zeros((N, 2), np.float32))[:, 0]],
            grid=(N, 1, 1),
            threadgroup=TG,
        ),
        ValueError,
        r"out\[0\] \('y'\) must be row-contiguous",
    ),
    (
        "unknown-backend",
        lambda a: COPY([f32(a)], **kw(backend="nonesuch")),
        kernelkit.BackendError,
        r"backend 'nonesuch'",
    ),
    ("backend-not-a-str", lambda a: COPY([f32(a)], **kw(backend=3)), TypeError, r"backend"),
]


@pytest.mark.parametrize(
    ("call", "exc", "match"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_call_then_good_call(arrays, call, exc, match):
    with pytest.raises(exc, match=match):
        call(arrays)
    good_call(arrays)


def test_out_on_a_device_no_backend_runs_on(arrays):
    torch = pytest.importorskip("torch")
    with pytest.raises((TypeError, ValueError), match=r"out\[0\]"):
        COPY([f32(arrays)], out=[torch.empty(N, device="meta")], grid=(N, 1, 1), threadgroup=TG)
    good_call(arrays)


def test_shared_memory_beyond_the_device(arrays):
    k = kernelkit.kernel("e_shared", ["x"], ["y"], "y[0] = x[0];", shared_memory=64 << 20)
    with pytest.raises(ValueError, match=r"\[e_shared\] shared_memory"):
        k([f32(arrays)], **kw())
    good_call(arrays)


@pytest.mark.parametrize(
    ("names", "match"),
    [
        ((["x"], []), "output_names"),
        ((["x"], ["x"]), "'x' is used more than once"),
        ((["x y"], ["y"]), r"input_names\[0\]"),
        ((["x"], ["y", "__z"]), r"output_names\[1\]"),
    ],
)
def test_bad_definitions(names, match):
    with pytest.raises(ValueError, match=match):
        kernelkit.kernel("e_def", *names, "")
    with pytest.raises(ValueError, match="kernel name"):
        kernelkit.kernel("e def", ["x"], ["y"], "")


def test_unknown_backend_at_definition_is_reported_at_call():
    k = kernelkit.kernel("e_nob", ["x"], ["y"], "y[0] = x[0];", backend="nonesuch")
    with pytest.raises(kernelkit.BackendError, match="'nonesuch'"):
        k([np.zeros(1, np.float32)], output_shapes=[(1,)], output_dtypes=[np.float32])


def _cuda_loads():
    try:
        _registry.get_backend("cuda")
    except kernelkit.BackendError:
        return False
    return True


def test_host_arrays_given_to_the_cuda_backend_name_the_input():
    """Works without a GPU: the device check comes before any device is needed."""
    if not _cuda_loads():
        pytest.skip("the cuda backend does not load here (cuda-bindings missing)")
    x = np.zeros(N, np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"\[e_copy\] input 'x' lives in host memory.*'cuda'"):
            COPY([x], **kw(backend="cuda"))
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"input 'x' lives in host memory"):
        COPY([torch.zeros(N)], **kw(backend="cuda"))


def test_host_out_given_to_the_cuda_backend():
    if not _cuda_loads():
        pytest.skip("the cuda backend does not load here (cuda-bindings missing)")
    k = kernelkit.kernel("e_fill", ["s"], ["y"], "y[threadIdx.x] = s;")
    with pytest.raises(ValueError, match=r"out\[0\] \('y'\) lives in host memory.*'cuda'"):
        k([1.0], out=[np.zeros(N, np.float32)], grid=(N, 1, 1), threadgroup=TG, backend="cuda")


@pytest.mark.gpu
def test_device_arrays_given_to_the_cpu_backend(arrays):
    if not arrays.on_gpu:
        pytest.skip("needs CUDA arrays")
    try:
        _registry.get_backend("cpu")
    except kernelkit.BackendError:
        pytest.skip("the cpu backend does not load here")
    with pytest.raises(ValueError, match=r"input 'x' lives in cuda:0 memory.*'cpu'"):
        COPY([f32(arrays)], **kw(backend="cpu"))
    good_call(arrays)


@pytest.mark.gpu
def test_out_on_another_device_than_the_inputs(arrays):
    if not arrays.on_gpu:
        pytest.skip("needs CUDA arrays")
    with pytest.raises(ValueError, match=r"different devices.*out\[0\]"):
        COPY([f32(arrays)], out=[np.zeros(N, np.float32)], grid=(N, 1, 1), threadgroup=TG)
    good_call(arrays)


def test_read_only_output_is_refused_and_the_next_call_works():
    x = np.arange(N, dtype=np.float32)  # NumPy: host memory, the CPU backend
    frozen = np.frombuffer(bytes(4 * N), np.float32)  # read-only memory
    view = np.lib.stride_tricks.as_strided(np.zeros(N, np.float32), writeable=False)
    for out in (frozen, view):
        assert not out.flags.writeable
        with pytest.raises(kernelkit.ArgumentError, match=r"out\[0\].*read-only"):
            COPY([x], out=[out], grid=(N, 1, 1), threadgroup=(32, 1, 1))
        assert not out.any()  # nothing was written
    y = np.full(N, np.nan, np.float32)
    COPY([x], out=[y], grid=(N, 1, 1), threadgroup=(32, 1, 1))
    np.testing.assert_array_equal(y, x)
    with pytest.raises(kernelkit.ArgumentError, match="read-only"):  # after a plan exists too
        COPY([x], out=[frozen], grid=(N, 1, 1), threadgroup=(32, 1, 1))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"init_value": "zero"}, TypeError, "init_value"),
        ({"init_value": True}, TypeError, "init_value"),
        ({"check": "yes"}, TypeError, "check must be True, False or None"),
        ({"check": 1}, TypeError, "check must be True, False or None"),
    ],
)
def test_bad_call_options_name_the_argument(arrays, kwargs, exc, match):
    for _ in range(2):  # before and after a plan exists for this specialization
        with pytest.raises(exc, match=match) as info:
            COPY([f32(arrays)], **{**kw(), **kwargs})
        assert isinstance(info.value, kernelkit.KernelkitError)
        good_call(arrays)


def test_argument_errors_are_kernelkit_errors_and_builtin_ones():
    assert issubclass(kernelkit.ArgumentError, kernelkit.KernelkitError)
    assert issubclass(kernelkit.ArgumentError, ValueError)
    assert issubclass(kernelkit.ArgumentTypeError, kernelkit.KernelkitError)
    assert issubclass(kernelkit.ArgumentTypeError, TypeError)
    with pytest.raises(kernelkit.KernelkitError, match="output_dtypes"):
        COPY([np.arange(3, dtype=np.float32)], grid=(3, 1, 1))


def test_a_failing_allocator_is_reported_as_such_not_as_bad_shapes():
    x = np.arange(N, dtype=np.float32)
    call = dict(output_dtypes=[np.float32], grid=(N, 1, 1), threadgroup=(32, 1, 1))
    with pytest.raises(kernelkit.LaunchError, match=r"allocating the outputs with numpy failed"):
        COPY([x], output_shapes=[(2**62,)], **call)  # valid, but no memory holds it
    for bad in ([(-1,)], [("a",)], [(N,), (N,)], "abc"):
        with pytest.raises(kernelkit.ArgumentError, match="output_shapes"):
            COPY([x], output_shapes=bad, **call)
    (y,) = COPY([x], output_shapes=[(N,)], **call)
    np.testing.assert_array_equal(y, x)


def test_a_warm_op_call_reports_a_failing_allocation_as_a_launch_error(monkeypatch):
    """The built-in ops' prepared calls (``_common.kernel_caller``: a run fixed for their
    signature, which makes its output as ``empty_like`` of its input) report an allocator's
    failure, out of memory say, as any allocation's: a LaunchError naming the framework, not
    the framework's bare exception. (A kernel of its own: no shared plan keeps the patch.)"""
    torch = pytest.importorskip("torch")
    from kernelkit._arrays import _torch as T
    from kernelkit.ops._common import kernel_caller

    failing = [False]
    real = T.TorchAdapter.like

    def like(self, dtype):
        found = real(self, dtype)
        if found is None:
            return None

        def empty_like(x):
            if failing[0]:
                raise torch.OutOfMemoryError("simulated: out of memory")
            return found[1](x)

        return found[0], empty_like

    monkeypatch.setattr(T.TorchAdapter, "like", like)
    body = "uint i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i];"
    k = kernelkit.kernel("t_warm_oom", ["x"], ["y"], body)
    call = kernel_caller(k, {"grid": (N, 1, 1), "threadgroup": (32, 1, 1)})
    x = torch.arange(N, dtype=torch.float32)
    for _ in range(3):  # the checked call first, then the run fixed for this signature
        (y,) = call([x], [(N,)], [torch.float32], None)
    assert torch.equal(y, x)
    failing[0] = True
    with pytest.raises(kernelkit.LaunchError, match="allocating the outputs with torch failed"):
        call([x], [(N,)], [torch.float32], None)
