"""Question: how fast can a bf16 GEMV (M = 1) read its weight on this GPU, by access pattern?

The ceiling ``ops.matmul``'s decode kernels are measured against. Variants of one M = 1 kernel
over the same weights, each block a contiguous slab of rows: direct 16-byte loads (``ldg``), and
``cp.async.bulk`` copies into a ring of 16 KiB shared-memory stages (``bulk``, S stages, the stage
one copy or 16), at three grid sizes; next to cuBLAS (``F.linear``), kernelkit's choice
and the forced ``gemv_tc`` heuristic, in one process. Weights rotated (4 copies, past the L2);
device time from CUDA-graph replays; % of the copy rate measured in the same run.

    PYTHONPATH=src python3 benchmarks/weight_stream.py      (needs sm_90 for the bulk variants)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _common import copy_rate_gbs, cuda_or_skip, graph_us

import kernelkit
from kernelkit import ops
from kernelkit.ops._matmul_impls import SLAB_HEADER

# gemv_slab's header: its bulk-copy/mbarrier helpers, kk_mma_smem_u32 and kk_slab_dot.
HDR = (
    SLAB_HEADER
    + r"""
// Block b: rows [b N / grid, (b + 1) N / grid) of w (K bf16 each) dotted with x; 256 threads;
// a stage is RS whole rows (16 KiB), copied in PIECES bulk copies, or loaded directly (!BULK).
template <int K, int RS, int S, int PIECES, bool BULK>
__device__ void pb_gemv(const uint4* x, const uint4* w, float* y, int N) {
  constexpr int VPR = K / 8, VPT = RS * VPR / 256, JPR = VPR / 256;
  constexpr unsigned SB = RS * K * 2;
  static_assert(VPR % 256 == 0, "K multiple of 2048");
  extern __shared__ __align__(128) uint4 ring[];
  __shared__ __align__(8) unsigned long long bars[S];
  __shared__ float part[8][RS];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int r0 = (int)((long long)blockIdx.x * N / gridDim.x);
  const int r1 = (int)((long long)(blockIdx.x + 1) * N / gridDim.x);
  const int tiles = (r1 - r0 + RS - 1) / RS;
  uint4 xr[JPR];
  for (int j = 0; j < JPR; ++j) xr[j] = x[t + 256 * j];
  auto fill = [&](int f) {  // thread 0: tile f into stage f % S
    const unsigned bar = kk_mma_smem_u32(&bars[f % S]);
    const int rows = r1 - (r0 + f * RS) < RS ? r1 - (r0 + f * RS) : RS;
    const unsigned total = rows * K * 2, piece = SB / PIECES;  // a last tile may be short
    kk_bulk_expect(bar, total);
    const char* src = (const char*)(w + (long long)(r0 + f * RS) * VPR);
    for (unsigned at = 0; at < total; at += piece)
      kk_bulk_copy(kk_mma_smem_u32(ring) + (f % S) * SB + at, src + at,
                   total - at < piece ? total - at : piece, bar);
  };
  if (BULK) {
    if (t == 0) {
      for (int s = 0; s < S; ++s)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" :: "r"(kk_mma_smem_u32(&bars[s])));
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (t == 0)
      for (int s = 0; s < S - 1 && s < tiles; ++s) fill(s);
  }
  for (int i = 0; i < tiles; ++i) {
    const int row = r0 + i * RS;
    uint4 v[VPT];
    if (BULK) {
      if (t == 0 && i + S - 1 < tiles) fill(i + S - 1);  // the stage freed at step i - 1
      kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (i / S) & 1);
      for (int j = 0; j < VPT; ++j) v[j] = ring[(i % S) * (SB / 16) + t + 256 * j];
    } else {
      for (int j = 0; j < VPT; ++j) {
        const bool live = row + (t + 256 * j) / VPR < r1;
        v[j] = live ? __ldg(w + (long long)row * VPR + t + 256 * j) : make_uint4(0, 0, 0, 0);
      }
    }
    for (int r = 0; r < RS; ++r) {
      float a = 0.0f;
      for (int j = 0; j < JPR; ++j) a = kk_slab_dot<__nv_bfloat16>(v[r * JPR + j], xr[j], a);
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == 0) part[warp][r] = a;
    }
    __syncthreads();  // stage i % S is free, part is complete
    if (t < RS && row + t < r1) {
      float a = 0.0f;
      for (int q = 0; q < 8; ++q) a += part[q][t];
      y[row + t] = a;
    }
    __syncthreads();  // part is read before the next step writes it
  }
}
"""
)
BODY = "pb_gemv<K, RS, S, PIECES, BULK>((const uint4*)x, (const uint4*)w, y, (int)w_shape[0]);"
PROBE = kernelkit.kernel("probe_gemv", ["x", "w"], ["y"], BODY, header=HDR)


def rotating(fn, weights):
    state = [0]

    def call():
        state[0] = (state[0] + 1) % len(weights)
        return fn(weights[state[0]])

    return call


def main() -> int:
    if not cuda_or_skip("weight_stream.py"):
        return 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    copy = copy_rate_gbs()
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, copy rate {copy:.0f} GB/s")
    print("weight read once per call; % of the copy rate; err: relative to float64")
    for n, k in ((8192, 8192), (14336, 4096)):
        shape(n, k, sms, copy)
    return 0


def shape(n: int, k: int, sms: int, copy: float) -> None:
    """Every variant on one weight shape, M = 1."""
    ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(1, n, device="cuda", dtype=torch.float32)
    ref = (x.double() @ ws[0].double().T).flatten()
    gb = n * k * 2 / 1e9

    def report(name: str, us: float) -> None:
        rate = gb / (us * 1e-6)
        print(f"{n}x{k} {name:<46} {us:7.1f} us {rate:6.0f} GB/s {100 * rate / copy:5.1f}%")

    report("cuBLAS (F.linear)", graph_us(rotating(lambda w: F.linear(x, w), ws)))
    kk = rotating(lambda w: ops.matmul(x, w, transpose_b=True), ws)
    report("kernelkit: " + ops.matmul.explain(x, ws[0], transpose_b=True).choice.impl, graph_us(kk))
    with kernelkit.force("matmul", "gemv_tc"):
        report("kernelkit: gemv_tc heuristic", graph_us(kk))
    rs = 16384 // (2 * k)  # rows per 16 KiB stage
    variants = ((False, 2, 1), (True, 4, 1), (True, 6, 16))
    for bulk, stages, pieces in variants:
        for grid in (sms, 2 * sms, n // 8):
            if bulk and grid <= 4 * sms and (grid // sms) * stages * 16384 > 220000:
                continue  # more shared memory than an SM has
            kw = {
                "grid": (grid * 256, 1, 1),
                "threadgroup": (256, 1, 1),
                "template": (
                    ("K", k),
                    ("RS", rs),
                    ("S", stages),
                    ("PIECES", pieces),
                    ("BULK", bulk),
                ),
                "shared_memory": stages * 16384 if bulk else None,
            }
            y.fill_(float("nan"))
            PROBE([x, ws[0]], out=[y], **kw)
            err = ((y.flatten().double() - ref).norm() / ref.norm()).item()
            us = graph_us(rotating(lambda w, kw=kw: PROBE([x, w], out=[y], **kw), ws))
            what = f"bulk S={stages} pieces={pieces}" if bulk else "ldg"
            report(f"{what} grid={grid} err={err:.0e}", us)


if __name__ == "__main__":
    raise SystemExit(main())
