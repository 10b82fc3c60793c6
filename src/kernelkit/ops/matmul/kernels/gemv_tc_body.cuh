
const long long K = x_shape[1];  // x is 2-D (a batch is flattened first): a constant index keeps
                                  // the shape out of local memory
const long long M = x_shape[0];
const long long N = w_shape[0];
kk_gemv_tc<T, TB, TY, MT, NT, WARPS, U, STAGES, ACT, HAS_BIAS>(x, w, bias, y, M, N, K);
