#include "cuactor/kernels/gemm_plan.hpp"

#include <fmt/format.h>

#include <boost/container_hash/hash.hpp>
#include <climits>
#include <cstdint>
#include <vector>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "gemm_geometry.hpp"
#include "kernels/instance_abi.h"
#include "kernels/split_k.hpp"

namespace cuactor::kernels {
namespace {

using detail::alignment_elements;
using detail::bytes_overlap;
using detail::ceil_div;
using detail::extents;
using detail::grid_swizzle;
using detail::kDefaultSmCount;
using detail::ld_or_packed;
using detail::span_bytes;
using detail::stride_or_packed;

/// The SM count plans assume: the options', else the H100/H200 SXM count.
int sm_count_of(const GemmPlanOptions& options) {
  return options.sm_count > 0 ? options.sm_count : kDefaultSmCount;
}

bool sku_computes(const GemmSku& s, const GemmProblem& p) {
  return s.family == GemmFamily::dense && s.a == p.a && s.b == p.b && s.c == p.c && s.d == p.d &&
         s.layout_a == p.layout_a && s.layout_b == p.layout_b && s.layout_c == p.layout_c && s.epilogue == p.epilogue;
}

/// Output tiles of `tile_m` x `tile_n` covering the problem's D, every batch.
std::int64_t output_tiles(const GemmProblem& p, std::int64_t tile_m, std::int64_t tile_n) {
  return ceil_div(p.m, tile_m) * ceil_div(p.n, tile_n) * p.batch;
}

/// Relative cost of a data-parallel kernel for the problem: full waves of output tiles times tile
/// area; lower is better. Tiles whose consumer warpgroup holds fewer than 128x128 accumulators (the
/// cooperative kernels split the CTA tile between two warpgroups) pay for their lower per-tile
/// efficiency. Pingpong kernels of full-size warpgroup tiles run one warpgroup's epilogue under the
/// other's mainloop, which also hides epilogue trees' arithmetic, so they win ties (H200: 0.956x cuBLAS
/// against 0.926x for cooperative 128x256 over 30 shapes); over long reductions (K > 8192) and on the
/// largest problems (M*N*K >= 1.5e12) the cooperative tile, which moves fewer bytes per flop, wins them
/// instead (pingpong fell to 0.79-0.95x there, cooperative held 0.99-1.02x).
/// Measured on an H100 (`cuactor tune gemm`), this order holds for decode too: 64x128 pingpong tiles
/// on half the SMs beat stream-K spreading K over all of them (40.7 vs 32.1 TFLOP/s at 16x8192x8192),
/// so stream-K kernels are left to the tuning database and explicit overrides.
double estimated_cost(const GemmSku& s, const GemmProblem& p, int sm_count) {
  const auto tiles = output_tiles(p, s.tile.m, s.tile.n);
  const auto waves = ceil_div(tiles, sm_count);
  const bool cooperative =
      s.schedule == GemmSchedule::cooperative || s.schedule == GemmSchedule::cooperative_fp8_fast_accum;
  const int warpgroup_tile = (cooperative ? s.tile.m / 2 : s.tile.m) * s.tile.n;
  const double small_tile_penalty = warpgroup_tile < 128 * 128 ? 1.15 : 1.0;
  const bool full_pingpong = s.schedule == GemmSchedule::pingpong && warpgroup_tile >= 128 * 128;
  const double work =
      static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) * static_cast<double>(p.batch);
  const bool long_or_largest = p.k > 8192 || work >= 1.5e12;
  const double schedule_factor = !full_pingpong ? 1.0 : long_or_largest ? 1.05 : 0.95;
  return static_cast<double>(waves) * s.tile.m * s.tile.n * small_tile_penalty * schedule_factor;
}

/// Whether the grid of 64x128 output tiles fills at most half the SMs: small-M problems whose few
/// CTAs each stream a long slice of B (memory-bound; see small_m_tile_k).
bool few_small_m_tiles(const GemmProblem& p, int sm_count) {
  return 2 * output_tiles(p, 64, 128) <= sm_count;
}

/// The K depth of 64-row pingpong tiles for the problem. 16-bit: 64 where the grid of 64x128 output
/// tiles fills at most half the SMs, so that each CTA streams a long K and the shallower tile's extra
/// pipeline stages keep more loads in flight (H100, `cuactor tune gemm`, ten decode shapes of M 16-128:
/// 1.07-1.17x the 128-deep tile on grids of 16-64 tiles, tied on 64 tiles once); 128 on larger grids
/// (0.97-1.01x either way there). fp8 keeps its 128-deep (128-byte) tile.
int small_m_tile_k(const GemmProblem& p, int sm_count) {
  if (is_low_precision_float(p.a)) return 128;
  return few_small_m_tiles(p, sm_count) ? 64 : 128;
}

/// Kernels the heuristic compares: not stream-K (see estimated_cost); 64-column tiles only on grids
/// of few 64x128 tiles, where twice the CTAs stream B (H100, weights of 117-136 MB read cold, 1-128
/// rows: 1.00-1.30x the 64x128 tile, 1.13x in the geometric mean of 21 shapes; on a grid of 96 tiles
/// of 64x128 they lost, 0.81x); no narrower tile: the cost above was never fitted to them. Narrower
/// ones serve pointwise convolutions (ConvPlan) and problems of at most 32 columns
/// (detail::narrow_kernel, which GemmPlan::make takes after this comparison).
bool heuristic_candidate(const GemmSku& s, const GemmProblem& p, int sm_count) {
  if (is_stream_k(s.schedule) || s.tile.n < 64) return false;
  return s.tile.n > 64 || few_small_m_tiles(p, sm_count);
}

std::string describe(const GemmProblem& p) {
  return fmt::format("A={} B={} C={} D={}, layouts {},{},{}, epilogue {}", name(p.a), name(p.b), name(p.c), name(p.d),
                     name(p.layout_a), name(p.layout_b), name(p.layout_c), name(p.epilogue));
}

Status check_problem(const GemmProblem& p) {
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.batch < 1)
    return fail(
        errc::invalid_argument,
        fmt::format("GEMM problem m={} n={} k={} batch={}: sizes must be >= 0 and batch >= 1", p.m, p.n, p.k, p.batch));
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX || p.batch > INT_MAX)
    return fail(errc::invalid_argument, fmt::format("GEMM problem m={} n={} k={} batch={}: each must be <= {}", p.m,
                                                    p.n, p.k, p.batch, INT_MAX));
  if (p.k == 0 && p.m > 0 && p.n > 0)
    return fail(errc::invalid_argument,
                fmt::format("GEMM problem m={} n={} k=0: dense plans need k >= 1 (D = beta*C is a scaling, not a GEMM)",
                            p.m, p.n));
  const bool fp8 = p.a == DType::e4m3 || p.a == DType::e5m2;
  if (fp8 && p.epilogue == GemmEpilogue::linear_combination)
    return fail(errc::invalid_argument,
                fmt::format("GEMM problem with A={}: fp8 inputs need the scaled_linear_combination epilogue "
                            "(per-tensor scales) or an epilogue tree, not {}",
                            name(p.a), name(p.epilogue)));
  CUACTOR_TRY(p.epilogue.check());
  if (pairs_columns(p.epilogue))
    return fail(errc::unsupported,
                fmt::format("GEMM epilogue '{}': swiglu is supported for grouped GEMM only (the expert FFN)",
                            name(p.epilogue)));
  const bool reads_bias = p.epilogue.uses(EpilogueNode::row_bias) || p.epilogue.uses(EpilogueNode::col_bias);
  if (!p.epilogue.is_preset() && reads_bias && p.c != DType::bf16 && p.c != DType::f16 && p.c != DType::f32)
    return fail(errc::unsupported,
                fmt::format("GEMM epilogue '{}': bias vectors take C's dtype, and {} is not bf16, f16 or f32",
                            name(p.epilogue), name(p.c)));
  return ok();
}

