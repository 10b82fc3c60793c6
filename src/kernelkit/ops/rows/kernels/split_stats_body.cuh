const long long n = x_shape[ND - 1];  // x is row-contiguous; part is [rows, S, 3]
const long long S = part_shape[1];
const long long r = blockIdx.x / S, s = blockIdx.x % S;
if (n % kk_pack<T>::N == 0 && kk_aligned16(x)) {
  kk_split_stats<T, KIND, BLOCK, U, true, HINT>(x, part, n, S, r, s);
} else {
  kk_split_stats<T, KIND, BLOCK, U, false, HINT>(x, part, n, S, r, s);
}
