
// The mma steps of one 32-wide step of K, from the lane's 16-byte words of w (NT) and x (MT).
template <class T, int MT, int NT>
__device__ __forceinline__ void kk_tc_step(float (*acc)[4], const uint4* wv, const uint4* xv) {
  for (int half = 0; half < 2; ++half) {
    unsigned a[4];
    a[0] = half ? xv[0].z : xv[0].x;
    a[2] = half ? xv[0].w : xv[0].y;
    a[1] = MT == 2 ? (half ? xv[MT - 1].z : xv[MT - 1].x) : 0u;
    a[3] = MT == 2 ? (half ? xv[MT - 1].w : xv[MT - 1].y) : 0u;
    for (int j = 0; j < NT; ++j)
      kk_mma_op<T>::run(acc[j], a, half ? wv[j].z : wv[j].x, half ? wv[j].w : wv[j].y);
  }
}
