
const long long n = x_shape[ND - 1];  // x's rows: kk_row_at; grid: CL blocks a row, no padding
const long long r = blockIdx.x / CL;
const T* xr = x + kk_row_at<ND, XS>(r, n, x_shape, x_strides);
if (n % kk_pack<T>::N == 0 && kk_rows_aligned16<T, ND, XS>(x, x_shape, x_strides) &&
    kk_aligned16(y) EXTRA_ALIGN) {
  kk_long_row<T, WT, KIND, BLOCK, CL, true>ARGS;
} else {
  kk_long_row<T, WT, KIND, BLOCK, CL, false>ARGS;
}
