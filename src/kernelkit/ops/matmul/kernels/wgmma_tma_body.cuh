
const long long M = x_shape[0];
const long long K = x_shape[1];
const long long N = w_shape[0];
kk_wgmma_gemm<T, TB, TY, WG, BN, KB, S, SPLIT, WS, ACT, HAS_BIAS>(x, w, &x_map, &w_map, bias, y, M,
                                                                  N, K);
