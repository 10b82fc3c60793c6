# ruff: noqa: E501, W291 - the kernels are the projects' text, unchanged
"""NVIDIA Apex's fused layer norm forward, ported: NVIDIA/apex, csrc/layer_norm_cuda_kernel.cu at
0028c903c805c12cc4b6b8cc909bb888f3d71319 (BSD-3). ``cuApplyLayerNorm``'s body as shipped, only
the signature removed; ``T`` and ``U`` are ``template=`` types (float/float and double/double,
as the file's launcher instantiates them). ``gamma`` and ``beta`` are optional inputs (the body
tests them against NULL).

The header is the file's device helpers unchanged (cuWelfordOnlineSum, cuChanOnlineSum,
cuWelfordMuSigma2, the rsqrt templates, SharedMemory) and the ``WARP_SHFL`` they call, from
pytorch/pytorch aten/src/THC/THCDeviceUtils.cuh at 02b36935be470b805fcc5d9d00a9320db1ba754e.
One edit: the file's ``cuWelfordMuSigma2`` specialization for ``at::Half`` is left out
(kernelkit's float16 is ``__half``, not ATen's type), so the fp16 path is not ported.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_ports import Port, Ports, close

HEADER = """
#include <cuda.h>

// aten/src/THC/THCDeviceUtils.cuh
template <typename T>
__device__ __forceinline__ T WARP_SHFL(T value, int srcLane, int width = warpSize, unsigned int mask = 0xffffffff)
{
#if CUDA_VERSION >= 9000
    return __shfl_sync(mask, value, srcLane, width);
#else
    return __shfl(value, srcLane, width);
#endif
}

// csrc/layer_norm_cuda_kernel.cu
template<typename U> __device__
void cuWelfordOnlineSum(
  const U curr,
  U& mu,
  U& sigma2,
  U& count)
{
  count = count + U(1);
  U delta = curr - mu;
  U lmean = mu + delta / count;
  mu = lmean;
  U delta2 = curr - lmean;
  sigma2 = sigma2 + delta * delta2;
}

template<typename U> __device__
void cuChanOnlineSum(
  const U muB,
  const U sigma2B,
  const U countB,
  U& mu,
  U& sigma2,
  U& count)
{
  U delta = muB - mu;
  U nA = count;
  U nB = countB;
  count = count + countB;
  U nX = count;
  if (nX > U(0)) {
    nA = nA / nX;
    nB = nB / nX;
    mu = nA*mu + nB*muB;
    sigma2 = sigma2 + sigma2B + delta * delta * nA * nB * nX;
  } else {
    mu = U(0);
    sigma2 = U(0);
  }
}

template<typename T, typename U> __device__
void cuWelfordMuSigma2(
  const T* __restrict__ vals,
  const int n1,
  const int n2,
  U& mu,
  U& sigma2,
  U* buf) 
{
  // Assumptions:
  // 1) blockDim.x == warpSize
  // 2) Tensor is contiguous
  // 3) 2*blockDim.y*sizeof(U)+blockDim.y*sizeof(int) shared memory available.
  //
  // compute variance and mean over n2
  U count = U(0);
  mu= U(0);
  sigma2 = U(0);
  int i1 = blockIdx.y;
  if (i1 < n1) {
    // one warp normalizes one n1 index,
    // synchronization is implicit
    // initialize with standard Welford algorithm
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const T* lvals = vals + i1*n2;
    int l = 4*thrx;
    for (;  l+3 < n2;  l+=4*numx) {
      for (int k = 0;  k < 4;  ++k) {
        U curr = static_cast<U>(lvals[l+k]);
        cuWelfordOnlineSum<U>(curr,mu,sigma2,count);
      }
    }
    for (;  l < n2;  ++l) {
      U curr = static_cast<U>(lvals[l]);
      cuWelfordOnlineSum<U>(curr,mu,sigma2,count);
    }
    // intra-warp reductions
    for (int l = 0;  l <= 4;  ++l) {
      int srcLaneB = (threadIdx.x+(1<<l))&31;
      U muB = WARP_SHFL(mu, srcLaneB);
      U countB = WARP_SHFL(count, srcLaneB);
      U sigma2B = WARP_SHFL(sigma2, srcLaneB);
      cuChanOnlineSum<U>(muB,sigma2B,countB,mu,sigma2,count);
    }
    // threadIdx.x == 0 has correct values for each warp
    // inter-warp reductions
    if (blockDim.y > 1) {
      U* ubuf = (U*)buf;
      U* ibuf = (U*)(ubuf + blockDim.y);
      for (int offset = blockDim.y/2;  offset > 0;  offset /= 2) {
        // upper half of warps write to shared
        if (threadIdx.x == 0 && threadIdx.y >= offset && threadIdx.y < 2*offset) {
          const int wrt_y = threadIdx.y - offset;
          ubuf[2*wrt_y] = mu;
          ubuf[2*wrt_y+1] = sigma2;
          ibuf[wrt_y] = count;
        }
        __syncthreads();
        // lower half merges
        if (threadIdx.x == 0 && threadIdx.y < offset) {
          U muB = ubuf[2*threadIdx.y];
          U sigma2B = ubuf[2*threadIdx.y+1];
          U countB = ibuf[threadIdx.y];
          cuChanOnlineSum<U>(muB,sigma2B,countB,mu,sigma2,count);
        }
        __syncthreads();
      }
      // threadIdx.x = 0 && threadIdx.y == 0 only thread that has correct values
      if (threadIdx.x == 0 && threadIdx.y == 0) {
        ubuf[0] = mu;
        ubuf[1] = sigma2;
      }
      __syncthreads();
      mu = ubuf[0];
      sigma2 = ubuf[1]/U(n2);
      // don't care about final value of count, we know count == n2
    } else {
      mu = WARP_SHFL(mu, 0);
      sigma2 = WARP_SHFL(sigma2/U(n2), 0);
    }
  }
}

