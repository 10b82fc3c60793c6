
template <int BM, int BN, int KB, int SPLIT>
__device__ __forceinline__ kk_wg_tile kk_wg_tile_of(long long M, long long N, long long K) {
  kk_wg_tile w;
  w.rank = 0;
  if (SPLIT > 1) asm("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(w.rank));
  const long long tile = blockIdx.x / SPLIT, tiles_m = (M + BM - 1) / BM;
  w.m0 = tile % tiles_m * BM;
  w.n0 = tile / tiles_m * BN;
  const int kt_all = (int)((K + 64 * KB - 1) / (64 * KB)), per = (kt_all + SPLIT - 1) / SPLIT;
  w.kt0 = (int)w.rank * per;
  w.kts = kt_all - w.kt0 < per ? kt_all - w.kt0 : per;
  return w;
}

// Warpgroup wg's wgmmas of one stage: KB sub-tiles of four k16 steps, A rows 64 wg .., B the
// stage's BN rows of w.
template <class T, int BM, int BN, int KB>
__device__ __forceinline__ void kk_wg_mma_stage(float (&acc)[BN / 2], unsigned stage, int wg) {
  constexpr unsigned A_BYTES = BM * 128u, SUB = (BM + BN) * 128u;
#pragma unroll
  for (int h = 0; h < KB; ++h) {  // sub-tile h: k [64 h, 64 h + 64) of the stage
    const unsigned long long da = kk_wg_desc(stage + h * SUB + wg * 8192u);  // rows 64 wg ..
    const unsigned long long db = kk_wg_desc(stage + h * SUB + A_BYTES);
#pragma unroll
    for (int k = 0; k < 4; ++k) kk_wgmma<T, BN>(acc, da + 2 * k, db + 2 * k);  // +32 bytes
  }
}

// Every thread of the block (THREADS), after the ring is idle: the consumers' (t < 128 WG)
// fp32 tiles into `red` (the ring's memory), then rank r of the cluster stores its share of
// the rows, the SPLIT tiles added in rank order (deterministic), bias, activation.
template <class TB, class TY, int WG, int BN, int SPLIT, int THREADS, int ACT, bool HAS_BIAS>
__device__ __forceinline__ void kk_wg_epilogue(const float (&acc)[BN / 2], float* red, int t,
                                               const kk_wg_tile& tl, const TB* bias, TY* y,
                                               long long M, long long N) {
  constexpr int BM = 64 * WG, PITCH = BN + 8;
  if (t < 128 * WG) {
    const int wg = t >> 7, warp = (t >> 5) & 3, g = (t & 31) >> 2, q = t & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {  // accumulator 4j + v: row g (+8 for v >= 2), col 8j + 2q
      const int r = 64 * wg + 16 * warp + g, c = 8 * j + 2 * q;
      *reinterpret_cast<float2*>(&red[r * PITCH + c]) = make_float2(acc[4 * j], acc[4 * j + 1]);
      *reinterpret_cast<float2*>(&red[(r + 8) * PITCH + c]) =
          make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
  }
  if (SPLIT > 1) kk_cluster_sync();  // every block's tile is in (and visible to the cluster)
  else __syncthreads();
  constexpr int SHARE = (BM + SPLIT - 1) / SPLIT, PAIRS = BN / 2;
  for (int idx = t; idx < SHARE * PAIRS; idx += THREADS) {  // rank r stores rows share r
    const int r = (int)tl.rank * SHARE + idx / PAIRS, c = 2 * (idx % PAIRS);
    const long long m = tl.m0 + r, n = tl.n0 + c;
    if (r >= BM || m >= M || n >= N) continue;
    float2 v = *reinterpret_cast<const float2*>(&red[r * PITCH + c]);
    if (SPLIT > 1) {
      v = make_float2(0.0f, 0.0f);
      for (unsigned b = 0; b < SPLIT; ++b) {  // in rank order: deterministic
        const float2 u = kk_cluster_load2(&red[r * PITCH + c], b);
        v.x += u.x;
        v.y += u.y;
      }
    }
    if (HAS_BIAS) v.x += (float)bias[n];
    y[m * N + n] = TY(kk_mm_act<ACT>(v.x));
    if (n + 1 < N) {
      if (HAS_BIAS) v.y += (float)bias[n + 1];
      y[m * N + n + 1] = TY(kk_mm_act<ACT>(v.y));
    }
  }
  if (SPLIT > 1) kk_cluster_sync();  // no block leaves while another may still read its tile
}

// A consumer warpgroup (WS >= 1): wait for stage i to land (``full``), its wgmmas, and release
// stage i - 1 (its wgmmas done) into ``empty``, one arrival per warp. FENCE: the stage was
// written by cp.async (the generic proxy), which the tensor cores see only after a proxy fence;
// TMA writes through the async proxy already.
template <class T, int BM, int BN, int KB, int S, bool FENCE>
__device__ __forceinline__ void kk_wg_consume(float (&acc)[BN / 2], unsigned base,
                                              unsigned long long (&full)[S],
                                              unsigned long long (&empty)[S], int kts, int wg,
                                              int t) {
  constexpr unsigned STAGE = KB * (BM + BN) * 128u;
  for (int i = 0; i < kts; ++i) {
    kk_bulk_wait(kk_mma_smem_u32(&full[i % S]), (unsigned)(i / S) & 1u);
    if (FENCE) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    kk_wg_pin(acc);
    kk_wgmma_fence();
    kk_wg_mma_stage<T, BM, BN, KB>(acc, base + (i % S) * STAGE, wg);
    kk_wgmma_commit();
    kk_wg_pin(acc);
    kk_wgmma_wait<1>();  // stage i - 1's wgmma is done: its slot is free
    if (i > 0 && (t & 31) == 0)
      asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                   :: "r"(kk_mma_smem_u32(&empty[(i - 1) % S])) : "memory");
  }
  kk_wgmma_wait<0>();
  kk_wg_pin(acc);
}

// The TMA producer (WS = 2), one thread: stage i waits on ``empty`` until the consumers are
// done with stage i - S, then its KB sub-tiles of x's XR rows and w's BN rows come as tensor
// copies (the maps' boxes: 64 elements x XR or BN rows, 128-byte swizzle, zeros past M, N
// and K) counted into ``full`` by their bytes. XR = BM, or M rounded up to 8 where M < BM:
// the rows of A past it are never written, and the wgmmas' rows past M are never stored.
template <int BM, int BN, int KB, int S>
__device__ __forceinline__ void kk_wg_tma_produce(unsigned base, unsigned long long (&full)[S],
                                                  unsigned long long (&empty)[S],
                                                  const kk_tensor_map* xm,
                                                  const kk_tensor_map* wm, const kk_wg_tile& tl,
                                                  int xr) {
  constexpr unsigned SUB = (BM + BN) * 128u, STAGE = KB * SUB;
  const unsigned bytes = KB * (unsigned)(xr + BN) * 128u;
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(xm) : "memory");
  asm volatile("prefetch.tensormap [%0];\n" :: "l"(wm) : "memory");
  for (int i = 0; i < tl.kts; ++i) {
    const int s = i % S;
    if (i >= S) kk_bulk_wait(kk_mma_smem_u32(&empty[s]), (unsigned)(i / S + 1) & 1u);
    const unsigned bar = kk_mma_smem_u32(&full[s]), stage = base + s * STAGE;
    kk_bulk_expect(bar, bytes);
#pragma unroll
    for (int h = 0; h < KB; ++h) {
      const int k = ((tl.kt0 + i) * KB + h) * 64;
      kk_tma_2d(stage + h * SUB, xm, k, (int)tl.m0, bar);
      kk_tma_2d(stage + h * SUB + BM * 128u, wm, k, (int)tl.n0, bar);
    }
  }
}

