const long long n = x_shape[ND - 1];  // x is row-contiguous; part is [rows, S, 3]
const long long S = part_shape[1];
const long long r = blockIdx.x / S, s = blockIdx.x % S;
if (n % kk_pack<T>::N == 0 && kk_aligned16(x) && kk_aligned16(y) EXTRA_ALIGN) {
  kk_split_apply<T, WT, KIND, BLOCK, U, true, HINT>ARGS;
} else {
  kk_split_apply<T, WT, KIND, BLOCK, U, false, HINT>ARGS;
}
