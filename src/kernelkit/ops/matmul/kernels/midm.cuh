// --- midm: y[M, N] = act(x[M, K] @ B + bias) for M of tens to hundreds of rows, sm_80+ ---------
// At these M the weight is the bytes that matter: it is read once from DRAM, x (M x K, small,
// in L2) is re-read by every column tile. So a block's BM rows cover all of M (or, past BM,
// the M tiles of one column tile are neighbours in launch order and share the weight in L2),
// and where the column tiles alone do not fill the GPU, SPLIT blocks (a thread-block cluster)
// take consecutive slices of K for the same tile and add their tiles through distributed shared
// memory at the end: deterministic, no workspace, no atomics.
// Per block, the main loop is _matmul_mma's (kk_mma_copies, its swizzle and ldmatrix offsets,
// mma.sync m16n8k16 with fp32 accumulators) over k tiles [kt0, kt1) of BK = 64: STAGES - 1
// tiles of x and of w in flight through cp.async while one is multiplied.
// Epilogue: the warps' accumulators go to an fp32 tile in shared memory (the stages' bytes,
// rows padded by 8 floats: float2 stores of a half-warp hit 32 different banks); the cluster
// syncs; block `rank` sums its share of the tile's rows over ranks 0 .. SPLIT - 1 in order
// (float4 reads, local or remote), adds bias, applies the activation and stores 4 columns a
// thread (coalesced); a second cluster sync keeps every tile alive until it has been read.
template <class T, class TB, class TY, int BM, int BN, int WM, int WN, int STAGES, int SPLIT,
          int ACT, bool HAS_BIAS, bool W_KN>
