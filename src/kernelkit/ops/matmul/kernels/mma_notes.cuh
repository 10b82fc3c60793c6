
// --- mma: y[M, N] = act(x[M, K] @ B + bias), sm_80+ tensor cores ------------------------------
// Block: BM x BN of y; WM x WN warps, each a WTM x WTN sub-tile = MT x NT mma tiles of 16 x 8.
// Per k16 step a warp issues MT x NT mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"; g = lane / 4, t = lane % 4; each
// 32-bit register holds two 16-bit elements, the lower-numbered column in the low half):
//   A 16x16 (row): a0 = A[g][2t, 2t+1]  a1 = A[g+8][2t, 2t+1]  a2 = A[g][2t+8, 2t+9]
//                  a3 = A[g+8][2t+8, 2t+9]
//   B 16x8 (col):  b0 = B[2t, 2t+1][g]  b1 = B[2t+8, 2t+9][g]          (B[k][n])
//   C 16x8 fp32:   c0, c1 = C[g][2t, 2t+1]   c2, c3 = C[g+8][2t, 2t+1]
// ldmatrix.m8n8.x4: lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes);
// register i of lane l receives matrix i's row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1.
// With .trans it receives the transposed matrix's: stored rows 2 (l % 4), +1, column l / 4.
//   A (x, smem [BM][BK]):  lane l -> row l % 16, k chunk l / 16: matrices give a0, a1, a2, a3.
//   B from w [N, K] (smem [BN][BK]), no .trans: lane l -> n row (l % 8) + 8 (l / 16), k chunk
//     (l / 8) % 2: registers give b0, b1 of n-tile j and b0, b1 of n-tile j + 1.
//   B from w [K, N] (smem [BK][BN]), .trans: lane l -> k row l % 16, n chunk l / 16: the same
//     four registers (k 0-7 / 8-15 of n-tile j, then of n-tile j + 1).
// Shared memory: rows of 16-byte chunks; chunk c of row r is stored at c ^ ((r >> S) & (C - 1))
// (C = min(chunks a row, 8), S = log2(8 / C)), so the 8 rows one ldmatrix matrix reads, and the
// 8 chunks a quarter-warp's cp.async writes, fall in 8 different 16-byte bank groups.
// Pipeline: STAGES - 1 tiles ahead are in flight (one cp.async group per tile) while tile kt is
// multiplied; one __syncthreads per BK, after which the stage of tile kt - 1 is refilled. In a
// tile, A's fragments of the next k16 step load while this step's mma run; B's are loaded two
// n-tiles at a time just before use (fewer live registers: 64x64 warp tiles stay near 220).

