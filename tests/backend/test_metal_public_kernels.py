"""Metal kernels of public MLX projects, run through ``kernelkit.metal_kernel`` unchanged.

Each body (and header) below is the project's own text for ``mx.fast.metal_kernel`` (both
projects are MIT-licensed, Copyright Apple Inc.), cited by repository, file and commit; the
tests launch them as the project does, with random inputs and NaN-poisoned outputs, against
float64 NumPy references written here from each kernel's documented semantics.
"""

# The Metal bodies are the projects' lines as they are (long lines; rwkv7's f-string).
# ruff: noqa: E501, F541

from __future__ import annotations

import numpy as np
import pytest

import kernelkit

# mlx-lm (github.com/ml-explore/mlx-lm, MIT), mlx_lm/models/gated_delta.py at d78bf58:
# _make_gated_delta_kernel's source, as the project builds it (the f-string unchanged).


def gated_delta_source(has_mask: bool = False, vectorized: bool = False) -> str:
    mask_source = "mask[b_idx * T + t]" if has_mask else "true"

    # Configure g indexing based on whether gating is vectorized
    if vectorized:
        g_comment = "// g: [B, T, Hv, Dk]"
        g_setup = "auto g_ = g + (b_idx * T * Hv + hv_idx) * Dk;"
        g_access = "g_[s_idx]"
        g_advance = "g_ += Hv * Dk;"
    else:
        g_comment = "// g: [B, T, Hv]"
        g_setup = "auto g_ = g + b_idx * T * Hv;"
        g_access = "g_[hv_idx]"
        g_advance = "g_ += Hv;"

    source = f"""
        auto n = thread_position_in_grid.z;
        auto b_idx = n / Hv;
        auto hv_idx = n % Hv;
        auto hk_idx = hv_idx / (Hv / Hk);
        constexpr int n_per_t = Dk / 32;

        // q, k: [B, T, Hk, Dk]
        auto q_ = q + b_idx * T * Hk * Dk + hk_idx * Dk;
        auto k_ = k + b_idx * T * Hk * Dk + hk_idx * Dk;

        // v, y: [B, T, Hv, Dv]
        auto v_ = v + b_idx * T * Hv * Dv + hv_idx * Dv;
        y += b_idx * T * Hv * Dv + hv_idx * Dv;

        auto dk_idx = thread_position_in_threadgroup.x;
        auto dv_idx = thread_position_in_grid.y;

        // state_in, state_out: [B, Hv, Dv, Dk]
        auto i_state = state_in + (n * Dv + dv_idx) * Dk;
        auto o_state = state_out + (n * Dv + dv_idx) * Dk;

        float state[n_per_t];
        for (int i = 0; i < n_per_t; ++i) {{
          auto s_idx = n_per_t * dk_idx + i;
          state[i] = static_cast<float>(i_state[s_idx]);
        }}

        {g_comment}
        {g_setup}
        auto beta_ = beta + b_idx * T * Hv;

        for (int t = 0; t < T; ++t) {{
          if ({mask_source}) {{
            float kv_mem = 0.0f;
            for (int i = 0; i < n_per_t; ++i) {{
              auto s_idx = n_per_t * dk_idx + i;
              state[i] = state[i] * {g_access};
              kv_mem += state[i] * k_[s_idx];
            }}
            kv_mem = simd_sum(kv_mem);

            auto delta = (v_[dv_idx] - kv_mem) * beta_[hv_idx];

            float out = 0.0f;
            for (int i = 0; i < n_per_t; ++i) {{
              auto s_idx = n_per_t * dk_idx + i;
              state[i] = state[i] + k_[s_idx] * delta;
              out += state[i] * q_[s_idx];
            }}
            out = simd_sum(out);
            if (thread_index_in_simdgroup == 0) {{
              y[dv_idx] = static_cast<InT>(out);
            }}
          }} else {{
            y[dv_idx] = static_cast<InT>(0);
          }}
          // Increment data pointers to next time step
          q_ += Hk * Dk;
          k_ += Hk * Dk;
          v_ += Hv * Dv;
          y += Hv * Dv;
          {g_advance}
          beta_ += Hv;
        }}
        for (int i = 0; i < n_per_t; ++i) {{
          auto s_idx = n_per_t * dk_idx + i;
          o_state[s_idx] = static_cast<StT>(state[i]);
        }}
    """
    return source


# mlx-lm, mlx_lm/models/ssm.py (make_ssm_kernel) at d78bf58.
SSM = """
        auto n = thread_position_in_grid.z;
        auto h_idx = n % H;
        auto g_idx = n / G;
        constexpr int n_per_t = Ds / 32;

        auto x = X + n * Dh;
        out += n * Dh;
        auto i_state = state_in + n * Dh * Ds;
        auto o_state = state_out + n * Dh * Ds;

        // C and B have shape [batch, group, state_dim]
        // C and B need to be offset by group size
        auto C_ = C + g_idx * Ds;
        auto B_ = B + g_idx * Ds;

        auto ds_idx = thread_position_in_threadgroup.x;
        auto d_idx = thread_position_in_grid.y;

        auto dt_ = static_cast<float>(dt[n]);
        auto A = -fast::exp(static_cast<float>(A_log[h_idx]));
        auto dA = fast::exp(A * dt_);

        float acc = 0.0;
        auto x_ = static_cast<float>(x[d_idx]);

        for (int i = 0; i < n_per_t; ++i) {
            auto s_idx = n_per_t * ds_idx + i;
            auto idx = d_idx * Ds + s_idx;
            auto dB_by_x = x_ * dt_ * static_cast<float>(B_[s_idx]);
            auto state = dA * i_state[idx] + dB_by_x;
            o_state[idx] = static_cast<U>(state);
            acc += state * C_[s_idx];
        }
        acc = simd_sum(acc);
        if (thread_index_in_simdgroup == 0) {
            out[d_idx] = static_cast<T>(acc + x_ * D[h_idx]);
        }
    """


