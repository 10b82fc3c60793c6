
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long M = x_shape[0];
const long long N = W_KN ? w_shape[1] : w_shape[0];
kk_tiled<T, TB, TY, BM, BN, BK, TM, TN, ACT, HAS_BIAS, W_KN>(x, w, bias, y, M, N, K);
