"""Every GPU kernel of ``kernelkit.ops`` once, on small awkward shapes, for compute-sanitizer.

Run by ``test_compute_sanitizer.py`` under memcheck, racecheck, synccheck and initcheck (with
``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, so each tensor is its own allocation and a read past an
operand's end is caught instead of landing in torch's pool). Each case is forced onto its
implementation, writes into a NaN-poisoned output and is checked against float64; the script
exits 1 naming the failed cases, 0 when all pass. Shapes are small (the tools slow kernels by
10-1000x) but cover tails: M, N, K off every tile, N = 1, rows past a stage, views.

    PYTHONPATH=src python3 tests/gpu/sanitized_ops.py
"""

from __future__ import annotations

import sys

import torch

import kernelkit
from kernelkit import ops
from kernelkit._choices import force
from kernelkit.ops._matmul_midm import midm_config
from kernelkit.ops._matmul_wgmma import wgmma_config
from kernelkit.ops._rowops import config as row_config

F = torch.nn.functional
BF16, FP32 = torch.bfloat16, torch.float32

# (implementation, M, N, K, dtype, transpose_b); each runs with a bias and silu
MATMUL = [
    ("gemv", 3, 37, 200, FP32, True),
    ("gemv", 16, 33, 264, BF16, True),
    ("gemv", 1, 37, 264, BF16, True),  # the M = 1 rule's config (gemv_first)
    ("gemv_tc", 9, 72, 40, BF16, True),
    ("gemv_tc", 3, 130, 1000, BF16, True),
    ("gemv_slab", 3, 33, 2048, BF16, True),
    ("gemv_slab", 1, 1, 4096, BF16, True),
    ("gemv_slab_tc", 1, 33, 8192, BF16, True),
    ("gemv_slab_tc", 4, 37, 4096, BF16, True),
    ("gemv_slab_tc", 7, 300, 2048, BF16, True),
    ("gemv_slab_tc", 13, 9, 1024, BF16, True),
    ("gemv_slab_tc", 16, 37, 4096, BF16, True),
    ("mma", 17, 33, 72, BF16, True),
    ("mma", 70, 136, 264, BF16, False),
    ("wgmma", 100, 72, 40, BF16, True),  # M = 65-256: TMA (WS = 2); else a copying warpgroup
    ("wgmma", 129, 200, 96, BF16, True),
    ("wgmma", 300, 130, 1160, BF16, True),
    # a cluster of 8 over a long K: 17 k tiles a rank through 4 stages (the last rank: 10)
    ("wgmma_ws1_split8", 70, 130, 8200, BF16, True),
    ("wgmma_ws2_split8", 70, 130, 8200, BF16, True),
    ("midm", 17, 33, 72, BF16, True),  # the heuristic's config: one tile, a cluster of 8
    ("midm_split4", 100, 130, 1160, BF16, True),  # 64 x 64 tiles, 19 k tiles over 4 ranks
    ("midm_split2", 33, 136, 264, BF16, False),
    ("tiled", 70, 9, 40, FP32, True),
    ("tiled", 33, 65, 17, BF16, False),
]

# (rows, columns, dtype, forced row config or None for the heuristic's, unaligned view)
ROWS = [
    (7, 1000, BF16, None, False),
    (5, 4096, FP32, None, False),
    (3, 20000, BF16, None, False),  # too long for registers: the loop
    (6, 515, BF16, None, True),  # 2 bytes off 16: the element-by-element path
    (9, 300, FP32, row_config(32, 4, 4), False),  # rows sharing a block
    (4, 777, BF16, row_config(128, 0), False),  # the loop, forced
]


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    if got.isnan().any():
        return float("nan")  # an element never written (or a NaN made up)
    return ((got.double() - want).norm() / max(want.norm().item(), 1e-30)).item()


