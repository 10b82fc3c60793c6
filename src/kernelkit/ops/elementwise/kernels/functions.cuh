__device__ __forceinline__ float kk_ew_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float kk_ew_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float kk_ew_relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ float kk_ew_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float kk_ew_gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