Status check_arch(const GemmProblem& p, GpuArch arch) {
  if (!p.epilogue.is_preset() && arch != GpuArch{9, 0, true})
    return fail(errc::unsupported,
                fmt::format("GEMM epilogue tree '{}' needs an sm_90a device (CUTLASS's Sm90EVT visitors); the device "
                            "is {}",
                            name(p.epilogue), arch.name()));
  for (DType t : {p.a, p.b}) {
    if ((t == DType::e4m3 || t == DType::e5m2) && arch.sm() < 89)
      return fail(errc::unsupported,
                  fmt::format("GEMM with {} inputs needs sm_89 or newer (fp8 tensor cores); the device is {}", name(t),
                              arch.name()));
    if (t == DType::e2m1 && arch.sm() < 100)
      return fail(
          errc::unsupported,
          fmt::format("GEMM with e2m1 inputs needs sm_100 or newer (fp4 tensor cores); the device is {}", arch.name()));
  }
  return ok();
}

Status check_operand(std::string_view what, const void* ptr, DType t, std::int64_t rows, std::int64_t cols,
                     MatrixLayout layout, std::int64_t ld, std::int64_t batch, std::int64_t batch_stride) {
  const std::int64_t align = alignment_elements(t);
  const std::int64_t contiguous = extents(rows, cols, layout).contiguous;
  CUACTOR_TRY(detail::check_operand_geometry(what, ptr, rows, cols, layout, ld, batch, batch_stride));
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
    return fail(errc::invalid_argument,
                fmt::format("GEMM operand {}: pointer {} is not 16-byte aligned", what, fmt::ptr(ptr)));
  if (ld % align != 0)
    return fail(errc::invalid_argument,
                fmt::format("GEMM operand {}: ld{}={} is not a multiple of {} for {}", what, what, ld, align, name(t)));
  if (contiguous % align != 0)
    return fail(errc::invalid_argument,
                fmt::format("GEMM operand {} ({}x{} {}-major): contiguous extent {} is not a multiple of {} for {}",
                            what, rows, cols, name(layout), contiguous, align, name(t)));
  if (batch > 1 && batch_stride % align != 0)
    return fail(errc::invalid_argument, fmt::format("GEMM operand {}: batch stride {} is not a multiple of {} for {}",
                                                    what, batch_stride, align, name(t)));
  return ok();
}

Status check_options(const GemmPlanOptions& options) {
  if (options.max_swizzle < 0 || options.max_swizzle > 8 || (options.max_swizzle & (options.max_swizzle - 1)) != 0)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan max_swizzle={} must be 0 (default), 1, 2, 4 or 8", options.max_swizzle));
  if (options.raster_order < 0 || options.raster_order > 2)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan raster_order={} must be 0 (heuristic), 1 (along M) or 2 (along N)",
                            options.raster_order));
  if (options.sm_count < 0)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan sm_count={} must be >= 0 (0: 132, the H100/H200 SXM count)", options.sm_count));
  if (options.split_k < 0 || options.split_k > kMaxSplitK)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan split_k={} must be 0 (the plan decides), 1 (never) or 2..{} slices",
                            options.split_k, kMaxSplitK));
  if (options.split_k > 1 && options.sku_override)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan split_k={} with sku_override {}: a split plan runs its own slice kernel",
                            options.split_k, options.sku_override->to_string()));
  if (options.swap_ab < 0 || options.swap_ab > 2)
    return fail(
        errc::invalid_argument,
        fmt::format("GemmPlan swap_ab={} must be 0 (the plan decides), 1 (never) or 2 (always)", options.swap_ab));
  if (options.swap_ab == 2 && options.sku_override)
    return fail(errc::invalid_argument,
                fmt::format("GemmPlan swap_ab=2 with sku_override {}: a swapped plan runs its own kernel",
                            options.sku_override->to_string()));
  return ok();
}

/// The slice kernel's arguments for a split run: `splits` batches of an m x n x k/splits GEMM over
/// consecutive K slices of A and B (both contiguous along K), writing float32 partial products (packed
/// m x n in D's layout, one matrix per slice) with alpha 1 and beta 0; the reduction applies the
/// caller's. A swapped kernel's column-major m x n partials are the problem's row-major n x m ones.
cuactor_dense_args slice_args(cuactor_dense_args a, int splits, float* partials, MatrixLayout layout_d) {
  const int depth = a.k / splits;
  a.k = depth;
  a.batch = splits;
  a.batch_stride_a = depth;
  a.batch_stride_b = depth;
  a.c = partials;
  a.d = partials;
  a.ldc = a.ldd = layout_d == MatrixLayout::row ? a.n : a.m;
  a.batch_stride_c = a.batch_stride_d = static_cast<std::int64_t>(a.m) * a.n;
  a.alpha = 1.0f;
  a.beta = 0.0f;
  return a;
}

