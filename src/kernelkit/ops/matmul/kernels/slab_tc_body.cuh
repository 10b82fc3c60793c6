
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first)
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_slab_tc<T, TB, TY, WARPS, ROWS, SKB, S, SEG, XH, JW, ACT, HAS_BIAS>(x, w, bias, y, M, N,
                                                                             K);
