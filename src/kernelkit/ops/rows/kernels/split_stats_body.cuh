const long long n = x_shape[ND - 1];  // x's rows: kk_row_at; part is [rows, S, 3]
const long long S = part_shape[1];
const long long r = blockIdx.x / S, s = blockIdx.x % S;
const T* xr = x + kk_row_at<ND, XS>(r, n, x_shape, x_strides);
if (n % kk_pack<T>::N == 0 && kk_rows_aligned16<T, ND, XS>(x, x_shape, x_strides)) {
  kk_split_stats<T, KIND, BLOCK, U, true, HINT>(xr, part, n, S, r, s);
} else {
  kk_split_stats<T, KIND, BLOCK, U, false, HINT>(xr, part, n, S, r, s);
}
