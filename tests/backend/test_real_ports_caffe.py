"""Caffe's CUDA kernels, ported: BVLC/caffe at 9b891540183ddc834a02b2bd81b31afae71b2153 (BSD-2).
Each body is the file's kernel as shipped, only the signature removed; ``Dtype`` (the class
template parameter) is a ``template=`` type, run at float and double as Caffe instantiates them.
``HEADER`` is what the bodies use from include/caffe/util/device_alternate.hpp
(``CUDA_KERNEL_LOOP``) and the files' own ``#include <cfloat>``, copied unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from real_ports import Port, Ports, close

COMMIT = "9b891540183ddc834a02b2bd81b31afae71b2153"
RNG = np.random.default_rng(9)
DTYPES = ("float32", "float64")

HEADER = """
#include <algorithm>
#include <cfloat>

// CUDA: grid stride looping
#define CUDA_KERNEL_LOOP(i, n) \\
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; \\
       i < (n); \\
       i += blockDim.x * gridDim.x)
"""

IM2COL = """
  CUDA_KERNEL_LOOP(index, n) {
    const int h_index = index / width_col;
    const int h_col = h_index % height_col;
    const int w_col = index % width_col;
    const int c_im = h_index / height_col;
    const int c_col = c_im * kernel_h * kernel_w;
    const int h_offset = h_col * stride_h - pad_h;
    const int w_offset = w_col * stride_w - pad_w;
    Dtype* data_col_ptr = data_col;
    data_col_ptr += (c_col * height_col + h_col) * width_col + w_col;
    const Dtype* data_im_ptr = data_im;
    data_im_ptr += (c_im * height + h_offset) * width + w_offset;
    for (int i = 0; i < kernel_h; ++i) {
      for (int j = 0; j < kernel_w; ++j) {
        int h_im = h_offset + i * dilation_h;
        int w_im = w_offset + j * dilation_w;
        *data_col_ptr =
            (h_im >= 0 && w_im >= 0 && h_im < height && w_im < width) ?
            data_im_ptr[i * dilation_h * width + j * dilation_w] : 0;
        data_col_ptr += height_col * width_col;
      }
    }
  }
"""

COL2IM = """
  CUDA_KERNEL_LOOP(index, n) {
    Dtype val = 0;
    const int w_im = index % width + pad_w;
    const int h_im = (index / width) % height + pad_h;
    const int c_im = index / (width * height);
    int kernel_extent_w = (kernel_w - 1) * dilation_w + 1;
    int kernel_extent_h = (kernel_h - 1) * dilation_h + 1;
    // compute the start and end of the output
    const int w_col_start =
        (w_im < kernel_extent_w) ? 0 : (w_im - kernel_extent_w) / stride_w + 1;
    const int w_col_end = min(w_im / stride_w + 1, width_col);
    const int h_col_start =
        (h_im < kernel_extent_h) ? 0 : (h_im - kernel_extent_h) / stride_h + 1;
    const int h_col_end = min(h_im / stride_h + 1, height_col);
    // TODO: use LCM of stride and dilation to avoid unnecessary loops
    for (int h_col = h_col_start; h_col < h_col_end; h_col += 1) {
      for (int w_col = w_col_start; w_col < w_col_end; w_col += 1) {
        int h_k = (h_im - h_col * stride_h);
        int w_k = (w_im - w_col * stride_w);
        if (h_k % dilation_h == 0 && w_k % dilation_w == 0) {
          h_k /= dilation_h;
          w_k /= dilation_w;
          int data_col_index = (((c_im * kernel_h + h_k) * kernel_w + w_k) *
                                height_col + h_col) * width_col + w_col;
          val += data_col[data_col_index];
        }
      }
    }
    data_im[index] = val;
  }
"""

RELU = """
  CUDA_KERNEL_LOOP(index, n) {
    out[index] = in[index] > 0 ? in[index] : in[index] * negative_slope;
  }
"""

CHANNEL_MAX = """
  CUDA_KERNEL_LOOP(index, num * spatial_dim) {
    int n = index / spatial_dim;
    int s = index % spatial_dim;
    Dtype maxval = -FLT_MAX;
    for (int c = 0; c < channels; ++c) {
      maxval = max(data[(n * channels + c) * spatial_dim + s], maxval);
    }
    out[index] = maxval;
  }
"""

CHANNEL_SUBTRACT = """
  CUDA_KERNEL_LOOP(index, count) {
    int n = index / channels / spatial_dim;
    int s = index % spatial_dim;
    data[index] -= channel_max[n * spatial_dim + s];
  }
"""

KERNEL_EXP = """
  CUDA_KERNEL_LOOP(index, count) {
    out[index] = exp(data[index]);
  }
"""

CHANNEL_SUM = """
  CUDA_KERNEL_LOOP(index, num * spatial_dim) {
    int n = index / spatial_dim;
    int s = index % spatial_dim;
    Dtype sum = 0;
    for (int c = 0; c < channels; ++c) {
      sum += data[(n * channels + c) * spatial_dim + s];
    }
    channel_sum[index] = sum;
  }
