"""``elementwise``'s kernel text: the header (the row ops' vector helpers and the expression
language's own functions, ``elementwise/kernels/functions.cuh``) and the body generated for one
checked expression (``_elementwise_parse``): the flat path (16-byte vectors, a grid-stride
loop) or the strided one (any layout, inputs broadcast in the kernel; by vectors where the
rows allow)."""

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
        vector = _vector_outputs(n_in, exprs, scalars)
        reads = "\n".join(f"  const float v{i} = {load(i, 'e')};" for i in range(n_in))
        writes = "\n".join(f"  y{j}[e] = (TY{j})({x});" for j, x in enumerate(exprs))
        return f"""
const IDX n = (IDX)y0_shape[0];
const IDX stride = (IDX)gridDim.x * blockDim.x;
const IDX first = (IDX)blockIdx.x * blockDim.x + threadIdx.x;
const IDX nv = (VEC > 1 && {aligned}) ? n / VEC : 0;
for (IDX q = first; q < nv; q += stride) {{
{vloads}
{vector}
}}
for (IDX e = nv * VEC + first; e < n; e += stride) {{
{reads}
{writes}
}}
"""
    return _strided(n_in, exprs, scalars)


def _vector_outputs(n_in: int, exprs: list[str], scalars: Sequence[bool]) -> str:
    """Both paths' vector step: VEC outputs from the inputs' vectors a_i (or scalars), stored
    as one 16-byte vector each at element q * VEC."""
    vreads = "\n".join(
        f"      const float v{i} = {'(float)x%d' % i if scalars[i] else '(float)a%d.v[j]' % i};"
        for i in range(n_in)
    )
    vdecl = "\n".join(f"    kk_vec<TY{j}> o{j};" for j in range(len(exprs)))
    vcompute = "\n".join(f"      o{j}.v[j] = (TY{j})({x});" for j, x in enumerate(exprs))
    vstores = "\n".join(
        f"    *reinterpret_cast<kk_vec<TY{j}>*>(y{j} + q * VEC) = o{j};" for j in range(len(exprs))
    )
    return f"""{vdecl}
    for (int j = 0; j < VEC; ++j) {{
{vreads}
{vcompute}
    }}
{vstores}"""


def _strided(n_in: int, exprs: list[str], scalars: Sequence[bool]) -> str:
    """The strided body: each array input broadcasts to y's shape (rank ND) as NumPy's rules
    say, in the kernel itself: input i has rank XND<i> (a template value), aligned with y's last
    dimensions; a dimension it lacks or holds once (size 1) is read with stride 0 (``s<i>``,
    made once a thread). The caller passes its arrays as they are (no broadcast views, no
    per-call work on the host). Where every row of y is whole 16-byte vectors (VEC > 1) and
    each array input is contiguous along the last dimension with 16-byte aligned rows, or
    constant along it (stride 0: a per-row scale, say), VEC outputs are made at a time, each
    input's offset found once a vector (one division) and read as one vector or one element; a
    bias [N] added to [M, N] then moves its bytes as the flat path does. Any other layout goes
    element by element. Shapes and strides are read at constant indices only (ND and XND<i>
    are template values, the loops unrolled): an index the compiler cannot resolve, or their
    address (``elem_to_loc``), copies the arrays to local memory in every thread, which made
    this path 12x slower than torch on a bias add."""
    arrays = [i for i in range(n_in) if not scalars[i]]
    spans = "\n".join(
        f"long long s{i}[ND > 0 ? ND : 1] = {{}};  // x{i}'s strides along y's dimensions\n"
        f"#pragma unroll\n"
        f"for (int d = 0; d < ND; ++d) {{\n"
        f"  const int k = d - (ND - XND{i});  // x{i}'s own dimension (< 0: it has none)\n"
        f"  const int at = k < 0 ? 0 : k;\n"
        f"  s{i}[d] = k < 0 || x{i}_shape[at] == 1 ? 0 : x{i}_strides[at];\n"
        f"}}"
        for i in arrays
    )
    checks = "\n".join(
        f"by_vectors = by_vectors && (s{i}[L] == 0 || (s{i}[L] == 1 && kk_aligned16(x{i})));\n"
        f"#pragma unroll\n"
        f"for (int d = 0; d + 1 < ND; ++d)  // rows read as vectors start 16 bytes apart\n"
        f"  by_vectors = by_vectors && (s{i}[L] == 0 ||\n"
        f"                              (s{i}[d] * (long long)sizeof(TX{i})) % 16 == 0);"
        for i in arrays
    )
    outs_ok = "".join(f" && kk_aligned16(y{j})" for j in range(len(exprs)))
    zero = ", ".join(f"p{i} = 0" for i in arrays)
    declare = f"    long long {zero};" if arrays else ""
    offsets = "\n".join(f"    long long p{i} = col * s{i}[L];" for i in arrays)
    steps = "\n".join(f"      p{i} += at * s{i}[d];" for i in arrays)
    vloads = "\n".join(
        f"    kk_vec<TX{i}> a{i};\n"
        f"    if (s{i}[L]) a{i} = *reinterpret_cast<const kk_vec<TX{i}>*>(x{i} + p{i});\n"
        f"    else for (int j = 0; j < VEC; ++j) a{i}.v[j] = x{i}[p{i}];"
        for i in arrays
    )
    vector = _vector_outputs(n_in, exprs, scalars)
    reads = "\n".join(
        f"    const float v{i} = {'(float)x%d' % i if scalars[i] else '(float)x%d[p%d]' % (i, i)};"
        for i in range(n_in)
    )
    writes = "\n".join(f"    y{j}[e] = (TY{j})({x});" for j, x in enumerate(exprs))
    return f"""
long long n = 1;  // y0's elements; ND (its rank) is a template value, so a new size compiles
#pragma unroll
for (int d = 0; d < ND; ++d) n *= y0_shape[d];  // nothing and the shape is read by constant index
constexpr int L = ND > 0 ? ND - 1 : 0;  // the last dimension (a 0-d y: none, no vectors)
const long long N = y0_shape[L];
{spans}
bool by_vectors = ND > 0 && VEC > 1 && N % VEC == 0{outs_ok};
{checks}
if (by_vectors) {{
  const IDX nv = (IDX)(N / VEC), total = (IDX)(n / VEC), step = (IDX)gridDim.x * blockDim.x;
  for (IDX q = (IDX)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += step) {{
    IDX row = q / nv;
    const long long col = (long long)(q - row * nv) * VEC;
{offsets}
#pragma unroll
    for (int d = ND - 2; d >= 0; --d) {{  // the row's index, last dimension first
      const long long at = d ? (long long)(row % (IDX)y0_shape[d]) : (long long)row;
{steps}
      if (d) row /= (IDX)y0_shape[d];
    }}
{vloads}
{vector}
  }}
}} else {{
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
    long long rest = e;
{declare}
#pragma unroll
    for (int d = ND - 1; d >= 0; --d) {{  // e's index, last dimension first
      const long long at = d ? rest % y0_shape[d] : rest;
{steps}
      if (d) rest /= y0_shape[d];
    }}
{reads}
{writes}
  }}
}}
"""
