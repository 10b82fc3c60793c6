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


# --- Ported for tests/backend/test_metal_ported.py (issue 25): each text exactly as the package
# passes it to mx.fast.metal_kernel (read from the PyPI wheels mlx-lm 0.32.2, mlx-vlm 0.7.10,
# mlx-audio 0.6.2; MIT, Copyright Apple Inc. / the package authors). The dict beside each gives
# the factory's other arguments as the package gives them.

# mlx-lm 0.32.2, mlx_lm/kernels/expert_routing.py (_ROUTING_SOURCE)
EXPERT_ROUTING = """
    constexpr int R = (E + 31) / 32;
    uint token = thread_position_in_grid.x / 32;
    uint lane = thread_index_in_simdgroup;
    auto row = logits + size_t(token) * E;

    float score[R];
    float biased[R];
    for (int i = 0; i < R; i++) {
        int e = lane + 32 * i;
        score[i] = 0.0f;
        biased[i] = -INFINITY;
        if (e < E) {
            float x = row[e] * multiplier;
            float y = 1.0f / (1.0f + metal::precise::exp(metal::abs(x)));
            score[i] = x < 0 ? y : 1.0f - y;
            biased[i] = score[i] + bias[e];
        }
    }

    float w[K];
    for (int k = 0; k < K; k++) {
        float best = -INFINITY;
        int best_e = E;
        for (int i = 0; i < R; i++) {
            int e = lane + 32 * i;
            if (biased[i] > best || (biased[i] == best && e < best_e)) {
                best = biased[i];
                best_e = e;
            }
        }
        float top = simd_max(best);
        int winner = simd_min(best == top ? best_e : E);
        float s = 0.0f;
        for (int i = 0; i < R; i++) {
            if (lane + 32 * i == winner) {
                s = score[i];
                biased[i] = -INFINITY;
            }
        }
        w[k] = simd_sum(s);
        if (lane == 0) {
            inds[size_t(token) * K + k] = winner;
        }
    }

    float total = 0.0f;
    for (int k = 0; k < K; k++) {
        total = w[k] + total;
    }
    if (lane == 0) {
        for (int k = 0; k < K; k++) {
            weights[size_t(token) * K + k] = w[k] / (total + eps) * scale;
        }
    }
"""
EXPERT_ROUTING_ARGS = {
    "name": "expert_routing",
    "input_names": ["logits", "bias", "multiplier", "eps", "scale"],
    "output_names": ["inds", "weights"],
}

# mlx-lm 0.32.2, mlx_lm/kernels/qk_norm.py (_QK_NORM_SOURCE)
QK_NORM = """
    constexpr int R = (D + 31) / 32;
    uint row = thread_position_in_grid.x / 32;
    uint lane = thread_index_in_simdgroup;
    uint n = row / (HQ + HK);
    uint h = row % (HQ + HK);
    auto x = qkvg + size_t(n) * (2 * (HQ + HK) * D) + h * D;

    float v[R];
    float sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        v[i] = d < D ? static_cast<float>(x[d]) : 0.0f;
        sum_sq += v[i] * v[i];
    }
    float rstd = metal::precise::rsqrt(simd_sum(sum_sq) / D + eps);
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        if (d < D) {
            T y = static_cast<T>(v[i] * rstd);
            if (h < HQ) {
                q[(size_t(n) * HQ + h) * D + d] = static_cast<T>(static_cast<float>(y) * scale);
            } else {
                k[(size_t(n) * HK + h - HQ) * D + d] = y;
            }
        }
    }
"""
QK_NORM_ARGS = {
    "name": "qk_norm",
    "input_names": ["qkvg", "scale", "eps"],
    "output_names": ["q", "k"],
}

