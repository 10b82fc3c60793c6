// kernelkit CPU backend: libcu++'s cuda::std is the host's C++ library here (<cuda/std/X> is <X>).
#pragma once
namespace cuda {
namespace std = ::std;
}
