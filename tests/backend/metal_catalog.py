"""Metal kernels in the style of MLX's documentation and of MLX packages, for the Metal dialect
tests: each entry is the Metal source as an MLX user writes it for ``mx.fast.metal_kernel``.

``UNCHANGED`` records, per kernel, whether its Metal body runs through kernelkit exactly as
written for MLX (every kernel here does; an edit would be listed with its reason).
"""

from __future__ import annotations

# MLX's documentation: "Custom Metal Kernels", the first example.
EXP = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""

# MLX's documentation: the same with ensure_row_contiguous=False and elem_to_loc.
STRIDED_EXP = """
    uint elem = thread_position_in_grid.x;
    // Utils from `mlx/backend/metal/kernels/utils.h` are automatically included
    uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
    T tmp = inp[loc];
    out[elem] = metal::exp(tmp);
"""

# MLX's documentation: bilinear grid_sample, forward (one thread per output element).
GRID_SAMPLE = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    int gH = grid_shape[1];
    int gW = grid_shape[2];
    int w_stride = C;
    int h_stride = W * w_stride;
    int b_stride = H * h_stride;

    uint grid_idx = elem / C * 2;
    float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
    float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;
    int ix_nw = floor(ix);
    int iy_nw = floor(iy);
    int ix_ne = ix_nw + 1;
    int iy_ne = iy_nw;
    int ix_sw = ix_nw;
    int iy_sw = iy_nw + 1;
    int ix_se = ix_nw + 1;
    int iy_se = iy_nw + 1;

    T nw = (ix_se - ix) * (iy_se - iy);
    T ne = (ix - ix_sw) * (iy_sw - iy);
    T sw = (ix_ne - ix) * (iy - iy_ne);
    T se = (ix - ix_nw) * (iy - iy_nw);

    int batch_idx = elem / C / gH / gW * b_stride;
    int channel_idx = elem % C;
    int base_idx = batch_idx + channel_idx;

    T I_nw = x[base_idx + iy_nw * h_stride + ix_nw * w_stride];
    T I_ne = x[base_idx + iy_ne * h_stride + ix_ne * w_stride];
    T I_sw = x[base_idx + iy_sw * h_stride + ix_sw * w_stride];
    T I_se = x[base_idx + iy_se * h_stride + ix_se * w_stride];

    I_nw = iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1 ? I_nw : 0;
    I_ne = iy_ne >= 0 && iy_ne <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1 ? I_ne : 0;
    I_sw = iy_sw >= 0 && iy_sw <= H - 1 && ix_sw >= 0 && ix_sw <= W - 1 ? I_sw : 0;
    I_se = iy_se >= 0 && iy_se <= H - 1 && ix_se >= 0 && ix_se <= W - 1 ? I_se : 0;

    out[elem] = nw * I_nw + ne * I_ne + sw * I_sw + se * I_se;
