"""The CPU backend holds CUDA's limits (what passes here launches on a GPU), reports divergent
barriers only for threads still running, and checked mode flags shuffles from absent lanes."""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import pytest

import kernelkit

RNG = np.random.default_rng(7)


def _call(k, x, n_out=None, check=False, **kw):
    kw.setdefault("grid", (x.size, 1, 1))
    kw.setdefault("threadgroup", (64, 1, 1))
    return k(
        [x],
        output_shapes=[(n_out or x.size,)],
        output_dtypes=[np.float32],
        backend="cpu",
        check=check,
        **kw,
    )[0]


def _shared_kernel(name, decls, use):
    return kernelkit.kernel(
        name,
        ["x"],
        ["y"],
        decls + "\nint i = threadIdx.x;\n" + use + "\n__syncthreads();\ny[i] = x[i];",
    )


@pytest.mark.parametrize(
    ("decls", "use"),
    [
        ("__shared__ float big[16384];", "big[i] = 1.0f;"),  # 64 KB in one array
        (
            "__shared__ float a[8192];\nif (threadIdx.x < 1000) {\n  __shared__ double b[4096];\n"
            "  b[i] = 1.0;\n}",
            "a[i] = 2.0f;",
        ),  # 32 KB + 32 KB, the second in a nested scope
        ("__shared__ float4 t[40][40], u[40][40];", "t[0][i % 40].x = 1.0f; u[1][0].y = 2.0f;"),
    ],
    ids=["one-array", "nested-scope", "two-declarators"],
)
def test_static_shared_memory_over_48kb_fails_to_compile_as_on_a_gpu(decls, use):
    k = _shared_kernel("lim_static_" + str(abs(hash(decls)) % 10**6), decls, use)
    with pytest.raises(kernelkit.CompileError) as e:
        _call(k, RNG.standard_normal(64).astype(np.float32))
    assert "48 KB" in e.value.log and "extern __shared__" in e.value.log


def test_exactly_48kb_of_static_shared_memory_runs():
    k = _shared_kernel(
        "lim_static_ok", "__shared__ float a[8192];\n__shared__ int b[4096];", "a[i] = b[i] = 1;"
    )
    x = RNG.standard_normal(64).astype(np.float32)
    np.testing.assert_array_equal(_call(k, x), x)


def test_static_shared_memory_in_a_header_template_is_limited_too():
    k = kernelkit.kernel(
        "lim_header",
        ["x"],
        ["y"],
        "y[threadIdx.x] = f<N>(x[threadIdx.x]);",
        header="template <int M>\n__device__ float f(float v) {\n  __shared__ float s[M];\n"
        "  s[threadIdx.x] = v;\n  __syncthreads();\n  return s[threadIdx.x];\n}",
    )
    x = RNG.standard_normal(32).astype(np.float32)
    np.testing.assert_array_equal(_call(k, x, template=[("N", 1024)]), x)
    with pytest.raises(kernelkit.CompileError, match="48 KB"):
        _call(k, x, template=[("N", 20000)])


@pytest.mark.parametrize(
    ("grid", "tg"),
    [
        ((1, 65536 * 2, 1), (1, 2, 1)),
        ((1, 1, 65536), (1, 1, 1)),
        ((1, 1, 128), (1, 1, 128)),
        ((1000, 1, 1), (2048, 1, 1)),  # issue 24, item 15: refused before clipping to the grid
        ((1, 1, 1), (1, 1, 128)),
    ],
    ids=["grid-y", "grid-z", "block-z", "threads-over-grid", "block-z-over-grid"],
)
def test_grid_and_block_dimension_limits(grid, tg):
    k = kernelkit.kernel("lim_grid", ["x"], ["y"], "y[0] = x[0];")
    with pytest.raises(ValueError, match=r"exceeds|allows"):
        _call(k, np.ones(1, np.float32), grid=grid, threadgroup=tg)