# mlx-lm 0.32.2, mlx_lm/kernels/qk_norm_rope.py (_QK_NORM_ROPE_SOURCE)
QK_NORM_ROPE = """
    constexpr int R = (D + 31) / 32;
    uint row = thread_position_in_grid.x / 32;
    uint lane = thread_index_in_simdgroup;
    uint n = row / (HQ + HK);
    uint h = row % (HQ + HK);
    auto x = qkvg + size_t(n) * (2 * (HQ + HK) * D) + h * D;

    float v[R];
    float sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        v[i] = d < D ? static_cast<float>(x[d]) : 0.0f;
        sum_sq += v[i] * v[i];
    }
    float rstd = metal::precise::rsqrt(simd_sum(sum_sq) / D + eps);
    float pos = static_cast<float>(n % seq_len + offset[(n / seq_len) * OFFSET_STRIDE]);
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        T y = static_cast<T>(v[i] * rstd);
        if (h < HQ) {
            y = static_cast<T>(static_cast<float>(y) * scale);
        }
        float self = static_cast<float>(y);
        float other = simd_shuffle_xor(self, 1);
        float inv_freq = metal::exp2(-(static_cast<float>(d / 2) / (D / 2)) * log2_base);
        float theta = pos * inv_freq;
        float c = metal::fast::cos(theta);
        float s = metal::fast::sin(theta);
        y = static_cast<T>(d % 2 == 0 ? self * c - other * s : other * s + self * c);
        if (d < D) {
            if (h < HQ) {
                q[(size_t(n) * HQ + h) * D + d] = y;
            } else {
                k[(size_t(n) * HK + h - HQ) * D + d] = y;
            }
        }
    }
"""
QK_NORM_ROPE_ARGS = {
    "name": "qk_norm_rope",
    "input_names": ["qkvg", "scale", "eps", "offset", "seq_len", "log2_base"],
    "output_names": ["q", "k"],
}

# mlx-lm 0.32.2, mlx_lm/kernels/post_expert_norm_combine.py (_EXPERT_COMBINE_SOURCE)
EXPERT_COMBINE = """
    constexpr int R = (D + TG - 1) / TG;
    constexpr int SG = TG / 32;
    threadgroup float buf[K * SG];
    uint t = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    size_t row = threadgroup_position_in_grid.x;

    float w[R];
    for (int i = 0; i < R; i++) {
        int d = t + i * TG;
        w[i] = d < D ? static_cast<float>(norm_w[d]) : 0.0f;
    }
    T x[K][R];
    for (int k = 0; k < K; k++) {
        size_t base = (row * K + k) * D;
        for (int i = 0; i < R; i++) {
            int d = t + i * TG;
            x[k][i] = d < D ? experts[base + d] : static_cast<T>(0.0f);
        }
    }
    float sum_sq[K];
    for (int k = 0; k < K; k++) {
        sum_sq[k] = 0.0f;
        for (int i = 0; i < R; i++) {
            float v = static_cast<float>(x[k][i]) * w[i];
            sum_sq[k] += v * v;
        }
        sum_sq[k] = simd_sum(sum_sq[k]);
    }
    if (TG > 32) {
        if (lane == 0) {
            for (int k = 0; k < K; k++) {
                buf[k * SG + sg] = sum_sq[k];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k = 0; k < K; k++) {
            sum_sq[k] = simd_sum(lane < SG ? buf[k * SG + lane] : 0.0f);
        }
    }

    float acc[R];
    for (int i = 0; i < R; i++) {
        acc[i] = 0.0f;
    }
    for (int k = 0; k < K; k++) {
        float inv = metal::precise::rsqrt(sum_sq[k] / D + eps);
        float ew = static_cast<T>(weights[row * K + k]);
        for (int i = 0; i < R; i++) {
            float v = static_cast<float>(x[k][i]) * w[i];
            acc[i] = static_cast<T>(acc[i] + v * inv * ew);
        }
    }
    for (int i = 0; i < R; i++) {
        int d = t + i * TG;
        if (d < D) {
            out[row * D + d] = static_cast<T>(acc[i]);
        }
    }
"""
EXPERT_COMBINE_ARGS = {
    "name": "post_expert_norm_combine",
    "input_names": ["experts", "weights", "norm_w", "eps"],
    "output_names": ["out"],
}

