import kernelkit

BODY = """
uint i = blockIdx.x * blockDim.x * U + threadIdx.x;
for (int u = 0; u < U; ++u, i += blockDim.x)
    if (i < x_shape[0]) y[i] = 2.0f * x[i] + 1.0f;
"""
k = kernelkit.kernel("doc_axpb", ["x"], ["y"], BODY)
axpb = kernelkit.autotune(
    k,
    configs=[{"U": u, "threadgroup": (t,)} for u in (1, 4, 16) for t in (64, 256)],
    key=["x.shape[0]:pow2"],
    grid=lambda p, c: (-(-p.arg("x").shape[0] // c.values["U"]),),
)
