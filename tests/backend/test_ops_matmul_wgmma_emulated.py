"""``matmul/wgmma``'s stage copies (``matmul/kernels/wgmma_copies.cuh``) run on the CPU backend,
with ``cp.async`` replaced by a recorder: for every tile shape the kernel has, the copying
warpgroup's copies of a stage (``kk_wg_produce``, WS = 1: a fixed 16-byte column of every
RSTEP-th row, addresses stepped a row at a time, row bounds checked once) must be exactly the
stage's layout (``expected``: x's BM rows then w's BN, 128-byte swizzle, rows past M or N and k
past K zero-filled): each 16-byte chunk of the stage written once, from its source or
zero-filled, on tiles inside the operands and on tiles past M, N and K. What it cannot show: the
copies' timing, the mbarriers between the warpgroups (the GPU tests and compute-sanitizer's
racecheck and synccheck cover them)."""

from __future__ import annotations

import pytest

import kernelkit
from kernelkit.ops import _matmul_wgmma as W
from kernelkit.ops._kernel_files import source

torch = pytest.importorskip("torch")

RECORDER = r"""
// kk_mma_cp16 as a recorder: rec[row][chunk of the stage] = the source's element offset in x
// (w's from 2^40 up), -1 when zero-filled; -3 when a chunk is written twice.
static thread_local int64_t* kk_rec;
static thread_local long long kk_rec_chunks, kk_rec_row;
static thread_local const unsigned char *kk_rec_x, *kk_rec_w, *kk_rec_x_end, *kk_rec_w_end;
__device__ inline void kk_mma_cp16(unsigned dst, const void* src, bool full) {
  if (dst % 16 || dst / 16 >= kk_rec_chunks) __trap();  // outside the stage
  long long v = -1;
  if (full) {
    const unsigned char* s = (const unsigned char*)src;
    if (s >= kk_rec_x && s + 16 <= kk_rec_x_end) v = (s - kk_rec_x) / 2;
    else if (s >= kk_rec_w && s + 16 <= kk_rec_w_end) v = (1ll << 40) + (s - kk_rec_w) / 2;
    else __trap();  // a read outside both operands
  }
  int64_t* slot = kk_rec + kk_rec_row * kk_rec_chunks + dst / 16;
  *slot = *slot == -2 ? v : -3;
}
"""

BODY = r"""
kk_rec = rec;
kk_rec_chunks = rec_shape[1];
kk_rec_x = (const unsigned char*)x;
kk_rec_x_end = kk_rec_x + x_shape[0] * x_shape[1] * 2;
kk_rec_w = (const unsigned char*)w;
kk_rec_w_end = kk_rec_w + w_shape[0] * w_shape[1] * 2;
const long long M = x_shape[0], K = x_shape[1], N = w_shape[0];
kk_wg_tile tl;
tl.m0 = m0;
tl.n0 = n0;
tl.kt0 = 0;
tl.kts = 1;
tl.rank = 0;
const int p = (int)threadIdx.x;
kk_rec_row = 0;
kk_wg_produce<T, BM, BN, KB>(0u, p, x, w, tl, kt, kk_wg_rows_ok<BM, BN, KB>(p, tl, M, N), K);
"""

_COPIES = kernelkit.kernel(
    "ops_matmul_wgmma_copies_emulated",
    ["x", "w", "m0", "n0", "kt"],
    ["rec"],
    BODY,
    header=RECORDER + source("matmul", "wgmma_copies"),
    backend="cpu",
)

# (WG, BN, KB) of every WS = 1 config
SHAPES = sorted({(c.values["WG"], c.values["BN"], c.values["KB"]) for c in W.WGMMA_CONFIGS
                 if c.values["WS"] == 1})  # fmt: skip


def record(wg, bn, kb, m, n, k, m0, n0, kt):
    x = torch.randn(m, k).to(torch.bfloat16)
    w = torch.randn(n, k).to(torch.bfloat16)
    chunks = (64 * wg + bn) * 8 * kb
    rec = torch.full((1, chunks), -2, dtype=torch.int64)
    _COPIES(
        [x, w, m0, n0, kt],
        grid=(128, 1, 1),
        threadgroup=(128, 1, 1),
        template=[("T", "bfloat16"), ("BM", 64 * wg), ("BN", bn), ("KB", kb)],
        out=[rec],
    )
    return rec[0]


def expected(wg, bn, kb, m, n, k, m0, n0, kt):
    """What the recorder holds for a stage: chunk ch of k (of 8 KB) of stage row r (x's rows,
    then w's) at sub-tile kc // 8, row r, chunk ch ^ (r % 8); its source's element offset (w's
    from 2^40), or -1 past M, N or K."""
    bm = 64 * wg
    out = torch.empty((bm + bn) * 8 * kb, dtype=torch.int64)
    for r in range(bm + bn):
        is_x = r < bm
        row = m0 + r if is_x else n0 + r - bm
        for kc in range(8 * kb):
            kk = kt * 64 * kb + 8 * kc
            full = row < (m if is_x else n) and kk < k
            value = (row * k + kk + (0 if is_x else 1 << 40)) if full else -1
            out[(kc >> 3) * (bm + bn) * 8 + r * 8 + ((kc & 7) ^ (r & 7))] = value
    return out


IDS = [f"WG{g}-BN{b}-KB{k}" for g, b, k in SHAPES]


@pytest.mark.parametrize(("wg", "bn", "kb"), SHAPES, ids=IDS)
def test_the_copying_warpgroup_fills_the_stage(wg, bn, kb):
    bm = 64 * wg
    cases = [
        (bm, bn, 64 * kb * 3, 0, 0, 1),  # a tile inside both operands
        (bm + 37, bn + 5, 64 * kb * 2 + 24, bm, bn, 2),  # past M, N and K: a partial k tile
        (3, 1, 8, 0, 0, 0),  # M = 3, N = 1, K = 8: almost every chunk zero-filled
    ]
    for m, n, k, m0, n0, kt in cases:
        rec = record(wg, bn, kb, m, n, k, m0, n0, kt)
        assert (rec != -2).all(), "a chunk of the stage was never written"
        assert (rec != -3).all(), "a chunk of the stage was written twice"
        assert torch.equal(rec, expected(wg, bn, kb, m, n, k, m0, n0, kt))
        copied = (rec >= 0).sum().item()
        rows_in = min(bm, max(0, m - m0)) + min(bn, max(0, n - n0))
        cols_in = max(0, min(8 * kb, -(-(k - 64 * kb * kt) // 8)))
        assert copied == rows_in * cols_in, (copied, rows_in, cols_in)