# mlx-lm 0.32.2, mlx_lm/kernels/rms_norm_sigmoid_gate.py (_NORM_GATE_SOURCE)
NORM_GATE = """
    // One SIMD group per (token, head) row of D values.
    uint row = thread_position_in_grid.x / 32;
    uint lane = thread_index_in_simdgroup;
    uint B = x_shape[0], H = x_shape[1], L = x_shape[2];
    if (row >= B * L * H) {
        return;
    }
    uint h = row % H;
    uint l = (row / H) % L;
    uint b = row / (H * L);
    int xd = x_strides[3], gd = g_strides[2];
    auto xr = x + b * x_strides[0] + h * x_strides[1] + l * x_strides[2];
    auto gr = g + b * g_strides[0] + l * g_strides[1] + h * D * gd;

    constexpr int R = (D + 31) / 32;
    float v[R];
    float sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        v[i] = d < D ? static_cast<float>(xr[d * xd]) : 0.0f;
        sum_sq += v[i] * v[i];
    }
    float rstd = metal::precise::rsqrt(simd_sum(sum_sq) / D + eps);
    for (int i = 0; i < R; i++) {
        int d = lane + 32 * i;
        if (d < D) {
            float sig = 1.0f / (1.0f + metal::exp(-static_cast<float>(gr[d * gd])));
            out[row * D + d] = static_cast<T>(v[i] * rstd * sig);
        }
    }
"""
NORM_GATE_ARGS = {
    "name": "rms_norm_sigmoid_gate",
    "input_names": ["x", "g", "eps"],
    "output_names": ["out"],
    "ensure_row_contiguous": False,
}

# mlx-lm 0.32.2, mlx_lm/kernels/norm_add_norm.py: the three kernels' texts are built by the
# module's own code, copied here unchanged (_source(pre_norm=True/False), _PRE_NORM_ONLY).
_BLOCK_SUM_ONCE_HEADER = """
template <int TG>
inline float block_sum_once(float v, threadgroup float* buf, uint lane, uint sg) {
    v = simd_sum(v);
    if (TG > 32) {
        if (lane == 0) {
            buf[sg] = v;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        v = simd_sum(lane < TG / 32 ? buf[lane] : 0.0f);
    }
    return v;
}
"""


_HEAD = """
    constexpr int R = (D + TG - 1) / TG;
    threadgroup float buf[2][32];
    uint t = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    size_t base = size_t(threadgroup_position_in_grid.x) * D;
"""

# The pre-norm of the stream values in v, with their sum of squares in sum_sq.
_PRE_NORM = """
    rstd = metal::precise::rsqrt(block_sum_once<TG>(sum_sq, buf[1], lane, sg) / D + pre_eps);
    for (int i = 0; i < R; i++) {
        int d = t + i * TG;
        if (d < D) {
            normed[base + d] = static_cast<T>(v[i] * rstd * pw[i]);
        }
    }
"""


def _source(pre_norm: bool) -> str:
    pw = ", pw[R]" if pre_norm else ""
    load_pw = "pw[i] = pre_w[d];" if pre_norm else ""
    source = (
        _HEAD
        + f"""
    float v[R], st[R], al[R], be[R]{pw};
    for (int i = 0; i < R; i++) {{
        int d = t + i * TG;
        v[i] = st[i] = al[i] = be[i] = 0.0f;
        if (d < D) {{
            v[i] = static_cast<float>(branch[base + d]);
            st[i] = stream[base + d];
            al[i] = alpha[d];
            be[i] = beta[d];
            {load_pw}
            if (POST_SCALE) {{
                // The weight scales the input in T, like the norm module.
                float w = static_cast<T>(post_w[d]);
                v[i] = static_cast<T>(w * v[i]);
            }}
        }}
    }}

    float sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {{
        sum_sq += v[i] * v[i];
    }}
    float rstd = metal::precise::rsqrt(block_sum_once<TG>(sum_sq, buf[0], lane, sg) / D + post_eps);

    sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {{
        int d = t + i * TG;
        float s = 0.0f;
        if (d < D) {{
            float n = static_cast<T>(v[i] * rstd);
            s = al[i] * st[i] + be[i] * n;
            new_stream[base + d] = s;
        }}
        v[i] = s;
        sum_sq += s * s;
    }}
"""
    )
    if pre_norm:
        source += _PRE_NORM
    return source


# Only the pre-norm, with the same sums as in norm_add_norm.
_PRE_NORM_ONLY = (
    _HEAD
    + """
    float v[R], pw[R];
    float sum_sq = 0.0f;
    for (int i = 0; i < R; i++) {
        int d = t + i * TG;
        v[i] = pw[i] = 0.0f;
        if (d < D) {
            v[i] = stream[base + d];
            pw[i] = pre_w[d];
        }
        sum_sq += v[i] * v[i];
    }
    float rstd;
"""
    + _PRE_NORM
)


