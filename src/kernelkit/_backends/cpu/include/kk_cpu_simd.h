// CUDA's SIMD intrinsics on 32-bit words: two 16-bit lanes (..2) or four 8-bit lanes (..4),
// each lane computed alone (checked bit for bit against the GPU, tests/gpu and
// tests/backend/test_simd_intrinsics.py). Included by kk_cpu_math.h.
#pragma once

// Lane i of a and b as signed (sa, sb) and unsigned (ua, ub) values; OP gives the lane's result,
// kept to W bits.
template <int W, class Op>
static inline unsigned kk_simd(unsigned a, unsigned b, Op op) {
  const unsigned mask = (1u << W) - 1u;
  unsigned r = 0;
  for (int i = 0; i < 32; i += W) {
    const unsigned ua = (a >> i) & mask, ub = (b >> i) & mask;
    const int sa = (int)(ua << (32 - W)) >> (32 - W), sb = (int)(ub << (32 - W)) >> (32 - W);
    r |= ((unsigned)op(sa, sb, ua, ub) & mask) << i;
  }
  return r;
}
template <int W, class Op>
static inline unsigned kk_simd_sum(unsigned a, unsigned b, Op op) {  // the lanes' results added
  const unsigned mask = (1u << W) - 1u;
  unsigned r = 0;
  for (int i = 0; i < 32; i += W) {
    const unsigned ua = (a >> i) & mask, ub = (b >> i) & mask;
    const int sa = (int)(ua << (32 - W)) >> (32 - W), sb = (int)(ub << (32 - W)) >> (32 - W);
    r += (unsigned)op(sa, sb, ua, ub);
  }
  return r;
}
template <int W>
static inline int kk_sat_s(int v) {
  const int hi = (1 << (W - 1)) - 1, lo = -(1 << (W - 1));
  return v > hi ? hi : v < lo ? lo : v;
}
template <int W>
static inline unsigned kk_sat_u(int v) {
  const int hi = (1 << W) - 1;
  return (unsigned)(v > hi ? hi : v < 0 ? 0 : v);
}

#define KK_SIMD2(NAME, EXPR)                                                                  \
  static inline unsigned NAME##2(unsigned a, unsigned b) {                                    \
    return kk_simd<16>(a, b, [](int sa, int sb, unsigned ua, unsigned ub) {                   \
      constexpr int W = 16; (void)sa; (void)sb; (void)ua; (void)ub; return EXPR;              \
    });                                                                                       \
  }                                                                                           \
  static inline unsigned NAME##4(unsigned a, unsigned b) {                                    \
    return kk_simd<8>(a, b, [](int sa, int sb, unsigned ua, unsigned ub) {                    \
      constexpr int W = 8; (void)sa; (void)sb; (void)ua; (void)ub; return EXPR;               \
    });                                                                                       \
  }
#define KK_SIMD1(NAME, EXPR)                                                                  \
  static inline unsigned NAME##2(unsigned a) {                                                \
    return kk_simd<16>(a, 0u, [](int sa, int, unsigned ua, unsigned) {                        \
      constexpr int W = 16; (void)sa; (void)ua; return EXPR;                                  \
    });                                                                                       \
  }                                                                                           \
  static inline unsigned NAME##4(unsigned a) {                                                \
    return kk_simd<8>(a, 0u, [](int sa, int, unsigned ua, unsigned) {                         \
      constexpr int W = 8; (void)sa; (void)ua; return EXPR;                                   \
    });                                                                                       \
  }
#define KK_SIMD_CMP(REL, SIGNED_OP, UNSIGNED_OP)                                              \
  KK_SIMD2(__vcmp##REL##s, (sa SIGNED_OP sb) ? ~0u : 0u)                                      \
  KK_SIMD2(__vcmp##REL##u, (ua UNSIGNED_OP ub) ? ~0u : 0u)                                    \
  KK_SIMD2(__vset##REL##s, (sa SIGNED_OP sb) ? 1u : 0u)                                       \
  KK_SIMD2(__vset##REL##u, (ua UNSIGNED_OP ub) ? 1u : 0u)

KK_SIMD1(__vabs, sa < 0 ? -sa : sa)
KK_SIMD1(__vabsss, kk_sat_s<W>(sa < 0 ? -sa : sa))
KK_SIMD1(__vneg, -sa)
KK_SIMD1(__vnegss, kk_sat_s<W>(-sa))
KK_SIMD2(__vabsdiffs, sa > sb ? sa - sb : sb - sa)
KK_SIMD2(__vabsdiffu, ua > ub ? ua - ub : ub - ua)
KK_SIMD2(__vadd, ua + ub)
KK_SIMD2(__vaddss, kk_sat_s<W>(sa + sb))
KK_SIMD2(__vaddus, kk_sat_u<W>((int)(ua + ub)))
KK_SIMD2(__vsub, ua - ub)
KK_SIMD2(__vsubss, kk_sat_s<W>(sa - sb))
KK_SIMD2(__vsubus, kk_sat_u<W>((int)ua - (int)ub))
KK_SIMD2(__vavgs, (sa + sb + ((sa + sb) >= 0 ? 1 : 0)) >> 1)
KK_SIMD2(__vavgu, (ua + ub + 1) >> 1)
KK_SIMD2(__vhaddu, (ua + ub) >> 1)
KK_SIMD2(__vmaxs, sa > sb ? sa : sb)
KK_SIMD2(__vmaxu, ua > ub ? ua : ub)
KK_SIMD2(__vmins, sa < sb ? sa : sb)
KK_SIMD2(__vminu, ua < ub ? ua : ub)
KK_SIMD2(__vcmpeq, ua == ub ? ~0u : 0u)
KK_SIMD2(__vcmpne, ua != ub ? ~0u : 0u)
KK_SIMD2(__vseteq, ua == ub ? 1u : 0u)
KK_SIMD2(__vsetne, ua != ub ? 1u : 0u)
KK_SIMD_CMP(ge, >=, >=) KK_SIMD_CMP(gt, >, >) KK_SIMD_CMP(le, <=, <=) KK_SIMD_CMP(lt, <, <)
#define KK_SIMD_SAD(NAME, W, EXPR)                                                            \
  static inline unsigned NAME(unsigned a, unsigned b) {                                       \
    return kk_simd_sum<W>(a, b, [](int sa, int sb, unsigned ua, unsigned ub) {                \
      (void)sa; (void)sb; (void)ua; (void)ub; return EXPR;                                    \
    });                                                                                       \
  }
KK_SIMD_SAD(__vsads2, 16, (unsigned)(sa > sb ? sa - sb : sb - sa))
KK_SIMD_SAD(__vsads4, 8, (unsigned)(sa > sb ? sa - sb : sb - sa))
KK_SIMD_SAD(__vsadu2, 16, ua > ub ? ua - ub : ub - ua)
KK_SIMD_SAD(__vsadu4, 8, ua > ub ? ua - ub : ub - ua)
#undef KK_SIMD_SAD
#undef KK_SIMD_CMP
#undef KK_SIMD1
#undef KK_SIMD2