# mlx-lm, mlx_lm/models/rwkv7.py (_make_wkv7_kernel) at d78bf58; an f-string there too, so
# `{{ }}` are its braces.
WKV7 = f"""
        auto n = thread_position_in_grid.z;
        auto b_idx = n / H;
        auto h_idx = n % H;
        constexpr int n_per_t = D / 32;

        // [B, T, H, D]
        auto r_ = r + b_idx * T * H * D + h_idx * D;
        auto w_ = w + b_idx * T * H * D + h_idx * D;
        auto k_ = k + b_idx * T * H * D + h_idx * D;
        auto v_ = v + b_idx * T * H * D + h_idx * D;
        auto a_ = a + b_idx * T * H * D + h_idx * D;
        auto b_ = b + b_idx * T * H * D + h_idx * D;
        y += b_idx * T * H * D + h_idx * D;

        auto dk_idx = thread_position_in_threadgroup.x;
        auto dv_idx = thread_position_in_grid.y;

        // state_in, state_out: [B, H, D, D]
        auto i_state = state_in  + (n * D + dv_idx) * D;
        auto o_state = state_out + (n * D + dv_idx) * D;

        float state[n_per_t];
        for (int i = 0; i < n_per_t; ++i) {{
          auto s_idx = n_per_t * dk_idx + i;
          state[i] = static_cast<float>(i_state[s_idx]);
        }}

        for (int t = 0; t < T; ++t) {{
          float sa = 0.0f;
          for (int i = 0; i < n_per_t; ++i) {{
            auto s_idx = n_per_t * dk_idx + i;
            sa += state[i] * a_[s_idx];
            state[i] = state[i] * w_[s_idx];
          }}
          sa = simd_sum(sa);

          float out = 0.0f;
          for (int i = 0; i < n_per_t; ++i) {{
            auto s_idx = n_per_t * dk_idx + i;
            state[i] = state[i] + k_[s_idx] * v_[dv_idx] + sa * b_[s_idx];
            out += state[i] * r_[s_idx];
          }}
          out = simd_sum(out);
          if (thread_index_in_simdgroup == 0) {{
            y[dv_idx] = static_cast<InT>(out);
          }}

          // Increment data pointers to next time step
          r_ += H * D;
          w_ += H * D;
          k_ += H * D;
          v_ += H * D;
          a_ += H * D;
          b_ += H * D;
          y  += H * D;
        }}
        for (int i = 0; i < n_per_t; ++i) {{
          auto s_idx = n_per_t * dk_idx + i;
          o_state[s_idx] = static_cast<InT>(state[i]);
        }}
    """


# mlx-lm, mlx_lm/models/bitlinear_layers.py (make_bitlinear_kernel) at d78bf58.
BITLINEAR = """
    constexpr int M = 4;
    constexpr int BLOCK = 32;

    uint tid = thread_position_in_grid.y;
    uint in_offset = thread_position_in_grid.x;

    uint batch_idx = tid / (out_features / 4);
    uint row_idx = tid % (out_features / 4);

    float sum[4] = {0.0};

    for (uint i = in_offset * M; i < in_features; i += BLOCK * M) {
        float v[M];
        for (int j=0; j<M; j++) {
            v[j] = x[batch_idx * in_features + i + j];
        }

        for (int j=0; j<M; j++) {
            uint8_t w = packed_weights[row_idx * in_features + i + j];
            sum[0] += v[j] * ((w & 3) - 1);
            sum[1] += v[j] * (((w >> 2) & 3) - 1);
            sum[2] += v[j] * (((w >> 4) & 3) - 1);
            sum[3] += v[j] * (((w >> 6) & 3) - 1);
        }
    }

    for (int j=0; j<4; j++) {
        sum[j] = simd_sum(sum[j]);
    }

    // Apply weight scaling by diving them or multiplying them
    if (in_offset == 0) {
        float scale = invert_weight_scales ? 1 / weight_scale[0] : weight_scale[0];
        for (int i=0; i<4; i++) {
            out[batch_idx * out_features + row_idx + i * (out_features/4)] = static_cast<T>(sum[i] * scale);
        }
    }
    """