NORM_ADD_NORM = _source(pre_norm=True)
NORM_ADD = _source(pre_norm=False)
PRE_NORM = _PRE_NORM_ONLY
NORM_ADD_NORM_HEADER = NORM_ADD_HEADER = PRE_NORM_HEADER = _BLOCK_SUM_ONCE_HEADER
NORM_ADD_NORM_ARGS = {
    "name": "norm_add_norm",
    "input_names": ["branch", "stream", "alpha", "beta", "post_w", "post_eps", "pre_w", "pre_eps"],
    "output_names": ["new_stream", "normed"],
}
NORM_ADD_ARGS = {
    "name": "norm_add",
    "input_names": ["branch", "stream", "alpha", "beta", "post_w", "post_eps"],
    "output_names": ["new_stream"],
}
PRE_NORM_ARGS = {
    "name": "norm_add_norm_pre_norm",
    "input_names": ["stream", "pre_w", "pre_eps"],
    "output_names": ["normed"],
}


# mlx-lm 0.32.2, mlx_lm/models/kimi_k3.py (_ATTN_RES_SOURCE)
ATTN_RES = """
    constexpr int NACC = K + 2;
    constexpr int NSIMD = THREADS / 32;

    auto n = threadgroup_position_in_grid.y;
    auto tid = thread_position_in_threadgroup.x;
    auto lane = thread_index_in_simdgroup;
    auto sg = simdgroup_index_in_threadgroup;

    auto partial_ = partial + n * D;

    float acc[NACC];
    for (int i = 0; i < NACC; ++i) {
      acc[i] = 0.0f;
    }
    for (uint d = tid; d < D; d += THREADS) {
      float w = static_cast<float>(w_eff[d]);
      float pv = static_cast<float>(partial_[d]);
      for (int k = 0; k < K; ++k) {
        acc[k] += static_cast<float>(raw[(k * N + n) * D + d]) * w;
      }
      acc[K] += pv * w;
      acc[K + 1] += pv * pv;
    }

    threadgroup float shm[NACC * NSIMD];
    for (int i = 0; i < NACC; ++i) {
      float s = simd_sum(acc[i]);
      if (lane == 0) {
        shm[i * NSIMD + sg] = s;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    threadgroup float weights[K + 1];
    if (tid == 0) {
      float tot[NACC];
      for (int i = 0; i < NACC; ++i) {
        tot[i] = 0.0f;
        for (int j = 0; j < NSIMD; ++j) {
          tot[i] += shm[i * NSIMD + j];
        }
      }
      float rinv = metal::rsqrt(tot[K + 1] / D + eps[0]);
      float logits[K + 1];
      float m = -1e30f;
      for (int k = 0; k < K; ++k) {
        logits[k] = tot[k] * inv_rms[k * N + n];
        m = metal::max(m, logits[k]);
      }
      logits[K] = tot[K] * rinv;
      m = metal::max(m, logits[K]);
      float denom = 0.0f;
      for (int k = 0; k <= K; ++k) {
        logits[k] = metal::exp(logits[k] - m);
        denom += logits[k];
      }
      for (int k = 0; k <= K; ++k) {
        weights[k] = logits[k] / denom;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float wp = weights[K];
    auto out_ = out + n * D;
    for (uint d = tid; d < D; d += THREADS) {
      float o = wp * static_cast<float>(partial_[d]);
      for (int k = 0; k < K; ++k) {
        o += weights[k] * static_cast<float>(raw[(k * N + n) * D + d]);
      }
      out_[d] = static_cast<InT>(o);
    }
"""
ATTN_RES_ARGS = {
    "name": "attnres_mix",
    "input_names": ["raw", "inv_rms", "partial", "w_eff", "eps", "N"],
    "output_names": ["out"],
}

# mlx-lm 0.32.2, mlx_lm/models/deepseek_v41.py (_make_sinkhorn_kernel)
SINKHORN = """
        uint n = thread_position_in_grid.x;
        if (n >= comb_shape[0]) {
            return;
        }
        float m[HC * HC];
        for (int k = 0; k < HC * HC; k++) {
            m[k] = comb[n * HC * HC + k];
        }
        float e = eps[0];
        for (int t = 0; t < 2 * ITERS - 1; t++) {
            bool rows = t % 2 == 1;
            for (int a = 0; a < HC; a++) {
                float s = 0.0f;
                for (int b = 0; b < HC; b++) {
                    s += rows ? m[a * HC + b] : m[b * HC + a];
                }
                float d = s + e;
                for (int b = 0; b < HC; b++) {
                    int k = rows ? a * HC + b : b * HC + a;
                    m[k] = m[k] / d;
                }
            }
        }
        for (int k = 0; k < HC * HC; k++) {
            out[n * HC * HC + k] = m[k];
        }
    """
