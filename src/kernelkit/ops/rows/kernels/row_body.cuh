
__shared__ float kk_red[64];
const long long n = x_shape[ND - 1];  // ND (x's rank) is a template value: constant indices
long long rows = 1;                   // keep the shape in parameter space, not local memory
for (int d = 0; d + 1 < ND; ++d) rows *= x_shape[d];
const int t = threadIdx.x % BLOCK;
const long long r = (long long)blockIdx.x * ROWS + threadIdx.x / BLOCK;
const long long nr = r < rows ? n : 0;
const T* xr = x + kk_row_at<ND, XS>(r < rows ? r : 0, n, x_shape, x_strides);
T* yr = y + (r < rows ? r : 0) * n;
if (n % kk_pack<T>::N == 0 && kk_rows_aligned16<T, ND, XS>(x, x_shape, x_strides) &&
    kk_aligned16(y) EXTRA_ALIGN) {
  CALL_ROW(true);
} else {
  CALL_ROW(false);
}