/// ABI arguments with packed defaults filled in.
cuactor_dense_args make_args(const GemmProblem& p, const GemmOperands& o, const GemmPlanOptions& opts) {
  cuactor_dense_args a{};
  a.m = static_cast<int>(p.m);
  a.n = static_cast<int>(p.n);
  a.k = static_cast<int>(p.k);
  a.batch = static_cast<int>(p.batch);
  a.lda = ld_or_packed(p.m, p.k, p.layout_a, o.lda);
  a.ldb = ld_or_packed(p.k, p.n, p.layout_b, o.ldb);
  a.ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
  a.ldc = o.c != nullptr ? ld_or_packed(p.m, p.n, p.layout_c, o.ldc) : a.ldd;
  a.batch_stride_a = stride_or_packed(p.m, p.k, p.layout_a, a.lda, o.batch_stride_a);
  a.batch_stride_b = stride_or_packed(p.k, p.n, p.layout_b, a.ldb, o.batch_stride_b);
  a.batch_stride_d = stride_or_packed(p.m, p.n, p.layout_c, a.ldd, o.batch_stride_d);
  a.batch_stride_c =
      o.c != nullptr ? stride_or_packed(p.m, p.n, p.layout_c, a.ldc, o.batch_stride_c) : a.batch_stride_d;
  a.a = o.a;
  a.b = o.b;
  a.c = o.c != nullptr ? o.c : o.d;  // beta == 0 without C: the kernel still needs a valid C descriptor
  a.d = o.d;
  a.alpha = o.alpha;
  a.beta = o.beta;
  a.scale_a = o.scale_a;
  a.scale_b = o.scale_b;
  a.epilogue.row_scale = o.epilogue.row_scale;
  a.epilogue.col_scale = o.epilogue.col_scale;
  a.epilogue.row_bias = o.epilogue.row_bias;
  a.epilogue.col_bias = o.epilogue.col_bias;
  a.epilogue.amax = o.epilogue.amax;
  a.epilogue.aux = o.epilogue.aux;
  a.epilogue.row_sum = o.epilogue.row_sum;
  a.epilogue.clamp_lo = o.epilogue.clamp_lo;
  a.epilogue.clamp_hi = o.epilogue.clamp_hi;
  a.device = opts.device;
  a.sm_count = opts.sm_count;
  a.max_swizzle = opts.max_swizzle;
  a.raster_order = opts.raster_order;
  // sm_90a kernels wait on the previous grid (instances built without that wait, sm_80 and stream-K
  // ones, ignore the field: AdapterEntries::programmatic_launch).
  // Consumers read epilogue vectors after their first mainloop stage, which the producer loaded after
  // its wait (check_problem's k >= 1 orders them too), but CUTLASS's scalar broadcast reads device
  // scalars (the fp8 scales) when each thread builds the epilogue, before any wait: those launch plainly.
  a.programmatic_launch = opts.programmatic_launch && o.scale_a == nullptr && o.scale_b == nullptr ? 1 : 0;
  return a;
}

}  // namespace

namespace detail {

std::string decode_plan_rule(const GemmProblem& p, GpuArch arch, std::string_view what, bool takes_e4m3) {
  if (arch != GpuArch{9, 0, true})
    return fmt::format("{} kernels are sm_90a kernels; the device is {}", what, arch.name());
  const bool e4m3 = takes_e4m3 && p.a == DType::e4m3 && p.b == DType::e4m3;
  if (!e4m3 && (p.a != p.b || (p.a != DType::bf16 && p.a != DType::f16)))
    return fmt::format("{} takes bf16 or f16 A and B{}, not A={} B={}", what, takes_e4m3 ? " (or e4m3 ones)" : "",
                       name(p.a), name(p.b));
  if (p.c != p.d) return fmt::format("{} writes C and D of one type, not C={} D={}", what, name(p.c), name(p.d));
  if (e4m3 && p.d != DType::bf16)
    return fmt::format("{} writes bf16 C and D from e4m3 inputs, not {}", what, name(p.d));
  const GemmEpilogue epilogue = e4m3 ? GemmEpilogue::scaled_linear_combination : GemmEpilogue::linear_combination;
  if (p.epilogue != epilogue)
    return fmt::format("{} applies '{}' to {} inputs, not the epilogue '{}'", what, name(epilogue), name(p.a),
                       name(p.epilogue));
  if (p.batch != 1) return fmt::format("{} takes one GEMM, not batch={}", what, p.batch);
  if (p.layout_a != MatrixLayout::row || p.layout_b != MatrixLayout::col || p.layout_c != MatrixLayout::row)
    return fmt::format("{} takes layouts row,col,row (A row-major, B as N x K, D row-major), not {},{},{}", what,
                       name(p.layout_a), name(p.layout_b), name(p.layout_c));
  return {};
}

namespace {

/// The sm_90a pingpong kernel without a cluster, of `tile`, that computes `p`: the decode plans' kernels
/// (fp8 inputs: the pingpong schedule with fast accumulation, as the catalog's other fp8 kernels).
GemmSku decode_pingpong_sku(const GemmProblem& p, Shape3 tile) {
  GemmSku s = dense_sku_for(p);
  s.arch = GpuArch{9, 0, true};
  s.schedule = is_low_precision_float(p.a) ? GemmSchedule::pingpong_fp8_fast_accum : GemmSchedule::pingpong;
  s.tile = tile;
  s.cluster = {1, 1, 1};
  return s;
}

/// The decode plans' narrow tile over `columns` columns (the swapped kernel's rows of the problem, a
/// narrow-column problem's N): 64 rows, 16 columns (32 past 16), `depth` deep.
Shape3 narrow_tile(std::int64_t columns, int depth) {
  return {64, columns <= 16 ? 16 : 32, depth};
}

}  // namespace

int split_k_for(const GemmProblem& p, int sm_count, bool swapped) noexcept {
  const std::int64_t weight_tiles = output_tiles(p, 64, 64);  // for m <= 32 the swapped kernel's tile count too
  if (weight_tiles == 0 || p.m > kSplitKMaxRows || p.k < kSplitKMinDepth) return 1;
  std::int64_t grid = weight_tiles;
  std::int64_t min_slice_depth = 512;
  int min_slices = 2;
  if (!swapped && p.m <= kSplitKNarrowRows) {
    if (2 * weight_tiles > sm_count) return 1;
  } else if (!swapped) {
    // The float32 partials, written and read back, add at most 1/8 of the weight bytes: per column,
    // s x 8 m bytes against 2 K.
    if (4 * weight_tiles > sm_count) return 1;
    min_slice_depth = 32 * p.m;
    min_slices = 3;
  } else {
    const Shape3 tile = swapped_sku(p).tile;
    grid = output_tiles(swapped_problem(p), tile.m, tile.n);
    // Past 32 rows the swapped grid is twice the weight tiles: both limits hold it.
    if (5 * weight_tiles > sm_count || 4 * grid > sm_count) return 1;
    min_slice_depth = 1024;
  }
  for (int s = 8; s >= min_slices; --s)
    if (s * grid <= sm_count && p.k % (s * kSplitKTileDepth) == 0 && p.k / s >= min_slice_depth) return s;
  return 1;
}

std::string split_k_rule(const GemmProblem& p, GpuArch arch, int splits) {
  if (std::string broken = decode_plan_rule(p, arch, "split-K"); !broken.empty()) return broken;
  if (p.d != DType::bf16 && p.d != DType::f16 && p.d != DType::f32)
    return fmt::format("split-K writes bf16, f16 or f32 C and D, not {}", name(p.d));
  if (p.k % (static_cast<std::int64_t>(splits) * kSplitKTileDepth) != 0)
    return fmt::format("split-K into {} slices needs k={} to be a multiple of {} (slices of whole {}-deep tiles)",
                       splits, p.k, splits * kSplitKTileDepth, kSplitKTileDepth);
  return {};
}

GemmSku split_k_slice_sku(const GemmProblem& p, bool swap_ab) {
  const Shape3 tile = p.n <= kNarrowMaxColumns ? narrow_tile(p.n, kSplitKTileDepth) : Shape3{64, 64, kSplitKTileDepth};
  GemmSku s = swap_ab ? swapped_sku(p, kSplitKTileDepth) : decode_pingpong_sku(p, tile);
  s.c = s.d = DType::f32;
  return s;
}

const CatalogEntry* split_k_slice_kernel(const GemmProblem& p, bool swap_ab) {
  const GemmSku preferred = split_k_slice_sku(p, swap_ab);
  if (const CatalogEntry* e = find_in_catalog(preferred); e != nullptr || swap_ab || preferred.tile.n == 64) return e;
  GemmSku wide = preferred;
  wide.tile.n = 64;
  return find_in_catalog(wide);
}

int narrow_split_for(const GemmProblem& p, int sm_count) noexcept {
  if (p.n > kNarrowMaxColumns || p.m <= kSplitKMaxRows || p.k < kNarrowSplitMinDepth) return 1;
  const std::int64_t tiles = (p.m + 63) / 64;
  if (4 * tiles > sm_count) return 1;
  for (int s = 8; s >= 2; --s)
    if (s * tiles <= sm_count && p.k % (s * kSplitKTileDepth) == 0 && p.k / s >= 1024) return s;
  return 1;
}

bool swap_ab_for(const GemmProblem& p, int sm_count) noexcept {
  return p.m <= kSwapAbMaxRows || (p.m <= kSwapAbWideMaxRows && 2 * output_tiles(p, 64, 64) <= sm_count);
}

std::string swap_ab_rule(const GemmProblem& p, GpuArch arch) {
  return decode_plan_rule(p, arch, "swap-AB", true);
}

GemmProblem swapped_problem(const GemmProblem& p) {
  GemmProblem s = p;
  s.m = p.n;
  s.n = p.m;
  s.a = p.b;
  s.b = p.a;
  s.layout_a = MatrixLayout::row;
  s.layout_b = MatrixLayout::col;
  s.layout_c = MatrixLayout::col;
  return s;
}

GemmOperands swapped_operands(const GemmOperands& o) {
  GemmOperands s = o;
  s.a = o.b;
  s.lda = o.ldb;
  s.batch_stride_a = o.batch_stride_b;
  s.b = o.a;
  s.ldb = o.lda;
  s.batch_stride_b = o.batch_stride_a;
  s.scale_a = o.scale_b;
  s.scale_b = o.scale_a;
  return s;
}

GemmSku swapped_sku(const GemmProblem& p, int depth) {
  if (depth == 0) depth = is_low_precision_float(p.a) ? 2 * kSwapAbTileDepth : kSwapAbTileDepth;
  return decode_pingpong_sku(swapped_problem(p), narrow_tile(p.m, depth));
}

const CatalogEntry* swapped_kernel(const GemmProblem& p) {
  if (const CatalogEntry* e = find_in_catalog(swapped_sku(p))) return e;
  return find_in_catalog(swapped_sku(p, kSplitKTileDepth));  // float32 outputs: the split slices' twins
}

GemmSku narrow_sku(const GemmProblem& p) {
  return decode_pingpong_sku(p, narrow_tile(p.n, kSwapAbTileDepth));
}

bool fits_narrow_plan(const GemmProblem& p, GpuArch arch) {
  return p.n <= kNarrowMaxColumns && p.d == p.a && decode_plan_rule(p, arch, "narrow-column").empty();
}

const CatalogEntry* narrow_kernel(const GemmProblem& p, GpuArch arch) {
  return fits_narrow_plan(p, arch) ? find_in_catalog(narrow_sku(p)) : nullptr;
}

}  // namespace detail