template<typename U> U rsqrt(U v) {
  return U(1) / sqrt(v);
}
template<> float rsqrt(float v) {
  return rsqrtf(v);
}
template<> double rsqrt(double v) {
  return rsqrt(v);
}

namespace {
// This is the un-specialized struct.  Note that we prevent instantiation of this
// struct by putting an undefined symbol in the function body so it won't compile.
//  template <typename T>
//  struct SharedMemory
//  {
//      // Ensure that we won't compile any un-specialized types
//      __device__ T *getPointer()
//      {
//          extern __device__ void error(void);
//          error();
//          return NULL;
//      }
//  };
// https://github.com/NVIDIA/apex/issues/246
template <typename T>
struct SharedMemory;

template <>
struct SharedMemory <float>
{
    __device__ float *getPointer()
    {
        extern __shared__ float s_float[];
        return s_float;
    }
};

template <>
struct SharedMemory <double>
{
    __device__ double *getPointer()
    {
        extern __shared__ double s_double[];
        return s_double;
    }
};
}
"""

APPLY_LAYER_NORM = """
  // Assumptions:
  // 1) blockDim.x == warpSize
  // 2) Tensors are contiguous
  //
  int i1 = blockIdx.y;
  if (i1 < n1) {
    SharedMemory<U> shared;
    U* buf = shared.getPointer();
    U mu,sigma2;
    cuWelfordMuSigma2(vals,n1,n2,mu,sigma2,buf);
    const T* lvals = vals + i1*n2;
    T* ovals = output_vals + i1*n2;
    U c_invvar = rsqrt(sigma2 + epsilon);
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    if (gamma != NULL && beta != NULL) {
      for (int i = thrx;  i < n2;  i+=numx) {
        U curr = static_cast<U>(lvals[i]);
        ovals[i] = gamma[i] * static_cast<T>(c_invvar * (curr - mu)) + beta[i];
      }
    } else {
      for (int i = thrx;  i < n2;  i+=numx) {
        U curr = static_cast<U>(lvals[i]);
        ovals[i] = static_cast<T>(c_invvar * (curr - mu));
      }
    }
    if (threadIdx.x == 0 && threadIdx.y == 0) {
      mean[i1] = mu;
      invvar[i1] = c_invvar;
    }
  }
"""

APPLY_LAYER_NORM_PORT = Port(
    "cuApplyLayerNorm", "NVIDIA/apex", "csrc/layer_norm_cuda_kernel.cu",
    "0028c903c805c12cc4b6b8cc909bb888f3d71319",
    ("vals:T*", "n1:i32", "n2:i32", "epsilon:T", "gamma:T*", "beta:T*"),
    ("output_vals:T*", "mean:T*", "invvar:T*"), APPLY_LAYER_NORM, HEADER, ("T", "U"),
    ("float32", "float64"), optional=("gamma", "beta"),
)  # fmt: skip
PORTS = (APPLY_LAYER_NORM_PORT,)
RNG = np.random.default_rng(23)


@pytest.fixture
def ports(backend):
    return Ports(backend)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("n2", "affine"), [(37, True), (1000, False), (3, True)])
def test_cu_apply_layer_norm(ports, dtype, n2, affine):
    n1, eps, warps = 5, 1e-5, 4
    x = ports.round(RNG.standard_normal((n1, n2)) * 3 + 1, dtype)
    gamma = ports.round(RNG.standard_normal(n2), dtype) if affine else None
    beta = ports.round(RNG.standard_normal(n2), dtype) if affine else None
    # HostApplyLayerNorm: threads(32, 4), blocks(1, n1), 3 * threads.y / 2 values of U shared
    itemsize = np.dtype(dtype).itemsize
    y, mean, invvar = ports.run(
        APPLY_LAYER_NORM_PORT, dtype, [x, n1, n2, eps, gamma, beta], [x.shape, (n1,), (n1,)],
        grid=(32, warps * n1, 1), threadgroup=(32, warps, 1),
        shared_memory=(warps + warps // 2) * itemsize,
    )  # fmt: skip
    mu = x.mean(axis=1)
    inv = 1 / np.sqrt(x.var(axis=1) + eps)
    want = (x - mu[:, None]) * inv[:, None]
    if affine:
        want = gamma * want + beta
    close(mean, mu, dtype, scale=16)
    close(invvar, inv, dtype, scale=16)
    close(y, want, dtype, scale=16)