def test_the_launch_entry_refuses_what_a_gpu_refuses():
    """The C entry checks the limits itself (for callers below the API)."""
    import ctypes

    from kernelkit._backends.cpu import CPUBackend
    from kernelkit._pipeline.codegen import make_source
    from kernelkit._records import KernelSpec

    be = CPUBackend()
    target = be.targets()[0]
    spec = KernelSpec(name="lim_entry", input_names=(), output_names=(), source="")
    program = be.load(be.compile(be.render(make_source(spec, (), ()), target)), target)
    params = (ctypes.c_void_p * 1)()
    for geometry in (
        (1, 65536, 1, 1, 1, 1, 0),
        (1, 1, 1, 1, 1, 65, 0),
        (1, 1, 1, 2048, 1, 1, 0),
        (1, 1, 1, 32, 1, 1, 228 * 1024),
    ):
        assert program.entry(params, *geometry, 1) == 2, geometry
        assert "invalid launch" in program.fault_text().decode()
    assert program.entry(params, 1, 65535, 1, 1, 1, 64, 227 * 1024, 1) == 0


# --- barriers and exited threads (item 11) ---------------------------------------------------


def test_threads_that_returned_do_not_hold_a_barrier_back():
    k = kernelkit.kernel(
        "bar_exit",
        ["x"],
        ["y"],
        "__shared__ float s[64];\nint t = threadIdx.x;\nif (t >= 40) return;\n"
        "s[t] = x[t];\n__syncthreads();\ny[t] = s[39 - t];",
    )
    x = RNG.standard_normal(64).astype(np.float32)
    for check in (False, True):
        y = _call(k, x, check=check, grid=(64, 1, 1))
        np.testing.assert_array_equal(y[:40], x[:40][::-1])


@pytest.mark.parametrize("check", [False, True])
def test_barrier_waited_on_by_running_threads_elsewhere_is_divergent(check):
    k = kernelkit.kernel(
        "bar_diverge",
        ["x"],
        ["y"],
        "int t = threadIdx.x;\nif (t < 16) {\n  __syncthreads();\n  y[t] = x[t];\n} else {\n"
        "  y[t] = __shfl_sync(0xffffffffu, x[t], 0);\n}",
    )
    with pytest.raises(kernelkit.KernelFault) as e:
        _call(k, np.ones(32, np.float32), check=check, threadgroup=(32, 1, 1))
    msg = str(e.value)
    assert "divergent __syncthreads() at bar_diverge:3" in msg
    assert "16 of 32 threads arrived, 0 returned" in msg and "16 wait at a warp" in msg


@pytest.mark.parametrize("check", [False, True])
def test_barriers_at_two_source_lines_are_divergent(check):
    k = kernelkit.kernel(
        "bar_sites",
        ["x"],
        ["y"],
        "int t = threadIdx.x;\nif (t % 2) {\n  __syncthreads();\n} else {\n  __syncthreads();\n}\n"
        "y[t] = x[t];",
    )
    with pytest.raises(
        kernelkit.KernelFault,
        match=r"wait at bar_sites:[35] while thread .* reaches bar_sites:[35]",
    ):
        _call(k, np.ones(32, np.float32), check=check, threadgroup=(32, 1, 1))


# --- shuffles from lanes outside the mask (item 13) -----------------------------------------

SHFL_OUTSIDE = kernelkit.kernel(
    "shfl_outside",
    ["x"],
    ["y"],
    "int lane = threadIdx.x & 31;\nfloat v = x[threadIdx.x];\n"
    "if (lane < 4) y[lane] = __shfl_down_sync(0xF, v, OFFSET, WIDTH);",
)


def test_checked_mode_flags_a_shuffle_from_a_lane_outside_its_mask():
    x = RNG.standard_normal(32).astype(np.float32)
    with pytest.raises(kernelkit.KernelFault) as e:
        _call(k := SHFL_OUTSIDE, x, n_out=4, check=True, template=[("OFFSET", 16), ("WIDTH", 32)])
    msg = str(e.value)
    assert re.search(
        r"warp shuffle reads lane 1[6-9], which does not take part \(mask 0x0000000f", msg
    )
    assert "shfl_outside:3" in msg
    # unchecked, the result is the GPU's undefined value: the CPU gives the caller's own
    np.testing.assert_array_equal(
        _call(k, x, n_out=4, template=[("OFFSET", 16), ("WIDTH", 32)]), x[:4]
    )
    # within 4-lane segments the sources stay inside the mask: fine in both modes
    for check in (False, True):
        y = _call(k, x, n_out=4, check=check, template=[("OFFSET", 2), ("WIDTH", 4)])
        np.testing.assert_array_equal(y, [x[2], x[3], x[2], x[3]])