# mlx-lm, mlx_lm/tuner/losses.py (_make_kl_forward_kernel) at d78bf58.
KL_FORWARD = """
    constexpr int M = 4;
    constexpr int block = 1024 * M;
    constexpr int full_blocks = V / block;
    constexpr int extra = V - full_blocks * block;

    threadgroup float shared[32 * 2];

    uint out_idx = threadgroup_position_in_grid.y;
    uint simd_lane_id = thread_index_in_simdgroup;
    uint simd_group_id = simdgroup_index_in_threadgroup;

    logits_q += out_idx * V;
    logits_p += out_idx * V;
    out += out_idx;

    float lse_q_minus_p;
    float lse_p;

    {
        float max_q = -1e30;
        float max_p = -1e30;
        float sum_exp_q = 0;
        float sum_exp_p = 0;

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j < M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }
        }

        // Share the maxs across the threadgroup
        float prev_max_q = max_q;
        float prev_max_p = max_p;
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = max_q;
            shared[simd_group_id * 2 + 1] = max_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        max_q = shared[simd_lane_id * 2 + 0];
        max_p = shared[simd_lane_id * 2 + 1];
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);

        // Share the sum_exp across the threadgroup
        sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
        sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = sum_exp_q;
            shared[simd_group_id * 2 + 1] = sum_exp_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        sum_exp_q = shared[simd_lane_id * 2 + 0];
        sum_exp_p = shared[simd_lane_id * 2 + 1];
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);

        lse_p = max_p + metal::fast::log(sum_exp_p);
        lse_q_minus_p = max_q + metal::fast::log(sum_exp_q) - lse_p;
    }

    threadgroup_barrier(mem_flags::mem_none);

    {
        float kl = 0;

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and add to the kl
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }

            for (int j=0; j<M; j++) {
                kl += metal::fast::exp(vals_p[j] - lse_p) * (vals_p[j] - vals_q[j] + lse_q_minus_p);
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }

            for (int j=0; j<M; j++) {
                kl += metal::fast::exp(vals_p[j] - lse_p) * (vals_p[j] - vals_q[j] + lse_q_minus_p);
            }
        }

        // Add the kl across the threadgroup
        kl = simd_sum(kl);
        if (simd_lane_id == 0) {
            shared[simd_group_id] = kl;
        }
        threadgroup_barrier(mem_flags::mem_none);
        kl = shared[simd_lane_id];
        kl = simd_sum(kl);

        if (thread_index_in_threadgroup == 0) {
            out[0] = static_cast<T>(kl);
        }
    }
    """


# mlx-lm, mlx_lm/tuner/losses.py (_make_kl_backward_kernel) at d78bf58.
KL_BACKWARD = """
    constexpr int M = 4;
    constexpr int block = 1024 * M;
    constexpr int full_blocks = V / block;
    constexpr int extra = V - full_blocks * block;

    threadgroup float shared[32 * 2];

    uint out_idx = threadgroup_position_in_grid.y;
    uint simd_lane_id = thread_index_in_simdgroup;
    uint simd_group_id = simdgroup_index_in_threadgroup;

    logits_q += out_idx * V;
    logits_p += out_idx * V;
    out += out_idx * V;
    cotan += out_idx;

    float lse_q;
    float lse_p;

    {
        float max_q = -1e30;
        float max_p = -1e30;
        float sum_exp_q = 0;
        float sum_exp_p = 0;

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j < M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }
        }

        // Share the maxs across the threadgroup
        float prev_max_q = max_q;
        float prev_max_p = max_p;
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = max_q;
            shared[simd_group_id * 2 + 1] = max_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        max_q = shared[simd_lane_id * 2 + 0];
        max_p = shared[simd_lane_id * 2 + 1];
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);

        // Share the sum_exp across the threadgroup
        sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
        sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = sum_exp_q;
            shared[simd_group_id * 2 + 1] = sum_exp_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        sum_exp_q = shared[simd_lane_id * 2 + 0];
        sum_exp_p = shared[simd_lane_id * 2 + 1];
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);

        lse_p = max_p + metal::fast::log(sum_exp_p);
        lse_q = max_q + metal::fast::log(sum_exp_q);
    }

    threadgroup_barrier(mem_flags::mem_none);

    {
        float kl = 0;
        float c = cotan[0];

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and add to the kl
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }

            for (int j=0; j<M; j++) {
                out[offset + j] = static_cast<T>(
                    c * (metal::fast::exp(vals_q[j] - lse_q) - metal::fast::exp(vals_p[j] - lse_p)));
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }

            for (int j=0; j<M; j++) {
                if (offset + j < V) {
                    out[offset + j] = static_cast<T>(
                        c * (metal::fast::exp(vals_q[j] - lse_q) - metal::fast::exp(vals_p[j] - lse_p)));
                }
            }
        }
    }
    """


