
const long long M = x_shape[0];
const long long K = x_shape[1];
const long long N = W_KN ? w_shape[1] : w_shape[0];
kk_mma<T, TB, TY, BM, BN, BK, WM, WN, STAGES, ACT, HAS_BIAS, W_KN>(x, w, bias, y, M, N, K);
