
const long long n = x_shape[ND - 1];  // x is row-contiguous; grid: CL blocks a cluster
long long rows = 1;
for (int d = 0; d + 1 < ND; ++d) rows *= x_shape[d];
if (n % kk_pack<T>::N == 0 && kk_aligned16(x) && kk_aligned16(y) EXTRA_ALIGN) {
  kk_stream_rows<T, WT, KIND, BLOCK, CL, true>ARGS;
} else {
  kk_stream_rows<T, WT, KIND, BLOCK, CL, false>ARGS;
}