# mlx-lm, mlx_lm/tuner/losses.py (_make_js_forward_kernel) at d78bf58.
JS_FORWARD = """
    constexpr int M = 4;
    constexpr int block = 1024 * M;
    constexpr int full_blocks = V / block;
    constexpr int extra = V - full_blocks * block;

    threadgroup float shared[32 * 2];

    uint out_idx = threadgroup_position_in_grid.y;
    uint simd_lane_id = thread_index_in_simdgroup;
    uint simd_group_id = simdgroup_index_in_threadgroup;

    logits_q += out_idx * V;
    logits_p += out_idx * V;
    out += out_idx;
    out_kl_q += out_idx;

    float lse_p;
    float lse_q;

    {
        float max_q = -1e30;
        float max_p = -1e30;
        float sum_exp_q = 0;
        float sum_exp_p = 0;

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j < M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }
        }

        // Share the maxs across the threadgroup
        float prev_max_q = max_q;
        float prev_max_p = max_p;
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = max_q;
            shared[simd_group_id * 2 + 1] = max_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        max_q = shared[simd_lane_id * 2 + 0];
        max_p = shared[simd_lane_id * 2 + 1];
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);

        // Share the sum_exp across the threadgroup
        sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
        sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = sum_exp_q;
            shared[simd_group_id * 2 + 1] = sum_exp_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        sum_exp_q = shared[simd_lane_id * 2 + 0];
        sum_exp_p = shared[simd_lane_id * 2 + 1];
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);

        lse_p = max_p + metal::fast::log(sum_exp_p);
        lse_q = max_q + metal::fast::log(sum_exp_q);
    }

    threadgroup_barrier(mem_flags::mem_none);

    {
        float kl_p = 0;
        float kl_q = 0;
        const float logtwo = metal::fast::log(static_cast<float>(2));

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and add to the kl_p and kl_q
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }

            for (int j=0; j<M; j++) {
                float logp_j = vals_p[j] - lse_p;
                float logq_j = vals_q[j] - lse_q;
                float p_j = metal::fast::exp(logp_j);
                float q_j = metal::fast::exp(logq_j);
                kl_p += p_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logq_j - logp_j)));
                kl_q += q_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logp_j - logq_j)));
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }

            for (int j=0; j<M; j++) {
                float logp_j = vals_p[j] - lse_p;
                float logq_j = vals_q[j] - lse_q;
                float p_j = metal::fast::exp(logp_j);
                float q_j = metal::fast::exp(logq_j);
                kl_p += p_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logq_j - logp_j)));
                kl_q += q_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logp_j - logq_j)));
            }
        }

        // Add the kl_p and kl_q across the threadgroup
        kl_p = simd_sum(kl_p);
        kl_q = simd_sum(kl_q);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = kl_p;
            shared[simd_group_id * 2 + 1] = kl_q;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        kl_p = shared[simd_lane_id * 2 + 0];
        kl_q = shared[simd_lane_id * 2 + 1];
        kl_p = simd_sum(kl_p);
        kl_q = simd_sum(kl_q);

        if (thread_index_in_threadgroup == 0) {
            out[0] = static_cast<T>(0.5 * kl_p + 0.5 * kl_q);
            out_kl_q[0] = static_cast<T>(kl_q);
        }
    }
    """


# mlx-lm, mlx_lm/tuner/losses.py (_make_js_backward_kernel) at d78bf58.
JS_BACKWARD = """
    constexpr int M = 4;
    constexpr int block = 1024 * M;
    constexpr int full_blocks = V / block;
    constexpr int extra = V - full_blocks * block;

    threadgroup float shared[32 * 2];

    uint out_idx = threadgroup_position_in_grid.y;
    uint simd_lane_id = thread_index_in_simdgroup;
    uint simd_group_id = simdgroup_index_in_threadgroup;

    logits_q += out_idx * V;
    logits_p += out_idx * V;
    out_q += out_idx * V;
    cotan += out_idx;
    output_kl_q += out_idx;

    float lse_q;
    float lse_p;

    {
        float max_q = -1e30;
        float max_p = -1e30;
        float sum_exp_q = 0;
        float sum_exp_p = 0;

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            // Read and update q and p
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j < M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }
            float prev_max_q = max_q;
            float prev_max_p = max_p;
            for (int j=0; j<M; j++) {
                max_q = max(max_q, vals_q[j]);
                max_p = max(max_p, vals_p[j]);
            }
            sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
            sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
            for (int j=0; j<M; j++) {
                sum_exp_q += metal::fast::exp(vals_q[j] - max_q);
                sum_exp_p += metal::fast::exp(vals_p[j] - max_p);
            }
        }

        // Share the maxs across the threadgroup
        float prev_max_q = max_q;
        float prev_max_p = max_p;
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = max_q;
            shared[simd_group_id * 2 + 1] = max_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        max_q = shared[simd_lane_id * 2 + 0];
        max_p = shared[simd_lane_id * 2 + 1];
        max_q = simd_max(max_q);
        max_p = simd_max(max_p);

        // Share the sum_exp across the threadgroup
        sum_exp_q *= metal::fast::exp(prev_max_q - max_q);
        sum_exp_p *= metal::fast::exp(prev_max_p - max_p);
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);
        if (simd_lane_id == 0) {
            shared[simd_group_id * 2 + 0] = sum_exp_q;
            shared[simd_group_id * 2 + 1] = sum_exp_p;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        sum_exp_q = shared[simd_lane_id * 2 + 0];
        sum_exp_p = shared[simd_lane_id * 2 + 1];
        sum_exp_q = simd_sum(sum_exp_q);
        sum_exp_p = simd_sum(sum_exp_p);

        lse_p = max_p + metal::fast::log(sum_exp_p);
        lse_q = max_q + metal::fast::log(sum_exp_q);
    }

    threadgroup_barrier(mem_flags::mem_none);

    {
        float c = cotan[0];
        const float logtwo = metal::fast::log(static_cast<float>(2));
        float kl_q = output_kl_q[0];

        int offset = thread_index_in_threadgroup * M;
        for (int i = 0; i < full_blocks; i++) {
            // Read and compute vjp for logits_q
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = logits_q[offset + j];
                vals_p[j] = logits_p[offset + j];
            }

            for (int j=0; j<M; j++) {
                float logp_j = vals_p[j] - lse_p;
                float logq_j = vals_q[j] - lse_q;
                float q_j = metal::fast::exp(logq_j);
                out_q[offset + j] = static_cast<T>(
                    c * 0.5 * q_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logp_j - logq_j)) - kl_q)
                );
            }

            // Move to the next block
            offset += block;
        }
        if (extra > 0) {
            float vals_q[M];
            float vals_p[M];
            for (int j=0; j<M; j++) {
                vals_q[j] = (offset + j < V) ? logits_q[offset + j] : -1e30;
                vals_p[j] = (offset + j < V) ? logits_p[offset + j] : -1e30;
            }

            for (int j=0; j<M; j++) {
                if (offset + j < V) {
                    float logp_j = vals_p[j] - lse_p;
                    float logq_j = vals_q[j] - lse_q;
                    float q_j = metal::fast::exp(logq_j);
                    out_q[offset + j] = static_cast<T>(
                        c * 0.5 * q_j * (logtwo - metal::fast::log(1 + metal::fast::exp(logp_j - logq_j)) - kl_q)
                    );
                }
            }
        }
    }
    """