GemmSku dense_sku_for(const GemmProblem& p) {
  GemmSku s;
  s.a = p.a;
  s.b = p.b;
  s.c = p.c;
  s.d = p.d;
  s.layout_a = p.layout_a;
  s.layout_b = p.layout_b;
  s.layout_c = p.layout_c;
  s.epilogue = p.epilogue;
  return s;
}

std::size_t hash_value(const GemmProblem& p) noexcept {
  std::size_t h = 0x9e3779b97f4a7c15ull;
  for (long long v : {static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                      static_cast<long long>(p.batch), static_cast<long long>(p.a), static_cast<long long>(p.b),
                      static_cast<long long>(p.c), static_cast<long long>(p.d), static_cast<long long>(p.layout_a),
                      static_cast<long long>(p.layout_b), static_cast<long long>(p.layout_c),
                      static_cast<long long>(hash_value(p.epilogue))})
    boost::hash_combine(h, v);
  return h;
}

Result<GemmPlan> GemmPlan::make(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options) {
  const nvtx::Range range("gemm.plan");
  CUACTOR_TRY(check_problem(problem));
  CUACTOR_TRY(check_arch(problem, device_arch));
  // Options are checked before the catalog is searched so that a build without kernels rejects them too.
  CUACTOR_TRY(check_options(options));
  CUACTOR_TRY(check_decode_options(problem, device_arch, options));
  const int sm_count = sm_count_of(options);
  const CatalogEntry* chosen = nullptr;
  if (options.sku_override) {
    const GemmSku& want = *options.sku_override;
    if (want.family != GemmFamily::dense)
      return fail(errc::invalid_argument,
                  fmt::format("GemmPlan override {}: family {} is not dense", want.to_string(), name(want.family)));
    if (!sku_computes(want, problem))
      return fail(errc::invalid_argument, fmt::format("GemmPlan override {} does not compute the problem ({})",
                                                      want.to_string(), describe(problem)));
    if (!runs_on(want, device_arch))
      return fail(errc::unsupported, fmt::format("GemmPlan override {}: {} kernels cannot run on a {} device",
                                                 want.to_string(), want.arch.name(), device_arch.name()));
    chosen = find_in_catalog(want);
    if (chosen == nullptr)
      return fail(errc::unsupported,
                  fmt::format("GemmPlan override {} is not compiled into this build's catalog ({} dense kernels; "
                              "the JIT can instantiate other configurations)",
                              want.to_string(), catalog_entries(GemmFamily::dense).size()));
  } else {
    // Prefer the most specific architecture the device runs (sm_90a over sm_80), then the cheapest
    // tile configuration for this shape.
    double best_cost = 0;
    const int small_k = small_m_tile_k(problem, sm_count);
    for (const CatalogEntry* e : catalog_entries(GemmFamily::dense)) {
      if (!sku_computes(e->sku, problem) || !runs_on(e->sku, device_arch) ||
          !heuristic_candidate(e->sku, problem, sm_count))
        continue;
      const double cost = estimated_cost(e->sku, problem, sm_count);
      // Two 64-row kernels that differ only in K depth cost the same; the shape's depth (small_m_tile_k)
      // decides between them.
      const bool depth_twin = chosen != nullptr && e->sku.tile.m == 64 && chosen->sku.tile.m == 64 &&
                              chosen->sku.tile.n == e->sku.tile.n && chosen->sku.schedule == e->sku.schedule &&
                              chosen->sku.cluster == e->sku.cluster && chosen->sku.arch == e->sku.arch;
      const bool deeper_fit =
          depth_twin && cost == best_cost && chosen->sku.tile.k != e->sku.tile.k && e->sku.tile.k == small_k;
      const bool better =
          chosen == nullptr || e->sku.arch.sm() > chosen->sku.arch.sm() ||
          (e->sku.arch.sm() == chosen->sku.arch.sm() &&
           (e->sku.arch.arch_specific > chosen->sku.arch.arch_specific ||
            (e->sku.arch.arch_specific == chosen->sku.arch.arch_specific && (cost < best_cost || deeper_fit))));
      if (better) {
        chosen = e;
        best_cost = cost;
      }
    }
  }
  if (options.sku_override)
    return finish(problem, device_arch, chosen->sku, *chosen->instance, nullptr, PlanSource::overridden, options);
  // Decode shapes: the swapped kernel (a narrow tile over the few rows) and split-K, where asked, or
  // where the shape calls for them and the problem and the catalog allow them (rules checked above
  // for forced ones); then, for plans not swapped, the narrow-column tile, split on grids of few tiles.
  const CatalogEntry* kernel = chosen;
  bool swap = false;
  if (options.swap_ab == 2 || (options.swap_ab == 0 && detail::swap_ab_for(problem, sm_count) &&
                               detail::swap_ab_rule(problem, device_arch).empty())) {
    if (const CatalogEntry* e = detail::swapped_kernel(problem)) {
      kernel = e;
      swap = true;
    } else if (options.swap_ab == 2) {
      return fail(errc::unsupported,
                  fmt::format("GemmPlan swap_ab=2: its kernel {} is not compiled into this build's catalog",
                              detail::swapped_sku(problem).to_string()));
    }
  }
  const bool forced = options.split_k > 1;
  const int splits = forced ? options.split_k : options.split_k == 1 ? 1 : detail::split_k_for(problem, sm_count, swap);
  // The catalog's slice kernel for `count` slices, swapped or not; null where the problem breaks a
  // split rule or the catalog lacks the kernel.
  const auto slice_entry = [&](int count, bool swapped) -> const CatalogEntry* {
    if (!detail::split_k_rule(problem, device_arch, count).empty()) return nullptr;
    return detail::split_k_slice_kernel(problem, swapped);
  };
  if (splits > 1) {
    if (const CatalogEntry* e = slice_entry(splits, swap))
      return finish(problem, device_arch, e->sku, *e->instance, nullptr, PlanSource::heuristic, options, splits, swap);
    if (forced) {  // its rules were checked above
      const GemmSku slice = detail::split_k_slice_sku(problem, swap);
      return fail(errc::unsupported,
                  fmt::format("GemmPlan split_k={}: its slice kernel {} is not compiled into this build's catalog{}",
                              splits, slice.to_string(),
                              !swap && slice.tile.n < 64 ? " (nor the 64-column one it falls back to)" : ""));
    }
  }
  // Past 32 rows, where the swapped split does not apply, the unswapped split reads the weights once
  // (split_k_for): it replaces an automatic swap.
  if (swap && options.swap_ab == 0 && options.split_k == 0 && splits == 1 && problem.m > detail::kSwapAbMaxRows) {
    const int unswapped = detail::split_k_for(problem, sm_count, false);
    if (const CatalogEntry* e = unswapped > 1 ? slice_entry(unswapped, false) : nullptr)
      return finish(problem, device_arch, e->sku, *e->instance, nullptr, PlanSource::heuristic, options, unswapped,
                    false);
  }
  if (const CatalogEntry* narrow = swap ? nullptr : detail::narrow_kernel(problem, device_arch)) {
    // Narrow-column problems on grids of few row tiles split along K, on the narrow slice kernel only.
    const int narrow_splits = options.split_k == 0 ? detail::narrow_split_for(problem, sm_count) : 1;
    const CatalogEntry* e = narrow_splits > 1 ? slice_entry(narrow_splits, false) : nullptr;
    if (e != nullptr && e->sku == detail::split_k_slice_sku(problem, false))
      return finish(problem, device_arch, e->sku, *e->instance, nullptr, PlanSource::heuristic, options, narrow_splits,
                    false);
    kernel = narrow;
  }
  if (kernel == nullptr)  // neither the heuristic's candidates nor a decode kernel computes it
    return fail(errc::unsupported,
                fmt::format("no dense GEMM kernel in this build's catalog computes {} on {} (CUACTOR_KERNEL_ARCHS "
                            "selects the compiled families; the JIT can instantiate others)",
                            describe(problem), device_arch.name()));
  return finish(problem, device_arch, kernel->sku, *kernel->instance, nullptr, PlanSource::heuristic, options, 1, swap);
}

