// kernelkit's XLA FFI handlers, one for XLA's CPU platform and one for CUDA (built by
// jax_shim.py against the headers that jaxlib ships, jax.ffi.include_dir(), with the system C++
// compiler: no CUDA header or library is needed to build or load it). XLA hands a handler the
// call's buffers; the attributes carry everything fixed when the call was lowered: the argument
// pack (CUDA's kernelParams layout) with its constant slots (shapes, strides, scalars) filled in
// and its array slots named by buffer index, the launch geometry, and what to launch: the CPU
// kernel library's launch entry, or the loaded CUfunction of each CUDA context it may run in.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// The kernel's parameters for one call: a copy of the pack (XLA may run a handler on several
// threads at once) with XLA's buffer addresses written into the array slots.
struct Params {
  std::vector<int64_t> storage;
  std::vector<void*> pointers;
};

ffi::Error fill_params(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                       ffi::Span<const int64_t> pack, ffi::Span<const int64_t> offsets,
                       ffi::Span<const int64_t> buffers, Params& out) {
  const size_t n = offsets.size();
  if (buffers.size() != n) {
    return ffi::Error::InvalidArgument("kernelkit: malformed launch attributes");
  }
  out.storage.assign(pack.size() + 1, 0);
  if (pack.size()) std::memcpy(out.storage.data(), &pack[0], pack.size() * sizeof(int64_t));
  char* base = reinterpret_cast<char*>(out.storage.data());
  out.pointers.assign(n ? n : 1, nullptr);
  const int64_t n_args = static_cast<int64_t>(args.size());
  for (size_t i = 0; i < n; ++i) {
    if (offsets[i] < 0 || static_cast<size_t>(offsets[i]) + 8 > pack.size() * sizeof(int64_t)) {
      return ffi::Error::InvalidArgument("kernelkit: argument pack offset out of range");
    }
    out.pointers[i] = base + offsets[i];
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
  return ffi::Error::Success();
}

// ---- CPU: the kernel library's launch entry (kk_cpu_sched.h's) --------------------------------

typedef int (*kk_launch_fn)(void**, long long, long long, long long, long long, long long,
                            long long, long long, int);
typedef const char* (*kk_fault_fn)();

ffi::Error kk_jax_cpu_launch_impl(ffi::RemainingArgs args, ffi::RemainingRets rets,
                                  uint64_t entry, uint64_t fault_text,
                                  ffi::Span<const int64_t> geometry,
                                  ffi::Span<const int64_t> pack,
                                  ffi::Span<const int64_t> offsets,
                                  ffi::Span<const int64_t> buffers) {
  if (geometry.size() != 8 || entry == 0) {
    return ffi::Error::InvalidArgument("kernelkit: malformed launch attributes");
  }
  Params params;
  if (ffi::Error e = fill_params(args, rets, pack, offsets, buffers, params); e.failure()) {
    return e;
  }
  const int status = reinterpret_cast<kk_launch_fn>(entry)(
      params.pointers.data(), geometry[0], geometry[1], geometry[2], geometry[3], geometry[4],
      geometry[5], geometry[6], static_cast<int>(geometry[7]));
  if (status != 0) {
    std::string text = fault_text ? reinterpret_cast<kk_fault_fn>(fault_text)() : "";
    return ffi::Error::Internal((status == 1 ? "kernelkit KernelFault: " : "kernelkit: ") + text);
  }
  return ffi::Error::Success();
}

// ---- CUDA: cuLaunchKernel on XLA's stream ------------------------------------------------------

// The driver's opaque handle types, declared here so that no CUDA header is needed; XLA's stream
// (cudaStream_t) is a CUstream. CUresult is an enum, passed as int.
struct CUstream_st;
struct CUctx_st;
struct CUfunc_st;
typedef CUstream_st* kk_stream;

// The few driver entry points the handler uses, found in libcuda.so.1 on first use (so the shim
// builds and loads on machines without a GPU). Versioned names as cuda.h maps them.
struct CudaDriver {
  int (*launch)(CUfunc_st*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                kk_stream, void**, void**) = nullptr;  // cuLaunchKernel
  int (*error_string)(int, const char**) = nullptr;   // cuGetErrorString
  int (*stream_context)(kk_stream, CUctx_st**) = nullptr;  // cuStreamGetCtx
  int (*current_context)(CUctx_st**) = nullptr;            // cuCtxGetCurrent
  int (*push_context)(CUctx_st*) = nullptr;                // cuCtxPushCurrent_v2
  int (*pop_context)(CUctx_st**) = nullptr;                // cuCtxPopCurrent_v2
  std::string problem;  // why the driver is not usable (empty when it is)
};

template <typename F>
bool find(void* library, const char* name, F& fn, std::string& problem) {
  fn = reinterpret_cast<F>(dlsym(library, name));
  if (fn == nullptr && problem.empty()) problem = std::string("libcuda.so.1 has no ") + name;
  return fn != nullptr;
}

CudaDriver open_driver() {
  CudaDriver d;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    d.problem = std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "");
    return d;
  }
  find(library, "cuLaunchKernel", d.launch, d.problem);
  find(library, "cuGetErrorString", d.error_string, d.problem);
  find(library, "cuStreamGetCtx", d.stream_context, d.problem);
  find(library, "cuCtxGetCurrent", d.current_context, d.problem);
  find(library, "cuCtxPushCurrent_v2", d.push_context, d.problem);
  find(library, "cuCtxPopCurrent_v2", d.pop_context, d.problem);
  return d;
}

