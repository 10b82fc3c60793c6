"""``kernelkit.tensor_map`` on a Hopper GPU: a user kernel copies boxes of a 2-D array through
TMA (one thread issues, an mbarrier counts the bytes) and writes them out; boxes past the
array's edges read zeros; a strided view is described by its strides; new arrays at a repeated
call get their own maps; and the map travels inside a CUDA graph with new values."""

from __future__ import annotations

import pytest

import kernelkit

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
        reason="needs an sm_90+ GPU (TMA)",
    ),
]

# Block b copies box b (BR x BC elements of src, boxes row-major over the padded grid) into
# shared memory with one tensor copy, then writes all of it to y[b] (zeros past src's edges).
BODY = r"""
__shared__ alignas(128) float tile[BR * BC];
__shared__ alignas(8) unsigned long long bar;
const unsigned t = threadIdx.x, b = blockIdx.x;
const int boxes_c = (int)((src_shape[1] + BC - 1) / BC);
const int r0 = (int)(b / boxes_c) * BR, c0 = (int)(b % boxes_c) * BC;
const unsigned s_bar = (unsigned)__cvta_generic_to_shared(&bar);
const unsigned s_tile = (unsigned)__cvta_generic_to_shared(tile);
if (t == 0) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(s_bar));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__syncthreads();
if (t == 0) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(s_bar), "r"(BR * BC * 4) : "memory");
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(s_tile), "l"(&src_map), "r"(c0), "r"(r0), "r"(s_bar) : "memory");
}
asm volatile("{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
             " @!p bra W;\n}" :: "r"(s_bar) : "memory");
for (unsigned i = t; i < BR * BC; i += blockDim.x) y[b * BR * BC + i] = tile[i];
"""

COPY = kernelkit.kernel("tma_box_copy", ["src", "src_map"], ["y"], BODY)


def _boxes(src, box):
    """What the kernel should write: src cut into boxes, zero-padded past its edges."""
    br, bc = box
    rows, cols = src.shape
    gr, gc = -(-rows // br), -(-cols // bc)
    padded = torch.zeros(gr * br, gc * bc, dtype=src.dtype, device=src.device)
    padded[:rows, :cols] = src
    return padded.view(gr, br, gc, bc).permute(0, 2, 1, 3).reshape(gr * gc, br * bc)


def _run(src, box):
    br, bc = box
    boxes = -(-src.shape[0] // br) * -(-src.shape[1] // bc)
    m = kernelkit.tensor_map(src, box, swizzle=0)
    y = torch.full((boxes, br * bc), float("nan"), device="cuda")
    COPY([src, m], grid=(boxes * 128, 1, 1), threadgroup=(128, 1, 1),
         template=[("BR", br), ("BC", bc)], out=[y])  # fmt: skip
    torch.cuda.synchronize()
    return y


@pytest.mark.parametrize(("shape", "box"), [((64, 96), (16, 32)), ((37, 52), (8, 16))])
def test_boxes_land_and_read_zeros_past_the_edges(shape, box):
    src = torch.randn(*shape, device="cuda")
    torch.testing.assert_close(_run(src, box), _boxes(src, box), rtol=0, atol=0)


def test_a_strided_view_and_a_new_array_each_get_their_own_map():
    big = torch.randn(48, 128, device="cuda")
    view = big[5:40, 8:72]  # rows 512 bytes apart: the map carries the stride
    torch.testing.assert_close(_run(view, (8, 16)), _boxes(view, (8, 16)), rtol=0, atol=0)
    other = torch.randn(48, 128, device="cuda")
    torch.testing.assert_close(_run(other, (8, 16)), _boxes(other, (8, 16)), rtol=0, atol=0)


def test_bad_input_names_the_argument_and_the_next_call_works():
    src = torch.randn(64, 96, device="cuda")
    with pytest.raises(kernelkit.ArgumentError, match="box"):
        kernelkit.tensor_map(src, (16, 300))  # past 256 elements
    with pytest.raises(kernelkit.ArgumentError, match="128-byte swizzle"):
        kernelkit.tensor_map(src, (16, 64))  # 256-byte rows, 128-byte swizzle
    with pytest.raises(kernelkit.ArgumentError, match="contiguous"):
        kernelkit.tensor_map(src.t(), (16, 16))
    torch.testing.assert_close(_run(src, (16, 32)), _boxes(src, (16, 32)), rtol=0, atol=0)


def test_a_graph_replays_the_map_with_new_values():
    src = torch.randn(64, 64, device="cuda")
    m = kernelkit.tensor_map(src, (16, 16), swizzle=0)
    y = torch.empty(16, 256, device="cuda")
    call = dict(grid=(16 * 128, 1, 1), threadgroup=(128, 1, 1),
                template=[("BR", 16), ("BC", 16)], out=[y])  # fmt: skip
    COPY([src, m], **call)  # compiled and planned before the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        COPY([src, m], **call)
    src.copy_(torch.randn(64, 64, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, _boxes(src, (16, 16)), rtol=0, atol=0)


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="wgmma is an sm_90a instruction",
)
def test_matmul_through_tma_with_new_inputs_and_in_a_graph():
    """matmul's TMA tiles (wgmma WS = 2) keep maps per (x, w) address pair of a signature: new x
    arrays of one shape (more than the 64 pairs it keeps), then a CUDA graph replayed on new
    values, each against float64, outputs poisoned."""
    from kernelkit import ops
    from kernelkit._choices import force
    from kernelkit.ops._matmul_wgmma import wgmma_config

    w = torch.randn(200, 520, device="cuda", dtype=torch.bfloat16)

    def err(y, x):
        ref = x.double() @ w.double().T
        return ((y.double() - ref).norm() / ref.norm()).item()

    xs = [torch.randn(100, 520, device="cuda", dtype=torch.bfloat16) for _ in range(70)]
    with force("matmul", "wgmma", wgmma_config(1, 64, 2, 6, 1, 2)):
        for x in xs + xs[:3]:  # 70 addresses, then three seen before (after the clear)
            y = torch.full((100, 200), float("nan"), device="cuda", dtype=torch.bfloat16)
            ops.matmul(x, w, transpose_b=True, out=y)
            assert err(y, x) < 1e-2
        x = xs[0]
        ops.matmul(x, w, transpose_b=True, out=y)  # planned before the capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            ops.matmul(x, w, transpose_b=True, out=y)
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert err(y, x) < 1e-2