SINKHORN_ARGS = {
    "name": "deepseek_v41_sinkhorn",
    "input_names": ["comb", "eps"],
    "output_names": ["out"],
}

# mlx-audio 0.6.2, mlx_audio/sts/models/mossformer2_se/depthwise_conv1d_kernel.py
DEPTHWISE_CONV1D = """
        const int chan = int(thread_position_in_grid.x);
        const int time = int(thread_position_in_grid.y);
        const int batch = int(thread_position_in_grid.z);

        const int B = params[0];
        const int L_in = params[1];
        const int C = params[2];
        const int K = params[3];
        const int pad = params[4];
        const int L_out = params[5];

        if (batch >= B || time >= L_out || chan >= C) {
            return;
        }

        const int out_index = ((batch * L_out) + time) * C + chan;
        const int weight_base = chan * K;

        T acc = T(0);
        for (int k = 0; k < K; ++k) {
            const int in_time = time + k - pad;
            if (in_time >= 0 && in_time < L_in) {
                const int in_index = ((batch * L_in) + in_time) * C + chan;
                acc += inp[in_index] * weight[weight_base + k];
            }
        }

        out[out_index] = acc;
    """
DEPTHWISE_CONV1D_ARGS = {
    "name": "custom_depthwise_conv1d",
    "input_names": ["inp", "weight", "params"],
    "output_names": ["out"],
}

# mlx-audio 0.6.2, mlx_audio/stt/models/phonon/packed.py (_UNPACK_SOURCE)
PHONON_UNPACK = """
    uint output_index = thread_position_in_grid.x;
    uint packed_width = in_features / 16;
    uint output_words = quint5_q_shape[0] * packed_width;
    if (output_index >= output_words) return;
    uint row = output_index / packed_width;
    uint word = output_index - row * packed_width;
    uint bytes_per_row = quint5_q_shape[1];
    uint base_word = 0;
    uint residual_word = 0;
    #pragma unroll
    for (uint j = 0; j < 16; ++j) {
        uint logical_index = word * 16 + j;
        uint group = logical_index / 10;
        uint offset = logical_index - group * 10;
        const device uchar* source = quint5_q + row * bytes_per_row + group * 3;
        uint payload = uint(source[0]) | (uint(source[1]) << 8) |
                       (uint(source[2]) << 16);
        uint divisor;
        switch (offset) {
            case 0: divisor = 1; break;
            case 1: divisor = 5; break;
            case 2: divisor = 25; break;
            case 3: divisor = 125; break;
            case 4: divisor = 625; break;
            case 5: divisor = 3125; break;
            case 6: divisor = 15625; break;
            case 7: divisor = 78125; break;
            case 8: divisor = 390625; break;
            default: divisor = 1953125; break;
        }
        uint symbol = (payload / divisor) % 5;
        uint base_code;
        uint residual_code;
        switch (symbol) {
            case 0: base_code = 0; residual_code = 0; break;
            case 1: base_code = 0; residual_code = 2; break;
            case 2: base_code = 1; residual_code = 1; break;
            case 3: base_code = 2; residual_code = 0; break;
            default: base_code = 2; residual_code = 2; break;
        }
        base_word |= base_code << (2 * j);
        residual_word |= residual_code << (2 * j);
    }
    base_q[output_index] = base_word;
    residual_q[output_index] = residual_word;
"""
PHONON_UNPACK_ARGS = {
    "name": "mlx_audio_phonon_unpack_base5_v1",
    "input_names": ["quint5_q", "in_features"],
    "output_names": ["base_q", "residual_q"],
}