// WS = 1: warp-specialized. Warpgroup WG (the last) only copies: stage i waits on `empty` until
// the consumers are done with stage i - S, and each producer thread's copies of the stage are
// counted into `full` when they land (cp.async.mbarrier.arrive: no thread waits for them). The
// WG consumer warpgroups wait on `full`, run the stage's wgmmas, and release the stage before
// (its wgmmas done) into `empty`: no barrier holds the whole block until the epilogue.
template <class T, class TB, class TY, int WG, int BN, int KB, int S, int SPLIT, int WS, int ACT,
          bool HAS_BIAS>
__device__ __forceinline__ void kk_wgmma_gemm(const T* x, const T* w, const kk_tensor_map* xm,
                                              const kk_tensor_map* wm, const TB* bias, TY* y,
                                              long long M, long long N, long long K) {
#if KK_HAS_WGMMA
  constexpr int BM = 64 * WG, ACC = BN / 2, CONSUMERS = 128 * WG;
  constexpr int THREADS = CONSUMERS + (WS == 2 ? 32 : 128 * WS);
  constexpr unsigned STAGE = KB * (BM + BN) * 128u;
  static_assert(S >= 3 && WS >= 1 && WS <= 2, "the config rules");
  extern __shared__ __align__(1024) unsigned char kk_wg_smem[];
  __shared__ unsigned long long full[S], empty[S];
  const unsigned raw = kk_mma_smem_u32(kk_wg_smem), base = (raw + 1023u) & ~1023u;
  float* red = reinterpret_cast<float*>(kk_wg_smem + (base - raw));  // the ring, reused
  const int t = threadIdx.x, wg = t >> 7;
  const kk_wg_tile tl = kk_wg_tile_of<BM, BN, KB, SPLIT>(M, N, K);
  float acc[ACC];
#pragma unroll
  for (int j = 0; j < ACC; ++j) acc[j] = 0.0f;
  if constexpr (WS == 1) {
    if (t == 0) {
      for (int s = 0; s < S; ++s) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 128;\n"  // the producer threads
                     :: "r"(kk_mma_smem_u32(&full[s])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"  // the consumer warps
                     :: "r"(kk_mma_smem_u32(&empty[s])), "n"(4 * WG));
      }
    }
    __syncthreads();
    if (wg == WG) {  // the producer warpgroup
      const unsigned long long rows_ok = kk_wg_rows_ok<BM, BN, KB>(t - CONSUMERS, tl, M, N);
      for (int i = 0; i < tl.kts; ++i) {
        const int s = i % S;
        if (i >= S) kk_bulk_wait(kk_mma_smem_u32(&empty[s]), (unsigned)(i / S + 1) & 1u);
        kk_wg_produce<T, BM, BN, KB>(base + s * STAGE, t - CONSUMERS, x, w, tl, tl.kt0 + i,
                                     rows_ok, K);
        // counted into `full` by the copy engine once this thread's copies so far have landed
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n"
                     :: "r"(kk_mma_smem_u32(&full[s])) : "memory");
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");
    } else {
      kk_wg_consume<T, BM, BN, KB, S, true>(acc, base, full, empty, tl.kts, wg, t);
    }
  } else {  // WS = 2: one warp's thread 0 issues the stages' tensor copies
    if (t == 0) {
      for (int s = 0; s < S; ++s) {
        kk_bulk_init(kk_mma_smem_u32(&full[s]));  // the producer's arrive.expect_tx
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n"  // the consumer warps
                     :: "r"(kk_mma_smem_u32(&empty[s])), "n"(4 * WG));
      }
      kk_bulk_init_fence();
    }
    __syncthreads();
    if (t == CONSUMERS)
      kk_wg_tma_produce<BM, BN, KB, S>(base, full, empty, xm, wm, tl,
                                       M < BM ? (int)((M + 7) / 8 * 8) : BM);
    else if (wg < WG)
      kk_wg_consume<T, BM, BN, KB, S, false>(acc, base, full, empty, tl.kts, wg, t);
  }
  __syncthreads();  // every warpgroup is done with the ring: red takes its place
  kk_wg_epilogue<TB, TY, WG, BN, SPLIT, THREADS, ACT, HAS_BIAS>(acc, red, t, tl, bias, y, M, N);
#else
  __trap();  // sm_90a only (the match rule): wgmma is an arch-specific instruction
#endif
}