Result<GemmSku> GemmPlan::sku_for(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options) {
  CUACTOR_TRY(check_problem(problem));
  CUACTOR_TRY(check_arch(problem, device_arch));
  CUACTOR_TRY(check_options(options));
  GemmSku base;
  base.family = GemmFamily::dense;
  base.a = problem.a;
  base.b = problem.b;
  base.c = problem.c;
  base.d = problem.d;
  base.accumulator = DType::f32;
  base.layout_a = problem.layout_a;
  base.layout_b = problem.layout_b;
  base.layout_c = problem.layout_c;
  base.epilogue = problem.epilogue;
  const bool fp8 = is_low_precision_float(problem.a);
  struct Config {
    GemmSchedule schedule;
    Shape3 tile;
    Shape3 cluster;
  };
  // The catalog's configurations per input width: large cooperative and pingpong tiles with a 2-CTA
  // cluster (16-bit), and 64-row pingpong tiles for small M.
  const int small_k = small_m_tile_k(problem, sm_count_of(options));
  std::vector<Config> configs =
      fp8 ? std::vector<Config>{{GemmSchedule::cooperative_fp8_fast_accum, {256, 128, 128}, {1, 2, 1}},
                                {GemmSchedule::pingpong_fp8_fast_accum, {64, 128, small_k}, {1, 1, 1}}}
          : std::vector<Config>{{GemmSchedule::cooperative, {128, 256, 64}, {2, 1, 1}},
                                {GemmSchedule::pingpong, {128, 128, 64}, {2, 1, 1}},
                                {GemmSchedule::pingpong, {64, 128, small_k}, {1, 1, 1}}};
  if (!fp8 && few_small_m_tiles(problem, sm_count_of(options)))
    configs.push_back({GemmSchedule::pingpong, {64, 64, small_k}, {1, 1, 1}});
  if (device_arch.sm() < 90 || !device_arch.arch_specific) {
    if (fp8) return fail(errc::unsupported, fmt::format("no sm_80 configuration computes {} inputs", name(problem.a)));
    base.arch = GpuArch{8, 0, false};
    base.schedule = GemmSchedule::multistage;
    base.tile = {128, 128, 64};
    base.cluster = {1, 1, 1};
    base.stages = 3;
    return base;
  }
  // Trees over at most kNarrowMaxColumns columns (a router's logits with a bias, a low-rank
  // projection with a scale) take the narrow-column tile that make() gives preset epilogues, under
  // the same rules but the epilogue's: 64-column tiles would compute 2-8x padding. Unsplit: split
  // slices write float32 partials, where the tree runs on the whole accumulator. Not for side outputs
  // (amax, aux, row sums), which no narrow tile has run.
  GemmProblem as_preset = problem;
  as_preset.epilogue = GemmEpilogue::linear_combination;
  if (!dense_only_output(problem.epilogue) && detail::fits_narrow_plan(as_preset, GpuArch{9, 0, true}))
    return detail::narrow_sku(problem);
  base.arch = GpuArch{9, 0, true};
  std::optional<GemmSku> best;
  double best_cost = 0;
  for (const Config& c : configs) {
    GemmSku s = base;
    s.schedule = c.schedule;
    s.tile = c.tile;
    s.cluster = c.cluster;
    const double cost = estimated_cost(s, problem, sm_count_of(options));
    if (!best || cost < best_cost) {
      best = s;
      best_cost = cost;
    }
  }
  return *best;
}

