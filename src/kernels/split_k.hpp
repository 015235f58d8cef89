/// @file
/// Internal: dense decode plans. Which problems GemmPlan computes transposed (swap-AB) or splits along
/// K and into how many slices (gemm_plan.cpp), their kernels, and the reduction of the slices
/// (split_k.cu). The slices are one batched launch of the decode pingpong kernel, not CUTLASS's
/// stream-K scheduler forced to split-K: its cooperative 128x64 and 128x128 tiles, at the best of 2 to 8 splits per
/// shape, ran 0.77-1.14x the 64x128 pingpong plan on 10 decode shapes (H100), and where they won (1.04-1.14x) the 64x64
/// pingpong tile gained 1.12-1.34x over the same plan.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "cuactor/core/arch.hpp"
#include "cuactor/core/dtype.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"

namespace cuactor::kernels::detail {

/// The K depth of the slice kernel's tile: slices are whole multiples of it.
inline constexpr int kSplitKTileDepth = 64;
/// The decode class split-K serves on its own (split_k_for): at most this many rows, K at least this;
/// unswapped up to kSplitKNarrowRows on grids of up to half the SMs, past it up to a quarter.
inline constexpr std::int64_t kSplitKMaxRows = 64;
inline constexpr std::int64_t kSplitKNarrowRows = 32;
inline constexpr std::int64_t kSplitKMinDepth = 4096;

/// Why `p` cannot run as a decode plan of kind `what` ("split-K", "swap-AB") on `arch` (the first rule
/// it breaks, naming the value), or an empty string: sm_90a, bf16 or f16 A and B, C and D of one type,
/// the preset linear combination, one batch, layouts row,col,row (A row-major, B N x K, D row-major).
/// With `takes_e4m3`, also e4m3 A and B with bf16 C and D and the per-tensor scaled linear combination.
std::string decode_plan_rule(const GemmProblem& p, GpuArch arch, std::string_view what, bool takes_e4m3 = false);

/// The slices GemmPlan splits `p` into when GemmPlanOptions::split_k is 0, for up to 64 rows over K >=
/// 4096 (else 1): the most slices (2 to 8) that keep the grid within one wave, each whole tile depths.
/// Unswapped (64x64 tiles, each weight read once): up to 32 rows where the tiles fill at most half of
/// `sm_count` SMs, slices at least 512 deep; 33-64 rows where they fill at most a quarter, at least 3
/// slices, at least 32 m deep (the float32 partials then add at most 1/8 of the weight bytes). With
/// `swapped`: where the 64x64 weight tiles fill at most a fifth of the SMs and the swapped kernel's
/// grid (twice the weight tiles past 32 rows) at most a quarter, slices at least 1024 deep. GemmPlan
/// takes the unswapped split past 32 rows where the swapped one does not apply. Measured with weights
/// cold in L2, in the same run. H100, unswapped, up to 32 rows: 1.01-1.72x the unsplit 64x64 plan on 20
/// shapes. H200, with the reduction a programmatic dependent launch (launch_split_k_reduce): swapped, 4
/// slices ran 1.10x the unsplit 128-deep kernel over K 4096 (8 and 56 rows, 16 weight tiles) and
/// 1.29-1.40x on 40 and 64 rows over K 8192 (12 and 16 weight tiles), while on 32 weight tiles (16
/// rows) the unsplit kernel won by 1.09x; past 32 rows on 18-32 weight tiles, which the swapped split
/// leaves alone, 4 unswapped slices ran 1.03-1.23x the unsplit swapped kernel (1.13x in the geometric
/// mean over 10 shapes); 6 slices lost to 4 by 1.08-1.14x at 1024 and 768 deep (36 and 44 rows) and won
/// by 1.06x at 1536 deep (52 rows), which the bound on the partials' bytes forbids there; 2 slices lost
/// on 7 of the 10. On 10 other such shapes this rule ran 1.09x the unsplit swapped plan in the
/// geometric mean (0.92x at worst, 3 slices). Few CTAs stream at rates that vary between runs, which
/// spreading K over the SMs evens out. Shape only: whether the problem can be split at all is
/// split_k_rule's question.
int split_k_for(const GemmProblem& p, int sm_count, bool swapped = false) noexcept;

/// Why `p` cannot be split into `splits` slices on `arch` (the first rule it breaks, naming the value),
/// or an empty string if it can: decode_plan_rule's rules, C and D bf16, f16 or f32, and K a multiple
/// of splits x kSplitKTileDepth.
std::string split_k_rule(const GemmProblem& p, GpuArch arch, int splits);

/// The kernel that computes the slices of a split `p`: 64x64x64 pingpong (for at most kNarrowMaxColumns
/// columns narrow_kernel's tile, 64 deep), or with `swap_ab` swapped_sku's tile 64 deep, with float32 C
/// and D.
GemmSku split_k_slice_sku(const GemmProblem& p, bool swap_ab = false);
/// The catalog's kernel for the slices of a split `p`: split_k_slice_sku(p, swap_ab), else, unswapped,
/// the 64x64x64 one (a build without the narrow slice kernels still splits narrow problems where
/// asked); null when the catalog has neither.
const CatalogEntry* split_k_slice_kernel(const GemmProblem& p, bool swap_ab = false);

/// The K depth of the swapped 16-bit kernel's tile: 128-deep loads ran 1.057x the 64-deep ones in the
/// geometric mean over 20 decode shapes of 1-32 rows (H100, weights cold, same run), 1.01-1.21x each; 256
/// deep gained less (1.040x where M <= 16). The fp8 kernel's tile is twice as deep: the same bytes.
inline constexpr int kSwapAbTileDepth = 128;

/// The rows a swapped plan takes on its own (GemmPlanOptions::swap_ab 0): up to kSwapAbMaxRows always,
/// up to kSwapAbWideMaxRows where the unswapped grid is small (swap_ab_for).
inline constexpr std::int64_t kSwapAbMaxRows = 32;
inline constexpr std::int64_t kSwapAbWideMaxRows = 64;

/// Whether GemmPlan computes `p` swapped when GemmPlanOptions::swap_ab is 0 (shape only; swap_ab_rule
/// says whether it can): up to 32 rows, whose swapped tile reads each weight once (H100, weights cold,
/// same run: 0.99-1.24x the unswapped plan on 17 shapes of 1-32 rows, 64 deep, where it did not split);
/// 33-64 rows where the grid of 64x64 tiles fills at most half of `sm_count` SMs: the swapped 64x32
/// tiles read the weights twice but double the grid (1.15-1.18x with 24-32 tiles, even with 64, 0.86x
/// with 80).
bool swap_ab_for(const GemmProblem& p, int sm_count) noexcept;

/// Why `p` cannot be computed transposed on `arch`, or an empty string if it can: decode_plan_rule's
/// rules, e4m3 inputs included.
std::string swap_ab_rule(const GemmProblem& p, GpuArch arch);

/// D^T = B^T A^T as the problem the swapped kernel computes: M and N trade places, A' is B's storage
/// (N x K row-major), B' is A's (M x K row-major, N' x K: "col"), D' is D's storage read column-major.
GemmProblem swapped_problem(const GemmProblem& p);

/// The operands of swapped_problem(p): A and B (pointers, leading dimensions, batch strides, fp8 scales)
/// trade places.
GemmOperands swapped_operands(const GemmOperands& o);

/// The swapped kernel for `p`: pingpong (with fast accumulation for e4m3), 64 rows over p's N, 16
/// columns over p's rows (32 past 16), `depth` deep (0: kSwapAbTileDepth, twice that for e4m3), layouts
/// row,col,col.
GemmSku swapped_sku(const GemmProblem& p, int depth = 0);

/// The catalog's swapped kernel for `p`: swapped_sku(p), else its 64-deep twin (float32 outputs have
/// only those, the split slices' kernels); null when the catalog has neither.
const CatalogEntry* swapped_kernel(const GemmProblem& p);

/// The most columns (N) a narrow-column plan takes: a router's logits (N = experts), a low-rank
/// projection (N = rank), a decode GEMM written with the weights as A.
inline constexpr std::int64_t kNarrowMaxColumns = 32;
/// The narrow-column kernel's SKU for `p`: sm_90a pingpong, 64 rows, 16 columns (32 past 16),
/// kSwapAbTileDepth deep, no cluster, with p's types, layouts and epilogue (GemmPlan::sku_for gives it
/// to epilogue trees of at most kNarrowMaxColumns columns).
GemmSku narrow_sku(const GemmProblem& p);
/// Whether `p` meets the narrow-column plans' rules on `arch`: at most kNarrowMaxColumns columns, D of
/// A's type, and decode_plan_rule's (bf16 or f16, one GEMM, layouts row,col,row, the preset epilogue).
bool fits_narrow_plan(const GemmProblem& p, GpuArch arch);
/// The catalog's kernel for a 16-bit `p` of at most kNarrowMaxColumns columns that GemmPlan runs
/// unswapped and unsplit: pingpong, 64 rows, 16 columns (32 past 16), kSwapAbTileDepth deep, layouts
/// row,col,row (the swapped kernel's tile, D row-major); null where `p` breaks decode_plan_rule's rules
/// on `arch`, writes D of another type than A (16-bit only), has more columns, or the catalog lacks
/// the kernel. Such a GEMM streams A once whatever its tile; the heuristic's 64-column tiles pad B to
/// 64 rows per stage. H200, same runs: on 8 shapes of 8 and 16 columns over 1024-8192 rows and K
/// 4096-14336 (`cuactor tune gemm`), 64x16x128 ran 1.29-2.43x the heuristic's 64x64x64 or 64x128x128,
/// 0.80-1.12x cuBLAS, while 128-row cooperative and stream-K 16-column tiles ran 0.42-0.89x cuBLAS;
/// on 5 bf16 shapes of 24 and 32 columns (`cuactor bench gemm --sku`), 64x32x128 ran 1.15-1.37x the
/// 64x64x64 tile and about twice the 64x128x128 one; in f16 (8, 16 and 32 columns), 1.26-1.41x the
/// 64x64x64 tile.
const CatalogEntry* narrow_kernel(const GemmProblem& p, GpuArch arch);
/// The least K a narrow-column plan splits on its own (narrow_split_for).
inline constexpr std::int64_t kNarrowSplitMinDepth = 8192;
/// The slices GemmPlan splits a narrow-column `p` (at most kNarrowMaxColumns columns, more than
/// kSplitKMaxRows rows) into when GemmPlanOptions::split_k is 0, else 1: where its 64-row tiles fill at
/// most a quarter of `sm_count` SMs over K of at least kNarrowSplitMinDepth, the most slices (2 to 8)
/// that keep the grid within one wave, each at least 1024 deep and whole tile depths. The rule mirrors
/// the swapped decode split (split_k_for), whose kernel has the same tile over the weights: on the H200
/// (session 40, 11 decode shapes of 24-64 weight tiles) 4 swapped slices beat the unsplit kernel per
/// launch over K of 8192 and more (1.01-1.15x on 5 of 6) and lost over K = 4096 (0.82-0.92x); unsplit,
/// narrow plans on 16 and 24 row tiles ran 0.67x and 0.83x cuBLAS. Measured on narrow plans (H200,
/// session 41, 9 shapes of 8-128 row tiles, two runs): 1.024x and 0.993x cuBLAS in the geometric mean,
/// against 0.881x and 0.892x unsplit (`--split-k 1`); split, shapes of 8-16 row tiles ran 1.4-1.85x
/// faster, 24 tiles 1.07x, and at the bound (28-32 tiles) 2048x16x8192 lost 3-5%, while 2048x32x8192
/// ran 0.988x and 1.040x cuBLAS split (session 40, unsplit: 0.948x).
int narrow_split_for(const GemmProblem& p, int sm_count) noexcept;
/// D[i, j] = alpha * (P[0, i, j] + ... + P[splits - 1, i, j]) + beta * C[i, j] for an m x n problem: P
/// holds the float32 partial products of the K slices, `splits` packed m x n row-major matrices; C and
/// D are row-major with leading dimensions ldc and ldd, of `dtype` (bf16, f16 or f32); C is read only
/// when beta != 0. The slices are added in order, so the result is deterministic. Launched as a
/// programmatic dependent of the kernel before it on `stream` (the slices, which release it once
/// their last mainloop is done): its blocks become resident while the slices finish and wait for the
/// slices' writes (griddepcontrol.wait); then they release their own dependent. In chains of 16 split
/// decode GEMMs (H200, the three split rows of `cuactor bench gemm`), slices and reductions launched
/// so took 0.85-0.94 of the time of plain launches. Stream capture records the dependency as a
/// programmatic graph edge. Where the reduction's code for the device has no wait (code for an older
/// architecture JIT-compiled for it), it launches plainly.
cudaError_t launch_split_k_reduce(DType dtype, const float* partials, int splits, std::int64_t m, std::int64_t n,
                                  float alpha, float beta, const void* c, std::int64_t ldc, void* d, std::int64_t ldd,
                                  int blocks, cudaStream_t stream) noexcept;

}  // namespace cuactor::kernels::detail
