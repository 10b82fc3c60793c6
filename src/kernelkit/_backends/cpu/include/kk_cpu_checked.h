// Checked mode: array parameters become kk_checked_ptr<T>, whose element references check the
// index against the array's extent on every read and write. The body is rewritten so that every
// use of an array name records its source line: `out[i]` -> `kk_at(out, __FILE__, __LINE__)[i]`.
#pragma once

[[noreturn]] __attribute__((cold, noinline)) static void kk_oob(const char* what, const char* name,
                                                                 long long idx, long long extent,
                                                                 const char* file, int line) {
  kk_fault_record("out-of-bounds %s '%s' at index %lld (extent %lld) by block (%u,%u,%u) "
                  "thread (%u,%u,%u) at %s:%d",
                  what, name, idx, extent, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x,
                  threadIdx.y, threadIdx.z, file, line);
  throw kk_fault{};
}

template <class T>
struct kk_checked_ptr;

template <class T>
struct kk_ref {  // one element of a checked array: reads and writes are checked separately
  using V = std::remove_const_t<T>;
  T* base;
  long long idx, extent;
  const char* name;
  const char* file;
  int line;

  T* addr(const char* what) const {
    if (__builtin_expect(idx < 0 || idx >= extent, 0)) kk_oob(what, name, idx, extent, file, line);
    return base + idx;
  }
  operator V() const { return *addr("read of"); }
  T* operator&() const { return addr("address of"); }
  template <class U>
  kk_ref& operator=(const U& v) {
    *addr("write to") = (V)v;
    return *this;
  }
  kk_ref& operator=(const kk_ref& o) {
    *addr("write to") = (V)o;
    return *this;
  }
#define KK_REF_OP(op)                       \
  template <class U>                        \
  kk_ref& operator op##=(const U& v) {      \
    V* p = addr("write to");                \
    *p = (V)(*p op v);                      \
    return *this;                           \
  }
  KK_REF_OP(+) KK_REF_OP(-) KK_REF_OP(*) KK_REF_OP(/) KK_REF_OP(%) KK_REF_OP(&) KK_REF_OP(|)
  KK_REF_OP(^) KK_REF_OP(<<) KK_REF_OP(>>)
#undef KK_REF_OP
  kk_ref& operator++() { return *this += 1; }
  kk_ref& operator--() { return *this -= 1; }
  V operator++(int) { V old = *this; *this += 1; return old; }
  V operator--(int) { V old = *this; *this -= 1; return old; }
};

template <class T>
struct kk_value<kk_ref<T>> { using type = std::remove_const_t<T>; };

template <class T>
struct kk_checked_ptr {  // an array parameter (or a pointer derived from it) with its extent
  T* base;
  long long off, extent;
  const char* name;
  const char* file;
  int line;

  operator T*() const { return base + off; }
  template <class I, class = std::enable_if_t<std::is_integral<I>::value>>
  kk_ref<T> operator[](I i) const {
    return kk_ref<T>{base, off + (long long)i, extent, name, file, line};
  }
  kk_ref<T> operator*() const { return kk_ref<T>{base, off, extent, name, file, line}; }
  template <class I, class = std::enable_if_t<std::is_integral<I>::value>>
  kk_checked_ptr operator+(I i) const {
    kk_checked_ptr r = *this;
    r.off += (long long)i;
    return r;
  }
  template <class I, class = std::enable_if_t<std::is_integral<I>::value>>
  kk_checked_ptr operator-(I i) const {
    kk_checked_ptr r = *this;
    r.off -= (long long)i;
    return r;
  }
  template <class I>
  kk_checked_ptr& operator+=(I i) { off += (long long)i; return *this; }
  template <class I>
  kk_checked_ptr& operator-=(I i) { off -= (long long)i; return *this; }
  kk_checked_ptr& operator++() { ++off; return *this; }
  kk_checked_ptr& operator--() { --off; return *this; }
  kk_checked_ptr operator++(int) { kk_checked_ptr r = *this; ++off; return r; }
  kk_checked_ptr operator--(int) { kk_checked_ptr r = *this; --off; return r; }
};
template <class I, class T, class = std::enable_if_t<std::is_integral<I>::value>>
static inline kk_checked_ptr<T> operator+(I i, const kk_checked_ptr<T>& p) { return p + i; }

template <class T>
static inline kk_checked_ptr<T> kk_at(kk_checked_ptr<T> p, const char* file, int line) {
  p.file = file;
  p.line = line;
  return p;
}
template <class T>
static inline T kk_at(T v, const char*, int) {  // a name the rewrite hit that is no array param
  return v;
}

// Atomics through a checked pointer check the element first.
#define KK_CHECKED_ATOMIC(fn)                                             \
  template <class T, class V>                                             \
  static inline std::remove_const_t<T> fn(kk_checked_ptr<T> p, V v) {     \
    return fn(&*p, (std::remove_const_t<T>)v);                            \
  }
KK_CHECKED_ATOMIC(atomicAdd) KK_CHECKED_ATOMIC(atomicSub) KK_CHECKED_ATOMIC(atomicMax)
KK_CHECKED_ATOMIC(atomicMin) KK_CHECKED_ATOMIC(atomicExch) KK_CHECKED_ATOMIC(atomicAnd)
KK_CHECKED_ATOMIC(atomicOr) KK_CHECKED_ATOMIC(atomicXor)
#undef KK_CHECKED_ATOMIC
template <class T, class V>
static inline T atomicCAS(kk_checked_ptr<T> p, V cmp, V v) {
  return atomicCAS(&*p, (T)cmp, (T)v);
}