Result<GemmPlan> GemmPlan::with_instance(const GemmProblem& problem, GpuArch device_arch, const GemmSku& sku,
                                         const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                         PlanSource source, const GemmPlanOptions& options) {
  CUACTOR_TRY(check_problem(problem));
  CUACTOR_TRY(check_arch(problem, device_arch));
  CUACTOR_TRY(check_options(options));
  CUACTOR_TRY(check_decode_options(problem, device_arch, options));
  const bool swap = options.swap_ab == 2;
  const int splits = std::max(options.split_k, 1);
  // What the kernel itself computes: the transposed problem when swapped, float32 partial products
  // (C and D) when it runs the slices of a split.
  GemmProblem kernel_problem = swap ? detail::swapped_problem(problem) : problem;
  if (splits > 1) kernel_problem.c = kernel_problem.d = DType::f32;
  if (!sku_computes(sku, kernel_problem))
    return fail(
        errc::invalid_argument,
        fmt::format("GEMM kernel {} does not compute the {}problem ({}){}", sku.to_string(), swap ? "swapped " : "",
                    describe(kernel_problem), splits > 1 ? fmt::format(" as the slices of split_k={}", splits) : ""));
  if (!runs_on(sku, device_arch))
    return fail(errc::unsupported, fmt::format("GEMM kernel {}: {} kernels cannot run on a {} device", sku.to_string(),
                                               sku.arch.name(), device_arch.name()));
  return finish(problem, device_arch, sku, instance, std::move(owner), source, options, splits, swap);
}

Status GemmPlan::check_decode_options(const GemmProblem& problem, GpuArch device_arch, const GemmPlanOptions& options) {
  if (options.split_k > 1)
    if (const std::string broken = detail::split_k_rule(problem, device_arch, options.split_k); !broken.empty())
      return fail(errc::unsupported, fmt::format("GemmPlan split_k={}: {}", options.split_k, broken));
  if (options.swap_ab == 2)
    if (const std::string broken = detail::swap_ab_rule(problem, device_arch); !broken.empty())
      return fail(errc::unsupported, fmt::format("GemmPlan swap_ab=2: {}", broken));
  return ok();
}

GemmPlan GemmPlan::finish(const GemmProblem& problem, GpuArch arch, const GemmSku& sku,
                          const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner, PlanSource source,
                          const GemmPlanOptions& options, int split_k, bool swap_ab) {
  GemmPlanOptions resolved = options;
  resolved.sm_count = sm_count_of(options);
  // The heuristic's 16-bit 128-row tiles take tiles in swizzled groups along N, so that a wave's CTAs
  // share rows of A and columns of B in L2 (H200: 0.93 -> 0.97x cuBLAS at 4096^3; along N because
  // CUTLASS's order lost up to 8% with the same swizzle). Callers' and tuned settings stand.
  if (source == PlanSource::heuristic && options.max_swizzle == 0 && options.raster_order == 0 && split_k <= 1 &&
      !swap_ab && sku.arch == GpuArch{9, 0, true} && sku.tile.m >= 128 &&
      (sku.a == DType::bf16 || sku.a == DType::f16) && sku.d == sku.a) {
    if (const int swizzle = grid_swizzle(problem, sku); swizzle > 1) {
      resolved.max_swizzle = swizzle;
      resolved.raster_order = 2;  // along N
    }
  }
  const GemmProblem kernel_problem = swap_ab ? detail::swapped_problem(problem) : problem;
  const auto args = make_args(kernel_problem, GemmOperands{}, resolved);
  if (split_k <= 1) {
    const std::size_t workspace = instance.workspace_size(&args);
    return GemmPlan(problem, arch, sku, &instance, std::move(owner), source, resolved, workspace,
                    Launch{swap_ab, 1, 0});
  }
  // Workspace: the slice kernel's own, then the float32 partial products of every slice.
  const auto slices = slice_args(args, split_k, nullptr, kernel_problem.layout_c);
  const std::size_t partials_offset = detail::align_up(instance.workspace_size(&slices), 256);
  const std::size_t partials = static_cast<std::size_t>(split_k) * static_cast<std::size_t>(problem.m) *
                               static_cast<std::size_t>(problem.n) * sizeof(float);
  return GemmPlan(problem, arch, sku, &instance, std::move(owner), source, resolved, partials_offset + partials,
                  Launch{swap_ab, split_k, partials_offset});
}

