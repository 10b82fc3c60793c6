
// --- gemv_slab_tc: y = act(x @ w^T + bias), M <= MX, sm_90: whole rows, tensor cores ---------
// As gemv_slab: a block owns ROWS consecutive rows of w, streamed through S stages of SKB KiB,
// RS whole rows each (one cp.async.bulk, thread 0 issues it, an mbarrier counts the bytes).
// K is cut into 32-wide chunks dealt round-robin to SEG segments: chunk c is segment c % SEG.
// An mma's 8 columns are R = 8 / SEG rows of the stage x SEG segments (column r SEG + s); x's
// rows x the same segments (row m SEG + s) are XH halves of 8 rows (1: an mma's first half,
// 2: both, 4: two mmas, each on the same w fragment); lane (g, q) loads 16 bytes of row
// g / SEG (+ 8 h / SEG for half h) of both at the k of its segment g % SEG, and the two mma
// steps take them as kk_tc_step does (a dot product may sum k in any order both operands
// share).
// Entry (m SEG + s, r SEG + s') is x[m] . w[r] over segment s's chunks of the step when s = s',
// and a cross-segment sum, dropped, when not. Step j of warp w takes chunks (w JW + j) SEG ..
// (w JW + j + 1) SEG - 1 of every row: 32 SEG contiguous elements a row, read without bank
// conflicts for SEG >= 2 (with SEG = 1 a quarter-warp reads two rows at the same offset: two
// ways), and x's fragments for its JW steps stay in registers for the whole kernel.
// Per group of R rows each lane keeps its agreeing entries, the segments are added by
// butterfly shuffles, the warps' sums in a fixed order (deterministic), as in gemv_slab.
// Rows past N in the last stage are not copied: stale words, computed, never stored.
template <class T, class TB, class TY, int WARPS, int ROWS, int SKB, int S, int SEG, int XH,
          int JW, int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_gemv_slab_tc(const T* x, const T* w, const TB* bias, TY* y,
                                                long long M, long long N, long long K) {
#if KK_HAS_TMA
  constexpr int R = 8 / SEG, MX = 8 * XH / SEG, MT = XH < 2 ? 1 : 2, AT = (XH + 1) / 2;
  constexpr int KC = 32 * SEG * WARPS * JW;  // K (the config rules)
  constexpr int RS = SKB * 512 / KC, G = RS / R;
  constexpr unsigned STAGE = SKB * 1024u;
  static_assert(SEG == 1 || SEG == 2 || SEG == 4 || SEG == 8, "segments: a power of two <= 8");
  static_assert(XH == 1 || XH == 2 || XH == 4, "x's halves: 1, 2 or 4");
  static_assert(RS * KC == SKB * 512 && RS % R == 0 && ROWS % RS == 0, "the config rules");
  extern __shared__ __align__(128) uint4 kk_slab_tc_ring[];
  __shared__ unsigned long long bars[S];  // 8-byte aligned, as mbarriers must be
  __shared__ float part[2][WARPS][RS * MX];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, g = lane >> 2, q = lane & 3;
  const int seg = g % SEG;  // this lane's segment, for x (A row g) and w (B column g) alike
  const long long n0 = (long long)blockIdx.x * ROWS;
  const int rows = N - n0 < ROWS ? (int)(N - n0) : ROWS, tiles = (rows + RS - 1) / RS;
  kk_slab_ring_init(bars);
  __syncthreads();
  auto fill = [&](int i) {  // thread 0: stage i % S <- rows n0 + RS i ..
    kk_slab_ring_fill<S, STAGE, RS>(kk_slab_tc_ring, bars, i, w + n0 * KC, rows, KC);
  };
  if (t == 0)
    for (int i = 0; i < S - 1 && i < tiles; ++i) fill(i);
  // this lane's 8 elements of step j: k = (warp JW + j) 32 SEG + 32 seg + 8 q
  const int k_lane = warp * JW * 32 * SEG + 32 * seg + 8 * q;
  uint4 xr[JW][XH];
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int j = 0; j < JW; ++j)
#pragma unroll
    for (int h = 0; h < XH; ++h) {
      const int m = g / SEG + h * (8 / SEG);  // A row g of half h
      xr[j][h] = m < M ? __ldg(reinterpret_cast<const uint4*>(x + m * K + k_lane + 32 * SEG * j))
                       : zero;
    }
  for (int i = 0; i < tiles; ++i) {
    if (t == 0 && i + S - 1 < tiles) fill(i + S - 1);
    kk_bulk_wait(kk_mma_smem_u32(&bars[i % S]), (unsigned)(i / S) & 1u);
#pragma unroll
    for (int grp = 0; grp < G; ++grp) {
      const uint4* mine = kk_slab_tc_ring + (i % S) * (STAGE / 16) +
                          ((grp * R + g / SEG) * KC + k_lane) / 8;
      float acc[AT][4];
#pragma unroll
      for (int u = 0; u < AT; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.0f;
#pragma unroll
      for (int j = 0; j < JW; ++j) {
        const uint4 wv = mine[4 * SEG * j];
#pragma unroll
        for (int u = 0; u < AT; ++u) kk_tc_step<T, MT, 1>(&acc[u], &wv, &xr[j][2 * u]);
      }
      float* out = part[i & 1][warp] + grp * R * MX;  // [row of the group][m]
#pragma unroll
      for (int u = 0; u < AT; ++u) {  // mma u: halves 2u (entries 0, 1) and 2u + 1 (2, 3)
        const bool up = 2 * u + 1 < XH;
        const int m_lo = 2 * u * (8 / SEG), m_hi = m_lo + 8 / SEG;  // x's rows at g = 0
        if (SEG == 1) {  // no segments: acc is y[g (+8)][2q (+1)] of the group's 8 rows
          out[(2 * q) * MX + g + m_lo] = acc[u][0];
          out[(2 * q + 1) * MX + g + m_lo] = acc[u][1];
          if (up) out[(2 * q) * MX + g + m_hi] = acc[u][2];
          if (up) out[(2 * q + 1) * MX + g + m_hi] = acc[u][3];
        } else {  // columns 2q, 2q + 1 are segments 2q % SEG, (2q + 1) % SEG of row 2q / SEG
          const bool even = seg == (2 * q) % SEG, odd = seg == (2 * q + 1) % SEG;
          float lo = even ? acc[u][0] : odd ? acc[u][1] : 0.0f;
          float hi = even ? acc[u][2] : odd ? acc[u][3] : 0.0f;
          // add over the lanes of the other segments: lane bits 2.. (g % SEG) and 0.. (q's part)
#pragma unroll
          for (int b = 4; b < 4 * SEG; b <<= 1) {
            lo += __shfl_xor_sync(0xffffffffu, lo, b);
            if (up) hi += __shfl_xor_sync(0xffffffffu, hi, b);
          }
#pragma unroll
          for (int b = 1; b < SEG / 2; b <<= 1) {
            lo += __shfl_xor_sync(0xffffffffu, lo, b);
            if (up) hi += __shfl_xor_sync(0xffffffffu, hi, b);
          }
          if (seg == 0 && q % (SEG > 1 ? SEG / 2 : 1) == 0) {  // (SEG = 1 compiles it: no % 0)
            const int r = 2 * q / SEG, m = g / SEG;
            out[r * MX + m + m_lo] = lo;
            if (up) out[r * MX + m + m_hi] = hi;
          }
        }
      }
    }
    __syncthreads();  // part is complete, and every thread is done with stage i % S
    kk_slab_store<TB, TY, WARPS, RS, MX, ACT, HAS_BIAS>(&part[i & 1][0][0], t, M, rows - RS * i,
                                                         n0 + (long long)RS * i, bias, y, N);
  }
#else
  __trap();  // sm_90+ only (the match rule): no cp.async.bulk / mbarrier transactions below
#endif
}
