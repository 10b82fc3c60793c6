
const long long n = x_shape[ND - 1];  // x is row-contiguous; grid: CL blocks a group of R rows
long long rows = 1;                   // ND (x's rank) is a template value: constant indices
for (int d = 0; d + 1 < ND; ++d) rows *= x_shape[d];
const long long r = (long long)(blockIdx.x / CL) * R;
const int nr = (int)(rows - r < R ? rows - r : R);  // the last group may hold fewer
if (n % kk_pack<T>::N == 0 && kk_aligned16(x) && kk_aligned16(y) EXTRA_ALIGN) {
  kk_long_row<T, WT, KIND, BLOCK, CL, R, true>ARGS;
} else {
  kk_long_row<T, WT, KIND, BLOCK, CL, R, false>ARGS;
}
