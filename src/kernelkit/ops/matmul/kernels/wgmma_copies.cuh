
// --- wgmma: y = act(x @ w^T + bias), sm_90a -------------------------------------------------
// Block b: cluster tile b / SPLIT (m tiles fastest: neighbours share a weight tile in L2), rank
// b % SPLIT, its k tiles [kt0, kt1). Stages of [BM + BN rows x 128 bytes] x KB (x's rows then
// w's, 128-byte swizzle: chunk c of row r at c ^ (r % 8)) come through a ring of S stages.
struct kk_wg_tile {
  long long m0, n0;
  int kt0, kts;
  unsigned rank;
};
// K as the compiler cannot see through (a value it will not hoist out of a loop), on the GPU.
__device__ __forceinline__ long long kk_wg_opaque(long long v) {
#ifdef __CUDA_ARCH__
  asm volatile("mov.b64 %0, %1;\n" : "=l"(v) : "l"(v));
#endif
  return v;
}

// The copying warpgroup's thread p (of 128) for one stage (WS = 1): it always takes the same
// 16-byte column kc of rows r0, r0 + RSTEP, ..., so whether a copy is x's or w's is known when
// compiling, a row's bounds check holds for every stage (rows_ok, bit j), and the addresses
// are a multiply-add each. K passes through an empty asm every stage so that the compiler does
// not keep every copy's address in registers between stages.
template <class T, int BM, int BN, int KB>
__device__ __forceinline__ void kk_wg_produce(unsigned stage, int p, const T* x, const T* w,
                                              const kk_wg_tile& tl, int kt,
                                              unsigned long long rows_ok, long long K) {
  constexpr int CPR = 8 * KB, RSTEP = 128 / CPR, J = (BM + BN) / RSTEP;
  constexpr unsigned SUB = (BM + BN) * 128u;
  static_assert(128 % CPR == 0 && BM % RSTEP == 0 && J <= 64, "the config rules");
  const long long k_rows = kk_wg_opaque(K);
  constexpr int XJ = BM / RSTEP;  // copies j < XJ are x's rows, the others w's
  const int kc = p % CPR, r0 = p / CPR, ch = kc & 7;
  const long long kk = (long long)kt * 64 * KB + 8 * kc, step = RSTEP * k_rows;
  const bool k_in = kk < K;
  const T* src = x + (tl.m0 + r0) * k_rows + kk;  // row j's, advanced a row step at a time
  const unsigned dst = stage + (kc >> 3) * SUB;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    if (j == XJ) src = w + (tl.n0 + r0) * k_rows + kk;
    const int r = r0 + j * RSTEP;
    const bool full = k_in && ((rows_ok >> j) & 1ull);
    kk_mma_cp16(dst + r * 128u + ((ch ^ (r & 7)) << 4), full ? src : x, full);
    src += step;
  }
}
// Bit j: whether the copying thread p's row j (of kk_wg_produce) is inside x or w.
template <int BM, int BN, int KB>
__device__ __forceinline__ unsigned long long kk_wg_rows_ok(int p, const kk_wg_tile& tl,
                                                            long long M, long long N) {
  constexpr int RSTEP = 16 / KB, J = (BM + BN) / RSTEP, XJ = BM / RSTEP;
  unsigned long long ok = 0;
  for (int j = 0; j < J; ++j) {
    const long long row = j < XJ ? tl.m0 + p / (8 * KB) + j * RSTEP
                                 : tl.n0 + p / (8 * KB) + (j - XJ) * RSTEP;
    ok |= (unsigned long long)(row < (j < XJ ? M : N)) << j;
  }
  return ok;
}