# mlx-examples (github.com/ml-explore/mlx-examples, MIT), encodec/encodec.py at 7ddca42:
# _lstm_kernel's header and source.
LSTM_HEADER = """
    template <typename T>
    T sigmoid(T x) {
        auto y = 1 / (1 + metal::exp(-metal::abs(x)));
        return (x < 0) ? 1 - y : y;
    }
    """
LSTM = """
        uint b = thread_position_in_grid.x;
        uint d = hidden_size * 4;

        uint elem = b * d + thread_position_in_grid.y;
        uint index = elem;
        uint x_index = b * num_time_steps * d + time_step * d + index;

        auto i = sigmoid(h_in[index] + x[x_index]);
        index += hidden_size;
        x_index += hidden_size;
        auto f = sigmoid(h_in[index] + x[x_index]);
        index += hidden_size;
        x_index += hidden_size;
        auto g = metal::precise::tanh(h_in[index] + x[x_index]);
        index += hidden_size;
        x_index += hidden_size;
        auto o = sigmoid(h_in[index] + x[x_index]);

        cell_state[elem] = f * cell[elem] + i * g;
        hidden_state[elem] = o * metal::precise::tanh(cell_state[elem]);
    """


RNG = np.random.default_rng(5)
F32, F16 = np.float32, np.float16
TOL = {F32: 2e-4, F16: 2e-2}


def _put(arrays, *xs):
    return [arrays.put(x) for x in xs]


def _poison(arrays, shapes, dtypes):
    return [arrays.full(s, np.nan, d) for s, d in zip(shapes, dtypes)]


def _check(arrays, got, want, dtype):
    tol = TOL[np.dtype(dtype).type]
    np.testing.assert_allclose(arrays.get(got).astype(np.float64), want, rtol=tol, atol=tol)


# --- references (float64), from each kernel's documented semantics --------------------------