def matmul_cases() -> list[tuple[str, float, float]]:
    out = []
    for impl, m, n, k, dtype, tb in MATMUL:
        if impl.startswith("wgmma") and torch.cuda.get_device_capability() != (9, 0):
            continue  # sm_90a only
        sm90 = impl in ("gemv_slab", "gemv_slab_tc") or impl.startswith("midm")
        if sm90 and torch.cuda.get_device_capability() < (9, 0):
            continue
        g = torch.Generator(device="cuda").manual_seed(m * 131 + n * 7 + k)
        a = (torch.randn(m, k, device="cuda", generator=g) / 4).to(dtype)
        b = torch.randn(*((n, k) if tb else (k, n)), device="cuda", generator=g).to(dtype)
        bias = torch.randn(n, device="cuda", generator=g).to(dtype)
        y = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        config, label = None, impl
        if impl.startswith("midm_split"):  # clusters of SPLIT blocks
            impl, config = "midm", midm_config(64, 64, 2, 2, 4, int(impl[10:]))
        elif impl.startswith("wgmma_ws"):  # WS = 1 or 2, split 8, 4 stages of one k tile
            impl, config = "wgmma", wgmma_config(2, 64, 1, 4, 8, int(impl[8]))
        with force("matmul", impl, config):
            choice = ops.matmul.explain(a, b, bias=bias, activation="silu", transpose_b=tb)
            assert choice.choice.impl == f"matmul/{impl}", choice.choice.describe()
            ops.matmul(a, b, bias=bias, activation="silu", transpose_b=tb, out=y)
        bd = b.double().T if tb else b.double()
        want = F.silu(a.double() @ bd + bias.double())
        tol = 1e-5 if dtype == FP32 else 1e-2
        out.append((f"matmul/{label} {m}x{n}x{k} {str(dtype)[6:]}", rel_err(y, want), tol))
    return out


def row_cases() -> list[tuple[str, float, float]]:
    out = []
    for rows, cols, dtype, cfg, unaligned in ROWS:
        g = torch.Generator(device="cuda").manual_seed(rows * 977 + cols)
        base = torch.randn(rows, cols + 1, device="cuda", generator=g).to(dtype)
        x = base[:, 1:] if unaligned else base[:, :cols].contiguous()
        w = torch.randn(cols, device="cuda", generator=g).to(dtype)
        b = torch.randn(cols, device="cuda", generator=g).to(dtype)
        xd, wd, bd = x.double(), w.double(), b.double()
        wants = [
            ("softmax", ops.softmax, (x,), torch.softmax(xd, -1)),
            ("rms_norm", ops.rms_norm, (x, w, 1e-6), F.rms_norm(xd, (cols,), wd, 1e-6)),
            ("layer_norm", ops.layer_norm, (x, w, b, 1e-5), F.layer_norm(xd, (cols,), wd, bd)),
        ]
        for name, op, args, want in wants:
            y = torch.full((rows, cols), float("nan"), device="cuda", dtype=dtype)
            if cfg is None:
                op(*args, out=y)
            else:
                with force(name, "rows", {**cfg.values, "threadgroup": cfg.threadgroup}):
                    op(*args, out=y)
            label = f"{name} {rows}x{cols} {str(dtype)[6:]}{' view' if unaligned else ''}"
            out.append((label, rel_err(y, want), 1e-5 if dtype == FP32 else 1e-2))
    return out


def elementwise_cases() -> list[tuple[str, float, float]]:
    swiglu = ops.elementwise("y = a * silu(b)")
    out = []
    g = torch.Generator(device="cuda").manual_seed(5)
    for shape_a, shape_b in (((1001,), (1001,)), ((7, 33), (1, 33)), ((5, 9), (9, 5))):
        a = torch.randn(shape_a, device="cuda", generator=g).to(BF16)
        b = torch.randn(shape_b, device="cuda", generator=g).to(BF16)
        if shape_b == (9, 5):
            b = b.T  # a transposed view: the strided path
        want = a.double() * F.silu(b.double())
        y = torch.full(want.shape, float("nan"), device="cuda", dtype=BF16)
        swiglu(a=a, b=b, out=y)
        out.append((f"a*silu(b) {shape_a} {tuple(b.shape)}", rel_err(y, want), 1e-2))
    return out


def main() -> int:
    results = matmul_cases() + row_cases() + elementwise_cases()
    torch.cuda.synchronize()
    failed = [(n, e, t) for n, e, t in results if not e <= t]
    for name, err, tol in results:
        print(f"{'FAIL' if (name, err, tol) in failed else 'ok  '} {name:<40} {err:.2e}")
    print(f"sanitized_ops: {len(results)} cases, {len(failed)} failed; kernelkit "
          f"{kernelkit.__version__} on {torch.cuda.get_device_name()}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
