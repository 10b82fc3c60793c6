const long long n = x_shape[ND - 1];  // x's rows: kk_row_at; part is [rows, S, 3]
const long long S = part_shape[1];
// chunks in the reverse of the statistics kernel's order: the blocks that start first read the
// chunks read last there, the likeliest still in L2
const long long rb = (long long)gridDim.x - 1 - blockIdx.x, r = rb / S, s = rb % S;
const T* xr = x + kk_row_at<ND, XS>(r, n, x_shape, x_strides);
if (n % kk_pack<T>::N == 0 && kk_rows_aligned16<T, ND, XS>(x, x_shape, x_strides) &&
    kk_aligned16(y) EXTRA_ALIGN) {
  kk_split_apply<T, WT, KIND, BLOCK, U, true, HINT>ARGS;
} else {
  kk_split_apply<T, WT, KIND, BLOCK, U, false, HINT>ARGS;
}
