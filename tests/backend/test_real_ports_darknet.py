# ruff: noqa: E501, W293 - the kernels are the projects' text, unchanged
"""Darknet's CUDA kernels, ported: pjreddie/darknet at f6afaabcdf85f77e7aff2ec55c020c0e297c77f9
(public domain), src/activation_kernels.cu and src/blas_kernels.cu. Each body is the kernel as
shipped, only the signature removed; all are float32 (Darknet has no other type).

Edits beyond the signature, as a port must make them: kernelkit passes inputs as ``const float*``,
so a parameter the kernel writes through (``x`` of activate_array_kernel, normalize_kernel,
l2norm_kernel and upsample_kernel's backward, ``output`` of the bias kernels, ``out`` of
shortcut_kernel, ``delta`` of gradient_array_kernel) is declared an output and passed in place,
and softmax_kernel's ``input``, handed to ``softmax_device(float *input, ...)``, is declared an
output too (a const pointer does not convert; the kernel never writes it). ``ACTIVATION a`` is
a by-value ``kernelkit.struct`` of darknet.h's enum. The header holds, unchanged,
include/darknet.h's ``BLOCK`` and ``ACTIVATION``, activation_kernels.cu's device functions and
blas_kernels.cu's ``softmax_device``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from real_ports import Port, Ports, close

COMMIT = "f6afaabcdf85f77e7aff2ec55c020c0e297c77f9"
RNG = np.random.default_rng(11)

DARKNET_H = """
#define BLOCK 512
typedef enum{
    LOGISTIC, RELU, RELIE, LINEAR, RAMP, TANH, PLSE, LEAKY, ELU, LOGGY, STAIR, HARDTAN, LHTAN, SELU
} ACTIVATION;
"""

ACTIVATIONS = """
__device__ float lhtan_activate_kernel(float x)
{
    if(x < 0) return .001f*x;
    if(x > 1) return .001f*(x-1.f) + 1.f;
    return x;
}
__device__ float lhtan_gradient_kernel(float x)
{
    if(x > 0 && x < 1) return 1;
    return .001;
}

__device__ float hardtan_activate_kernel(float x)
{
    if (x < -1) return -1;
    if (x > 1) return 1;
    return x;
}
__device__ float linear_activate_kernel(float x){return x;}
__device__ float logistic_activate_kernel(float x){return 1.f/(1.f + expf(-x));}
__device__ float loggy_activate_kernel(float x){return 2.f/(1.f + expf(-x)) - 1;}
__device__ float relu_activate_kernel(float x){return x*(x>0);}
__device__ float elu_activate_kernel(float x){return (x >= 0)*x + (x < 0)*(expf(x)-1);}
__device__ float selu_activate_kernel(float x){return (x >= 0)*1.0507f*x + (x < 0)*1.0507f*1.6732f*(expf(x)-1);}
__device__ float relie_activate_kernel(float x){return (x>0) ? x : .01f*x;}
__device__ float ramp_activate_kernel(float x){return x*(x>0)+.1f*x;}
__device__ float leaky_activate_kernel(float x){return (x>0) ? x : .1f*x;}
__device__ float tanh_activate_kernel(float x){return (2.f/(1 + expf(-2*x)) - 1);}
__device__ float plse_activate_kernel(float x)
{
    if(x < -4) return .01f * (x + 4);
    if(x > 4)  return .01f * (x - 4) + 1;
    return .125f*x + .5f;
}
__device__ float stair_activate_kernel(float x)
{
    int n = floorf(x);
    if (n%2 == 0) return floorf(x/2);
    else return (x - n) + floorf(x/2);
}
 