"""

CHANNEL_DIV = """
  CUDA_KERNEL_LOOP(index, count) {
    int n = index / channels / spatial_dim;
    int s = index % spatial_dim;
    data[index] /= channel_sum[n * spatial_dim + s];
  }
"""

MAX_POOL = """
  CUDA_KERNEL_LOOP(index, nthreads) {
    const int pw = index % pooled_width;
    const int ph = (index / pooled_width) % pooled_height;
    const int c = (index / pooled_width / pooled_height) % channels;
    const int n = index / pooled_width / pooled_height / channels;
    int hstart = ph * stride_h - pad_h;
    int wstart = pw * stride_w - pad_w;
    const int hend = min(hstart + kernel_h, height);
    const int wend = min(wstart + kernel_w, width);
    hstart = max(hstart, 0);
    wstart = max(wstart, 0);
    Dtype maxval = -FLT_MAX;
    int maxidx = -1;
    const Dtype* const bottom_slice =
        bottom_data + (n * channels + c) * height * width;
    for (int h = hstart; h < hend; ++h) {
      for (int w = wstart; w < wend; ++w) {
        if (bottom_slice[h * width + w] > maxval) {
          maxidx = h * width + w;
          maxval = bottom_slice[maxidx];
        }
      }
    }
    top_data[index] = maxval;
    if (mask) {
      mask[index] = maxidx;
    } else {
      top_mask[index] = maxidx;
    }
  }
