
const long long n = x_shape[ND - 1];  // x is row-contiguous; grid: CL blocks a row, no padding
const long long r = blockIdx.x / CL;
if (n % kk_pack<T>::N == 0 && kk_aligned16(x) && kk_aligned16(y) EXTRA_ALIGN) {
  kk_long_row<T, WT, KIND, BLOCK, CL, true>ARGS;
} else {
  kk_long_row<T, WT, KIND, BLOCK, CL, false>ARGS;
}
