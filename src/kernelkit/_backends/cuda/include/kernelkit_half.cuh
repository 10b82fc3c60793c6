// __half and __nv_bfloat16 with built-in numbers, for bodies that mix them (PyTorch's kernels
// do: `cur_weight == 0`, `float_sum += x[i]` with x of scalar_t). cuda_fp16.h / cuda_bf16.h
// convert these types to every built-in type, so NVRTC finds several built-in operators for each
// such expression and refuses it; PyTorch instantiates c10::Half, which converts to float alone,
// and so does the CPU backend's __half (kk_cpu_half.h). These templates are exact matches, so
// they win, and compute as the CPU backend does: the half in float, then the built-in operator
// (float or double as the usual conversions give). Every expression they take was an error
// before: no body that compiled changes meaning.
template <class T>
struct kk_half_num {
  static constexpr bool value = false;
};
#define KK_HALF_NUM_TYPE(T) \
  template <>               \
  struct kk_half_num<T> {   \
    static constexpr bool value = true; \
  };
KK_HALF_NUM_TYPE(bool) KK_HALF_NUM_TYPE(char) KK_HALF_NUM_TYPE(signed char)
KK_HALF_NUM_TYPE(unsigned char) KK_HALF_NUM_TYPE(short) KK_HALF_NUM_TYPE(unsigned short)
KK_HALF_NUM_TYPE(int) KK_HALF_NUM_TYPE(unsigned) KK_HALF_NUM_TYPE(long)
KK_HALF_NUM_TYPE(unsigned long) KK_HALF_NUM_TYPE(long long) KK_HALF_NUM_TYPE(unsigned long long)
KK_HALF_NUM_TYPE(float) KK_HALF_NUM_TYPE(double)
#undef KK_HALF_NUM_TYPE
template <bool B>
struct kk_half_num_if {};
template <>
struct kk_half_num_if<true> {
  using type = int;
};

// half OP number and number OP half; number OP= half (half OP= number is cuda_fp16.h's own).
#define KK_HALF_NUM_OP(H, F, OP)                                                         \
  template <class U, typename kk_half_num_if<kk_half_num<U>::value>::type = 0>                     \
  __device__ __forceinline__ auto operator OP(const H& a, U b)->decltype(0.0f OP b) {    \
    return F(a) OP b;                                                                    \
  }                                                                                      \
  template <class U, typename kk_half_num_if<kk_half_num<U>::value>::type = 0>                     \
  __device__ __forceinline__ auto operator OP(U a, const H& b)->decltype(a OP 0.0f) {    \
    return a OP F(b);                                                                    \
  }
#define KK_NUM_HALF_ASSIGN(H, F, OP)                                                     \
  template <class U, typename kk_half_num_if<kk_half_num<U>::value>::type = 0>                     \
  __device__ __forceinline__ U& operator OP(U& a, const H& b) {                          \
    return a OP F(b);                                                                    \
  }
#define KK_HALF_NUM(H, F)                                                                \
  KK_HALF_NUM_OP(H, F, +) KK_HALF_NUM_OP(H, F, -) KK_HALF_NUM_OP(H, F, *)                \
  KK_HALF_NUM_OP(H, F, /) KK_HALF_NUM_OP(H, F, ==) KK_HALF_NUM_OP(H, F, !=)              \
  KK_HALF_NUM_OP(H, F, <) KK_HALF_NUM_OP(H, F, >) KK_HALF_NUM_OP(H, F, <=)               \
  KK_HALF_NUM_OP(H, F, >=) KK_NUM_HALF_ASSIGN(H, F, +=) KK_NUM_HALF_ASSIGN(H, F, -=)     \
  KK_NUM_HALF_ASSIGN(H, F, *=) KK_NUM_HALF_ASSIGN(H, F, /=)

// max/min of two halves (__hmax/__hmin: a NaN gives the other input) or of a half and a number
// (in float), abs as float's, and the classification functions, where the math library's float,
// double and integer overloads all match a half: as the CPU backend gives them.
#define KK_HALF_NUM_MINMAX(H, F, NAME)                                                       \
  template <class U, typename kk_half_num_if<kk_half_num<U>::value>::type = 0>               \
  __device__ __forceinline__ auto NAME(const H& a, U b)->decltype(NAME(0.0f, b)) {          \
    return NAME(F(a), b);                                                                   \
  }                                                                                         \
  template <class U, typename kk_half_num_if<kk_half_num<U>::value>::type = 0>               \
  __device__ __forceinline__ auto NAME(U a, const H& b)->decltype(NAME(a, 0.0f)) {          \
    return NAME(a, F(b));                                                                   \
  }
#define KK_HALF_FUNCS(H, F, BITS)                                                            \
  __device__ __forceinline__ H max(const H& a, const H& b) { return __hmax(a, b); }         \
  __device__ __forceinline__ H min(const H& a, const H& b) { return __hmin(a, b); }         \
  KK_HALF_NUM_MINMAX(H, F, max) KK_HALF_NUM_MINMAX(H, F, min)                               \
  __device__ __forceinline__ float abs(const H& a) { return fabsf(F(a)); }                  \
  __device__ __forceinline__ bool isnan(const H& a) { return __hisnan(a); }                 \
  __device__ __forceinline__ bool isinf(const H& a) { return __hisinf(a) != 0; }            \
  __device__ __forceinline__ bool isfinite(const H& a) { return isfinite(F(a)); }           \
  __device__ __forceinline__ bool signbit(const H& a) { return (BITS(a) >> 15) != 0; }

#ifdef __CUDA_FP16_H__
KK_HALF_NUM(__half, __half2float)
KK_HALF_FUNCS(__half, __half2float, __half_as_ushort)
#endif
#ifdef __CUDA_BF16_H__
KK_HALF_NUM(__nv_bfloat16, __bfloat162float)
KK_HALF_FUNCS(__nv_bfloat16, __bfloat162float, __bfloat16_as_ushort)
// __half OP __nv_bfloat16 (either order): both in float, as on the CPU backend.
#define KK_HALF_BF16_OP(OP)                                                                  \
  __device__ __forceinline__ auto operator OP(const __half& a, const __nv_bfloat16& b)       \
      ->decltype(0.0f OP 0.0f) {                                                             \
    return __half2float(a) OP __bfloat162float(b);                                           \
  }                                                                                          \
  __device__ __forceinline__ auto operator OP(const __nv_bfloat16& a, const __half& b)       \
      ->decltype(0.0f OP 0.0f) {                                                             \
    return __bfloat162float(a) OP __half2float(b);                                           \
  }
KK_HALF_BF16_OP(+) KK_HALF_BF16_OP(-) KK_HALF_BF16_OP(*) KK_HALF_BF16_OP(/)
KK_HALF_BF16_OP(==) KK_HALF_BF16_OP(!=) KK_HALF_BF16_OP(<) KK_HALF_BF16_OP(>)
KK_HALF_BF16_OP(<=) KK_HALF_BF16_OP(>=)
#undef KK_HALF_BF16_OP
#endif
#undef KK_HALF_FUNCS
#undef KK_HALF_NUM_MINMAX
#undef KK_HALF_NUM
#undef KK_NUM_HALF_ASSIGN
#undef KK_HALF_NUM_OP
