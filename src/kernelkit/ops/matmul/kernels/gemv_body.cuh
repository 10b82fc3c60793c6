
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long N = w_shape[0];
kk_gemv<T, TB, TY, M, ROWS, WARPS, U, ACT, HAS_BIAS>(x, w, bias, y, N, K);