"""
# (as the documentation's forward, the corner loads above read before the bounds test; the
# tests keep sample points inside the image so every read is in bounds)

# MLX's documentation: grid_sample's VJP, atomic_outputs=True, init_value=0, simd_sum.
GRID_SAMPLE_GRAD = """
    uint elem = thread_position_in_grid.x;
    int H = x_shape[1];
    int W = x_shape[2];
    int C = x_shape[3];
    // Pad C to the nearest larger simdgroup size multiple
    int C_padded = ceildiv(C, threads_per_simdgroup) * threads_per_simdgroup;
    int gH = grid_shape[1];
    int gW = grid_shape[2];
    int w_stride = C;
    int h_stride = W * w_stride;
    int b_stride = H * h_stride;

    uint grid_idx = elem / C_padded * 2;
    float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
    float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;
    int ix_nw = floor(ix);
    int iy_nw = floor(iy);
    int ix_ne = ix_nw + 1;
    int iy_ne = iy_nw;
    int ix_sw = ix_nw;
    int iy_sw = iy_nw + 1;
    int ix_se = ix_nw + 1;
    int iy_se = iy_nw + 1;

    T nw = (ix_se - ix) * (iy_se - iy);
    T ne = (ix - ix_sw) * (iy_sw - iy);
    T sw = (ix_ne - ix) * (iy - iy_ne);
    T se = (ix - ix_nw) * (iy - iy_nw);

    int batch_idx = elem / C_padded / gH / gW * b_stride;
    int channel_idx = elem % C_padded;
    int base_idx = batch_idx + channel_idx;

    T gix = T(0);
    T giy = T(0);
    if (channel_idx < C) {
        int cot_index = elem / C_padded * C + channel_idx;
        T cot = cotangent[cot_index];
        if (iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1) {
            int offset = base_idx + iy_nw * h_stride + ix_nw * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], nw * cot, memory_order_relaxed);
            T I_nw = x[offset];
            gix -= I_nw * (iy_se - iy) * cot;
            giy -= I_nw * (ix_se - ix) * cot;
        }
        if (iy_ne >= 0 && iy_ne <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1) {
            int offset = base_idx + iy_ne * h_stride + ix_ne * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], ne * cot, memory_order_relaxed);
            T I_ne = x[offset];
            gix += I_ne * (iy_sw - iy) * cot;
            giy -= I_ne * (ix - ix_sw) * cot;
        }
        if (iy_sw >= 0 && iy_sw <= H - 1 && ix_sw >= 0 && ix_sw <= W - 1) {
            int offset = base_idx + iy_sw * h_stride + ix_sw * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], sw * cot, memory_order_relaxed);
            T I_sw = x[offset];
            gix -= I_sw * (iy - iy_ne) * cot;
            giy += I_sw * (ix_ne - ix) * cot;
        }
        if (iy_se >= 0 && iy_se <= H - 1 && ix_se >= 0 && ix_se <= W - 1) {
            int offset = base_idx + iy_se * h_stride + ix_se * w_stride;
            atomic_fetch_add_explicit(&x_grad[offset], se * cot, memory_order_relaxed);
            T I_se = x[offset];
            gix += I_se * (iy - iy_nw) * cot;
            giy += I_se * (ix - ix_nw) * cot;
        }
    }
    T gix_mult = W / 2;
    T giy_mult = H / 2;
    // Reduce across each simdgroup first.
    gix = simd_sum(gix);
    giy = simd_sum(giy);
    if (thread_index_in_simdgroup == 0) {
        atomic_fetch_add_explicit(&grid_grad[grid_idx], gix * gix_mult, memory_order_relaxed);
        atomic_fetch_add_explicit(&grid_grad[grid_idx + 1], giy * giy_mult, memory_order_relaxed);
    }
"""

# A row sum: one threadgroup per row, simd_sum within SIMD-groups, threadgroup memory across.
ROW_SUM = """
    uint row = threadgroup_position_in_grid.y;
    uint tid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    int n = x_shape[1];
    threadgroup float partial[32];

    float acc = 0.0f;
    for (int i = tid; i < n; i += threads_per_threadgroup.x) {
        acc += static_cast<float>(x[row * n + i]);
    }
    acc = simd_sum(acc);
    if (lane == 0) {
        partial[sg] = acc;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float v = lane < simdgroups_per_threadgroup ? partial[lane] : 0.0f;
        v = simd_sum(v);
        if (lane == 0) {
            out[row] = static_cast<T>(v);
        }
    }
"""

# RMS norm in the style of mlx-lm's fused norms: float4 loads, SIMD sums, a threadgroup
# exchange, the epsilon as a Python scalar (MLX: `const constant float& eps`) and a 0-d scale.
RMS_NORM_HEADER = """
#include <metal_stdlib>
using namespace metal;

