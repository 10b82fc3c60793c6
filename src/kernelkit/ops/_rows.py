"""Row-wise kernels (softmax, rms_norm, layer_norm) over the last dimension.

An aligned row that fits in registers is read once with 16-byte vector loads and written once:
the bandwidth minimum. A longer or unaligned row is read twice (statistics, then the output),
with an online max/sum for softmax. Statistics are in float32 whatever the input dtype.
Template values: ``T`` (element type), ``BLOCK`` (threads per row), ``ITEMS`` (vector loads
each thread keeps in registers; 0: the long-row loop), ``ROWS`` (rows per block), ``ND`` (x's
rank).
"""

from __future__ import annotations

from ._kernel_files import source

# Shared device helpers (the elementwise op uses them too). A 16-byte vector holds 8 bf16/fp16
# elements or 4 fp32; kk_vec is it as a struct of T (for memory), kk_words as four 32-bit words
# (for registers).
HEADER = source("rows", "rows")

# The body of every row kernel: each block takes ROWS rows of BLOCK threads each; a row past
# the end (the last block's padding) loads and stores nothing but still meets the barriers.
# The vector path needs every row aligned: the same test for the whole block ({vector} is
# filled with true/false).
_ROW = source("rows", "row_body")

SOFTMAX = source("rows", "softmax")

# rms_norm: y = x / sqrt(mean(x^2) + eps) * w ; layer_norm: (x - mean) / sqrt(var + eps) * w + b
NORM = source("rows", "norm")


def body(call: str, aligned: tuple[str, ...] = ()) -> str:
    """The kernel body calling a row function: ``call`` uses ``VECTOR`` for its vector flag,
    e.g. ``"kk_softmax_row<T, BLOCK, ITEMS, VECTOR>(xr, yr, nr, t, kk_red)"``; the vector path
    also needs the pointers named in ``aligned`` (e.g. a weight) 16-byte aligned."""
    extra = "".join(f" && kk_aligned16({p})" for p in aligned)
    text = _ROW.replace(" EXTRA_ALIGN", extra)
    return text.replace("CALL_ROW(true)", call.replace("VECTOR", "true")).replace(
        "CALL_ROW(false)", call.replace("VECTOR", "false")
    )
