// Metal Shading Language support for translated mx.fast.metal_kernel bodies, shared by every
// backend: the translator (kernelkit/_dialects/metal.py) puts the sections a kernel needs in front
// of its header, after the backend's prelude (CUDA builtins, __shfl_*_sync, atomics, half and
// metal:: scalar math all come from there). Everything Metal-only lives in namespace metal; the
// translator qualifies Metal's library names (float4 -> metal::float4, dot -> metal::dot).
// Sections start with "//@ name" lines and are kept or dropped whole.
//@ core
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;
#define METAL_FUNC __device__ __forceinline__
#define KK_MF __device__ __forceinline__
// From MLX's Metal utils, which mx.fast.metal_kernel puts in front of every kernel (as
// elem_to_loc, which the backends' preludes define).
template <class T, class U> KK_MF T ceildiv(T n, U d) { return (n + d - 1) / d; }
// half op float, half op int, ... in float (or double) come from the CUDA backend's
// kernelkit_half.cuh, as the CPU backend's 16-bit types give them; metal::abs keeps the type.
#if defined(KERNELKIT_CUDA) && defined(__CUDA_FP16_H__)
namespace metal { KK_MF __half abs(const __half& x) { return __half(::fabsf(float(x))); } }
#endif
#if defined(KERNELKIT_CUDA) && defined(__CUDA_BF16_H__)
namespace metal {
KK_MF __nv_bfloat16 abs(const __nv_bfloat16& x) { return __nv_bfloat16(::fabsf(float(x))); }
}
#endif
// `c ? a : b` with a 16-bit class and another arithmetic type: C++ finds both conversions and
// stops; Metal promotes (half : float -> float, half : int -> half). The translator casts each
// operand to kk_cond_t<its type, the other's>: the promoted type where a 16-bit type meets an
// arithmetic one, else its own type (the cast changes nothing and C++'s rules apply as written).
namespace metal {
template <class T> struct kk_bare { using type = T; };
template <class T> struct kk_bare<const T> { using type = typename kk_bare<T>::type; };
template <class T> struct kk_bare<volatile T> { using type = typename kk_bare<T>::type; };
template <class T> struct kk_bare<const volatile T> { using type = typename kk_bare<T>::type; };
template <class T> struct kk_bare<T&> { using type = typename kk_bare<T>::type; };
template <class T> struct kk_bare<T&&> { using type = typename kk_bare<T>::type; };
// kk_kind: 0 anything else, 1 integral, 2 float or double, 3 a 16-bit class
template <class T> struct kk_kind { static constexpr int value = 0; };
#define KK_KIND(T, K) template <> struct kk_kind<T> { static constexpr int value = K; };
KK_KIND(bool, 1) KK_KIND(char, 1) KK_KIND(signed char, 1) KK_KIND(unsigned char, 1)
KK_KIND(short, 1) KK_KIND(unsigned short, 1) KK_KIND(int, 1) KK_KIND(unsigned, 1)
KK_KIND(long, 1) KK_KIND(unsigned long, 1) KK_KIND(long long, 1) KK_KIND(unsigned long long, 1)
KK_KIND(float, 2) KK_KIND(double, 2)
#if !defined(KERNELKIT_CUDA) || defined(__CUDA_FP16_H__)
KK_KIND(__half, 3)
#endif
#if !defined(KERNELKIT_CUDA) || defined(__CUDA_BF16_H__)
KK_KIND(__nv_bfloat16, 3)
#endif
#undef KK_KIND
template <class S, class O, int KS = kk_kind<typename kk_bare<S>::type>::value,
          int KO = kk_kind<typename kk_bare<O>::type>::value>
struct kk_cond { using type = S; };  // no 16-bit class involved (or not with a number)
template <class S, class O> struct kk_cond<S, O, 3, 1> { using type = typename kk_bare<S>::type; };
template <class S, class O> struct kk_cond<S, O, 1, 3> { using type = typename kk_bare<O>::type; };
template <class S, class O> struct kk_cond<S, O, 3, 2> { using type = float; };
template <class S, class O> struct kk_cond<S, O, 2, 3> { using type = float; };
template <class A, class B> struct kk_same { static constexpr bool value = false; };
template <class A> struct kk_same<A, A> { static constexpr bool value = true; };
template <class S, class O, bool Same> struct kk_cond16 { using type = S; };  // as written
template <class S, class O> struct kk_cond16<S, O, false> { using type = float; };  // half : bf16
template <class S, class O>
struct kk_cond<S, O, 3, 3>
    : kk_cond16<S, O, kk_same<typename kk_bare<S>::type, typename kk_bare<O>::type>::value> {};
template <class S, class O>
using kk_cond_t = typename kk_cond<S, O>::type;
}  // namespace metal
namespace metal {
template <class T> struct kk_id { using type = T; };
template <bool B, class T = void> struct kk_enable_if {};
template <class T> struct kk_enable_if<true, T> { using type = T; };

// --- vectors: Metal's layout (a 3-vector has the size and alignment of a 4-vector unless packed)
template <class T, int N, bool P = false> struct vec;
template <class T> struct kk_is_vec { static constexpr bool value = false; };
template <class T, int N, bool P> struct kk_is_vec<vec<T, N, P>> { static constexpr bool value = true; };
template <class T> struct kk_width { static constexpr int value = 1; };
template <class T, int N, bool P> struct kk_width<vec<T, N, P>> { static constexpr int value = N; };
constexpr int kk_vec_align(int size, int n, bool packed) {
  return packed ? size : (size * (n == 3 ? 4 : n) > 16 ? 16 : size * (n == 3 ? 4 : n));
}
template <class T, int N, bool P> struct kk_vec_store;
template <class T, bool P> struct kk_vec_store<T, 2, P> { T x, y; };
template <class T> struct kk_vec_store<T, 3, true> { T x, y, z; };
template <class T> struct kk_vec_store<T, 3, false> { T x, y, z, kk_pad; };
template <class T, bool P> struct kk_vec_store<T, 4, P> { T x, y, z, w; };

template <class T, int N, bool P>
struct alignas(kk_vec_align(sizeof(T), N, P)) vec : kk_vec_store<T, N, P> {
  using value_type = T;
  vec() = default;
  template <class U, class = typename kk_enable_if<!kk_is_vec<U>::value>::type>
  KK_MF vec(U s) { for (int i = 0; i < N; ++i) (*this)[i] = T(s); }  // broadcast
  template <class U, bool Q>
  KK_MF vec(const vec<U, N, Q>& o) { for (int i = 0; i < N; ++i) (*this)[i] = T(o[i]); }
  template <class A, class B, class... R,
            class = typename kk_enable_if<kk_width<A>::value + kk_width<B>::value +
                                              (0 + ... + kk_width<R>::value) == N>::type>
  KK_MF vec(A a, B b, R... r) {  // components and shorter vectors, in order: float4(v.xy, z, w)
    int i = 0;
    put(i, a), put(i, b);
    (put(i, r), ...);
  }
  KK_MF T& operator[](int i) { return (&this->x)[i]; }
  KK_MF const T& operator[](int i) const { return (&this->x)[i]; }
  template <int... I> KK_MF vec<T, sizeof...(I)> kk_swz() const {  // v.xy (read)
    static_assert(((I < N) && ...), "swizzle names a component the vector does not have");
    return vec<T, sizeof...(I)>((*this)[I]...);
  }
  template <int... I> struct kk_swref {  // v.xy = ... (write)
    vec& v;
    template <class V> KK_MF kk_swref& operator=(const V& o) {
      const vec<T, sizeof...(I)> t(o);
      int k = 0;
      ((v[I] = t[k++]), ...);
      return *this;
    }
#define KK_SWOP(OP)                                                        \
  template <class V> KK_MF kk_swref& operator OP##=(const V& o) {          \
    const vec<T, sizeof...(I)> t(o);                                       \
    int k = 0;                                                             \
    ((v[I] = T(v[I] OP t[k++])), ...);                                     \
    return *this;                                                          \
  }
    KK_SWOP(+) KK_SWOP(-) KK_SWOP(*) KK_SWOP(/)
#undef KK_SWOP
  };
  template <int... I> KK_MF kk_swref<I...> kk_swr() {
    static_assert(((I < N) && ...), "swizzle names a component the vector does not have");
    return kk_swref<I...>{*this};
  }
#define KK_VCOMPOUND(OP)                                                                     \
  KK_MF vec& operator OP##=(const vec& o) {                                                  \
    for (int i = 0; i < N; ++i) (*this)[i] = T((*this)[i] OP o[i]);                         \
    return *this;                                                                            \
  }                                                                                          \
  KK_MF vec& operator OP##=(typename kk_id<T>::type s) {                                     \
    for (int i = 0; i < N; ++i) (*this)[i] = T((*this)[i] OP s);                            \
    return *this;                                                                            \
  }
  KK_VCOMPOUND(+) KK_VCOMPOUND(-) KK_VCOMPOUND(*) KK_VCOMPOUND(/) KK_VCOMPOUND(%)
  KK_VCOMPOUND(&) KK_VCOMPOUND(|) KK_VCOMPOUND(^) KK_VCOMPOUND(<<) KK_VCOMPOUND(>>)