std::string_view name(PlanSource s) noexcept {
  switch (s) {
    case PlanSource::heuristic:
      return "heuristic";
    case PlanSource::overridden:
      return "override";
    case PlanSource::tuned:
      return "tuned";
  }
  return "?";
}

double GemmPlan::flops() const noexcept {
  return 2.0 * static_cast<double>(problem_.m) * static_cast<double>(problem_.n) * static_cast<double>(problem_.k) *
         static_cast<double>(problem_.batch);
}

namespace {

/// Side outputs (aux, row sums, amax) apart from the operands and from each other.
Status check_side_outputs_apart(const GemmProblem& p, const GemmOperands& o) {
  // The side outputs are written with plain stores while other CTAs read A, B and C and store D:
  // any overlap with them, or with each other, is a race. Byte spans, so padding counts too.
  struct Span {
    const char* what;
    const void* ptr;
    std::size_t bytes;
  };
  const std::int64_t lda = ld_or_packed(p.m, p.k, p.layout_a, o.lda), ldb = ld_or_packed(p.k, p.n, p.layout_b, o.ldb);
  const std::int64_t ldc = ld_or_packed(p.m, p.n, p.layout_c, o.ldc), ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
  const std::int64_t bsd = stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d);
  const Span spans[] = {
      {"A", o.a,
       span_bytes(p.a, p.m, p.k, p.layout_a, lda, p.batch,
                  stride_or_packed(p.m, p.k, p.layout_a, lda, o.batch_stride_a))},
      {"B", o.b,
       span_bytes(p.b, p.k, p.n, p.layout_b, ldb, p.batch,
                  stride_or_packed(p.k, p.n, p.layout_b, ldb, o.batch_stride_b))},
      {"C", o.c,
       span_bytes(p.c, p.m, p.n, p.layout_c, ldc, p.batch,
                  stride_or_packed(p.m, p.n, p.layout_c, ldc, o.batch_stride_c))},
      {"D", o.d, span_bytes(p.d, p.m, p.n, p.layout_c, ldd, p.batch, bsd)},
      {"aux", o.epilogue.aux, span_bytes(p.c, p.m, p.n, p.layout_c, ldd, p.batch, bsd)},
      {"row_sum", o.epilogue.row_sum, static_cast<std::size_t>(p.m * p.batch) * sizeof(float)},
      {"amax", o.epilogue.amax, sizeof(float)},
  };
  constexpr std::size_t kFirstSideOutput = 4;
  for (std::size_t i = kFirstSideOutput; i < std::size(spans); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (bytes_overlap(spans[i].ptr, spans[i].bytes, spans[j].ptr, spans[j].bytes))
        return fail(errc::invalid_argument,
                    fmt::format("GEMM epilogue '{}': the side output {} ({} bytes at {}) overlaps {} ({} bytes at {}); "
                                "side outputs need memory of their own",
                                name(p.epilogue), spans[i].what, spans[i].bytes, spans[i].ptr, spans[j].what,
                                spans[j].bytes, spans[j].ptr));
  return ok();
}

}  // namespace

Status GemmPlan::validate(const GemmOperands& o) const {
  const auto& p = problem_;
  if (p.m == 0 || p.n == 0) {
    if (p.m * p.n != 0 || (o.d == nullptr && p.m * p.n > 0))
      return fail(errc::internal, "GemmPlan: unreachable empty-problem state");
    return ok();  // nothing to compute
  }
  const std::int64_t lda = ld_or_packed(p.m, p.k, p.layout_a, o.lda);
  const std::int64_t ldb = ld_or_packed(p.k, p.n, p.layout_b, o.ldb);
  const std::int64_t ldd = ld_or_packed(p.m, p.n, p.layout_c, o.ldd);
  CUACTOR_TRY(check_operand("A", o.a, p.a, p.m, p.k, p.layout_a, lda, p.batch,
                            stride_or_packed(p.m, p.k, p.layout_a, lda, o.batch_stride_a)));
  CUACTOR_TRY(check_operand("B", o.b, p.b, p.k, p.n, p.layout_b, ldb, p.batch,
                            stride_or_packed(p.k, p.n, p.layout_b, ldb, o.batch_stride_b)));
  CUACTOR_TRY(check_operand("D", o.d, p.d, p.m, p.n, p.layout_c, ldd, p.batch,
                            stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d)));
  const bool tree = !p.epilogue.is_preset();
  if (tree && (o.c == nullptr) == p.epilogue.uses(EpilogueNode::c))
    return fail(errc::invalid_argument, fmt::format("GEMM operand C: {} but the epilogue '{}' {} it",
                                                    o.c == nullptr ? "pointer is null" : "set", name(p.epilogue),
                                                    o.c == nullptr ? "reads" : "does not read"));
  if (o.c == nullptr) {
    if (!tree && o.beta != 0.0f)
      return fail(
          errc::invalid_argument,
          fmt::format("GEMM operand C: pointer is null but beta={} (C may be omitted only when beta is 0)", o.beta));
  } else {
    const std::int64_t ldc = ld_or_packed(p.m, p.n, p.layout_c, o.ldc);
    CUACTOR_TRY(check_operand("C", o.c, p.c, p.m, p.n, p.layout_c, ldc, p.batch,
                              stride_or_packed(p.m, p.n, p.layout_c, ldc, o.batch_stride_c)));
    if (o.c == o.d && p.c != p.d)
      return fail(errc::invalid_argument,
                  fmt::format("GEMM operands C and D alias but C is {} and D is {}", name(p.c), name(p.d)));
  }
  const bool scaled = p.epilogue == GemmEpilogue::scaled_linear_combination;
  for (auto [what, ptr] : {std::pair{"scale_a", o.scale_a}, std::pair{"scale_b", o.scale_b}}) {
    if (ptr == nullptr) continue;
    if (!scaled)
      return fail(errc::invalid_argument,
                  fmt::format("GEMM {} is set but the epilogue {} has no per-tensor scales", what, name(p.epilogue)));
    if (reinterpret_cast<std::uintptr_t>(ptr) % alignof(float) != 0)
      return fail(errc::invalid_argument,
                  fmt::format("GEMM {}: pointer {} is not 4-byte aligned", what, fmt::ptr(ptr)));
  }
  CUACTOR_TRY(check_epilogue_operands(p.epilogue, o.epilogue, "GEMM"));
  const std::int64_t batch_stride_d = stride_or_packed(p.m, p.n, p.layout_c, ldd, o.batch_stride_d);
  if (o.epilogue.aux != nullptr)  // laid out like D (its ld and batch stride), in C's dtype
    CUACTOR_TRY(check_operand("aux (D's ld)", o.epilogue.aux, p.c, p.m, p.n, p.layout_c, ldd, p.batch, batch_stride_d));
  return check_side_outputs_apart(p, o);
}