def _maps() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc (Linux)")
def test_fiber_kernels_do_not_exhaust_the_process_map_count():
    """Each kernel library keeps its own fiber stacks; with a guard page per stack a few hundred
    fiber kernels in one process exceeded vm.max_map_count (dlopen then failed)."""
    x = np.ones(256, np.float32)
    before = _maps()
    for i in range(12):
        k = kernelkit.kernel(
            f"lim_maps_{i}",
            ["x"],
            ["y"],
            f"__shared__ float s[256]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();"
            f" y[threadIdx.x] = s[255 - threadIdx.x] + {i};",
        )
        (y,) = k(
            [x],
            output_shapes=[x.shape],
            output_dtypes=[x.dtype],
            grid=(256, 1, 1),
            threadgroup=(256, 1, 1),
            backend="cpu",
        )
        assert y[0] == 1 + i
    assert (_maps() - before) / 12 < 30  # was about 2 per fiber per worker (500+ here)


def test_a_fiber_stack_overflow_is_a_fault_and_the_next_launch_works():
    x = np.ones(32, np.float32)
    deep = kernelkit.kernel(
        "lim_deep",
        ["x"],
        ["y"],
        "volatile float big[33000]; for (int i = 0; i < 33000; ++i) big[i] = x[0] + i;"
        " __syncthreads(); y[threadIdx.x] = big[32999];",
    )
    call = dict(
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
        grid=(32, 1, 1),
        threadgroup=(32, 1, 1),
        backend="cpu",
    )
    with pytest.raises(kernelkit.KernelFault, match=r"overflowed its .*fiber stack"):
        deep([x], **call)
    ok = kernelkit.kernel(
        "lim_after_deep", ["x"], ["y"], "__syncthreads(); y[threadIdx.x] = 3 * x[threadIdx.x];"
    )
    np.testing.assert_array_equal(ok([x], **call)[0], 3 * x)


# --- inline PTX assembly (issue 25, item 7) ---------------------------------------------------


@pytest.mark.parametrize("check", [False, True])
def test_inline_ptx_is_refused_at_its_line(check):
    k = kernelkit.kernel(
        "ptx_asm",
        ["x"],
        ["y"],
        "unsigned r;\nint i = threadIdx.x;\n"
        'asm volatile("mov.u32 %0, %1;" : "=r"(r) : "r"(i));\ny[i] = x[i] + r;',
    )
    with pytest.raises(kernelkit.CompileError, match=r"ptx_asm:3:\d+: error: inline assembly"):
        _call(k, np.ones(32, np.float32), check=check)


@pytest.mark.parametrize("check", [False, True])
def test_guarded_ptx_and_empty_asm_compile(check):
    k = kernelkit.kernel(
        "ptx_asm_guarded",
        ["x"],
        ["y"],
        "float v = x[threadIdx.x];\n#ifdef __CUDA_ARCH__\n"
        'asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(v) : "f"(v));\n#endif\n'
        'asm volatile("" ::: "memory");  // a compiler barrier: asm("mov")\n'
        "y[threadIdx.x] = v;",
    )
    x = RNG.standard_normal(64).astype(np.float32)
    np.testing.assert_array_equal(_call(k, x, check=check), x)


def test_the_cpu_target_counts_its_worker_threads_as_sms(monkeypatch):
    from kernelkit._backends.cpu._backend import CPUBackend
    from kernelkit._backends.cpu._program import worker_count

    assert CPUBackend().targets()[0].multiprocessor_count == worker_count() >= 1
    from kernelkit import _config

    monkeypatch.setattr(_config, "config", dataclasses.replace(_config.config, cpu_threads=3))
    assert CPUBackend().targets()[0].multiprocessor_count == 3