__device__ __forceinline__ void kk_midm(const T* x, const T* w, const TB* bias, TY* y,
                                        long long M, long long N, long long K) {
#if KK_HAS_CP_ASYNC
  constexpr int BK = 64, THREADS = WM * WN * 32, WTM = BM / WM, WTN = BN / WN;
  constexpr int MT = WTM / 16, NT = WTN / 8, KSTEPS = BK / 16, LD = BN + 8;
  constexpr int ACH = BK / 8, BCH = W_KN ? BN / 8 : BK / 8;  // 16-byte chunks per smem row
  constexpr unsigned A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
  static_assert(sizeof(T) == 2, "mma takes 16-bit inputs");
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BN % 4 == 0, "warp tile of 16 x 16 steps");
  static_assert((WTN & (WTN - 1)) == 0 && (!W_KN || BCH >= 8), "see the ldmatrix offsets");
  static_assert(SPLIT == 1 || SPLIT == 2 || SPLIT == 4 || SPLIT == 8, "a portable cluster");
  extern __shared__ __align__(128) unsigned char kk_midm_smem[];
  const unsigned smem = kk_mma_smem_u32(kk_midm_smem);
  const unsigned smem_b = smem + STAGES * A_BYTES;
  kk_midm_cluster_init<SPLIT>(kk_midm_smem);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned rank = kk_midm_rank<SPLIT>();
  const long long tiles_m = (M + BM - 1) / BM, tile = blockIdx.x / SPLIT;
  const long long m0 = tile % tiles_m * BM, n0 = tile / tiles_m * BN;  // M tiles: neighbours
  const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
  const long long KT = (K + BK - 1) / BK;
  const int kt0 = (int)(KT * rank / SPLIT), kts = (int)(KT * (rank + 1) / SPLIT) - kt0;
  const long long k0 = (long long)kt0 * BK;

  kk_mma_copies<T, BM, ACH, THREADS, BK, false> copy_a(x, K, m0, M, k0, K, tid);
  kk_mma_copies<T, W_KN ? BK : BN, BCH, THREADS, BK, W_KN> copy_b(
      w, W_KN ? N : K, W_KN ? k0 : n0, W_KN ? K : N, W_KN ? n0 : k0, W_KN ? N : K, tid);
  auto load_tile = [&](int stage) {
    copy_a.next(smem + stage * A_BYTES, K);
    copy_b.next(smem_b + stage * B_BYTES, W_KN ? N : K);
  };
  // ldmatrix offsets as in kk_mma (its notes say why XOR-ing them steps k and n)
  const unsigned a_ld = kk_mma_swz<ACH>(wm0 + (lane & 15), lane >> 4);
  const unsigned b_ld = W_KN ? kk_mma_swz<BCH>(lane & 15, wn0 / 8 + (lane >> 4))
                             : kk_mma_swz<BCH>(wn0 + (lane & 7) + ((lane >> 4) << 3),
                                               (lane >> 3) & 1);
  auto load_a = [&](unsigned (&af)[MT][4], unsigned sa, int ks) {
#pragma unroll
    for (int i = 0; i < MT; ++i) kk_mma_ldsm(af[i], sa + (a_ld ^ (ks * 32)) + i * 16 * ACH * 16);
  };
  auto load_b = [&](unsigned (&r)[4], unsigned sb, int ks, int j) {
    if constexpr (W_KN) {
      kk_mma_ldsm_t(r, sb + (b_ld ^ ((j & 7) * 16)) + (j >> 3) * 128 + ks * 16 * BCH * 16);
    } else {
      kk_mma_ldsm(r, sb + (b_ld ^ (ks * 32)) + j * 8 * BCH * 16);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < kts) load_tile(s);
    kk_mma_commit();  // one group per tile, empty past the last: the wait counts stay exact
  }
  int read = 0, write = STAGES - 1;
  for (int kt = 0; kt < kts; ++kt) {
    kk_mma_wait<STAGES - 2>();  // tile kt has landed; after the barrier every warp is done
    __syncthreads();            // with tile kt - 1, whose stage is refilled now
    if (kt + STAGES - 1 < kts) load_tile(write);
    kk_mma_commit();
    write = write == STAGES - 1 ? 0 : write + 1;
    const unsigned sa = smem + read * A_BYTES, sb = smem_b + read * B_BYTES;
    read = read == STAGES - 1 ? 0 : read + 1;
    unsigned af[2][MT][4];
    load_a(af[0], sa, 0);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
      if (ks + 1 < KSTEPS) load_a(af[(ks + 1) & 1], sa, ks + 1);
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
        unsigned b[4];  // b0, b1 of n-tile j, then of n-tile j + 1
        load_b(b, sb, ks, j);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          kk_mma_op<T>::run(acc[i][j], af[ks & 1][i], b[0], b[1]);
          kk_mma_op<T>::run(acc[i][j + 1], af[ks & 1][i], b[2], b[3]);
        }
      }
    }
  }
  kk_mma_wait<0>();
  __syncthreads();  // every warp is done with the stages: their bytes become the fp32 tile

  float* sums = reinterpret_cast<float*>(kk_midm_smem);  // [BM][LD]
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = wm0 + i * 16 + g + h * 8, c = wn0 + j * 8 + 2 * t;
        *reinterpret_cast<float2*>(sums + r * LD + c) =
            make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
      }
  kk_midm_cluster_sync<SPLIT>();

  // Block `rank` stores groups [q0, q1) of 4 columns (row-major over the tile's live rows).
  constexpr int QR = BN / 4;  // groups a row
  const int rows = M - m0 < BM ? (int)(M - m0) : BM;
  const int groups = rows * QR, share = (groups + SPLIT - 1) / SPLIT;
  const int q0 = (int)rank * share, q1 = q0 + share < groups ? q0 + share : groups;
  const bool pairs = (N & 1) == 0 && ((unsigned long long)y & 3ull) == 0;
  for (int q = q0 + tid; q < q1; q += THREADS) {
    const int r = q / QR, c = q % QR * 4;
    float4 s = *reinterpret_cast<const float4*>(kk_midm_map<SPLIT>(sums + r * LD + c, 0u));
#pragma unroll
    for (int p = 1; p < SPLIT; ++p) {  // ranks in order: the same sum whoever stores it
      const float4 o = *reinterpret_cast<const float4*>(kk_midm_map<SPLIT>(sums + r * LD + c,
                                                                         (unsigned)p));
      s.x += o.x;
      s.y += o.y;
      s.z += o.z;
      s.w += o.w;
    }
    const long long col = n0 + c;
    float v[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      float b = 0.0f;
      if (HAS_BIAS && col + u < N) b = (float)bias[col + u];
      v[u] = kk_mm_act<ACT>(v[u] + b);
    }
    TY* dst = y + (m0 + r) * N + col;
    if (pairs && col + 4 <= N) {
      kk_mma_pair<TY> lo, hi;
      lo.v[0] = TY(v[0]);
      lo.v[1] = TY(v[1]);
      hi.v[0] = TY(v[2]);
      hi.v[1] = TY(v[3]);
      reinterpret_cast<kk_mma_pair<TY>*>(dst)[0] = lo;
      reinterpret_cast<kk_mma_pair<TY>*>(dst)[1] = hi;
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (col + u < N) dst[u] = TY(v[u]);
    }
  }
  if (SPLIT > 1) kk_midm_cluster_sync<SPLIT>();  // no block leaves while its tile is read
#else
  __trap();  // sm_80+ only (the match rule): no mma.sync m16n8k16 / cp.async below
#endif
}
