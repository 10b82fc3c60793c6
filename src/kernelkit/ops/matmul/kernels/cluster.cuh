
// --- gemv_cluster: y = act(x @ w^T + bias) for M <= 8 MT <= 16, sm_90, tensor cores ----------
// Cluster c owns weight rows [c ROWS, (c + 1) ROWS); its block of rank r takes k in [r KS,
// (r + 1) KS) of each, through S stages of 8 rows x KS (thread 0 issues the bulk copies, an
// mbarrier per stage counts the bytes in; a stage is refilled as soon as every warp is done
// with it, so S stages are in flight but for the moments between). Warp w takes k [w KW,
// (w + 1) KW) of its block's slice, so its x fragments (STEPS 32-wide steps, MT 16-byte words
// each) stay in registers; per stage, each warp's 16 x 8 tile goes to `part` (two buffers: one
// barrier a stage) and is summed over warps in a fixed order into `sums`, which the cluster
// adds over ranks at the end.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T, class TB, class TY, int WARPS, int ROWS, int KS, int S, int CL, int MT,
          int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_cluster(const T* x, const T* w, const TB* bias, TY* y,
                                                long long M, long long N, long long K) {
#if KK_HAS_TMA && KK_HAS_CLUSTERS
  constexpr int KW = KS / WARPS, STEPS = KW / 32, SHARE = (ROWS + CL - 1) / CL;
  constexpr unsigned STAGE = 16u * KS;  // bytes: 8 rows x KS 16-bit elements
  static_assert(KW % 32 == 0 && ROWS % 8 == 0 && WARPS >= 2 * MT, "the config rules");
  extern __shared__ __align__(128) uint4 kk_cluster_ring[];
  __shared__ unsigned long long bars[S];  // 8-byte aligned, as mbarriers must be
  __shared__ float part[2][WARPS][32][4];
  __shared__ float sums[ROWS][8 * MT];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  unsigned rank = 0, cluster = blockIdx.x;
  if (CL > 1) {
    asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    asm("mov.u32 %0, %%clusterid.x;\n" : "=r"(cluster));
  }
  const long long n0 = (long long)cluster * ROWS, k0 = (long long)rank * KS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + 7) / 8;
  kk_slab_ring_init(bars);
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + 8 i .., k in [k0, k0 + KS)
    const int n = rows - 8 * i < 8 ? rows - 8 * i : 8;
    const unsigned bar = kk_mma_smem_u32(&bars[i % S]);
    const unsigned dst = kk_mma_smem_u32(kk_cluster_ring) + (i % S) * STAGE;
    const T* src = w + (n0 + 8 * i) * K + k0;
    kk_bulk_expect(bar, (unsigned)n * KS * 2u);
    if (CL == 1) {
      kk_bulk_copy(dst, src, (unsigned)n * KS * 2u, bar);  // whole rows: one span
    } else {
      for (int r = 0; r < n; ++r) kk_bulk_copy(dst + r * KS * 2u, src + r * K, KS * 2u, bar);
    }
  };
  if (t == 0)
    for (int i = 0; i < S && i < tiles; ++i) fill(i);
  uint4 xr[STEPS][MT];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int s = 0; s < STEPS; ++s)
#pragma unroll
    for (int h = 0; h < MT; ++h) {
      const long long m = g + 8 * h, k = k0 + warp * KW + 32 * s + 8 * q;
      xr[s][h] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K + k)) : zero;
    }
  for (int i = 0; i < tiles; ++i) {
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
    const uint4* mine = kk_cluster_ring + (i % S) * (STAGE / 16) + (g * KS + warp * KW + 8 * q) / 8;
    float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
      const uint4 wv = mine[4 * s];
      kk_tc_step<T, MT, 1>(acc, &wv, xr[s]);
    }
#pragma unroll
    for (int v = 0; v < 4; ++v) part[i & 1][warp][lane][v] = acc[0][v];
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    if (t == 0 && i + S < tiles) fill(i + S);  // first: the copy engine never waits for sums
    if (t < 64 * MT) {  // output (m, r) of this stage: accumulator v of lane l in every warp
      const int m = t >> 3, r = t & 7, l = (m & 7) * 4 + (r >> 1), v = (m >> 3) * 2 + (r & 1);
      float a = 0.0f;
      for (int p = 0; p < WARPS; ++p) a += part[i & 1][p][l][v];  // fixed order: deterministic
      sums[8 * i + r][m] = a;
    }
  }
  if (CL > 1) kk_cluster_sync();  // every block's sums are complete (and visible to the cluster)
  else __syncthreads();
  for (int idx = t; idx < SHARE * 8 * MT; idx += 32 * WARPS) {  // rank c stores rows share c
    const int m = idx / SHARE, r = (int)rank * SHARE + idx % SHARE;
    if (m >= M || r >= rows) continue;
    float a = sums[r][m];
    if (CL > 1) {
      a = 0.0f;
      for (int c = 0; c < CL; ++c) a += kk_cluster_load(&sums[r][m], c);  // in rank order
    }
    const long long n = n0 + r;
    if (HAS_BIAS) a += (float)bias[n];
    y[m * N + n] = TY(kk_mm_act<ACT>(a));
  }
  if (CL > 1) kk_cluster_sync();  // no block leaves while another may still read its sums
#else
  __trap();  // sm_90+ only (the match rule): no bulk copies, mbarriers or clusters below
#endif
}
