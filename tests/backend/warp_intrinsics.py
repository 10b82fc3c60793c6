"""One kernel that calls the warp intrinsics (shuffles of every width and direction with lane
offsets in and out of range, votes, match, the integer reductions) on random per-lane values,
each result as a 64-bit integer per thread, for the CPU backend's checks and the GPU's
bit-for-bit comparison with the CPU backend."""

from __future__ import annotations

import numpy as np

import kernelkit

WIDTHS = (32, 16, 8, 4, 2, 1)
F = "0xffffffffu"


def outputs() -> list[tuple[str, str]]:
    """(name, C++ expression) per thread: v an int, f a float, d a double, h a long long, s a
    lane offset (-40..40), p a predicate, q an unsigned in 0..3 (few distinct values)."""
    out = []
    for w in WIDTHS:
        out += [
            (f"shfl_w{w}", f"__shfl_sync({F}, v, s, {w})"),
            (f"shfl_up_w{w}", f"__shfl_up_sync({F}, v, (unsigned)(s & 63), {w})"),
            (f"shfl_down_w{w}", f"__shfl_down_sync({F}, v, (unsigned)(s & 63), {w})"),
            (f"shfl_xor_w{w}", f"__shfl_xor_sync({F}, v, s & 63, {w})"),
        ]
    out += [
        ("shfl_float", f"__float_as_int(__shfl_xor_sync({F}, f, 5))"),
        ("shfl_double", f"__double_as_longlong(__shfl_down_sync({F}, d, 3))"),
        ("shfl_ll", f"__shfl_sync({F}, h, s)"),
        ("ballot", f"(long long)__ballot_sync({F}, p)"),
        ("any", f"__any_sync({F}, p)"),
        ("all", f"__all_sync({F}, p)"),
        ("all_true", f"__all_sync({F}, 1)"),
        ("activemask", "(long long)__activemask()"),
        ("reduce_add", f"(long long)__reduce_add_sync({F}, (unsigned)v)"),
        ("reduce_min_u", f"(long long)__reduce_min_sync({F}, (unsigned)v)"),
        ("reduce_max_i", f"__reduce_max_sync({F}, v)"),
        ("reduce_min_i", f"__reduce_min_sync({F}, v)"),
        ("reduce_and", f"(long long)__reduce_and_sync({F}, (unsigned)v)"),
        ("reduce_or", f"(long long)__reduce_or_sync({F}, (unsigned)v)"),
        ("reduce_xor", f"(long long)__reduce_xor_sync({F}, (unsigned)v)"),
        ("match_any", f"(long long)__match_any_sync({F}, q)"),
        ("match_all", f"(long long)__match_all_sync({F}, (unsigned)v >> 30, &pred)"),
        ("match_all_pred", "pred"),
        ("lane_sum_xor", "lane_sum"),
    ]
    return out


def kernel() -> kernelkit.Kernel:
    lines = [
        "const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
        "const long long n = vi_shape[0];",
        "const int v = vi[t], s = si[t];",
        "const float f = __int_as_float(v);",
        "const double d = (double)v * 1.000001;",
        "const long long h = ((long long)v << 32) ^ (long long)s;",
        "const int p = (v & 3) == 0;",
        "const unsigned q = (unsigned)v & 3u;",
        "int pred = -1;",
        "int lane_sum = v;  // a butterfly sum, as reductions are written",
        f"for (int o = 16; o > 0; o >>= 1) lane_sum += __shfl_xor_sync({F}, lane_sum, o);",
    ]
    for k, (_, e) in enumerate(outputs()):
        lines.append(f"r[{k} * n + t] = (long long)({e});")
    return kernelkit.kernel("warp_intrinsics", ["vi", "si"], ["r"], "\n".join(lines))


def inputs(warps: int = 64, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per lane: values (a quarter of the warps with few distinct values, for match), offsets."""
    rng = np.random.default_rng(seed)
    n = 32 * warps
    v = rng.integers(-(2**31), 2**31 - 1, n, dtype=np.int64).astype(np.int32)
    few = rng.integers(0, 4, n).astype(np.int32)
    v[: n // 4] = few[: n // 4]
    v[32:64] = 8  # one warp of equal values (match_all true)
    s = rng.integers(-40, 41, n).astype(np.int32)
    s[64:96] = rng.integers(-40, 41)  # one warp with the same offset in every lane
    return v, s
