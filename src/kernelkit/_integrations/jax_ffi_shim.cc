// kernelkit's XLA FFI handler for the CPU backend (built by jax_ffi.py against the headers that
// jaxlib ships, jax.ffi.include_dir()). XLA hands it the call's buffers; the attributes carry
// everything fixed at trace time: the kernel library's launch entry and fault-text addresses,
// the launch geometry, and the argument pack (CUDA's kernelParams layout) with its constant
// slots (shapes, strides, scalars) filled in and its array slots named by buffer index.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

typedef int (*kk_launch_fn)(void**, long long, long long, long long, long long, long long,
                            long long, long long, int);
typedef const char* (*kk_fault_fn)();

static ffi::Error kk_jax_cpu_launch_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                         uint64_t entry, uint64_t fault_text,
                                         ffi::Span<const int64_t> geometry,
                                         ffi::Span<const int64_t> pack,
                                         ffi::Span<const int64_t> offsets,
                                         ffi::Span<const int64_t> buffers) {
  const size_t n = offsets.size();
  if (buffers.size() != n || geometry.size() != 8 || entry == 0) {
    return ffi::Error::InvalidArgument("kernelkit: malformed launch attributes");
  }
  // One copy of the pack per call: XLA may run this handler on several threads at once.
  std::vector<int64_t> storage(pack.size() + 1);
  if (pack.size()) std::memcpy(storage.data(), &pack[0], pack.size() * sizeof(int64_t));
  char* base = reinterpret_cast<char*>(storage.data());
  std::vector<void*> params(n ? n : 1);
  const int64_t n_args = static_cast<int64_t>(args.size());
  for (size_t i = 0; i < n; ++i) {
    if (offsets[i] < 0 || static_cast<size_t>(offsets[i]) + 8 > pack.size() * sizeof(int64_t)) {
      return ffi::Error::InvalidArgument("kernelkit: argument pack offset out of range");
    }
    params[i] = base + offsets[i];
    const int64_t b = buffers[i];
    if (b < 0) continue;  // a constant slot, already in the pack
    void* data = nullptr;
    if (b < n_args) {
      auto buf = args.get<ffi::AnyBuffer>(b);
      if (!buf.has_value()) return buf.error();
      data = buf->untyped_data();
    } else {
      auto buf = rets.get<ffi::AnyBuffer>(b - n_args);
      if (!buf.has_value()) return buf.error();
      data = (*buf)->untyped_data();
    }
    const uint64_t address = reinterpret_cast<uintptr_t>(data);
    std::memcpy(base + offsets[i], &address, sizeof(address));
  }
  const int status = reinterpret_cast<kk_launch_fn>(entry)(
      params.data(), geometry[0], geometry[1], geometry[2], geometry[3], geometry[4],
      geometry[5], geometry[6], static_cast<int>(geometry[7]));
  if (status != 0) {
    std::string text = fault_text ? reinterpret_cast<kk_fault_fn>(fault_text)() : "";
    return ffi::Error::Internal((status == 1 ? "kernelkit KernelFault: " : "kernelkit: ") + text);
  }
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(kk_jax_cpu_launch, kk_jax_cpu_launch_impl,
                              ffi::Ffi::Bind()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<uint64_t>("entry")
                                  .Attr<uint64_t>("fault_text")
                                  .Attr<ffi::Span<const int64_t>>("geometry")
                                  .Attr<ffi::Span<const int64_t>>("pack")
                                  .Attr<ffi::Span<const int64_t>>("offsets")
                                  .Attr<ffi::Span<const int64_t>>("buffers"));
