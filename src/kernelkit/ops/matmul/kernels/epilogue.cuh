
template <int ACT>
__device__ __forceinline__ float kk_mm_act(float v) {
  if (ACT == 1) return fmaxf(v, 0.0f);                                   // relu
  if (ACT == 2) return v / (1.0f + expf(-v));                            // silu
  if (ACT == 3) return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));  // gelu
  return v;
}