def gated_delta_ref(q, k, v, g, beta, state, mask=None):
    """mlx-lm's gated_delta_ops: q, k [B,T,Hk,Dk]; v [B,T,Hv,Dv]; g [B,T,Hv(,Dk)]; state
    [B,Hv,Dv,Dk]; a masked step writes y = 0 and keeps the state."""
    q, k, v, g, beta, s = (np.asarray(a, np.float64) for a in (q, k, v, g, beta, state))
    _B, T, Hk, _ = q.shape
    Hv = v.shape[2]
    q, k = np.repeat(q, Hv // Hk, 2), np.repeat(k, Hv // Hk, 2)
    ys = []
    for t in range(T):
        decay = g[:, t, :, None, None] if g.ndim == 3 else g[:, t, :, None, :]
        new = s * decay
        kv = (new * k[:, t, :, None, :]).sum(-1)
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        new = new + k[:, t, :, None, :] * delta[..., None]
        y = (new * q[:, t, :, None, :]).sum(-1)
        if mask is not None:
            on = mask[:, t].astype(bool)
            y = np.where(on[:, None, None], y, 0)
            new = np.where(on[:, None, None, None], new, s)
        s = new
        ys.append(y)
    return np.stack(ys, 1), s


@pytest.mark.parametrize("has_mask", [False, True])
@pytest.mark.parametrize("vectorized", [False, True])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_gated_delta_step(arrays, has_mask, vectorized, dtype):
    B, T, Hk, Hv, Dk, Dv = 2, 3, 2, 4, 64, 16
    q, k = (RNG.standard_normal((B, T, Hk, Dk)).astype(dtype) * 0.3 for _ in range(2))
    v = RNG.standard_normal((B, T, Hv, Dv)).astype(dtype)
    g = RNG.uniform(0.5, 1, (B, T, Hv, Dk) if vectorized else (B, T, Hv)).astype(F32)
    beta = RNG.uniform(0, 1, (B, T, Hv)).astype(dtype)
    state = RNG.standard_normal((B, Hv, Dv, Dk)).astype(F32)
    mask = np.array([[True, False, True], [False, True, True]])
    inputs = [q, k, v, g, beta, state, T] + ([mask] if has_mask else [])
    names = ["q", "k", "v", "g", "beta", "state_in", "T"] + (["mask"] if has_mask else [])
    kernel = kernelkit.metal_kernel(
        name="gated_delta_step", input_names=names, output_names=["y", "state_out"],
        source=gated_delta_source(has_mask, vectorized),
    )  # fmt: skip
    shapes, dtypes = [(B, T, Hv, Dv), state.shape], [dtype, F32]
    y, s = kernel(
        inputs=[arrays.put(x) if isinstance(x, np.ndarray) else x for x in inputs],
        template=[("InT", dtype), ("StT", F32), ("Dk", Dk), ("Dv", Dv), ("Hk", Hk), ("Hv", Hv)],
        grid=(32, Dv, B * Hv), threadgroup=(32, 4, 1), output_shapes=shapes,
        output_dtypes=dtypes, out=_poison(arrays, shapes, dtypes),
    )  # fmt: skip
    want_y, want_s = gated_delta_ref(q, k, v, g, beta, state, mask if has_mask else None)
    _check(arrays, y, want_y, dtype)
    _check(arrays, s, want_s, dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_ssm_update(arrays, dtype):
    n, h, d, hb, ds = 2, 4, 8, 2, 64  # batch, heads, head dim, groups, state dim
    x = RNG.standard_normal((n, 1, h, d)).astype(dtype)
    a_log = RNG.uniform(-1, 0.5, h).astype(F32)
    b, c = (RNG.standard_normal((n, hb, ds)).astype(dtype) * 0.3 for _ in range(2))
    dd = RNG.standard_normal(h).astype(dtype)
    dt = RNG.uniform(0.01, 1, (n, h)).astype(F32)
    state = RNG.standard_normal((n, h, d, ds)).astype(F32)
    kernel = kernelkit.metal_kernel(
        name="ssm_kernel", input_names=["X", "A_log", "B", "C", "D", "dt", "state_in"],
        output_names=["out", "state_out"], source=SSM,
    )  # fmt: skip
    shapes, dtypes = [(n, 1, h, d), state.shape], [dtype, F32]
    out, s = kernel(
        inputs=_put(arrays, x, a_log, b, c, dd, dt, state),
        template=[("T", dtype), ("U", F32), ("Dh", d), ("Ds", ds), ("H", h), ("G", h // hb)],
        grid=(32, d, h * n), threadgroup=(32, 8, 1), output_shapes=shapes, output_dtypes=dtypes,
        out=_poison(arrays, shapes, dtypes),
    )  # fmt: skip
    # Mamba-2 step: dA = exp(-exp(A_log) dt); state = dA state + dt x B; y = state.C + D x
    f = np.float64
    grp = np.arange(h) // (h // hb)
    da = np.exp(-np.exp(a_log.astype(f)) * dt)  # [n, h]
    bx = dt[..., None, None] * x[:, 0, :, :, None].astype(f) * b[:, grp, None, :].astype(f)
    want_s = da[..., None, None] * state + bx
    want = (want_s * c[:, grp, None, :].astype(f)).sum(-1) + dd.astype(f)[:, None] * x[:, 0]
    _check(arrays, s, want_s, dtype)
    _check(arrays, out, want[:, None], dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_wkv7(arrays, dtype):
    B, T, H, D = 2, 3, 2, 64
    r, w, k, v, a, b = (RNG.standard_normal((B, T, H, D)) * 0.2 for _ in range(6))
    w = RNG.uniform(0.8, 1, (B, T, H, D))
    r, w, k, v, a, b = (x.astype(dtype) for x in (r, w, k, v, a, b))
    state = (RNG.standard_normal((B, H, D, D)) * 0.2).astype(dtype)
    kernel = kernelkit.metal_kernel(
        name="wkv7_kernel", input_names=["r", "w", "k", "v", "a", "b", "state_in", "T"],
        output_names=["y", "state_out"], source=WKV7,
    )  # fmt: skip
    shapes = [(B, T, H, D), state.shape]
    y, s = kernel(
        inputs=[*_put(arrays, r, w, k, v, a, b, state), T],
        template=[("InT", dtype), ("H", H), ("D", D)], grid=(32, D, B * H),
        threadgroup=(32, 4, 1), output_shapes=shapes, output_dtypes=[dtype, dtype],
        out=_poison(arrays, shapes, [dtype, dtype]),
    )  # fmt: skip
    # mlx-lm's _wkv7_step_ops: S = S diag(w) + v k^T + (S a) b^T; y = S r
    f = lambda x: np.asarray(x, np.float64)
    st, ys = f(state), []
    for t in range(T):
        sab = (st @ f(a[:, t])[..., None]) @ f(b[:, t])[..., None, :]
        st = st * f(w[:, t])[:, :, None, :] + f(v[:, t])[..., None] @ f(k[:, t])[..., None, :] + sab
        ys.append((st @ f(r[:, t])[..., None])[..., 0])
    _check(arrays, y, np.stack(ys, 1), dtype)
    _check(arrays, s, st, dtype)


@pytest.mark.parametrize("invert", [False, True])
def test_bitlinear_matmul(arrays, invert):
    nb, fin, fout = 3, 256, 16
    x = RNG.standard_normal((nb, fin)).astype(F32)
    packed = RNG.integers(0, 256, (fout // 4, fin), dtype=np.uint8)
    scale = np.array([0.7], F32)
    kernel = kernelkit.metal_kernel(
        name="bitlinear_matmul", input_names=["x", "packed_weights", "weight_scale"],
        output_names=["out"], source=BITLINEAR,
    )  # fmt: skip
    (out,) = kernel(
        inputs=_put(arrays, x, packed, scale),
        template=[("T", F32), ("invert_weight_scales", invert), ("in_features", fin),
                  ("out_features", fout)],
        grid=(32, nb * fout // 4, 1), threadgroup=(32, 1, 1), output_shapes=[(nb, fout)],
        output_dtypes=[F32], out=_poison(arrays, [(nb, fout)], [F32]),
    )  # fmt: skip
    # ternary weights, 2 bits each (value - 1): bits 2i..2i+1 of row r are output row i*fout/4 + r
    w = np.concatenate([((packed >> (2 * i)) & 3).astype(np.float64) - 1 for i in range(4)])
    s = 1 / 0.7 if invert else 0.7
    _check(arrays, out, x.astype(np.float64) @ w.T * s, F32)


def _log_softmax(z):
    z = np.asarray(z, np.float64)
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


LOSS_ROWS, LOSS_V = 3, 5000  # V over 4096 = 1024 threads x 4: full blocks and a tail


@pytest.mark.parametrize("which", ["kl", "js"])
def test_divergence_losses(arrays, which):
    lq, lp = (RNG.standard_normal((LOSS_ROWS, LOSS_V)).astype(F32) * 2 for _ in range(2))
    cot = RNG.standard_normal(LOSS_ROWS).astype(F32)
    lgq, lgp = _log_softmax(lq), _log_softmax(lp)
    pq, pp = np.exp(lgq), np.exp(lgp)
    common = dict(template=[("T", F32), ("V", LOSS_V)], grid=(1024, LOSS_ROWS, 1),
                  threadgroup=(1024, 1, 1))  # fmt: skip
    row, full = (LOSS_ROWS,), (LOSS_ROWS, LOSS_V)
    if which == "kl":  # KL(p || q) per row, and its gradient in logits_q
        fwd = kernelkit.metal_kernel(name="kl_forward", input_names=["logits_q", "logits_p"],
                                     output_names=["out"], source=KL_FORWARD)  # fmt: skip
        (kl,) = fwd(inputs=_put(arrays, lq, lp), output_shapes=[row], output_dtypes=[F32],
                    out=_poison(arrays, [row], [F32]), **common)  # fmt: skip
        _check(arrays, kl, (pp * (lgp - lgq)).sum(-1), F32)
        bwd = kernelkit.metal_kernel(
            name="kl_backward", input_names=["logits_q", "logits_p", "cotan"],
            output_names=["out"], source=KL_BACKWARD,
        )  # fmt: skip
        (dq,) = bwd(inputs=_put(arrays, lq, lp, cot), output_shapes=[full], output_dtypes=[F32],
                    out=_poison(arrays, [full], [F32]), **common)  # fmt: skip
        _check(arrays, dq, cot[:, None] * (pq - pp), F32)
        return
    # Jensen-Shannon: m = (p + q) / 2; out = (KL(p||m) + KL(q||m)) / 2, out_kl_q = KL(q||m)
    lgm = np.log((pp + pq) / 2)
    kl_p, kl_q = (pp * (lgp - lgm)).sum(-1), (pq * (lgq - lgm)).sum(-1)
    fwd = kernelkit.metal_kernel(name="js_forward", input_names=["logits_q", "logits_p"],
                                 output_names=["out", "out_kl_q"], source=JS_FORWARD)  # fmt: skip
    js, klq = fwd(inputs=_put(arrays, lq, lp), output_shapes=[row, row], output_dtypes=[F32] * 2,
                  out=_poison(arrays, [row, row], [F32] * 2), **common)  # fmt: skip
    _check(arrays, js, (kl_p + kl_q) / 2, F32)
    _check(arrays, klq, kl_q, F32)
    bwd = kernelkit.metal_kernel(
        name="js_backward", input_names=["logits_q", "logits_p", "cotan", "output_kl_q"],
        output_names=["out_q"], source=JS_BACKWARD,
    )  # fmt: skip
    (dq,) = bwd(inputs=_put(arrays, lq, lp, cot, kl_q.astype(F32)), output_shapes=[full],
                output_dtypes=[F32], out=_poison(arrays, [full], [F32]), **common)  # fmt: skip
    # d JS / d logits_q = q (log(q/m) - KL(q||m)) / 2
    _check(arrays, dq, cot[:, None] * 0.5 * pq * ((lgq - lgm) - kl_q[:, None]), F32)


@pytest.mark.parametrize("dtype", [F32, F16])
def test_encodec_lstm_step(arrays, dtype):
    hidden, steps, t = 40, 5, 2
    x = RNG.standard_normal((1, steps, 4 * hidden)).astype(dtype)
    h_in = RNG.standard_normal((1, 4 * hidden)).astype(dtype)
    cell = RNG.standard_normal((1, hidden)).astype(dtype)
    kernel = kernelkit.metal_kernel(
        name="lstm",
        input_names=["x", "h_in", "cell", "hidden_size", "time_step", "num_time_steps"],
        output_names=["hidden_state", "cell_state"], header=LSTM_HEADER, source=LSTM,
    )  # fmt: skip
    # encodec's lstm_custom launch (its indexing is written for a batch of 1, as encodec runs it)
    hs, cs = kernel(
        inputs=[*_put(arrays, x, h_in, cell), hidden, t, steps],
        output_shapes=[cell.shape] * 2, output_dtypes=[dtype] * 2, grid=(1, h_in.size // 4, 1),
        threadgroup=(256, 1, 1), out=_poison(arrays, [cell.shape] * 2, [dtype] * 2),
    )  # fmt: skip
    z = h_in[0].astype(np.float64) + x[0, t]
    i, f, g, o = (
        1 / (1 + np.exp(-u)) if n != 2 else np.tanh(u) for n, u in enumerate(np.split(z, 4))
    )
    want_c = f * cell[0] + i * g
    _check(arrays, cs, want_c[None], dtype)
    _check(arrays, hs, (o * np.tanh(want_c))[None], dtype)


# On the CUDA backend the 16-bit types are cuda_fp16.h's classes: `float * half` was ambiguous
# there (every kernel above failed to compile for half/bfloat16 inputs). Compiled with NVRTC.
NVRTC_CASES = {
    "gated_delta": (
        lambda: gated_delta_source(True, True),
        "",
        ["q", "k", "v", "g", "beta", "state_in", "T", "mask"],
        ["y", "state_out"],
        ["H", "H", "H", "float32", "H", "float32", ("scalar", "int32"), "bool"],
        ["H", "float32"],
        [("InT", "H"), ("StT", "float32"), ("Dk", 64), ("Dv", 16), ("Hk", 2), ("Hv", 4)],
    ),
    "ssm": (
        lambda: SSM,
        "",
        ["X", "A_log", "B", "C", "D", "dt", "state_in"],
        ["out", "state_out"],
        ["H", "float32", "H", "H", "H", "float32", "float32"],
        ["H", "float32"],
        [("T", "H"), ("U", "float32"), ("Dh", 8), ("Ds", 64), ("H", 4), ("G", 2)],
    ),
    "wkv7": (
        lambda: WKV7,
        "",
        ["r", "w", "k", "v", "a", "b", "state_in", "T"],
        ["y", "state_out"],
        ["H"] * 7 + [("scalar", "int32")],
        ["H", "H"],
        [("InT", "H"), ("H", 2), ("D", 64)],
    ),
    "lstm": (
        lambda: LSTM,
        LSTM_HEADER,
        ["x", "h_in", "cell", "hidden_size", "time_step", "num_time_steps"],
        ["hidden_state", "cell_state"],
        ["H", "H", "H"] + [("scalar", "int32")] * 3,
        ["H", "H"],
        [],
    ),
}


def _nvrtc_compile(cuda, case, h):
    from kernelkit._dtypes import DTYPES
    from kernelkit._pipeline.render import render_request

    source, header, ins, outs, in_types, out_types, template = NVRTC_CASES[case]
    sub = lambda t: h if t == "H" else t
    mk = kernelkit.metal_kernel(f"pub_{case}", ins, outs, source(), header=header)
    k = mk._kernel(tuple(ins), tuple(outs), (), True)
    kinds = [t if isinstance(t, tuple) else ("array", sub(t)) for t in in_types]
    kinds += [("scalar", "int32")] * 3  # the grid
    _, req = render_request(
        k.spec,
        cuda,
        cuda.target_for_arch("sm_80"),
        [(kind, DTYPES[d]) for kind, d in kinds],
        [DTYPES[sub(d)] for d in out_types],
        [(n, DTYPES[sub(v)] if isinstance(v, str) else v) for n, v in template],
        False,
    )
    return cuda.compile(req)


@pytest.mark.parametrize("h", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(NVRTC_CASES))
def test_public_kernel_compiles_for_16_bit_types_with_nvrtc(cuda, case, h):
    assert _nvrtc_compile(cuda, case, h).binary


def test_kl_forward_in_half_where_a_half_meets_a_literal_in_a_conditional(arrays):
    # mlx-lm's loss kernels read `(offset + j < V) ? logits_q[offset + j] : -1e30`: with
    # T = half that is `half : double`, which C++ could not settle for class-type halves (a
    # compile error on both backends); Metal promotes, and so does kernelkit now (issue 25 item 8)
    kernel = kernelkit.metal_kernel(name="kl_forward", input_names=["logits_q", "logits_p"],
                                    output_names=["out"], source=KL_FORWARD)  # fmt: skip
    lq, lp = (RNG.standard_normal((LOSS_ROWS, LOSS_V)).astype(F16) for _ in range(2))
    lgq, lgp = (_log_softmax(a.astype(np.float64)) for a in (lq, lp))
    (kl,) = kernel(inputs=_put(arrays, lq, lp), output_shapes=[(LOSS_ROWS,)], output_dtypes=[F16],
                   template=[("T", F16), ("V", LOSS_V)], grid=(1024, LOSS_ROWS, 1),
                   threadgroup=(1024, 1, 1))  # fmt: skip
    want = (np.exp(lgp) * (lgp - lgq)).sum(-1)
    np.testing.assert_allclose(arrays.get(kl).astype(np.float64), want, rtol=1e-2, atol=1e-2)
