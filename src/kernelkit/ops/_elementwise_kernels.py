"""``elementwise``'s kernel text: the header (the row ops' vector helpers and the expression
language's own functions, ``elementwise/kernels/functions.cuh``) and the body generated for one
checked expression (``_elementwise_parse``): the flat path (16-byte vectors, a grid-stride
loop) or the strided one (any layout, broadcasting through stride-0 views)."""

from __future__ import annotations

from collections.abc import Sequence

from ._kernel_files import source

__all__ = ["HEADER", "body"]

# the row ops' vector helpers, then the expression's own functions
# (_elementwise_parse.OWN_FUNCTIONS)
HEADER = source("rows", "rows") + source("elementwise", "functions")


def body(n_in: int, exprs: list[str], scalars: Sequence[bool], flat: bool) -> str:
    """The kernel body: locals v_i read as float, outputs y_j written in their dtype."""

    def load(i: int, at: str) -> str:
        return f"(float)x{i}" if scalars[i] else f"(float)x{i}[{at}]"

    if flat:  # 16-byte vectors over the aligned bulk (VEC > 1), then one element at a time
        arrays = [i for i in range(n_in) if not scalars[i]]
        aligned = " && ".join(
            [f"kk_aligned16(x{i})" for i in arrays]
            + [f"kk_aligned16(y{j})" for j in range(len(exprs))]
        )
        vloads = "\n".join(
            f"    const kk_vec<TX{i}> a{i} = "
            f"*reinterpret_cast<const kk_vec<TX{i}>*>(x{i} + q * VEC);"
            for i in arrays
        )
        vreads = "\n".join(
            f"      const float v{i} = {'(float)x%d' % i if scalars[i] else '(float)a%d.v[j]' % i};"
            for i in range(n_in)
        )
        vdecl = "\n".join(f"    kk_vec<TY{j}> o{j};" for j in range(len(exprs)))
        vcompute = "\n".join(f"      o{j}.v[j] = (TY{j})({x});" for j, x in enumerate(exprs))
        vstores = "\n".join(
            f"    *reinterpret_cast<kk_vec<TY{j}>*>(y{j} + q * VEC) = o{j};"
            for j in range(len(exprs))
        )
        reads = "\n".join(f"  const float v{i} = {load(i, 'e')};" for i in range(n_in))
        writes = "\n".join(f"  y{j}[e] = (TY{j})({x});" for j, x in enumerate(exprs))
        return f"""
const IDX n = (IDX)y0_shape[0];
const IDX stride = (IDX)gridDim.x * blockDim.x;
const IDX first = (IDX)blockIdx.x * blockDim.x + threadIdx.x;
const IDX nv = (VEC > 1 && {aligned}) ? n / VEC : 0;
for (IDX q = first; q < nv; q += stride) {{
{vloads}
{vdecl}
    for (int j = 0; j < VEC; ++j) {{
{vreads}
{vcompute}
    }}
{vstores}
}}
for (IDX e = nv * VEC + first; e < n; e += stride) {{
{reads}
{writes}
}}
"""
    reads = "\n".join(
        f"    const float v{i} = {load(i, f'elem_to_loc(e, x{i}_shape, x{i}_strides, x{i}_ndim)')};"
        for i in range(n_in)
    )
    writes = "\n".join(f"    y{j}[e] = (TY{j})({x});" for j, x in enumerate(exprs))
    return f"""
long long n = 1;  // y0's elements; ND (its rank) is a template value, so a new size compiles
for (int d = 0; d < ND; ++d) n *= y0_shape[d];  // nothing and the shape is read by constant index
const long long stride = (long long)gridDim.x * blockDim.x;
for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
{reads}
{writes}
}}
"""