"""


def port(name, path, inputs, outputs, body):
    return Port(name, "BVLC/caffe", path, COMMIT, inputs, outputs, body, HEADER, ("Dtype",), DTYPES)


CONV = (
    "height:i32", "width:i32", "kernel_h:i32", "kernel_w:i32", "pad_h:i32", "pad_w:i32",
    "stride_h:i32", "stride_w:i32", "dilation_h:i32", "dilation_w:i32",
    "height_col:i32", "width_col:i32",
)  # fmt: skip
IM2COL_PORT = port(
    "im2col_gpu_kernel", "src/caffe/util/im2col.cu",
    ("n:i32", "data_im:T*", *CONV), ("data_col:T*",), IM2COL,
)  # fmt: skip
COL2IM_PORT = port(
    "col2im_gpu_kernel", "src/caffe/util/im2col.cu",
    ("n:i32", "data_col:T*", "height:i32", "width:i32", "channels:i32", *CONV[2:]),
    ("data_im:T*",), COL2IM,
)  # fmt: skip
RELU_PORT = port(
    "ReLUForward", "src/caffe/layers/relu_layer.cu",
    ("n:i32", "in:T*", "negative_slope:T"), ("out:T*",), RELU,
)  # fmt: skip
SOFTMAX = "src/caffe/layers/softmax_layer.cu"
DIMS = ("num:i32", "channels:i32", "spatial_dim:i32")
CHANNEL_MAX_PORT = port("kernel_channel_max", SOFTMAX, (*DIMS, "data:T*"), ("out:T*",), CHANNEL_MAX)
CHANNEL_SUBTRACT_PORT = port(
    "kernel_channel_subtract", SOFTMAX, ("count:i32", *DIMS, "channel_max:T*"), ("data:T*",),
    CHANNEL_SUBTRACT,
)  # fmt: skip
KERNEL_EXP_PORT = port("kernel_exp", SOFTMAX, ("count:i32", "data:T*"), ("out:T*",), KERNEL_EXP)
CHANNEL_SUM_PORT = port(
    "kernel_channel_sum", SOFTMAX, (*DIMS, "data:T*"), ("channel_sum:T*",), CHANNEL_SUM
)
CHANNEL_DIV_PORT = port(
    "kernel_channel_div", SOFTMAX, ("count:i32", *DIMS, "channel_sum:T*"), ("data:T*",),
    CHANNEL_DIV,
)  # fmt: skip
POOL = (
    "num:i32", "channels:i32", "height:i32", "width:i32", "pooled_height:i32",
    "pooled_width:i32", "kernel_h:i32", "kernel_w:i32", "stride_h:i32", "stride_w:i32",
    "pad_h:i32", "pad_w:i32",
)  # fmt: skip
MAX_POOL_PORT = port(
    "MaxPoolForward", "src/caffe/layers/pooling_layer.cu",
    ("nthreads:i32", "bottom_data:T*", *POOL), ("top_data:T*", "mask:i32*", "top_mask:T*"),
    MAX_POOL,
)  # fmt: skip

PORTS = (
    IM2COL_PORT, COL2IM_PORT, RELU_PORT, CHANNEL_MAX_PORT, CHANNEL_SUBTRACT_PORT,
    KERNEL_EXP_PORT, CHANNEL_SUM_PORT, CHANNEL_DIV_PORT, MAX_POOL_PORT,
)  # fmt: skip
# fewer threads than items: the loop strides
LOOP = {"grid": (256, 1, 1), "threadgroup": (128, 1, 1)}


@pytest.fixture
def ports(backend):
    return Ports(backend)


def _im2col_ref(im, kh, kw, ph, pw, sh, sw, dh, dw):
    c, h, w = im.shape
    hc = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    wc = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    padded = np.pad(im, ((0, 0), (ph, ph), (pw, pw)))
    col = np.zeros((c, kh, kw, hc, wc))
    for i in range(kh):
        for j in range(kw):
            col[:, i, j] = padded[:, i * dh : i * dh + sh * hc : sh, j * dw : j * dw + sw * wc : sw]
    return col, hc, wc


GEOMETRY = [(3, 7, 9, 3, 2, 1, 0, 2, 1, 1, 2), (2, 11, 5, 5, 3, 2, 1, 1, 3, 2, 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", GEOMETRY)
def test_im2col_and_col2im(ports, dtype, geom):
    c, h, w, kh, kw, ph, pw, sh, sw, dh, dw = geom
    im = ports.round(RNG.standard_normal((c, h, w)), dtype)
    col, hc, wc = _im2col_ref(im, kh, kw, ph, pw, sh, sw, dh, dw)
    conv = [kh, kw, ph, pw, sh, sw, dh, dw, hc, wc]
    (got,) = ports.run(IM2COL_PORT, dtype, [c * hc * wc, im, h, w, *conv], [col.shape], **LOOP)
    np.testing.assert_array_equal(got, col)
    # col2im sums every column entry back onto its pixel: the adjoint of im2col
    cols = ports.round(RNG.standard_normal(col.shape), dtype)
    want = np.zeros((c, h + 2 * ph, w + 2 * pw))
    for i in range(kh):
        for j in range(kw):
            want[:, i * dh : i * dh + sh * hc : sh, j * dw : j * dw + sw * wc : sw] += cols[:, i, j]
    want = want[:, ph : ph + h, pw : pw + w]
    (got,) = ports.run(COL2IM_PORT, dtype, [c * h * w, cols, h, w, c, *conv], [im.shape], **LOOP)
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_relu_forward(ports, dtype):
    x = ports.round(RNG.standard_normal(1001), dtype)
    (got,) = ports.run(RELU_PORT, dtype, [x.size, x, 0.125], [x.shape], **LOOP)
    np.testing.assert_array_equal(got, np.where(x > 0, x, x * 0.125))


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_channel_kernels(ports, dtype):
    """Caffe's SoftmaxLayer::Forward_gpu: max, subtract (in place), exp, sum, divide (in place)."""
    num, channels, spatial = 3, 17, 13
    x = ports.round(4 * RNG.standard_normal((num, channels, spatial)), dtype)
    dims, count = [num, channels, spatial], x.size
    (mx,) = ports.run(CHANNEL_MAX_PORT, dtype, [*dims, x], [(num, spatial)], **LOOP)
    np.testing.assert_array_equal(mx, x.max(axis=1))
    (shifted,) = ports.run(CHANNEL_SUBTRACT_PORT, dtype, [count, *dims, mx], [x], **LOOP)
    np.testing.assert_array_equal(shifted, ports.round(x - mx[:, None, :], dtype))
    (e,) = ports.run(KERNEL_EXP_PORT, dtype, [count, shifted], [x.shape], **LOOP)
    close(e, np.exp(shifted), dtype)
    (s,) = ports.run(CHANNEL_SUM_PORT, dtype, [*dims, e], [(num, spatial)], **LOOP)
    close(s, e.sum(axis=1), dtype)
    (y,) = ports.run(CHANNEL_DIV_PORT, dtype, [count, *dims, s], [e], **LOOP)
    z = np.exp(x - x.max(axis=1, keepdims=True))
    close(y, z / z.sum(axis=1, keepdims=True), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_pool_forward(ports, dtype):
    num, c, h, w, k, s, p = 2, 3, 9, 7, 3, 2, 1
    ph, pw = -(-(h + 2 * p - k) // s) + 1, -(-(w + 2 * p - k) // s) + 1  # Caffe's ceil mode
    x = ports.round(RNG.standard_normal((num, c, h, w)), dtype)
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    want = np.empty((num, c, ph, pw))
    for i in range(ph):
        for j in range(pw):
            want[:, :, i, j] = padded[:, :, i * s : i * s + k, j * s : j * s + k].max(axis=(2, 3))
    geo = [num, c, h, w, ph, pw, k, k, s, s, p, p]
    top, mask, top_mask = ports.run(
        MAX_POOL_PORT, dtype, [want.size, x, *geo], [want.shape, want.shape, want.shape], **LOOP
    )
    np.testing.assert_array_equal(top, want)
    flat = x.reshape(num, c, h * w)
    picked = np.take_along_axis(flat, mask.astype(np.int64).reshape(num, c, -1), axis=2)
    np.testing.assert_array_equal(picked.reshape(want.shape), want)
    assert np.isnan(top_mask).all()  # mask was given: top_mask is not written
