"""``matmul/mma`` without a device: every shipped config rendered and compiled by NVRTC for sm_80
and sm_90 (both dtypes, both layouts of ``b``, with and without bias and activation) with
ptxas's resource report read back (no spills, a block that launches); and the selection stage:
mma is chosen on CUDA for M > 16, its heuristic sizes tiles to the problem, and it is refused with
a reason on the CPU, before sm_80, for float32, for K (or N of a [K, N] ``b``) not a multiple of
8 and for a misaligned view."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kernelkit
from kernelkit._records import ArgFacts, Problem, Target
from kernelkit._select.records import KernelChoice
from kernelkit._select.select import Override, select
from kernelkit.ops import _matmul as MM
from kernelkit.ops import _matmul_impls as I
from kernelkit.ops import _matmul_mma as MMA

SM80_FEATURES = frozenset({"fp16", "bf16", "cp_async", "mma_sync"})


def target(arch: str = "sm_90", features=SM80_FEATURES | {"tma", "clusters"}) -> Target:
    return Target("cuda", 0, arch, "H100", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
                  48 * 1024, 227 * 1024, 32, frozenset(features), 132)  # fmt: skip


CPU = Target("cpu", 0, "x86_64", "host", 1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535),
             48 * 1024, 227 * 1024, 32, frozenset({"cpu"}))  # fmt: skip


def problem(m, n=4096, k=4096, dtype="bfloat16", transpose_b=True, bias=None, activation=None,
            framework="cupy", aligned16=True, device_type=2) -> Problem:  # fmt: skip
    """A matmul problem as ``ops.matmul`` binds it (arguments, named dimensions, options)."""
    w_shape = (n, k) if transpose_b else (k, n)
    args = (
        ArgFacts("x", "array", dtype, (m, k), (k, 1)),
        ArgFacts("w", "array", dtype, w_shape, (w_shape[1], 1)),
        ArgFacts("bias", "null" if bias is None else "array", bias or "float32", (n,), (1,)),
        ArgFacts("y", "array", dtype, is_output=True),
    )
    options = {"transpose_b": transpose_b, "activation": activation, "bias": bias,
               "framework": framework, "aligned16": aligned16}  # fmt: skip
    attrs = {"M": m, "K": k, "N": n, **options}
    return Problem("matmul", args, tuple(sorted(attrs.items())), device_type=device_type)


def considered(selection, impl: str = "matmul/mma") -> list[str]:
    return [c.verdict for c in selection.considered if c.impl == impl]


# --- selection ------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [17, 128, 1000, 3500, 8192])
@pytest.mark.parametrize("nk", [(4096, 4096), (14336, 4096)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("transpose_b", [True, False])
def test_mma_is_chosen_on_sm90_above_m16(m, nk, dtype, transpose_b):
    n, k = nk
    p = problem(m, n, k, dtype, transpose_b)
    choice = select(MM.OP, p, target()).choice
    assert (choice.impl, choice.source) == ("matmul/mma", "heuristic")
    assert choice.config in MMA.MMA_CONFIGS
    tiles = -(-m // choice.config.values["BM"]) * -(-n // choice.config.values["BN"])
    assert choice.grid == (tiles * choice.config.threadgroup[0], 1, 1)
    assert KernelChoice.from_json(choice.to_json()) == choice


def test_decode_shapes_stay_with_the_gemv_kernels():
    decode = ("gemv_slab", "gemv_slab_tc", "gemv_tc", "gemv")
    decode = tuple(f"matmul/{d}" for d in decode)
    assert select(MM.OP, problem(16), target()).choice.impl in decode


def test_the_heuristic_sizes_tiles_to_the_problem():
    def tile(m, n):
        v = select(MM.OP, problem(m, n), target()).choice.config.values
        return v["BM"], v["BN"]

    assert tile(8192, 4096) == tile(3500, 14336) == (128, 256)  # a wave of big tiles
    assert tile(512, 4096) == (128, 128)
    assert tile(257, 4096) == (64, 128)
    assert tile(128, 14336) == (64, 128)
    assert tile(128, 4096) == (64, 64)  # 128 blocks, not 16 of 128 x 256
    assert tile(17, 4096) == (32, 64)  # nothing fills the GPU: the smallest tile


def test_torch_cuda_tensors_keep_cublas_and_mma_is_a_candidate():
    """The framework microkernel still wins for torch (microkernels come before heuristics);
    mma is reachable by an override (or a table / tuning record) and then chosen."""
    p = problem(4096, framework="torch")
    assert select(MM.OP, p, target()).choice.impl == "matmul/framework"
    forced = select(MM.OP, p, target(), override=Override("mma")).choice
    # forced without a config: the one mma's heuristic gives this problem
    assert (forced.impl, forced.config) == ("matmul/mma", MMA.mma_heuristic(p, target()))
    assert forced.config == MMA.MMA_CONFIGS[0] != MM.OP.get("mma").default  # 128 x 256 tiles


def test_refused_on_the_cpu_with_a_reason():
    p = problem(512, device_type=1, framework="numpy")
    s = select(MM.OP, p, CPU)
    assert s.choice.impl == "matmul/tiled"
    assert considered(s) and all("needs cp_async, mma_sync" in v for v in considered(s))
    assert "x86_64" in considered(s)[0]
    # the match rule alone refuses a non-CUDA target too (inline PTX)
    assert "needs a CUDA target, not x86_64" in MMA.mma_match(p, CPU)


@pytest.mark.parametrize(
    ("p", "t", "reason"),
    [
        (problem(512, k=4100), target(), "K = 4100 is not a multiple of 8"),
        (problem(512, n=4100, transpose_b=False), target(), "N = 4100 is not a multiple of 8"),
        (problem(512, dtype="float32"), target(), "takes float16 or bfloat16, not float32"),
        (problem(512, aligned16=False), target(), "16-byte boundary"),
        (problem(512), target("sm_75", {"fp16"}), "needs cp_async, mma_sync"),
        (problem(512), target("sm_75", SM80_FEATURES), "needs sm_80 or newer"),
    ],
    ids=["K", "N_of_KN", "float32", "misaligned", "sm75", "sm75_arch"],
)
def test_refusals_name_the_reason_and_fall_back(p, t, reason):
    s = select(MM.OP, p, t)
    assert s.choice.impl == "matmul/tiled"
    assert any(reason in v for v in considered(s)), considered(s)
    with pytest.raises(kernelkit.ArgumentError, match=re.escape(reason)):
        select(MM.OP, p, t, override=Override("mma"))


def test_odd_n_is_fine_for_a_linear_layers_weight():
    assert select(MM.OP, problem(1000, 1001, 1000), target()).choice.impl == "matmul/mma"


def test_alignment_is_part_of_the_key():
    """Decisions are cached per key: an aligned and a misaligned call must not share one."""
    assert MM.OP.key.of(problem(512)) != MM.OP.key.of(problem(512, aligned16=False))


def test_aligned16_reads_the_data_pointer():
    a = np.zeros(64 + 8, np.float16)
    base = a[(-a.ctypes.data % 16) // 2 :]  # the first 16-byte aligned element
    assert MMA.aligned16(base[:64].reshape(8, 8))
    assert not MMA.aligned16(base[1:65].reshape(8, 8))  # 2 bytes off
    assert MMA.aligned16(base[8:72].reshape(8, 8), base[:64])  # 16 bytes off: fine
    assert not MMA.aligned16(object())  # no pointer: not known to be aligned


def test_the_op_reads_pointers_only_for_the_dtypes_mma_takes(monkeypatch):
    """Validation reads no pointer (a tracer may be running: issue 26); the prepared run reads
    the 16-byte alignment per call, for float16/bfloat16 only, and prepares a run for each."""
    a32, w32 = np.zeros((4, 8), np.float32), np.zeros((3, 8), np.float32)
    assert MM._prepare(a32, w32, None, None, True)[3]["aligned16"] is None
    a16 = np.zeros(4 * 8 + 8, np.float16)
    a16 = a16[(-a16.ctypes.data % 16) // 2 :]
    w16 = np.zeros((3, 8), np.float16)

    def no_pointer(*arrays):
        raise AssertionError("validation read a pointer")

    with monkeypatch.context() as m:
        m.setattr(MMA, "aligned16", no_pointer)
        assert MM._prepare(a16[:32].reshape(4, 8), w16, None, None, True)[3]["aligned16"] is False
    seen = []
    first = MM._RUNNER.first

    def spy(inputs, dtype, out, options):
        seen.append(options["aligned16"])
        return first(inputs, dtype, out, options)

    monkeypatch.setattr(MM._RUNNER, "first", spy)
    run = MM._prepared_run((4,), 3, 8, MM._prepare(a16[:32].reshape(4, 8), w16, None, None,
                           True)[3], True, a16, w16)  # fmt: skip
    for view in (a16[:32], a16[1:33], a16[:32]):  # aligned, 2 bytes off, aligned again
        run([view.reshape(4, 8), w16, None], None)
    # one run per alignment, each prepared once (w16 itself is aligned where NumPy aligns)
    assert seen == ([True, False] if MMA.aligned16(w16) else [False])


def test_a_config_that_does_not_match_the_kernel_is_refused():
    p, good = problem(512), MMA.MMA_CONFIGS[0]
    assert all(MMA.mma_fits(p, c) is None for c in MMA.MMA_CONFIGS)
    assert all(MMA.mma_fits(problem(512, transpose_b=False), c) is None for c in MMA.MMA_CONFIGS)
    bad = {
        "threadgroup": dataclasses.replace(good, threadgroup=(128, 1, 1)),
        "shared_memory": dataclasses.replace(good, shared_memory=1024),
        "missing": dataclasses.replace(good, template=(("BM", 128),)),
        "warp tiles": MMA._config(128, 96, 32, 2, 2, 3),
        "copies": MMA._config(64, 64, 32, 4, 4, 3),
    }
    for name, config in bad.items():
        assert MMA.mma_fits(p, config) is not None, name
        with pytest.raises(kernelkit.ArgumentError):
            select(MM.OP, p, target(), override=Override("mma", config))


def test_configs_fit_every_sm80_class_gpu():
    """A100 163 KB, H100 227 KB, but sm_86/sm_89 (RTX 30/40, L40S) 99 KB of shared memory."""
    assert max(c.shared_memory for c in MMA.MMA_CONFIGS) <= 99 * 1024


# --- NVRTC: every shipped config compiles, without spills ---------------------------------


def _variants() -> list:
    """Per config and arch, four compiles: each dtype with each layout of b, each dtype and each
    layout with and without a bias, the three activations and none (~0.1-0.8 s each)."""
    epilogues = [
        ("float16", True, None, None),
        ("float16", False, "float16", "relu"),
        ("bfloat16", True, None, "silu"),
        ("bfloat16", False, "float32", "gelu"),
    ]
    return [
        pytest.param(arch, c, *e, id=f"{arch}-{c.describe().split(' threadgroup')[0]}-{e}")
        for arch in ("sm_80", "sm_90")
        for c in MMA.MMA_CONFIGS
        for e in epilogues
    ]


@pytest.mark.parametrize(("arch", "config", "dtype", "transpose_b", "bias", "act"), _variants())
def test_every_config_compiles_without_spills(cuda, arch, config, dtype, transpose_b, bias, act):
    p = problem(4096, dtype=dtype, transpose_b=transpose_b, bias=bias, activation=act)
    assert MMA.mma_fits(p, config) is None
    template = [*config.template, *I.common_template(p), ("W_KN", not transpose_b)]
    art, report = ptxas_report(cuda, I.MMA_KERNEL, p, template, arch)
    assert report.get("bytes spill stores") == report.get("bytes spill loads") == 0, art.log
    assert report["registers"] * config.threadgroup[0] <= 65536, art.log  # the block launches
    assert "bytes smem" not in art.log  # no static shared memory: all of it is the dynamic ring


def ptxas_report(cuda, k, p, template, arch: str = "sm_90") -> tuple:
    """Kernel ``k`` rendered for ``p`` and compiled by NVRTC for ``arch``: the artifact (checked
    to be a cubin) and ptxas's resource report (registers, stack frame, spill bytes)."""
    from kernelkit._pipeline.render import arg_types, render_request

    inputs, outputs = arg_types(p)
    _, req = render_request(
        k.spec, cuda, cuda.target_for_arch(arch), inputs, outputs, template, False
    )
    assert req.arch == arch
    req = dataclasses.replace(req, options=(*req.options, "--ptxas-options=-v"))
    art = cuda.compile(req)
    assert art.kind == "cubin" and art.binary[:4] == b"\x7fELF"
    found = re.findall(
        r"(\d+) (registers|bytes stack frame|bytes spill stores|bytes spill loads)", art.log
    )
    return art, {what: int(n) for n, what in found}


def test_the_cuda_backend_has_the_features_mma_requires(cuda):
    impl = MM.OP.get("mma")
    assert impl is not None
    assert impl.requires <= cuda.target_for_arch("sm_80").features
    assert impl.requires <= cuda.target_for_arch("sm_90").features
    assert not impl.requires <= cuda.target_for_arch("sm_75").features