#undef KK_VCOMPOUND

 private:
  template <class U> KK_MF void put(int& i, const U& s) { (*this)[i++] = T(s); }
  template <class U, int M, bool Q> KK_MF void put(int& i, const vec<U, M, Q>& v) {
    for (int k = 0; k < M; ++k) (*this)[i++] = T(v[k]);
  }
};

#define KK_VBIN(OP, R)                                                                      \
  template <class T, int N, bool P>                                                         \
  KK_MF vec<R, N, P> operator OP(const vec<T, N, P>& a, const vec<T, N, P>& b) {            \
    vec<R, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = R(a[i] OP b[i]);                                     \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N, bool P>                                                         \
  KK_MF vec<R, N, P> operator OP(const vec<T, N, P>& a, typename kk_id<T>::type b) {        \
    vec<R, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = R(a[i] OP b);                                        \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N, bool P>                                                         \
  KK_MF vec<R, N, P> operator OP(typename kk_id<T>::type a, const vec<T, N, P>& b) {        \
    vec<R, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = R(a OP b[i]);                                        \
    return r;                                                                               \
  }
KK_VBIN(+, T) KK_VBIN(-, T) KK_VBIN(*, T) KK_VBIN(/, T) KK_VBIN(%, T) KK_VBIN(&, T)
KK_VBIN(|, T) KK_VBIN(^, T) KK_VBIN(<<, T) KK_VBIN(>>, T)
KK_VBIN(==, bool) KK_VBIN(!=, bool) KK_VBIN(<, bool) KK_VBIN(>, bool) KK_VBIN(<=, bool)
KK_VBIN(>=, bool) KK_VBIN(&&, bool) KK_VBIN(||, bool)
#undef KK_VBIN
#define KK_VUN(OP, R)                                                                       \
  template <class T, int N, bool P> KK_MF vec<R, N, P> operator OP(const vec<T, N, P>& a) { \
    vec<R, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = R(OP a[i]);                                          \
    return r;                                                                               \
  }
KK_VUN(-, T) KK_VUN(+, T) KK_VUN(~, T) KK_VUN(!, bool)
#undef KK_VUN

#define KK_VTYPES(S, T)                                                                     \
  using S##2 = vec<T, 2>; using S##3 = vec<T, 3>; using S##4 = vec<T, 4>;                   \
  using packed_##S##2 = vec<T, 2, true>; using packed_##S##3 = vec<T, 3, true>;             \
  using packed_##S##4 = vec<T, 4, true>;
KK_VTYPES(float, float) KK_VTYPES(int, int) KK_VTYPES(uint, unsigned) KK_VTYPES(short, short)
KK_VTYPES(ushort, unsigned short) KK_VTYPES(char, signed char) KK_VTYPES(uchar, unsigned char)
KK_VTYPES(bool, bool) KK_VTYPES(long, long long) KK_VTYPES(ulong, unsigned long long)

// --- scalar math that neither backend's metal:: namespace has, then vector forms of it all
template <class T, class U> KK_MF T max(T a, U b) { return a > T(b) ? a : T(b); }  // max(x, 0)
template <class T, class U> KK_MF T min(T a, U b) { return a < T(b) ? a : T(b); }
template <class T, class U, class V> KK_MF T clamp(T x, U lo, V hi) {
  return metal::min(metal::max(x, T(lo)), T(hi));
}
template <class T> KK_MF T saturate(T x) { return metal::clamp(x, T(0), T(1)); }
template <class T, class U> KK_MF T mix(T x, T y, U a) { return T(x + (y - x) * a); }
template <class T> KK_MF T fract(T x) { return T(x - metal::floor(x)); }
template <class T> KK_MF T sign(T x) { return T(x > T(0) ? 1 : (x < T(0) ? -1 : 0)); }
template <class T> KK_MF T step(T edge, T x) { return T(x < edge ? 0 : 1); }
template <class T> KK_MF T smoothstep(T e0, T e1, T x) {
  const T t = metal::clamp(T((x - e0) / (e1 - e0)), T(0), T(1));
  return T(t * t * (T(3) - T(2) * t));
}
template <class T> KK_MF T exp10(T x) { return metal::exp2(T(x * T(3.321928094887362))); }
template <class T> KK_MF T powr(T x, T y) { return metal::pow(x, y); }
template <class T> KK_MF T fmod(T x, T y) { return T(x - y * metal::trunc(T(x / y))); }
template <class T> KK_MF T atan2(T y, T x) { return T(::atan2((double)y, (double)x)); }
template <class T> KK_MF T copysign(T x, T y) {
  return (y < T(0) || (y == T(0) && 1.0 / (double)y < 0)) ? -metal::abs(x) : metal::abs(x);
}
template <class T> KK_MF T divide(T x, T y) { return T(x / y); }
template <class T> KK_MF bool isnan(T x) { return x != x; }
template <class T> KK_MF bool isinf(T x) { return x == x && (double)x - (double)x != 0; }
template <class T> KK_MF bool isfinite(T x) { return (double)x - (double)x == 0; }
template <class T> KK_MF bool signbit(T x) { return x < T(0) || (x == T(0) && 1.0 / (double)x < 0); }
#define KK_VMAP1(F)                                                                         \
  template <class T, int N, bool P> KK_MF vec<T, N, P> F(const vec<T, N, P>& a) {           \
    vec<T, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = T(metal::F(a[i]));                                   \
    return r;                                                                               \
  }
KK_VMAP1(exp) KK_VMAP1(exp2) KK_VMAP1(exp10) KK_VMAP1(log) KK_VMAP1(log2) KK_VMAP1(log10)
KK_VMAP1(sqrt) KK_VMAP1(rsqrt) KK_VMAP1(abs) KK_VMAP1(fabs) KK_VMAP1(sin) KK_VMAP1(cos)
KK_VMAP1(tan) KK_VMAP1(sinh) KK_VMAP1(cosh) KK_VMAP1(tanh) KK_VMAP1(asin) KK_VMAP1(acos)
KK_VMAP1(atan) KK_VMAP1(floor) KK_VMAP1(ceil) KK_VMAP1(round) KK_VMAP1(trunc) KK_VMAP1(rint)
KK_VMAP1(erf) KK_VMAP1(fract) KK_VMAP1(sign) KK_VMAP1(saturate)
#undef KK_VMAP1
#define KK_VMAP2(F)                                                                         \
  template <class T, int N, bool P>                                                         \
  KK_MF vec<T, N, P> F(const vec<T, N, P>& a, const vec<T, N, P>& b) {                      \
    vec<T, N, P> r;                                                                         \
    for (int i = 0; i < N; ++i) r[i] = T(metal::F(a[i], b[i]));                             \
    return r;                                                                               \
  }                                                                                         \
  template <class T, int N, bool P>                                                         \
  KK_MF vec<T, N, P> F(const vec<T, N, P>& a, typename kk_id<T>::type b) {                  \
    return metal::F(a, vec<T, N, P>(b));                                                    \
  }
KK_VMAP2(max) KK_VMAP2(min) KK_VMAP2(pow) KK_VMAP2(powr) KK_VMAP2(fmax) KK_VMAP2(fmin)
KK_VMAP2(fmod) KK_VMAP2(atan2) KK_VMAP2(copysign) KK_VMAP2(step) KK_VMAP2(divide)
#undef KK_VMAP2
template <class T, int N, bool P, class U, class V>
KK_MF vec<T, N, P> clamp(const vec<T, N, P>& x, const U& lo, const V& hi) {
  const vec<T, N, P> l(lo), h(hi);
  vec<T, N, P> r;
  for (int i = 0; i < N; ++i) r[i] = metal::clamp(x[i], l[i], h[i]);
  return r;
}
template <class T, int N, bool P, class U>
KK_MF vec<T, N, P> mix(const vec<T, N, P>& x, const vec<T, N, P>& y, const U& a) {
  const vec<T, N, P> t(a);
  vec<T, N, P> r;
  for (int i = 0; i < N; ++i) r[i] = T(x[i] + (y[i] - x[i]) * t[i]);
  return r;
}
template <class T, int N, bool P>
KK_MF vec<T, N, P> fma(const vec<T, N, P>& a, const vec<T, N, P>& b, const vec<T, N, P>& c) {
  vec<T, N, P> r;
  for (int i = 0; i < N; ++i) r[i] = T(a[i] * b[i] + c[i]);
  return r;
}
template <class T, int N, bool P, bool Q>
KK_MF vec<T, N, P> select(const vec<T, N, P>& a, const vec<T, N, P>& b, const vec<bool, N, Q>& c) {
  vec<T, N, P> r;
  for (int i = 0; i < N; ++i) r[i] = c[i] ? b[i] : a[i];
  return r;
}
template <class T, int N, bool P> KK_MF T dot(const vec<T, N, P>& a, const vec<T, N, P>& b) {
  T s = T(a[0] * b[0]);
  for (int i = 1; i < N; ++i) s = T(s + a[i] * b[i]);
  return s;
}
template <class T, int N, bool P> KK_MF T length_squared(const vec<T, N, P>& a) { return dot(a, a); }
template <class T, int N, bool P> KK_MF T length(const vec<T, N, P>& a) {
  return T(metal::sqrt(dot(a, a)));
}
template <class T, int N, bool P>
KK_MF T distance(const vec<T, N, P>& a, const vec<T, N, P>& b) { return metal::length(a - b); }
template <class T, int N, bool P> KK_MF vec<T, N, P> normalize(const vec<T, N, P>& a) {
  return a * T(metal::rsqrt(dot(a, a)));
}
template <class T, bool P> KK_MF vec<T, 3, P> cross(const vec<T, 3, P>& a, const vec<T, 3, P>& b) {
  return vec<T, 3, P>(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}

// --- numeric_limits (16-bit float types in their own sections)
template <class T> struct numeric_limits;
#define KK_ILIMITS(T, LO, HI)                                                               \
  template <> struct numeric_limits<T> {                                                    \
    static constexpr bool is_integer = true;                                                \
    static constexpr KK_MF T min() { return LO; }                                           \
    static constexpr KK_MF T lowest() { return LO; }                                        \
    static constexpr KK_MF T max() { return HI; }                                           \
  };
KK_ILIMITS(bool, false, true) KK_ILIMITS(signed char, -128, 127) KK_ILIMITS(unsigned char, 0, 255)
KK_ILIMITS(char, -128, 127) KK_ILIMITS(short, -32768, 32767) KK_ILIMITS(unsigned short, 0, 65535)
KK_ILIMITS(int, -2147483647 - 1, 2147483647) KK_ILIMITS(unsigned, 0u, 4294967295u)
KK_ILIMITS(long, -9223372036854775807L - 1, 9223372036854775807L)
KK_ILIMITS(unsigned long, 0ul, 18446744073709551615ul)
KK_ILIMITS(long long, -9223372036854775807LL - 1, 9223372036854775807LL)
KK_ILIMITS(unsigned long long, 0ull, 18446744073709551615ull)
#undef KK_ILIMITS
#define KK_FLIMITS(T, MIN, MAX, EPS)                                                        \
  template <> struct numeric_limits<T> {                                                    \
    static constexpr bool is_integer = false;                                               \
    static constexpr KK_MF T min() { return MIN; }                                          \
    static constexpr KK_MF T lowest() { return -MAX; }                                      \
    static constexpr KK_MF T max() { return MAX; }                                          \
    static constexpr KK_MF T epsilon() { return EPS; }                                      \
    static KK_MF T infinity() { return (T)INFINITY; }                                       \
    static KK_MF T quiet_NaN() { return (T)NAN; }                                           \
  };
KK_FLIMITS(float, 1.17549435e-38f, 3.40282347e+38f, 1.19209290e-07f)
KK_FLIMITS(double, 2.2250738585072014e-308, 1.7976931348623157e+308, 2.220446049250313e-16)
#undef KK_FLIMITS

// --- as_type: reinterpret the bits (sizes must match)
template <class To, class From> KK_MF To as_type(const From& x) {
  static_assert(sizeof(To) == sizeof(From), "as_type needs types of the same size");
  To r;
  const char* s = reinterpret_cast<const char*>(&x);
  char* d = reinterpret_cast<char*>(&r);
  for (unsigned i = 0; i < sizeof(To); ++i) d[i] = s[i];
  return r;
}

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
KK_MF mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
}  // namespace metal
//@ vote
// (a section of its own: the CPU backend reads "all(" and "any(" as warp votes, run as fibers)
namespace metal {
KK_MF bool all(bool b) { return b; }
KK_MF bool any(bool b) { return b; }
template <class T, int N, bool P> KK_MF bool all(const vec<T, N, P>& v) {
  for (int i = 0; i < N; ++i) if (!v[i]) return false;
  return true;
}
template <class T, int N, bool P> KK_MF bool any(const vec<T, N, P>& v) {
  for (int i = 0; i < N; ++i) if (v[i]) return true;
  return false;
}
}  // namespace metal
//@ half
namespace metal {
KK_VTYPES(half, half)
template <> struct numeric_limits<half> {
  static constexpr bool is_integer = false;
  static KK_MF half min() { return half(6.103515625e-05f); }
  static KK_MF half lowest() { return half(-65504.0f); }
  static KK_MF half max() { return half(65504.0f); }
  static KK_MF half epsilon() { return half(0.0009765625f); }
  static KK_MF half infinity() { return half(INFINITY); }
  static KK_MF half quiet_NaN() { return half(NAN); }
};
}  // namespace metal
//@ bfloat
typedef __nv_bfloat16 bfloat;
typedef __nv_bfloat16 bfloat16_t;
namespace metal {
KK_VTYPES(bfloat, __nv_bfloat16)
template <> struct numeric_limits<__nv_bfloat16> {
  static constexpr bool is_integer = false;
  static KK_MF __nv_bfloat16 min() { return __nv_bfloat16(1.17549435e-38f); }
  static KK_MF __nv_bfloat16 lowest() { return __nv_bfloat16(-3.38953139e+38f); }
  static KK_MF __nv_bfloat16 max() { return __nv_bfloat16(3.38953139e+38f); }
  static KK_MF __nv_bfloat16 epsilon() { return __nv_bfloat16(0.0078125f); }
  static KK_MF __nv_bfloat16 infinity() { return __nv_bfloat16(INFINITY); }
  static KK_MF __nv_bfloat16 quiet_NaN() { return __nv_bfloat16(NAN); }
};
}  // namespace metal
//@ simd
// SIMD-group functions on warps: Apple GPUs run SIMD-groups of 32 threads, as NVIDIA GPUs run
// warps of 32 (and the CPU backend emulates them), so lane numbers and results match. The lanes
// taking part are the active ones (__activemask): threads past the grid or that returned drop
// out, as on Metal.
// Each function takes the caller's place in the source (a default argument), which the CPU
// backend's __activemask() groups lanes by: lanes that reach one simd_max after different arms of
// a branch are one group there, as on a GPU, however the optimizer copies the call.
#ifdef KERNELKIT_CPU
#define KK_SIMD_SITE KK_SITE_PARAMS
#define KK_SIMD_ACTIVE() __activemask(kk_file, kk_line)
#else
#define KK_SIMD_SITE const char* kk_file = nullptr, int kk_line = 0
#define KK_SIMD_ACTIVE() ((void)kk_file, (void)kk_line, __activemask())
#endif
#define KK_SIMD_AT kk_file, kk_line
namespace metal {
KK_MF unsigned kk_simd_lane() { return kk_linear_tid() & 31u; }
template <class T> KK_MF T kk_shfl(unsigned m, T v, int src) { return T(__shfl_sync(m, v, src)); }
KK_MF bool kk_shfl(unsigned m, bool v, int src) { return __shfl_sync(m, (int)v, src) != 0; }
template <class T, int N, bool P> KK_MF vec<T, N, P> kk_shfl(unsigned m, vec<T, N, P> v, int src) {
  for (int i = 0; i < N; ++i) v[i] = kk_shfl(m, v[i], src);
  return v;
}
template <class T, class F> KK_MF T kk_simd_reduce(T v, F f, KK_SIMD_SITE) {
  const unsigned m = KK_SIMD_ACTIVE();
  if (m == 0xffffffffu) {  // butterfly: every lane ends with the same bits
    const unsigned lane = kk_simd_lane();
    for (int o = 16; o > 0; o >>= 1) v = f(v, kk_shfl(m, v, (int)(lane ^ o)));
    return v;
  }
  T acc = kk_shfl(m, v, __ffs(m) - 1);
  for (unsigned rest = m & (m - 1); rest; rest &= rest - 1) acc = f(acc, kk_shfl(m, v, __ffs(rest) - 1));
  return acc;
}
template <class T, class F> KK_MF T kk_simd_scan(T v, F f, bool inclusive, T acc, KK_SIMD_SITE) {
  const unsigned m = KK_SIMD_ACTIVE(), lane = kk_simd_lane();
  for (unsigned rest = m; rest; rest &= rest - 1) {  // the active lanes below this one, in order
    const int src = __ffs(rest) - 1;
    const T x = kk_shfl(m, v, src);
    if ((unsigned)src < lane || (inclusive && (unsigned)src == lane)) acc = f(acc, x);
  }
  return acc;
}
struct kk_add { template <class T> KK_MF T operator()(T a, T b) const { return T(a + b); } };
struct kk_mul { template <class T> KK_MF T operator()(T a, T b) const { return T(a * b); } };
struct kk_max { template <class T> KK_MF T operator()(T a, T b) const { return metal::max(a, b); } };
struct kk_min { template <class T> KK_MF T operator()(T a, T b) const { return metal::min(a, b); } };
struct kk_and { template <class T> KK_MF T operator()(T a, T b) const { return T(a & b); } };
struct kk_or { template <class T> KK_MF T operator()(T a, T b) const { return T(a | b); } };
struct kk_xor { template <class T> KK_MF T operator()(T a, T b) const { return T(a ^ b); } };
template <class T> KK_MF T simd_sum(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_add{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_product(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_mul{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_max(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_max{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_min(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_min{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_and(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_and{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_or(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_or{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_xor(T v, KK_SIMD_SITE) { return kk_simd_reduce(v, kk_xor{}, KK_SIMD_AT); }
template <class T> KK_MF T simd_prefix_inclusive_sum(T v, KK_SIMD_SITE) {
  return kk_simd_scan(v, kk_add{}, true, T(0), KK_SIMD_AT);
}
template <class T> KK_MF T simd_prefix_exclusive_sum(T v, KK_SIMD_SITE) {
  return kk_simd_scan(v, kk_add{}, false, T(0), KK_SIMD_AT);
}
template <class T> KK_MF T simd_prefix_inclusive_product(T v, KK_SIMD_SITE) {
  return kk_simd_scan(v, kk_mul{}, true, T(1), KK_SIMD_AT);
}
template <class T> KK_MF T simd_prefix_exclusive_product(T v, KK_SIMD_SITE) {
  return kk_simd_scan(v, kk_mul{}, false, T(1), KK_SIMD_AT);
}
template <class T> KK_MF T simd_shuffle(T v, unsigned short lane, KK_SIMD_SITE) {
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)lane);
}
template <class T> KK_MF T simd_broadcast(T v, unsigned short lane, KK_SIMD_SITE) {
  return simd_shuffle(v, lane, KK_SIMD_AT);
}
template <class T> KK_MF T simd_broadcast_first(T v, KK_SIMD_SITE) {
  const unsigned m = KK_SIMD_ACTIVE();
  return kk_shfl(m, v, __ffs(m) - 1);
}
template <class T> KK_MF T simd_shuffle_xor(T v, unsigned short mask, KK_SIMD_SITE) {
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)(kk_simd_lane() ^ mask));
}
template <class T> KK_MF T simd_shuffle_up(T v, unsigned short d, KK_SIMD_SITE) {  // the lowest d lanes keep v
  const unsigned lane = kk_simd_lane();
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)(lane >= d ? lane - d : lane));
}
template <class T> KK_MF T simd_shuffle_down(T v, unsigned short d, KK_SIMD_SITE) {  // the highest d keep v
  const unsigned lane = kk_simd_lane();
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)(lane + d < 32u ? lane + d : lane));
}
template <class T> KK_MF T simd_shuffle_rotate_up(T v, unsigned short d, KK_SIMD_SITE) {
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)((kk_simd_lane() + 32u - (d & 31u)) & 31u));
}
template <class T> KK_MF T simd_shuffle_rotate_down(T v, unsigned short d, KK_SIMD_SITE) {
  return kk_shfl(KK_SIMD_ACTIVE(), v, (int)((kk_simd_lane() + d) & 31u));
}
struct simd_vote {
  using vote_t = unsigned long long;
  vote_t bits, active;
  KK_MF explicit operator vote_t() const { return bits; }
  KK_MF bool all() const { return bits == active; }
  KK_MF bool any() const { return bits != 0; }
};
KK_MF simd_vote simd_ballot(bool p, KK_SIMD_SITE) {
  const unsigned m = KK_SIMD_ACTIVE();
  return simd_vote{__ballot_sync(m, p), m};
}
KK_MF bool simd_any(bool p, KK_SIMD_SITE) { return __any_sync(KK_SIMD_ACTIVE(), p) != 0; }
KK_MF bool simd_all(bool p, KK_SIMD_SITE) { return __all_sync(KK_SIMD_ACTIVE(), p) != 0; }
KK_MF simd_vote simd_active_threads_mask(KK_SIMD_SITE) { return simd_ballot(true, KK_SIMD_AT); }
KK_MF bool simd_is_first(KK_SIMD_SITE) { return (__ffs(KK_SIMD_ACTIVE()) - 1) == (int)kk_simd_lane(); }
KK_MF bool simd_is_helper_thread() { return false; }
KK_MF void simdgroup_barrier(mem_flags = mem_flags::mem_none, KK_SIMD_SITE) { __syncwarp(KK_SIMD_ACTIVE()); }
}  // namespace metal
//@ atomic
// Metal's atomics on plain pointers (device atomic<T>* is T*): memory_order_relaxed only, as Metal.
namespace metal {
template <class T> using atomic = T;
using atomic_int = int;
using atomic_uint = unsigned;
using atomic_bool = bool;
using atomic_float = float;
enum memory_order { memory_order_relaxed, memory_order_acquire, memory_order_release,
                    memory_order_acq_rel, memory_order_seq_cst };
template <class T, class F> KK_MF T kk_atomic_cas_loop(T* p, F f) {  // float min/max
  unsigned* q = reinterpret_cast<unsigned*>(p);
  unsigned old = *reinterpret_cast<volatile unsigned*>(q), seen;
  do {
    seen = old;
    old = atomicCAS(q, seen, as_type<unsigned>(f(as_type<T>(seen))));
  } while (old != seen);
  return as_type<T>(old);
}
template <class T, class U> KK_MF T atomic_fetch_add_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicAdd(p, T(v));
}
template <class T, class U> KK_MF T atomic_fetch_sub_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicAdd(p, T(-T(v)));
}
KK_MF unsigned atomic_fetch_sub_explicit(unsigned* p, unsigned v, memory_order = memory_order_relaxed) {
  return atomicSub(p, v);
}
template <class T, class U> KK_MF T atomic_fetch_max_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicMax(p, T(v));
}
template <class T, class U> KK_MF T atomic_fetch_min_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicMin(p, T(v));
}
template <class U>
KK_MF float atomic_fetch_max_explicit(float* p, U v, memory_order = memory_order_relaxed) {
  const float f = float(v);
  return kk_atomic_cas_loop(p, [f](float o) { return o > f ? o : f; });
}
template <class U>
KK_MF float atomic_fetch_min_explicit(float* p, U v, memory_order = memory_order_relaxed) {
  const float f = float(v);
  return kk_atomic_cas_loop(p, [f](float o) { return o < f ? o : f; });
}
template <class T, class U> KK_MF T atomic_fetch_and_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicAnd(p, T(v));
}
template <class T, class U> KK_MF T atomic_fetch_or_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicOr(p, T(v));
}
template <class T, class U> KK_MF T atomic_fetch_xor_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicXor(p, T(v));
}
template <class T, class U> KK_MF T atomic_exchange_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  return atomicExch(p, T(v));
}
template <class T, class U> KK_MF void atomic_store_explicit(T* p, U v, memory_order = memory_order_relaxed) {
  atomicExch(p, T(v));
}
template <class T> KK_MF T atomic_load_explicit(const T* p, memory_order = memory_order_relaxed) {
  return *reinterpret_cast<const volatile T*>(p);
}
template <class T, class U>
KK_MF bool atomic_compare_exchange_weak_explicit(T* p, T* expected, U desired, memory_order,
                                                  memory_order) {
  const T seen = atomicCAS(p, *expected, T(desired));
  const bool ok = seen == *expected;
  *expected = seen;
  return ok;
}
}  // namespace metal