__device__ float hardtan_gradient_kernel(float x)
{
    if (x > -1 && x < 1) return 1;
    return 0;
}
__device__ float linear_gradient_kernel(float x){return 1;}
__device__ float logistic_gradient_kernel(float x){return (1-x)*x;}
__device__ float loggy_gradient_kernel(float x)
{
    float y = (x+1)/2;
    return 2*(1-y)*y;
}
__device__ float relu_gradient_kernel(float x){return (x>0);}
__device__ float elu_gradient_kernel(float x){return (x >= 0) + (x < 0)*(x + 1);}
__device__ float selu_gradient_kernel(float x){return (x >= 0)*1.0507 + (x < 0)*(x + 1.0507*1.6732);}
__device__ float relie_gradient_kernel(float x){return (x>0) ? 1 : .01f;}
__device__ float ramp_gradient_kernel(float x){return (x>0)+.1f;}
__device__ float leaky_gradient_kernel(float x){return (x>0) ? 1 : .1f;}
__device__ float tanh_gradient_kernel(float x){return 1-x*x;}
__device__ float plse_gradient_kernel(float x){return (x < 0 || x > 1) ? .01f : .125f;}
__device__ float stair_gradient_kernel(float x)
{
    if (floorf(x) == x) return 0;
    return 1;
}

__device__ float activate_kernel(float x, ACTIVATION a)
{
    switch(a){
        case LINEAR:
            return linear_activate_kernel(x);
        case LOGISTIC:
            return logistic_activate_kernel(x);
        case LOGGY:
            return loggy_activate_kernel(x);
        case RELU:
            return relu_activate_kernel(x);
        case ELU:
            return elu_activate_kernel(x);
        case SELU:
            return selu_activate_kernel(x);
        case RELIE:
            return relie_activate_kernel(x);
        case RAMP:
            return ramp_activate_kernel(x);
        case LEAKY:
            return leaky_activate_kernel(x);
        case TANH:
            return tanh_activate_kernel(x);
        case PLSE:
            return plse_activate_kernel(x);
        case STAIR:
            return stair_activate_kernel(x);
        case HARDTAN:
            return hardtan_activate_kernel(x);
        case LHTAN:
            return lhtan_activate_kernel(x);
    }
    return 0;
}

__device__ float gradient_kernel(float x, ACTIVATION a)
{
    switch(a){
        case LINEAR:
            return linear_gradient_kernel(x);
        case LOGISTIC:
            return logistic_gradient_kernel(x);
        case LOGGY:
            return loggy_gradient_kernel(x);
        case RELU:
            return relu_gradient_kernel(x);
        case ELU:
            return elu_gradient_kernel(x);
        case SELU:
            return selu_gradient_kernel(x);
        case RELIE:
            return relie_gradient_kernel(x);
        case RAMP:
            return ramp_gradient_kernel(x);
        case LEAKY:
            return leaky_gradient_kernel(x);
        case TANH:
            return tanh_gradient_kernel(x);
        case PLSE:
            return plse_gradient_kernel(x);
        case STAIR:
            return stair_gradient_kernel(x);
        case HARDTAN:
            return hardtan_gradient_kernel(x);
        case LHTAN:
            return lhtan_gradient_kernel(x);
    }
    return 0;
}
"""

SOFTMAX_DEVICE = """
__device__ void softmax_device(float *input, int n, float temp, int stride, float *output)
{
    int i;
    float sum = 0;
    float largest = -INFINITY;
    for(i = 0; i < n; ++i){
        int val = input[i*stride];
        largest = (val>largest) ? val : largest;
    }
    for(i = 0; i < n; ++i){
        float e = expf(input[i*stride]/temp - largest/temp);
        sum += e;
        output[i*stride] = e;
    }
    for(i = 0; i < n; ++i){
        output[i*stride] /= sum;
    }
}
"""

ACTIVATE_ARRAY = """
    int i = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if(i < n) x[i] = activate_kernel(x[i], a);
"""

GRADIENT_ARRAY = """
    int i = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if(i < n) delta[i] *= gradient_kernel(x[i], a);
"""

SCALE_BIAS = """
    int offset = blockIdx.x * blockDim.x + threadIdx.x;
    int filter = blockIdx.y;
    int batch = blockIdx.z;

    if(offset < size) output[(batch*n+filter)*size + offset] *= biases[filter];
"""

ADD_BIAS = """
    int index = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (index >= n*size*batch) return;
    int i = index % size;
    index /= size;
    int j = index % n;
    index /= n;
    int k = index;

    output[(k*n+j)*size + i] += biases[j];