const CudaDriver& driver() {
  static const CudaDriver d = open_driver();  // once, thread-safe (a function-local static)
  return d;
}

ffi::Error cuda_error(const CudaDriver& d, int status, const char* call) {
  const char* text = nullptr;
  if (d.error_string == nullptr || d.error_string(status, &text) != 0 || text == nullptr) {
    text = "unknown error";
  }
  return ffi::Error::Internal(std::string("kernelkit: ") + call + " failed: " + text + " (" +
                              std::to_string(status) + ")");
}

// functions[i] is the kernel loaded in CUDA context contexts[i] (one per device the computation
// was lowered for); the one in the context of XLA's stream runs, with that context current.
ffi::Error kk_jax_cuda_launch_impl(kk_stream stream, ffi::RemainingArgs args,
                                   ffi::RemainingRets rets,
                                   ffi::Span<const int64_t> functions,
                                   ffi::Span<const int64_t> contexts,
                                   ffi::Span<const int64_t> geometry,
                                   ffi::Span<const int64_t> pack,
                                   ffi::Span<const int64_t> offsets,
                                   ffi::Span<const int64_t> buffers) {
  const CudaDriver& d = driver();
  if (!d.problem.empty()) return ffi::Error::Internal("kernelkit: " + d.problem);
  if (geometry.size() != 7 || functions.size() != contexts.size() || functions.size() == 0) {
    return ffi::Error::InvalidArgument("kernelkit: malformed launch attributes");
  }
  CUctx_st* context = nullptr;
  if (int s = d.stream_context(stream, &context); s != 0) {
    return cuda_error(d, s, "cuStreamGetCtx");
  }
  CUfunc_st* function = nullptr;
  for (size_t i = 0; i < contexts.size(); ++i) {
    if (static_cast<uint64_t>(contexts[i]) == reinterpret_cast<uintptr_t>(context)) {
      function = reinterpret_cast<CUfunc_st*>(static_cast<uintptr_t>(functions[i]));
    }
  }
  if (function == nullptr) {
    return ffi::Error::Internal(
        "kernelkit: the kernel is not loaded in the CUDA context of XLA's stream (a device "
        "the computation was not lowered for)");
  }
  Params params;
  if (ffi::Error e = fill_params(args, rets, pack, offsets, buffers, params); e.failure()) {
    return e;
  }
  CUctx_st* current = nullptr;
  const bool switch_context = d.current_context(&current) != 0 || current != context;
  if (switch_context) {
    if (int s = d.push_context(context); s != 0) return cuda_error(d, s, "cuCtxPushCurrent");
  }
  const int status = d.launch(
      function, static_cast<unsigned>(geometry[0]), static_cast<unsigned>(geometry[1]),
      static_cast<unsigned>(geometry[2]), static_cast<unsigned>(geometry[3]),
      static_cast<unsigned>(geometry[4]), static_cast<unsigned>(geometry[5]),
      static_cast<unsigned>(geometry[6]), stream, params.pointers.data(), nullptr);
  if (switch_context) {
    CUctx_st* popped = nullptr;
    d.pop_context(&popped);
  }
  if (status != 0) return cuda_error(d, status, "cuLaunchKernel");
  return ffi::Error::Success();
}

}  // namespace

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

XLA_FFI_DEFINE_HANDLER_SYMBOL(kk_jax_cuda_launch, kk_jax_cuda_launch_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<kk_stream>>()
                                  .RemainingArgs()
                                  .RemainingRets()
                                  .Attr<ffi::Span<const int64_t>>("functions")
                                  .Attr<ffi::Span<const int64_t>>("contexts")
                                  .Attr<ffi::Span<const int64_t>>("geometry")
                                  .Attr<ffi::Span<const int64_t>>("pack")
                                  .Attr<ffi::Span<const int64_t>>("offsets")
                                  .Attr<ffi::Span<const int64_t>>("buffers"));