# mlx-vlm 0.7.10, mlx_vlm/models/kernels.py (nearest_interpolate)
NEAREST_INTERP = """
        uint x_out = thread_position_in_grid.x;
        uint y_out = thread_position_in_grid.y;
        uint bc_idx = thread_position_in_grid.z;

        int batch_size = dims[0];
        int channels = dims[1];
        int in_h = dims[2];
        int in_w = dims[3];
        int out_h = dims[4];
        int out_w = dims[5];

        if (x_out >= (uint)out_w || y_out >= (uint)out_h || bc_idx >= (uint)(batch_size * channels))
            return;

        int c = bc_idx % channels;
        int b = bc_idx / channels;

        // PyTorch's coordinate calculation for nearest neighbor
        // This matches: torch.nn.functional.interpolate(..., mode='nearest')
        float scale_h = float(in_h) / float(out_h);
        float scale_w = float(in_w) / float(out_w);

        // PyTorch uses floor for nearest neighbor coordinate mapping
        int y_in = int(floor(float(y_out) * scale_h));
        int x_in = int(floor(float(x_out) * scale_w));

        // Clamp to bounds
        y_in = max(0, min(y_in, in_h - 1));
        x_in = max(0, min(x_in, in_w - 1));

        int input_offset = ((b * channels + c) * in_h + y_in) * in_w + x_in;
        int output_offset = ((b * channels + c) * out_h + y_out) * out_w + x_out;

        output[output_offset] = input[input_offset];
    """
NEAREST_INTERP_ARGS = {
    "name": "nearest_interpolation",
    "input_names": ["input", "dims"],
    "output_names": ["output"],
}

# mlx-vlm 0.7.10, mlx_vlm/models/kernels.py (grid_sample)
VLM_GRID_SAMPLE = """
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
        float ix = ((static_cast<float>(grid[grid_idx]) + 1) * W - 1) / 2;
        float iy = ((static_cast<float>(grid[grid_idx + 1]) + 1) * H - 1) / 2;

        int ix_nw = floor(ix);
        int iy_nw = floor(iy);

        int ix_ne = ix_nw + 1;
        int iy_ne = iy_nw;

        int ix_sw = ix_nw;
        int iy_sw = iy_nw + 1;

        int ix_se = ix_nw + 1;
        int iy_se = iy_nw + 1;

        float nw = (ix_se - ix)    * (iy_se - iy);
        float ne = (ix    - ix_sw) * (iy_sw - iy);
        float sw = (ix_ne - ix)    * (iy    - iy_ne);
        float se = (ix    - ix_nw) * (iy    - iy_nw);

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

        out[elem] = static_cast<T>(nw * I_nw + ne * I_ne + sw * I_sw + se * I_se);
    """
VLM_GRID_SAMPLE_ARGS = {
    "name": "grid_sample",
    "input_names": ["x", "grid"],
    "output_names": ["out"],
}

# mlx-vlm 0.7.10, mlx_vlm/models/kernels.py (separable_interpolate)
SEPARABLE_INTERP = """
        uint gx = thread_position_in_grid.x;
        uint y_out = thread_position_in_grid.y;
        uint b = thread_position_in_grid.z;

        int in_h = x_shape[1];
        int in_w = x_shape[2];
        int channels = x_shape[3];
        int out_h = iy_shape[0];
        int taps_y = iy_shape[1];
        int out_w = ix_shape[0];
        int taps_x = ix_shape[1];

        if (gx >= (uint)(out_w * channels) || y_out >= (uint)out_h)
            return;

        int x_out = gx / channels;
        size_t y_tap = (size_t)y_out * taps_y;
        size_t x_tap = (size_t)x_out * taps_x;
        size_t input_base = (size_t)b * in_h * in_w * channels + (gx % channels);

        // W taps are contracted inside the H loop to match ATen's summation order
        float result = 0.0f;
        for (int a = 0; a < taps_y; a++) {
            size_t row = input_base + (size_t)iy[y_tap + a] * in_w * channels;
            float row_result = 0.0f;
            for (int c = 0; c < taps_x; c++) {
                row_result += x[row + (size_t)ix[x_tap + c] * channels] * wx[x_tap + c];
            }
            result += row_result * wy[y_tap + a];
        }

        out[((size_t)b * out_h + y_out) * out_w * channels + gx] = result;
    """
SEPARABLE_INTERP_ARGS = {
    "name": "separable_interpolate",
    "input_names": ["x", "iy", "wy", "ix", "wx"],
    "output_names": ["out"],
}