"""

FAST_MEAN = """
    const int threads = BLOCK;
    __shared__ float local[threads];

    int id = threadIdx.x;
    local[id] = 0;

    int filter = blockIdx.x;

    int i, j;
    for(j = 0; j < batch; ++j){
        for(i = 0; i < spatial; i += threads){
            int index = j*spatial*filters + filter*spatial + i + id;
            local[id] += (i+id < spatial) ? x[index] : 0;
        }
    }

    __syncthreads();

    if(id == 0){
        mean[filter] = 0;
        for(i = 0; i < threads; ++i){
            mean[filter] += local[i];
        }
        mean[filter] /= spatial * batch;
    }
"""

FAST_VARIANCE = """
    const int threads = BLOCK;
    __shared__ float local[threads];

    int id = threadIdx.x;
    local[id] = 0;

    int filter = blockIdx.x;

    int i, j;
    for(j = 0; j < batch; ++j){
        for(i = 0; i < spatial; i += threads){
            int index = j*spatial*filters + filter*spatial + i + id;

            local[id] += (i+id < spatial) ? powf((x[index] - mean[filter]), 2) : 0;
        }
    }

    __syncthreads();

    if(id == 0){
        variance[filter] = 0;
        for(i = 0; i < threads; ++i){
            variance[filter] += local[i];
        }
        variance[filter] /= (spatial * batch - 1);
    }
"""

NORMALIZE = """
    int index = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (index >= N) return;
    int f = (index/spatial)%filters;
    
    x[index] = (x[index] - mean[f])/(sqrtf(variance[f] + .00001f));
"""

L2NORM = r"""
    int index = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (index >= N) return;
    int b = index / spatial;
    int i = index % spatial;
    int f;
    float sum = 0;
    for(f = 0; f < filters; ++f){
        int index = b*filters*spatial + f*spatial + i;
        sum += powf(x[index], 2);
    }
    sum = sqrtf(sum);
    if(sum == 0) sum = 1;
    //printf("%f\n", sum);
    for(f = 0; f < filters; ++f){
        int index = b*filters*spatial + f*spatial + i;
        x[index] /= sum;
        dx[index] = (1 - x[index]) / sum;
    }
"""

SOFTMAX = """
    int id = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (id >= batch*groups) return;
    int b = id / groups;
    int g = id % groups;
    softmax_device(input + b*batch_offset + g*group_offset, n, temp, stride, output + b*batch_offset + g*group_offset);
"""

UPSAMPLE = """
    size_t i = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if(i >= N) return;
    int out_index = i;
    int out_w = i%(w*stride);
    i = i/(w*stride);
    int out_h = i%(h*stride);
    i = i/(h*stride);
    int out_c = i%c;
    i = i/c;
    int b = i%batch;

    int in_w = out_w / stride;
    int in_h = out_h / stride;
    int in_c = out_c;

    int in_index = b*w*h*c + in_c*w*h + in_h*w + in_w;


    if(forward) out[out_index] += scale * x[in_index];
    else atomicAdd(x+in_index, scale * out[out_index]);
"""

SHORTCUT = """
    int id = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if (id >= size) return;
    int i = id % minw;
    id /= minw;
    int j = id % minh;
    id /= minh;
    int k = id % minc;
    id /= minc;
    int b = id % batch;

    int out_index = i*sample + w2*(j*sample + h2*(k + c2*b));
    int add_index = i*stride + w1*(j*stride + h1*(k + c1*b));
    out[out_index] = s1*out[out_index] + s2*add[add_index];
    //out[out_index] += add[add_index];
"""

SMOOTH_L1 = """
    int i = (blockIdx.x + blockIdx.y*gridDim.x) * blockDim.x + threadIdx.x;
    if(i < n){
        float diff = truth[i] - pred[i];
        float abs_val = fabsf(diff);
        if(abs_val < 1) {
            error[i] = diff * diff;
            delta[i] = diff;
        }
        else {
            error[i] = 2*abs_val - 1;
            delta[i] = (diff > 0) ? 1 : -1;
        }
    }