Status check_gemm_buffer_sizes(const GemmProblem& p, const GemmOperands& o, std::size_t a_bytes, std::size_t b_bytes,
                               std::size_t c_bytes, std::size_t d_bytes) {
  if (p.m == 0 || p.n == 0) return ok();
  struct Operand {
    const char* what;
    const void* ptr;
    DType type;
    std::int64_t rows, cols;
    MatrixLayout layout;
    std::int64_t ld, batch_stride;
    std::size_t bytes;
  };
  const Operand operands[] = {
      {"A", o.a, p.a, p.m, p.k, p.layout_a, o.lda, o.batch_stride_a, a_bytes},
      {"B", o.b, p.b, p.k, p.n, p.layout_b, o.ldb, o.batch_stride_b, b_bytes},
      {"C", o.c, p.c, p.m, p.n, p.layout_c, o.ldc, o.batch_stride_c, c_bytes},
      {"D", o.d, p.d, p.m, p.n, p.layout_c, o.ldd, o.batch_stride_d, d_bytes},
  };
  for (const Operand& x : operands) {
    if (x.ptr == nullptr && x.what[0] == 'C') continue;
    const std::int64_t ld = ld_or_packed(x.rows, x.cols, x.layout, x.ld);
    const std::size_t need = span_bytes(x.type, x.rows, x.cols, x.layout, ld, p.batch,
                                        stride_or_packed(x.rows, x.cols, x.layout, ld, x.batch_stride));
    if (need > x.bytes)
      return fail(errc::invalid_argument,
                  fmt::format("GEMM operand {} ({}x{} {}-major, ld {}, batch {}): needs {} bytes but the buffer has {}",
                              x.what, x.rows, x.cols, name(x.layout), ld, p.batch, need, x.bytes));
  }
  return ok();
}

Status GemmPlan::check_buffer_sizes(const GemmOperands& o, std::size_t a_bytes, std::size_t b_bytes,
                                    std::size_t c_bytes, std::size_t d_bytes) const {
  return check_gemm_buffer_sizes(problem_, o, a_bytes, b_bytes, c_bytes, d_bytes);
}

Status GemmPlan::run(const GemmOperands& operands, void* workspace, std::size_t workspace_bytes,
                     cudaStream_t stream) const {
  CUACTOR_TRY(validate(operands));
  if (problem_.m == 0 || problem_.n == 0) return ok();
  if (workspace_bytes < workspace_size_ || (workspace_size_ > 0 && workspace == nullptr))
    return fail(errc::workspace_too_small,
                fmt::format("GEMM {}: workspace of {} bytes at {} is smaller than the {} bytes the plan needs",
                            sku().to_string(), workspace_bytes, fmt::ptr(workspace), workspace_size_));
  const int split_k = launch_.split_k;
  if (split_k > 1 && !detail::aligned16(workspace))
    return fail(errc::invalid_argument,
                fmt::format("GEMM split-K: workspace at {} is not 16-byte aligned (its partial products are TMA "
                            "stores)",
                            fmt::ptr(workspace)));
  // A swapped plan's kernel computes D^T = B^T A^T on the same memory.
  const GemmProblem kernel_problem = launch_.swap_ab ? detail::swapped_problem(problem_) : problem_;
  auto args = make_args(kernel_problem, launch_.swap_ab ? detail::swapped_operands(operands) : operands, options_);
  auto* partials = reinterpret_cast<float*>(static_cast<std::byte*>(workspace) + launch_.partials_offset);
  if (split_k > 1) args = slice_args(args, split_k, partials, kernel_problem.layout_c);
  const cuactor_gemm_instance& inst = *instance_;
  if (const int s = inst.can_implement(&args); s != CUACTOR_KERNEL_OK)
    return fail(errc::invalid_argument,
                fmt::format("GEMM {}: the kernel rejects m={} n={} k={} lda={} ldb={} ldc={} ldd={} (status {})",
                            sku().to_string(), args.m, args.n, args.k, args.lda, args.ldb, args.ldc, args.ldd, s));
  // A split plan's kernel owns the workspace before the partial products.
  switch (inst.run(&args, workspace, split_k > 1 ? launch_.partials_offset : workspace_bytes, stream)) {
    case CUACTOR_KERNEL_OK:
      if (split_k > 1) {
        const auto& p = problem_;
        return gpu::check(detail::launch_split_k_reduce(p.d, partials, split_k, p.m, p.n, operands.alpha, operands.beta,
                                                        operands.c, ld_or_packed(p.m, p.n, p.layout_c, operands.ldc),
                                                        operands.d, ld_or_packed(p.m, p.n, p.layout_c, operands.ldd),
                                                        4 * options_.sm_count, stream),
                          "GEMM split-K reduction");
      }
      return ok();
    case CUACTOR_KERNEL_WORKSPACE_TOO_SMALL:
      return fail(errc::workspace_too_small,
                  fmt::format("GEMM {}: workspace of {} bytes is too small", sku().to_string(), workspace_bytes));
    case CUACTOR_KERNEL_LAUNCH_FAILED:
      // CUTLASS consumed the launch error; a sticky one is still visible to the next query.
      CUACTOR_TRY(gpu::check(cudaPeekAtLastError(), "GEMM launch"));
      return fail(errc::internal, fmt::format("GEMM {}: kernel launch failed", sku().to_string()));
    default:
      return fail(errc::internal, fmt::format("GEMM {}: building the kernel parameters failed", sku().to_string()));
  }
}

std::size_t GemmPlanCache::KeyHash::operator()(const Key& k) const noexcept {
  std::size_t h = hash_value(k.problem);
  for (std::size_t v :
       {static_cast<std::size_t>(k.arch.sm()), static_cast<std::size_t>(k.arch.arch_specific),
        static_cast<std::size_t>(k.sm_count), static_cast<std::size_t>(k.device),
        static_cast<std::size_t>(k.max_swizzle * 3 + k.raster_order),
        static_cast<std::size_t>(k.split_k * 3 + k.swap_ab), static_cast<std::size_t>(k.programmatic_launch),
        k.sku_override ? hash_value(*k.sku_override) : std::size_t{0}})
    boost::hash_combine(h, v);
  return h;
}

Result<GemmPlan> GemmPlanCache::get(const GemmProblem& problem, GpuArch arch, const GemmPlanOptions& options) {
  const Key key{problem,
                arch,
                options.sm_count,
                options.device,
                options.max_swizzle,
                options.raster_order,
                options.split_k,
                options.swap_ab,
                options.programmatic_launch,
                options.sku_override};
  return cache_.get_or_create(
      key, [&] { return planner_ ? planner_(problem, arch, options) : GemmPlan::make(problem, arch, options); });
}

}  // namespace cuactor::kernels