template <typename T>
METAL_FUNC float block_sum(float v, threadgroup float* scratch, uint lane, uint sg, uint nsg) {
    v = simd_sum(v);
    if (lane == 0) {
        scratch[sg] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    v = lane < nsg ? scratch[lane] : 0.0f;
    v = simd_sum(v);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return v;
}
"""
RMS_NORM = """
    constexpr int N_READS = 4;
    uint row = threadgroup_position_in_grid.y;
    uint tid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    int n = x_shape[1];
    threadgroup float scratch[32];

    const device float4* xr = (const device float4*)(x + row * n);
    float sumsq = 0;
    for (int i = tid; i < n / N_READS; i += threads_per_threadgroup.x) {
        float4 v = float4(xr[i]);
        sumsq += dot(v, v);
    }
    float total = block_sum<T>(sumsq, scratch, lane, sg, nsg);
    float inv = metal::precise::rsqrt(total / n + eps) * scale;
    const device float4* wr = (const device float4*)w;
    device float4* yr = (device float4*)(y + row * n);
    for (int i = tid; i < n / N_READS; i += threads_per_threadgroup.x) {
        float4 v = xr[i] * inv;
        yr[i] = v * wr[i];
    }
"""

# An MoE top-k router (one SIMD-group per token): scores -> softmax over the k largest, by
# repeated simd_max; ties go to the lower expert, found with simd_min over lanes.
TOPK_ROUTER = """
    uint token = threadgroup_position_in_grid.y;
    uint lane = thread_index_in_simdgroup;
    constexpr int PER_LANE = E / 32;
    float s[PER_LANE];
    for (int j = 0; j < PER_LANE; ++j) {
        s[j] = static_cast<float>(logits[token * E + j * 32 + lane]);
    }
    float top[K];
    float m0 = 0;
    for (int t = 0; t < K; ++t) {
        float best = -numeric_limits<float>::infinity();
        uint where = E;
        for (int j = 0; j < PER_LANE; ++j) {
            bool better = s[j] > best;
            best = select(best, s[j], better);
            where = select(where, uint(j * 32 + lane), better);
        }
        float m = simd_max(best);
        uint pick = simd_min(best == m ? where : uint(E));
        if (t == 0) {
            m0 = m;
        }
        top[t] = m;
        for (int j = 0; j < PER_LANE; ++j) {
            if (uint(j * 32 + lane) == pick) {
                s[j] = -numeric_limits<float>::infinity();
            }
        }
        if (lane == 0) {
            indices[token * K + t] = pick;
        }
    }
    float denom = 0;
    for (int t = 0; t < K; ++t) {
        denom += fast::exp(top[t] - m0);
    }
    if (lane < K) {
        float mine = 0;
        for (int t = 0; t < K; ++t) {
            mine = t == int(lane) ? top[t] : mine;
        }
        weights[token * K + lane] = static_cast<T>(metal::exp(mine - m0) / denom);
    }
"""

# Rotary embedding on interleaved pairs (x[2i], x[2i+1]): one thread per element, the partner
# element comes from the neighbouring lane with simd_shuffle_xor; angles from the position.
ROPE = """
    uint3 pos = thread_position_in_grid;
    uint d = pos.x;
    uint head = pos.y;
    uint token = pos.z;
    int D = x_shape[2];
    int H = x_shape[1];
    uint idx = (token * H + head) * D + d;
    float v = static_cast<float>(x[idx]);
    float partner = simd_shuffle_xor(v, 1);
    float inv_freq = metal::pow(base, -float(d & ~1u) / float(D));
    float theta = float(offset + int(token)) * inv_freq;
    float2 cs = float2(metal::precise::cos(theta), metal::precise::sin(theta));
    float rotated = (d & 1u) ? v * cs.x + partner * cs.y : v * cs.x - partner * cs.y;
    out[idx] = static_cast<T>(rotated);
"""

# A gated delta-rule recurrent step (as in mlx-lm's recurrent models): each thread keeps its
# slice of one state row in registers across the time loop; SIMD sums give the row's dot
# products with k and q. Grid: (32, Dv, B * Hh); state [B, Hh, Dv, Dk], Dk = 32 * N_PER.
GATED_DELTA = """
    uint lane = thread_position_in_threadgroup.x;
    uint dv = thread_position_in_grid.y;
    uint bh = thread_position_in_grid.z;
    int T_len = q_shape[1];
    int Hh = q_shape[2];
    int Dv = v_shape[3];
    uint b = bh / Hh;
    uint h = bh % Hh;
    constexpr int Dk = 32 * N_PER;

    float state[N_PER];
    const device float* s_in = state_in + (bh * Dv + dv) * Dk;
    for (int i = 0; i < N_PER; ++i) {
        state[i] = s_in[lane * N_PER + i];
    }
    for (int t = 0; t < T_len; ++t) {
        uint qk = ((b * T_len + t) * Hh + h) * Dk + lane * N_PER;
        uint gv = (b * T_len + t) * Hh + h;
        float decay = g[gv];
        float kv = 0;
        for (int i = 0; i < N_PER; ++i) {
            state[i] *= decay;
            kv += state[i] * k[qk + i];
        }
        kv = simd_sum(kv);
        float delta = (v[gv * Dv + dv] - kv) * beta[gv];
        float o = 0;
        for (int i = 0; i < N_PER; ++i) {
            state[i] += k[qk + i] * delta;
            o += state[i] * q[qk + i];
        }
        o = simd_sum(o);
        if (lane == 0) {
            y[gv * Dv + dv] = o;
        }
    }
    device float* s_out = state_out + (bh * Dv + dv) * Dk;
    for (int i = 0; i < N_PER; ++i) {
        s_out[lane * N_PER + i] = state[i];
    }
"""

UNCHANGED = {
    "exp": True,
    "strided_exp": True,
    "grid_sample": True,
    "grid_sample_grad": True,
    "row_sum": True,
    "rms_norm": True,
    "topk_router": True,
    "rope": True,
    "gated_delta": True,
}