"""


def port(name, path, inputs, outputs, body, header=DARKNET_H, **kw):
    return Port(name, "pjreddie/darknet", path, COMMIT, inputs, outputs, body, header, **kw)


ACT = "src/activation_kernels.cu"
BLAS = "src/blas_kernels.cu"
ACT_HEADER = DARKNET_H + ACTIVATIONS
ACTIVATION = (("a", "ACTIVATION", 4),)
ACTIVATE_ARRAY_PORT = port(
    "activate_array_kernel", ACT, ("n:i32", "a:struct"), ("x:f32*",), ACTIVATE_ARRAY,
    ACT_HEADER, structs=ACTIVATION,
)  # fmt: skip
GRADIENT_ARRAY_PORT = port(
    "gradient_array_kernel", ACT, ("x:f32*", "n:i32", "a:struct"), ("delta:f32*",),
    GRADIENT_ARRAY, ACT_HEADER, structs=ACTIVATION,
)  # fmt: skip
SCALE_BIAS_PORT = port(
    "scale_bias_kernel", BLAS, ("biases:f32*", "n:i32", "size:i32"), ("output:f32*",), SCALE_BIAS
)
ADD_BIAS_PORT = port(
    "add_bias_kernel", BLAS, ("biases:f32*", "batch:i32", "n:i32", "size:i32"), ("output:f32*",),
    ADD_BIAS,
)  # fmt: skip
BFS = ("batch:i32", "filters:i32", "spatial:i32")
FAST_MEAN_PORT = port("fast_mean_kernel", BLAS, ("x:f32*", *BFS), ("mean:f32*",), FAST_MEAN)
FAST_VARIANCE_PORT = port(
    "fast_variance_kernel", BLAS, ("x:f32*", "mean:f32*", *BFS), ("variance:f32*",), FAST_VARIANCE
)
NORMALIZE_PORT = port(
    "normalize_kernel", BLAS, ("N:i32", "mean:f32*", "variance:f32*", *BFS), ("x:f32*",),
    NORMALIZE,
)  # fmt: skip
L2NORM_PORT = port("l2norm_kernel", BLAS, ("N:i32", *BFS), ("x:f32*", "dx:f32*"), L2NORM)
SOFTMAX_PORT = port(
    "softmax_kernel", BLAS,
    ("n:i32", "batch:i32", "batch_offset:i32", "groups:i32", "group_offset:i32", "stride:i32",
     "temp:f32"),
    ("input:f32*", "output:f32*"), SOFTMAX, DARKNET_H + SOFTMAX_DEVICE,
)  # fmt: skip
UPSAMPLE_PORT = port(
    "upsample_kernel", BLAS,
    ("N:u64", "w:i32", "h:i32", "c:i32", "batch:i32", "stride:i32", "forward:i32", "scale:f32"),
    ("x:f32*", "out:f32*"), UPSAMPLE,
)  # fmt: skip
SHORTCUT_PORT = port(
    "shortcut_kernel", BLAS,
    ("size:i32", "minw:i32", "minh:i32", "minc:i32", "stride:i32", "sample:i32", "batch:i32",
     "w1:i32", "h1:i32", "c1:i32", "add:f32*", "w2:i32", "h2:i32", "c2:i32", "s1:f32", "s2:f32"),
    ("out:f32*",), SHORTCUT,
)  # fmt: skip
SMOOTH_L1_PORT = port(
    "smooth_l1_kernel", BLAS, ("n:i32", "pred:f32*", "truth:f32*"), ("delta:f32*", "error:f32*"),
    SMOOTH_L1,
)  # fmt: skip

PORTS = (
    ACTIVATE_ARRAY_PORT, GRADIENT_ARRAY_PORT, SCALE_BIAS_PORT, ADD_BIAS_PORT, FAST_MEAN_PORT,
    FAST_VARIANCE_PORT, NORMALIZE_PORT, L2NORM_PORT, SOFTMAX_PORT, UPSAMPLE_PORT, SHORTCUT_PORT,
    SMOOTH_L1_PORT,
)  # fmt: skip
F = "float32"


def blocks(n):
    """cuda_gridsize(n) with BLOCK threads (one grid row while n fits)."""
    return {"grid": (-(-n // 512) * 512, 1, 1), "threadgroup": (512, 1, 1)}


@pytest.fixture
def ports(backend):
    return Ports(backend)


def _activations(x):
    with np.errstate(over="ignore"):
        e = np.exp(x)
        n = np.floor(x)
        return {
            "LOGISTIC": 1 / (1 + np.exp(-x)),
            "RELU": x * (x > 0),
            "LEAKY": np.where(x > 0, x, 0.1 * x),
            "ELU": np.where(x >= 0, x, e - 1),
            "SELU": np.where(x >= 0, 1.0507 * x, 1.0507 * 1.6732 * (e - 1)),
            "PLSE": np.where(
                x < -4, 0.01 * (x + 4), np.where(x > 4, 0.01 * (x - 4) + 1, 0.125 * x + 0.5)
            ),
            "STAIR": np.where(n % 2 == 0, np.floor(x / 2), (x - n) + np.floor(x / 2)),
            "LHTAN": np.where(x < 0, 0.001 * x, np.where(x > 1, 0.001 * (x - 1) + 1, x)),
            "TANH": np.tanh(x),
        }


ORDER = "LOGISTIC RELU RELIE LINEAR RAMP TANH PLSE LEAKY ELU LOGGY STAIR HARDTAN LHTAN SELU".split()
GRADIENTS = {
    "LOGISTIC": lambda y: (1 - y) * y,
    "RELU": lambda y: (y > 0) * 1.0,
    "LEAKY": lambda y: np.where(y > 0, 1, 0.1),
    "TANH": lambda y: 1 - y * y,
    "PLSE": lambda y: np.where((y < 0) | (y > 1), 0.01, 0.125),
}


@pytest.mark.parametrize(
    "act", ["LOGISTIC", "RELU", "LEAKY", "ELU", "SELU", "PLSE", "STAIR", "LHTAN", "TANH"]
)
def test_activate_array(ports, act):
    x = ports.round(3 * RNG.standard_normal(1037), F)
    a = np.int32(ORDER.index(act)).tobytes()
    (y,) = ports.run(ACTIVATE_ARRAY_PORT, F, [x.size, a], [x], **blocks(x.size))
    close(y, _activations(x)[act], F)


@pytest.mark.parametrize("act", sorted(GRADIENTS))
def test_gradient_array(ports, act):
    y = ports.round(RNG.uniform(-1.5, 1.5, 777), F)
    d = ports.round(RNG.standard_normal(777), F)
    a = np.int32(ORDER.index(act)).tobytes()
    (got,) = ports.run(GRADIENT_ARRAY_PORT, F, [y, y.size, a], [d], **blocks(y.size))
    close(got, d * GRADIENTS[act](y), F)


def test_scale_and_add_bias(ports):
    batch, n, size = 3, 5, 71
    out = ports.round(RNG.standard_normal((batch, n, size)), F)
    b = ports.round(RNG.standard_normal(n), F)
    # scale_bias_gpu: dim3 dimGrid((size-1)/BLOCK + 1, n, batch), BLOCK threads
    (got,) = ports.run(
        SCALE_BIAS_PORT, F, [b, n, size], [out], grid=(512, n, batch), threadgroup=(512, 1, 1)
    )
    close(got, out * b[:, None], F)
    (got,) = ports.run(ADD_BIAS_PORT, F, [b, batch, n, size], [out], **blocks(out.size))
    close(got, out + b[:, None], F)


def test_fast_mean_variance_normalize(ports):
    batch, filters, spatial = 2, 3, 1300  # spatial past BLOCK: each thread sums several
    x = ports.round(RNG.standard_normal((batch, filters, spatial)) + 2, F)
    geo = {"grid": (512 * filters, 1, 1), "threadgroup": (512, 1, 1)}  # a block per filter
    (mean,) = ports.run(FAST_MEAN_PORT, F, [x, batch, filters, spatial], [(filters,)], **geo)
    close(mean, x.mean(axis=(0, 2)), F)
    mean32 = ports.round(mean, F)
    (var,) = ports.run(
        FAST_VARIANCE_PORT, F, [x, mean32, batch, filters, spatial], [(filters,)], **geo
    )
    close(var, ((x - mean32[:, None]) ** 2).sum(axis=(0, 2)) / (batch * spatial - 1), F)
    var32 = ports.round(var, F)
    (y,) = ports.run(
        NORMALIZE_PORT, F, [x.size, mean32, var32, batch, filters, spatial], [x], **blocks(x.size)
    )
    close(y, (x - mean32[:, None]) / np.sqrt(var32[:, None] + 1e-5), F)


def test_l2norm(ports):
    batch, filters, spatial = 3, 7, 45
    x = ports.round(RNG.standard_normal((batch, filters, spatial)), F)
    x[0, :, 0] = 0  # a zero column: Darknet divides by 1
    n = batch * spatial
    y, dx = ports.run(L2NORM_PORT, F, [n, batch, filters, spatial], [x, x.shape], **blocks(n))
    s = np.sqrt((x * x).sum(axis=1, keepdims=True))
    s[s == 0] = 1
    close(y, x / s, F)
    close(dx, (1 - x / s) / s, F)


def test_softmax(ports):
    """softmax_device truncates each value to int while it looks for the largest
    (``int val = input[i*stride];``): the reference does too."""
    batch, groups, n, temp = 3, 4, 37, 0.7
    x = ports.round(3 * RNG.standard_normal((batch, groups, n)), F)
    args = [n, batch, groups * n, groups, n, 1, temp]
    inp, y = ports.run(SOFTMAX_PORT, F, args, [x, x.shape], **blocks(batch * groups))
    largest = np.maximum(np.trunc(x).max(axis=-1, keepdims=True), -np.inf)
    e = np.exp(x / np.float32(temp) - largest / np.float32(temp))
    close(y, e / e.sum(axis=-1, keepdims=True), F)
    np.testing.assert_array_equal(inp, x)


@pytest.mark.parametrize("forward", [1, 0])
def test_upsample(ports, forward):
    batch, c, h, w, stride, scale = 2, 3, 5, 7, 2, 0.5
    x = ports.round(RNG.standard_normal((batch, c, h, w)), F)
    out = ports.round(RNG.standard_normal((batch, c, h * stride, w * stride)), F)
    args = [out.size, w, h, c, batch, stride, forward, scale]
    gx, gout = ports.run(UPSAMPLE_PORT, F, args, [x, out], **blocks(out.size))
    if forward:
        close(gout, out + scale * x.repeat(stride, axis=2).repeat(stride, axis=3), F)
        np.testing.assert_array_equal(gx, x)
    else:  # atomicAdd of each output's share back onto its input
        pooled = out.reshape(batch, c, h, stride, w, stride).sum(axis=(3, 5))
        close(gx, x + scale * pooled, F)
        np.testing.assert_array_equal(gout, out)


@pytest.mark.parametrize(("w1", "w2"), [(12, 6), (5, 10), (9, 9)])
def test_shortcut(ports, w1, w2):
    batch, c1, c2, s1, s2 = 2, 3, 5, 0.75, 1.5
    add = ports.round(RNG.standard_normal((batch, c1, w1, w1)), F)
    out = ports.round(RNG.standard_normal((batch, c2, w2, w2)), F)
    minw, minc = min(w1, w2), min(c1, c2)
    stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
    size = batch * minw * minw * minc
    args = [size, minw, minw, minc, stride, sample, batch, w1, w1, c1, add, w2, w2, c2, s1, s2]
    (got,) = ports.run(SHORTCUT_PORT, F, args, [out], **blocks(size))
    want = out.copy()
    src = add[:, :minc, : minw * stride : stride, : minw * stride : stride]
    dst = (
        slice(None),
        slice(0, minc),
        slice(0, minw * sample, sample),
        slice(0, minw * sample, sample),
    )
    want[dst] = s1 * out[dst] + s2 * src
    close(got, want, F)


def test_smooth_l1(ports):
    pred = ports.round(2 * RNG.standard_normal(999), F)
    truth = ports.round(2 * RNG.standard_normal(999), F)
    delta, err = ports.run(
        SMOOTH_L1_PORT, F, [pred.size, pred, truth], [pred.shape, pred.shape], **blocks(999)
    )
    diff = truth - pred
    small = np.abs(diff) < 1
    close(err, np.where(small, diff * diff, 2 * np.abs(diff) - 1), F)
    close(delta, np.where(small, diff, np.sign(diff)), F)
    assert math.isfinite(err.sum())
