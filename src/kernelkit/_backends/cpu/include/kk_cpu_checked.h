// Checked mode: array parameters become kk_checked_ptr<T>, whose element accesses check the
// index against the array's extent. The body is rewritten (_source.py) by how each use of an
// array name reads: `out[i]` and `*out` -> `kk_at(out, __FILE__, __LINE__)[i]` (checked, with the
// source line); `out += n`, `++out`, `out = ...` -> `out` (the checked pointer moves);
// `auto p = out + n` -> a checked pointer too; any other use -> `kk_raw(out)`, the plain `T*`
// that unchecked code sees (so templates deduce `T*`, casts and helpers work). Checking never
// changes a result: it only adds faults. Elements of an input (`const T`) are checked when
// indexed and are then plain `const T&`; elements of an output are kk_ref, so that reads and
// writes are told apart.
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
  operator V&() const { return *addr("read of"); }
  T* operator&() const { return addr("address of"); }
  // `(float)y[i]` on a half or bfloat16 array (two conversions: allowed only when spelled out)
  template <class U, class = std::enable_if_t<std::is_arithmetic<U>::value &&
                                              !std::is_arithmetic<V>::value>>
  explicit operator U() const {
    return (U)(V)(*addr("read of"));
  }
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

  using elem = std::conditional_t<std::is_const<T>::value, T&, kk_ref<T>>;

  operator T*() const { return base + off; }
  kk_checked_ptr& operator=(T* p) {  // `x = x + n` (the right side is the plain pointer)
    off = p - base;
    return *this;
  }
  template <class I, class = std::enable_if_t<std::is_integral<I>::value>>
  elem operator[](I i) const { return at(off + (long long)i); }
  elem operator*() const { return at(off); }
  elem at(long long idx) const {
    if constexpr (std::is_const<T>::value) {
      if (__builtin_expect(idx < 0 || idx >= extent, 0))
        kk_oob("read of", name, idx, extent, file, line);
      return base[idx];
    } else {
      return kk_ref<T>{base, idx, extent, name, file, line};
    }
  }
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
static inline kk_checked_ptr<T> kk_at(const kk_checked_ptr<T>& p, const char* file, int line) {
  kk_checked_ptr<T> r = p;
  r.file = file;
  r.line = line;
  return r;
}
template <class T>
static inline kk_checked_ptr<T> kk_at(kk_checked_ptr<T>& p, const char* file, int line) {
  return kk_at(static_cast<const kk_checked_ptr<T>&>(p), file, line);
}
template <class T>
static inline T&& kk_at(T&& v, const char*, int) {  // a local that shadows an array param
  return static_cast<T&&>(v);
}
// The plain pointer, for every use that is not an element access or a move of the pointer.
template <class T>
static inline T* kk_raw(kk_checked_ptr<T>& p) { return p.base + p.off; }
template <class T>
static inline T* kk_raw(const kk_checked_ptr<T>& p) { return p.base + p.off; }
template <class T>
static inline T&& kk_raw(T&& v) { return static_cast<T&&>(v); }  // a shadowing local
