#include "cuactor/kernels/conv_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <boost/container_hash/hash.hpp>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <tuple>
#include <utility>

#include "cuactor/core/nvtx.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "gemm_geometry.hpp"
#include "kernels/conv_instance_abi.h"

namespace cuactor::kernels {
namespace {

using detail::alignment_elements;
using detail::ceil_div;
using detail::kDefaultSmCount;

constexpr std::array<std::pair<std::string_view, ConvOperation>, 3> kOperations{{
    {"fprop", ConvOperation::fprop},
    {"dgrad", ConvOperation::dgrad},
    {"wgrad", ConvOperation::wgrad},
}};

// TMA im2col limits of CUTLASS's sm_90a conv collective for 2-D problems (its can_implement):
// window corners in [-128, 127], filter offsets (R - 1) * dilation below 255.
constexpr GpuArch kSm90a{9, 0, true};
constexpr std::int64_t kMaxSm80Filter = 32;  // CUTLASS 2.x optimized fprop / dgrad iterators: one mask bit per tap
constexpr std::int64_t kMinCorner = -128;
constexpr std::int64_t kMaxCorner = 127;
constexpr std::int64_t kMaxFilterOffset = 255;

static_assert(kMaxConvSlices == CUACTOR_CONV_MAX_SLICES,
              "the plan's slice cap is the instances' (conv_instance_abi.h)");
static_assert(kMaxConvChannelSlices == CUACTOR_CONV_MAX_CHANNEL_SLICES,
              "the plan's channel slice cap is the instances' (conv_instance_abi.h)");

/// Layouts of (A, B, C/D) of each operation's implicit GEMM.
std::array<MatrixLayout, 3> layouts_of(ConvOperation op) {
  switch (op) {
    case ConvOperation::fprop:
    case ConvOperation::dgrad:
      return {MatrixLayout::nhwc, MatrixLayout::krsc, MatrixLayout::nhwc};
    case ConvOperation::wgrad:
      return {MatrixLayout::nhwc, MatrixLayout::nhwc, MatrixLayout::krsc};
  }
  return {MatrixLayout::nhwc, MatrixLayout::krsc, MatrixLayout::nhwc};
}

bool sku_computes(const GemmSku& s, const ConvSpec& spec) {
  const auto layouts = layouts_of(spec.operation);
  return s.family == family_of(spec.operation) && s.a == spec.element && s.b == spec.element && s.c == spec.output &&
         s.d == spec.output && s.layout_a == layouts[0] && s.layout_b == layouts[1] && s.layout_c == layouts[2] &&
         s.epilogue == GemmEpilogue::linear_combination && conv_schedule_fits(s);
}

/// Kernels the cost models know: one CTA per cluster, or for fprop and dgrad (where it was measured)
/// a 1x2 cluster, two CTAs of one row band sharing the activation tile by multicast; coresident
/// kernels for wgrad only (as fprop and dgrad kernels they ran 0.58-1.04x the plans' choices on 11
/// shapes, bf16 on an H100, session 18).
bool heuristic_candidate(const GemmSku& s) {
  if (s.schedule == GemmSchedule::coresident) return s.family == GemmFamily::conv_wgrad && s.cluster == Shape3{1, 1, 1};
  if (s.cluster == Shape3{1, 1, 1}) return true;
  return s.cluster == Shape3{1, 2, 1} && (s.family == GemmFamily::conv_fprop || s.family == GemmFamily::conv_dgrad);
}

/// Tiles smaller than 128x128 reuse each loaded operand row less. A one-warpgroup kernel pays for it
/// by the operand elements its tile loads per flop, (M + N) / (M N): 1.5x 128x128's for 128x64.
/// Measured on an H100 (bf16 fprop 2 x 64 x 64 x 640 -> 640 3x3), its 128x64 tile ran 1.83x the time
/// per flop of 128x128 (357 against 546 TFLOP/s on waves 97% and 81% full), and a flat 1.15 had
/// chosen it at 0.59x cuDNN. The pingpong kernels' classes were fitted with the flat 1.15.
double small_tile_penalty(const GemmSku& sku) {
  const double m = sku.tile.m, n = sku.tile.n;
  if (m * n >= 128.0 * 128.0) return 1.0;
  if (sku.schedule == GemmSchedule::pingpong) return 1.15;
  return (m + n) / (m * n) * (128.0 * 128.0 / 256.0);
}

/// Operand elements a consumer warpgroup's 128 x `columns` share of a tile loads per flop.
double warpgroup_loads_per_flop(double columns) {
  return (128.0 + columns) / (128.0 * columns);
}

/// Time per flop of a tile's mainloop relative to one consumer warpgroup's 128x128: two warpgroups
/// sharing a tile (cooperative) keep the tensor cores busier, but at 64 columns each warpgroup's
/// 128x64 share rereads its A rows twice as often per flop: measured on an H100, 256x64 beat 128x64
/// by 1.11-1.21x where it halved the waves and lost to 128x128 at equal waves (slightly above 1).
/// Widths in between take the time in proportion to the loads per flop: 0.88 for 96 columns.
constexpr double kCooperativeTime = 0.8;
constexpr double kCooperativeNarrowTime = 1.05;
double schedule_factor(const GemmSku& sku) {
  if (sku.schedule != GemmSchedule::cooperative) return 1.0;
  const double n = std::clamp(static_cast<double>(sku.tile.n), 64.0, 128.0);
  return kCooperativeTime + (kCooperativeNarrowTime - kCooperativeTime) *
                                (warpgroup_loads_per_flop(n) - warpgroup_loads_per_flop(128)) /
                                (warpgroup_loads_per_flop(64) - warpgroup_loads_per_flop(128));
}

/// The channels an fprop or dgrad mainloop reduces over (fprop's C, dgrad's K) and those its output
/// tiles cover (fprop's K, dgrad's C).
std::pair<std::int64_t, std::int64_t> reduced_and_output_channels(const ConvSpec& spec) {
  return spec.operation == ConvOperation::fprop ? std::pair{spec.c, spec.k} : std::pair{spec.k, spec.c};
}

/// The 128-byte K step of an element type: 64 elements of 16 bits, 32 of 32 bits.
std::int64_t full_k_step(const GemmSku& sku) {
  return 1024 / size_bits(sku.a);
}

/// Tiles for channel counts between the power-of-two widths serve only the class they were measured
/// to win (H100, bf16 fprop and dgrad, 22 shapes of 48 to 640 channels, session 21):
/// - a width that is not a power of two (96) where it pads the output channels less than the next
///   power of two by more than its extra loads per flop (7/6 for 96): 96, 160, 192 and 288 channels,
///   not 224, 320, 480 or 640, where the best 96-wide kernel ran 0.69-1.00x the best kernel (the
///   best on 2 of 16 rows; on a wave or two the estimate's rounding to whole waves hides what the
///   extra loads cost);
/// - a K step narrower than 128 bytes where the reduced channels are not a multiple of the full step
///   (the full step half-empties each filter tap's last step; with multiples of 64 channels
///   256x128x32 and 256x96x32 ran 0.87-1.07x their 64-element-step tiles, 0.99x on geometric mean,
///   so the estimate prices a narrow step by the elements it reduces).
bool fits_channel_class(const GemmSku& sku, const ConvSpec& spec) {
  if (spec.operation == ConvOperation::wgrad) return true;
  const auto [reduced, output] = reduced_and_output_channels(spec);
  const std::int64_t width = sku.tile.n, power = std::bit_ceil(static_cast<std::uint64_t>(width));
  if (width != power) {
    const double extra_loads =
        warpgroup_loads_per_flop(static_cast<double>(width)) / warpgroup_loads_per_flop(static_cast<double>(power));
    if (static_cast<double>(ceil_div(output, width) * width) * extra_loads >=
        static_cast<double>(ceil_div(output, power) * power))
      return false;
  }
  const std::int64_t step = full_k_step(sku);
  return sku.tile.k >= step || reduced % step != 0;
}

/// A cluster multicasts a shared operand tile: measured on an H100 (bf16 fprop and dgrad, 18 shapes)
/// a 1x2 cluster of 256x128 tiles ran 1.10-1.13x faster on every grid of two waves or more (the L2 is
/// then the bottleneck) and 0.52-1.02x on grids of one wave or less (the cluster's pairing and
/// barriers, nothing to save). Grids of kClusterWaves or more gain, counted as the cost models count
/// waves: rounded up (the measured two-wave grids held 1.5 waves of CTAs).
constexpr std::int64_t kClusterWaves = 2;
double cluster_factor(const GemmSku& sku, std::int64_t waves) {
  if (sku.cluster.m * sku.cluster.n * sku.cluster.k == 1) return 1.0;
  return waves >= kClusterWaves ? 0.9 : 1.1;
}

/// CTAs of `sku` over the spec's implicit GEMM: its output tiles, each extent rounded up to whole
/// clusters (a cluster's CTAs past the edge still run). Wgrad's N mode is (C, S, R) and its tiles
/// cover channels of one filter tap: R x S x ceil(C / tile N) of them (the grids launched on an H100
/// say so), so C = 64 half-fills a 128-wide tile however many taps there are.
std::int64_t output_tiles(const GemmSku& sku, const ConvSpec& spec) {
  const auto gemm = spec.implicit_gemm();  // (M, N, K)
  const auto clustered = [](std::int64_t tiles, int cluster) { return ceil_div(tiles, cluster) * cluster; };
  const std::int64_t n_tiles = spec.operation == ConvOperation::wgrad ? spec.r * spec.s * ceil_div(spec.c, sku.tile.n)
                                                                      : ceil_div(gemm[1], sku.tile.n);
  return clustered(ceil_div(gemm[0], sku.tile.m), sku.cluster.m) * clustered(n_tiles, sku.cluster.n);
}

/// The multiprocessors a plan counts on (the given count, else an H100's).
std::int64_t planned_sms(int sm_count) {
  return sm_count > 0 ? sm_count : kDefaultSmCount;
}

// The pingpong kernel (persistent, its two consumer warpgroups taking tiles in turn) hides one
// tile's fill and epilogue behind the other's mainloop. Measured on an H100 (bf16 fprop and dgrad,
// 13 shapes, session 19): where the reduction is short (1 to 18 k-steps) and each CTA takes two
// tiles or more it ran 1.05-1.24x the plans' choices (32 x 56 x 56 x 64 -> 64 3x3: 128x64 1.23x and
// 1.27x; 64 x 28 x 28 x 128 -> 128 3x3: 128x128 1.24x and 1.22x); with a long reduction (45 k-steps
// or more) 0.70-0.84x, the cooperative kernels' 256-row tiles sharing their filter tiles. So it is
// considered for short reductions over grids of two tiles a multiprocessor or more, and on grids of
// a wave or less, where each CTA holds one tile. There its 128x128 and 128x64 tiles ran 0.94-1.06x
// the one-warpgroup kernel's (on equal estimates the catalog's first, the one-warpgroup kernel,
// stays), and its 64x128 tile (one 64x128 MMA a k-slice where 128x64 issues two 64x64 ones)
// 0.95-1.51x the one-warpgroup 128x64 on about as many tiles (17 shapes of 26 to 104 tiles, 16 of
// them 1.00x or more: fprop 1.51x and dgrad 1.34x on 8 x 14 x 14 x 512 -> 512 3x3, fprop 1.25x on
// 8 x 28 x 28 x 256 -> 512 stride 2; 0.95x on dgrad 4 x 14 x 14 x 1024 -> 256 1x1).
//
// Its 64x192 and 64x256 tiles (session 21, 14 shapes) cover 192 or 256 output channels with one tile
// column, so that each activation tile is loaded once, where narrower tiles load it once per column:
// on short reductions over many pixels 64x192 ran 1.12-1.21x the plan's former choice (fprop and
// dgrad 16 x 56 x 56 x 192 and 32 x 28 x 28 x 192 -> 192 1x1; 0.95x on fprop 16 x 56 x 56 x 64 ->
// 192 1x1), 64x256 1.15-1.24x (fprop 32 x 56 x 56 x 64 -> 256 1x1, 16 x 56 x 56 x 256 -> 256 1x1).
// They are considered where one tile column covers the output channels, with kPingpongFullRowTime in
// that class. On grids of a wave they were measured only where 128-wide tiles pad the channels (8 x 28 x
// 28 x 192 -> 192 3x3: 64x192 1.41x cuDNN, the one-warpgroup 128x128 0.98x) and are considered only
// there.
constexpr std::int64_t kPingpongMaxSteps = 24;
constexpr double kPingpongShortTime = 0.8;
constexpr double kPingpongWideRowTime = 0.85;
constexpr double kPingpongFullRowTime = 0.85;
constexpr std::int64_t kPingpongMaxColumns = 128;  // wider tiles only as the one column of the output

bool pingpong(const GemmSku& sku) {
  return sku.schedule == GemmSchedule::pingpong;
}

// The one-warpgroup 64x64 tile doubles the CTAs of the pingpong 64x128 tile, the estimate's choice
// on grids of a wave or less. Measured on an H100 (bf16 and f16 fprop, session 22, 12 shapes of 8 to
// 150 CTAs of 64x64), it ran 1.04-1.20x the pingpong 64x128 tile on all 6 shapes whose 64x64 grid
// fills at most half a wave (16 x 7 x 7 x 1024 -> 256 1x1: 52 CTAs, 0.88x cuDNN against 0.77x; 4 x 7
// x 7 x 1024 -> 1024 3x3: 64 CTAs, 0.80x against 0.68x), where the estimate priced the two about
// equal; 0.94-1.01x on 4 of the 5 shapes of 100 and 104 CTAs (1.15x on the short 16 x 7 x 7 x 512 ->
// 512 1x1) and 0.66x on 150 CTAs. So it is preferred on grids of at most half a wave only.
constexpr double kSmallGridTileTime = 0.85;

bool small_grid_tile(const GemmSku& sku) {
  return sku.schedule == GemmSchedule::warpspecialized && sku.tile.m == 64 && sku.tile.n == 64;
}

/// Whether `sku`'s instances split fprop's input channels: the sm_90a small-grid tile with 16-bit
/// tensors (kernels/sm90_conv.cuh's kSplitsChannels names the same tiles).
bool splits_channels(const GemmSku& sku, const ConvSpec& spec) {
  return spec.operation == ConvOperation::fprop && sku.arch.arch_specific && small_grid_tile(sku) &&
         size_bits(sku.d) == 16;
}

/// The most ranges `sku` may split fprop's input channels into: one per K step of C, at most
/// kMaxConvChannelSlices (the instances' cap).
std::int64_t most_channel_slices(const GemmSku& sku, const ConvSpec& s) {
  return std::min<std::int64_t>(ceil_div(s.c, sku.tile.k), kMaxConvChannelSlices);
}

// A channel split of fprop runs its slices side by side and adds their fp32 partials in a second
// kernel, as wgrad's split does. Its time model was fitted on an H100 (session 23, bf16 and f16, 14
// shapes of 4 to 64 tiles of 64x64, 1x1 and 3x3 filters, each unsplit and split 2, 4, 8 and 16 ways:
// 134 timings, all within 5% of the model but one at 7%): 5.5 us of launch and fill, 0.153 us per K
// step of the longest slice and wave, and for a split the sum's 3.14 us plus 0.65 us per MB of
// partials written and read back and of output written. A split pays where the filter's taps make the
// reduction long (1x7x7x512->512 3x3: 16.3 us unsplit, 11.0 us in 8 slices); on 1x1 filters over 4
// tiles or more the sum cost what the slices saved, or more (1x7x7x2048->512, 8 tiles: 10.3 us
// unsplit, 10.4 in 8 slices). So a split is taken only where the model expects it to save a tenth of
// the time, twice its largest error.
constexpr double kChannelFillMicros = 5.5;
constexpr double kChannelStepMicros = 0.153;
constexpr double kChannelSumMicros = 3.14;
constexpr double kChannelSumMicrosPerByte = 0.65e-6;
constexpr double kChannelSplitMinGain = 0.9;

/// The estimated time of fprop with `sku` in `slices` ranges of input channels.
double channel_split_micros(const GemmSku& sku, const ConvSpec& s, std::int64_t slices, int sm_count) {
  const std::int64_t steps = s.r * s.s * ceil_div(ceil_div(s.c, sku.tile.k), slices);  // the longest slice's
  const std::int64_t waves = ceil_div(output_tiles(sku, s) * slices, planned_sms(sm_count));
  const double mainloop = kChannelFillMicros + static_cast<double>(waves * steps) * kChannelStepMicros;
  if (slices == 1) return mainloop;
  const double bytes =
      static_cast<double>(s.n * s.p() * s.q() * s.k) * (8.0 * static_cast<double>(slices) + size_bits(s.output) / 8.0);
  return mainloop + kChannelSumMicros + bytes * kChannelSumMicrosPerByte;
}

/// The channel split of fprop with `sku` of the least estimated time, {1, 1, 1} where it does not
/// split or where no split saves kChannelSplitMinGain of the unsplit time.
ConvSplit best_channel_split(const GemmSku& sku, const ConvSpec& s, int sm_count) {
  if (!splits_channels(sku, s)) return {};
  const std::int64_t most = most_channel_slices(sku, s);
  std::int64_t best = 1;
  double best_micros = kChannelSplitMinGain * channel_split_micros(sku, s, 1, sm_count);
  for (std::int64_t slices = 2; slices <= most; ++slices)
    if (const double t = channel_split_micros(sku, s, slices, sm_count); t < best_micros) {
      best = slices;
      best_micros = t;
    }
  return ConvSplit{.channels = static_cast<int>(best)};
}

// A pointwise fprop (1x1 filter, unit stride, no padding) is the dense GEMM y (NHW x K) = x (NHW x C)
// . w (K x C)^T, which a dense kernel runs on plain TMA tiles where the conv kernels load through TMA
// im2col. Measured on an H100 (bf16, session 24, 11 shapes, dense kernels beside cuDNN and the conv
// plans in one run): the dense pingpong 64x32x64 tile ran 1.03-1.14x the conv plan's choice on each of
// the 6 shapes whose 64x32 grid fills at most half a wave over 16 K steps or more (1x7x7x2048->512:
// 0.89x cuDNN against 0.78x; 4x7x7x2048->512: 0.89x against 0.84x; 1x7x7x1024->256: 0.87x against
// 0.83x), and 0.93-0.98x the conv plan past that class (16x7x7x1024->256 on 104 CTAs, 8x7x7x2048->512
// on 112, 1x28x28x512->128 over 8 K steps), far less on full grids. Its CTAs load a 64-row activation
// tile and a 32-row filter tile per K step, three quarters of a 64x64 tile's loads, on twice the CTAs.
constexpr Shape3 kPointwiseGemmTile{64, 32, 64};
constexpr std::int64_t kPointwiseMinSteps = 16;

/// Whether `s` is a dense GEMM as it stands: fprop of a 1x1 filter, unit stride, no padding.
bool is_pointwise_fprop(const ConvSpec& s) {
  return s.operation == ConvOperation::fprop && s.r == 1 && s.s == 1 && s.stride_h == 1 && s.stride_w == 1 &&
         s.pad_h == 0 && s.pad_w == 0 && s.groups == 1;
}

/// The dense GEMM of a pointwise fprop: A = x (NHW x C, row-major), B = w (C x K, column-major: K rows
/// of C), D = y (NHW x K, row-major).
GemmProblem pointwise_problem(const ConvSpec& s) {
  GemmProblem p;
  p.m = s.n * s.h * s.w;
  p.n = s.k;
  p.k = s.c;
  p.a = p.b = s.element;
  p.c = p.d = s.output;
  p.layout_a = MatrixLayout::row;
  p.layout_b = MatrixLayout::col;
  p.layout_c = MatrixLayout::row;
  p.epilogue = GemmEpilogue::linear_combination;
  return p;
}

/// The catalog's dense 64x32x64 pingpong kernel for problem `p` (types, layouts and epilogue as
/// pointwise_problem states them; sm_90a, fp32 accumulation), if it has one.
const CatalogEntry* pointwise_kernel(const GemmProblem& p) {
  GemmSku sku = dense_sku_for(p);
  sku.tile = kPointwiseGemmTile;
  sku.schedule = GemmSchedule::pingpong;
  return find_in_catalog(sku);
}

/// Whether the dense route is the class it was measured to win: a pointwise fprop whose 64x32 grid
/// fills at most half a wave, over kPointwiseMinSteps K steps or more.
bool in_pointwise_class(const ConvSpec& s, int sm_count) {
  const std::int64_t tiles = ceil_div(s.n * s.h * s.w, kPointwiseGemmTile.m) * ceil_div(s.k, kPointwiseGemmTile.n);
  return is_pointwise_fprop(s) && 2 * tiles <= planned_sms(sm_count) &&
         ceil_div(s.c, kPointwiseGemmTile.k) >= kPointwiseMinSteps;
}

/// The fprop / dgrad cost: waves of tiles, each as long as its tile's area times the reduction
/// elements it steps through. The conv mainloop tiles its reduction as (channels, S, R): R x S x
/// ceil(channels / tile K) steps, so channels that are not a multiple of the K step pad each tap.
double estimated_cost(const GemmSku& sku, const ConvSpec& spec, int sm_count) {
  if (!fits_channel_class(sku, spec)) return std::numeric_limits<double>::infinity();
  const std::int64_t tiles = output_tiles(sku, spec), sms = planned_sms(sm_count);
  const std::int64_t waves = ceil_div(tiles, sms);
  const auto [reduced, output] = reduced_and_output_channels(spec);
  const std::int64_t k_steps = spec.r * spec.s * ceil_div(reduced, sku.tile.k);
  double factor = schedule_factor(sku) * cluster_factor(sku, waves);
  if (small_grid_tile(sku) && 2 * tiles <= sms) factor *= kSmallGridTileTime;
  if (pingpong(sku)) {
    const bool full_row = sku.tile.n > kPingpongMaxColumns;
    if (full_row && output > sku.tile.n) return std::numeric_limits<double>::infinity();
    if (tiles <= sms) {
      // On a wave a full-row tile was measured where it covers channels that 128-wide tiles pad.
      if (full_row && output % kPingpongMaxColumns == 0) return std::numeric_limits<double>::infinity();
      if (sku.tile.m == 64 && sku.tile.n >= 128) factor *= kPingpongWideRowTime;
    } else if (k_steps <= kPingpongMaxSteps && tiles >= 2 * sms) {
      factor *= kPingpongShortTime * (full_row ? kPingpongFullRowTime : 1.0);
    } else {
      return std::numeric_limits<double>::infinity();  // not a class it was measured to win
    }
  }
  return static_cast<double>(waves) * sku.tile.m * sku.tile.n * small_tile_penalty(sku) * factor *
         static_cast<double>(k_steps * sku.tile.k);
}

// Wgrad cost model (microseconds on an H100-class part; only its ordering matters), fitted on an
// H100 to 7 wgrad tiles over 15 shapes (session 16, bf16; one consumer warpgroup 64x64 to 128x128,
// cooperative 128x64 to 256x128). A mainloop step's time follows the operand elements it loads,
// (tile M + tile N) x tile K, not its flops: per flop, 64x128 and 128x64 ran 1.43-1.56x and 64x64
// 2.06x the time of 128x128, cooperative 256x128 0.72x (the law says 1.5, 2 and 0.75), and the
// schedule added nothing beyond that (cooperative 128x128 ran as the one-warpgroup 128x128). Each
// wave adds a fill and epilogue time proportional to the tile's area (the fp32 partials it
// writes); a split adds its partials' round trip through memory at kSumBytesPerMicro and the sum's
// launch.
constexpr double kMicrosPerLoadedElement16 = 0.474 / ((128 + 128) * 64);  // a 128x128x64 step: 0.474 us
constexpr double kFillMicros128 = 7.0;                                    // per wave of 128x128 tiles
constexpr double kSumBytesPerMicro = 2.5e6;
constexpr double kSumLaunchMicros = 2.0;

// Coresident wgrad kernels (two CTAs per multiprocessor), fitted on an H100 to 27 runs of 11 shapes
// (session 18, bf16; 64x64 to 128x128 tiles, unsplit and split; 15% rms error): a step of two CTAs
// sharing a multiprocessor takes 1.24x (64x64) to 1.41x (128x128) a lone CTA's step, so a pair
// computes 1.6x (64x64) to 1.4x (128x128) as fast; the fill and epilogue of a wave take about 5 us
// plus 6.3 us per 128x128 of tile. The gain is the pairing: a grid of up to twice the multiprocessor
// count runs as one wave. On grids of a wave or less the CTAs run alone; on grids of more than two
// waves the cooperative and one-warpgroup kernels measured faster (a 1 x 256 x 256 x 512 problem:
// 0.66x cuDNN coresident, 0.90x cooperative), so coresident splits are considered only where their
// CTAs fill more than one lone wave and at most one coresident wave, and their estimates, less sure
// than the lone kernels', must beat those by kPairedMargin.
constexpr double kCoresidentStepShare64 = 1.24;
constexpr double kCoresidentStepShare128 = 1.41;
constexpr double kCoresidentFillMicros = 4.95;
constexpr double kCoresidentFillMicros128 = 6.32;

// Pingpong wgrad kernels, fitted on an H100 to 7 runs of 5 shapes (session 19, bf16, unsplit): the
// CTA's tiles run their mainloops back to back, each step 0.93x (64x64) to 0.70x (128x128) the lone
// model's, with one fill and epilogue exposed. It beat the coresident 128x128 kernel on 4 x 32 x 32 x
// 640 -> 640 (225 tiles, 0.91x against 0.80x cuDNN) and lost to the coresident 64x64 one on 2 x 64
// x 64 x 320 -> 320 (0.69x against 0.85x). Split, it lost to the lone kernels wherever it was tried
// (8 x 28 x 28 x 256 -> 512 3x3: 3x1 0.86x and 2x1 0.75x the lone 128x128 unsplit; 1 x 128 x 128 x
// 256 -> 256: 1x7 0.89x the plan's lone choice), so it is considered unsplit, over more than one
// lone wave and at most two tiles a multiprocessor. There its estimate is below the coresident
// kernel's of the same tile, so the coresident 128x128 kernel now runs split grids only.
constexpr double kPingpongStepShare64 = 0.93;
constexpr double kPingpongStepShare128 = 0.70;
// Coresident and pingpong estimates, less sure than the lone kernels', must beat those by this.
constexpr double kPairedMargin = 0.9;

bool coresident(const GemmSku& sku) {
  return sku.schedule == GemmSchedule::coresident;
}
/// Kernels whose CTAs pair tiles on a multiprocessor: two coresident CTAs, or pingpong warpgroups.
bool paired(const GemmSku& sku) {
  return coresident(sku) || pingpong(sku);
}

/// A share of a lone step's time by tile area, linear between its values at 64x64 and 128x128.
double step_share(const GemmSku& sku, double at64, double at128) {
  const double area = static_cast<double>(sku.tile.m) * sku.tile.n;
  const double t = std::clamp((area - 64.0 * 64.0) / (128.0 * 128.0 - 64.0 * 64.0), 0.0, 1.0);
  return at64 + t * (at128 - at64);
}

/// Estimated time of wgrad with `sku` split as `split`.
double wgrad_micros(const GemmSku& sku, const ConvSpec& s, ConvSplit split, int sm_count) {
  // The largest slice sets the length of a wave.
  const std::int64_t k_steps = ceil_div(ceil_div(s.n, split.images) * ceil_div(s.p(), split.rows) * s.q(), sku.tile.k);
  const std::int64_t ctas = output_tiles(sku, s) * split.slices();
  const std::int64_t sms = planned_sms(sm_count);
  const double element_cost = size_bits(s.element) == 32 ? 2 * kMicrosPerLoadedElement16 : kMicrosPerLoadedElement16;
  const double step = static_cast<double>(sku.tile.m + sku.tile.n) * sku.tile.k * element_cost;
  const double area128 = sku.tile.m * sku.tile.n / (128.0 * 128.0);
  double mainloop = 0;
  if (coresident(sku)) {
    // Full waves of pairs, then a last wave whose CTAs run alone if it holds a lone wave or less.
    const double fill = kCoresidentFillMicros + kCoresidentFillMicros128 * area128;
    const double pair_wave =
        static_cast<double>(k_steps) * step * step_share(sku, kCoresidentStepShare64, kCoresidentStepShare128) + fill;
    const std::int64_t full = ctas / (2 * sms), rest = ctas % (2 * sms);
    mainloop = static_cast<double>(full) * pair_wave;
    if (rest > sms) mainloop += pair_wave;
    if (rest > 0 && rest <= sms) mainloop += static_cast<double>(k_steps) * step + fill;
  } else if (pingpong(sku)) {
    const double share = step_share(sku, kPingpongStepShare64, kPingpongStepShare128);
    mainloop = static_cast<double>(ceil_div(ctas, sms) * k_steps) * step * share + kFillMicros128 * area128;
  } else {
    const std::int64_t waves = ceil_div(ctas, sms);
    mainloop = static_cast<double>(waves) * (static_cast<double>(k_steps) * step + kFillMicros128 * area128) *
               cluster_factor(sku, waves);
  }
  if (split.slices() == 1) return mainloop;  // one kernel writes D directly
  // The slices write fp32 partials that the sum reads back before it writes D.
  const double sum_bytes =
      static_cast<double>(s.filter_elements()) * (8.0 * split.slices() + size_bits(s.output) / 8.0);
  return mainloop + sum_bytes / kSumBytesPerMicro + kSumLaunchMicros;
}

// The pingpong wgrad kernel wins only where its tiles are full: measured on an H100 (bf16, session 24,
// 14 shapes of 144 to 256 tiles of 128x128, every catalog wgrad kernel in one run), with 512, 640 or
// 2048 channels it ran 0.96-1.07x the best other kernel on 9 shapes, with 480 (each tap's last tile
// column and the last tile row three quarters full) 0.81-0.95x on 4 (4x32x32x480->480 3x3: 286
// TFLOP/s against the cooperative 256x128's 345 and the coresident 128x128's 330), where the
// estimate, which prices padded tiles like full ones, still preferred it.

/// Whether the cost model considers `split` for `sku`: every split for a lone kernel; for a
/// coresident one, those whose CTAs fill more than one lone wave and at most one paired wave; for a
/// pingpong one, no split, on such a grid, of tiles that the filters' K and C fill.
bool considered(const GemmSku& sku, const ConvSpec& s, ConvSplit split, int sm_count) {
  if (!paired(sku)) return true;
  if (pingpong(sku) && (split.slices() > 1 || s.k % sku.tile.m != 0 || s.c % sku.tile.n != 0)) return false;
  const std::int64_t ctas = output_tiles(sku, s) * split.slices(), sms = planned_sms(sm_count);
  return ctas > sms && ctas <= 2 * sms;
}

/// Whether every slice of a split of the output rows reads at least one input row: no output row's
/// window lies wholly in the padding.
bool rows_can_split(const ConvSpec& s) {
  return s.pad_h <= s.dilation_h * (s.r - 1);
}

/// A wgrad split and its estimated time.
struct WgradChoice {
  ConvSplit split;
  double micros = 0;
};

/// The split of the least estimated time: image ranges, or, when every image is its own slice,
/// row ranges within each image too. For the heuristic's comparison of kernels only the splits the
/// model considers for `sku` count (micros is infinite where there is none); a kernel chosen by
/// override takes the best of all.
WgradChoice best_wgrad_split(const GemmSku& sku, const ConvSpec& s, int sm_count, bool heuristic) {
  WgradChoice best{ConvSplit{}, std::numeric_limits<double>::infinity()};
  const auto consider = [&](ConvSplit c) {
    if (heuristic && !considered(sku, s, c, sm_count)) return;
    const double t = wgrad_micros(sku, s, c, sm_count);
    if (t < best.micros) best = {c, t};
  };
  consider({});
  for (std::int64_t images = 2; images <= std::min<std::int64_t>(s.n, kMaxConvSlices); ++images)
    consider({static_cast<int>(images), 1});
  if (s.n <= kMaxConvSlices / 2 && rows_can_split(s))
    for (std::int64_t rows = 2; rows <= std::min<std::int64_t>(s.p(), kMaxConvSlices / s.n); ++rows)
      consider({static_cast<int>(s.n), static_cast<int>(rows)});
  if (heuristic && paired(sku)) best.micros /= kPairedMargin;
  return best;
}

/// An explicit split against the rules of ConvPlanOptions::split_override, for `sku`.
Status check_split(const ConvSpec& s, const GemmSku& sku, ConvSplit split) {
  if (split == ConvSplit{}) return ok();
  if (s.operation == ConvOperation::fprop) {
    if (split.images != 1 || split.rows != 1)
      return fail(errc::invalid_argument,
                  fmt::format("ConvPlan split {}: fprop splits its input channels only (images and rows 1)",
                              split.to_string()));
    const std::int64_t most = most_channel_slices(sku, s);
    if (split.channels < 1 || split.channels > most)
      return fail(errc::invalid_argument,
                  fmt::format("ConvPlan split channels={} must be in [1, {}] (C={} in K steps of {}, at most {} "
                              "slices)",
                              split.channels, most, s.c, sku.tile.k, kMaxConvChannelSlices));
    if (split.channels > 1 && !splits_channels(sku, s))
      return fail(errc::unsupported,
                  fmt::format("convolution kernel {} does not split channels (split {}; the one-warpgroup 64x64 "
                              "tile of 16-bit tensors does)",
                              sku.to_string(), split.to_string()));
    return ok();
  }
  if (s.operation != ConvOperation::wgrad)
    return fail(errc::invalid_argument, fmt::format("ConvPlan split {}: {} is never split (it takes 1x1)",
                                                    split.to_string(), name(s.operation)));
  if (split.channels != 1)
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan split {}: wgrad splits images and rows, not channels", split.to_string()));
  if (split.images < 1 || split.images > s.n)
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan split images={} must be in [1, N={}]", split.images, s.n));
  if (split.rows < 1 || split.rows > s.p())
    return fail(errc::invalid_argument, fmt::format("ConvPlan split rows={} must be in [1, P={}]", split.rows, s.p()));
  if (static_cast<std::int64_t>(split.images) * split.rows > kMaxConvSlices)
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan split {} has {} slices, more than {}", split.to_string(),
                            static_cast<std::int64_t>(split.images) * split.rows, kMaxConvSlices));
  if (split.rows > 1 && split.images != s.n)
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan split {}: splitting rows needs one image per range (images = N = {})",
                            split.to_string(), s.n));
  if (split.rows > 1 && !rows_can_split(s))
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan split rows={}: pad_h={} exceeds dilation_h*(R-1)={}, so a range of rows could "
                            "read padding only",
                            split.rows, s.pad_h, s.dilation_h * (s.r - 1)));
  if (!sku.arch.arch_specific && split.slices() > 1)
    return fail(errc::unsupported, fmt::format("convolution kernel {}: sm_80 kernels do not split wgrad (split {})",
                                               sku.to_string(), split.to_string()));
  return ok();
}

/// a * b * ..., saturated at INT64_MAX (every factor is positive).
std::int64_t saturating_product(std::initializer_list<std::int64_t> factors) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (product > INT64_MAX / f) return INT64_MAX;
    product *= f;
  }
  return product;
}

Status check_spec(const ConvSpec& s) {
  const std::pair<const char*, std::int64_t> extents[] = {{"n", s.n}, {"h", s.h}, {"w", s.w}, {"c", s.c},
                                                          {"k", s.k}, {"r", s.r}, {"s", s.s}};
  for (const auto& [field, v] : extents)
    if (v < 1) return fail(errc::invalid_argument, fmt::format("ConvSpec {}={} must be at least 1", field, v));
  for (const auto& [field, v] : {std::pair{"pad_h", s.pad_h}, std::pair{"pad_w", s.pad_w}})
    if (v < 0) return fail(errc::invalid_argument, fmt::format("ConvSpec {}={} must not be negative", field, v));
  const std::pair<const char*, std::int64_t> steps[] = {{"stride_h", s.stride_h},
                                                        {"stride_w", s.stride_w},
                                                        {"dilation_h", s.dilation_h},
                                                        {"dilation_w", s.dilation_w},
                                                        {"groups", s.groups}};
  for (const auto& [field, v] : steps)
    if (v < 1) return fail(errc::invalid_argument, fmt::format("ConvSpec {}={} must be at least 1", field, v));
  // Every field is bounded to int32 (the kernels' argument type) before any product is formed, so
  // p(), q() and the products below cannot overflow int64.
  for (const auto& [field, v] : {std::pair{"n", s.n},
                                 {"h", s.h},
                                 {"w", s.w},
                                 {"c", s.c},
                                 {"k", s.k},
                                 {"r", s.r},
                                 {"s", s.s},
                                 {"pad_h", s.pad_h},
                                 {"pad_w", s.pad_w},
                                 {"stride_h", s.stride_h},
                                 {"stride_w", s.stride_w},
                                 {"dilation_h", s.dilation_h},
                                 {"dilation_w", s.dilation_w},
                                 {"groups", s.groups}})
    if (v > INT_MAX) return fail(errc::invalid_argument, fmt::format("ConvSpec {}={} exceeds int32", field, v));
  if (s.p() < 1 || s.q() < 1)
    return fail(errc::invalid_argument,
                fmt::format("ConvSpec {}: the output is {}x{}; the padded input ({}x{}) must hold the dilated "
                            "filter ({}x{})",
                            s.to_string(), s.p(), s.q(), s.h + 2 * s.pad_h, s.w + 2 * s.pad_w,
                            s.dilation_h * (s.r - 1) + 1, s.dilation_w * (s.s - 1) + 1));
  for (const auto& [what, elements] : {std::pair{"activation (N H W C)", saturating_product({s.n, s.h, s.w, s.c})},
                                       std::pair{"filter (K R S C)", saturating_product({s.k, s.r, s.s, s.c})},
                                       std::pair{"output (N P Q K)", saturating_product({s.n, s.p(), s.q(), s.k})}})
    if (elements > INT_MAX)
      return fail(errc::invalid_argument,
                  fmt::format("ConvSpec {}: the {} tensor has {}{} elements, more than the int32 extents the kernels "
                              "index ({})",
                              s.to_string(), what, elements == INT64_MAX ? "over " : "", elements, INT_MAX));
  for (DType t : {s.element, s.output}) {
    const std::int64_t align = alignment_elements(t);
    for (const auto& [field, v] : {std::pair{"c", s.c}, std::pair{"k", s.k}})
      if (v % align != 0)
        return fail(errc::invalid_argument,
                    fmt::format("ConvSpec {}={} must be a multiple of {} for {} tensors (16-byte rows of channels)",
                                field, v, align, name(t)));
  }
  return ok();
}

Status check_options(const ConvPlanOptions& options) {
  if (options.sm_count < 0)
    return fail(errc::invalid_argument,
                fmt::format("ConvPlan sm_count={} must be >= 0 (0: queried at run time)", options.sm_count));
  return ok();
}

bool is_strided(const ConvSpec& s) noexcept {
  return s.stride_h != 1 || s.stride_w != 1;
}

/// What no conv kernel computes, whatever the catalog holds.
Status check_supported(const ConvSpec& s, GpuArch arch) {
  if (s.groups != 1)
    return fail(errc::unsupported,
                fmt::format("ConvSpec groups={}: grouped convolution has no kernel (cuactor's conv kernels compute "
                            "groups=1 only)",
                            s.groups));
  if (s.operation == ConvOperation::dgrad && is_strided(s) && (s.dilation_h != 1 || s.dilation_w != 1))
    return fail(errc::unsupported,
                fmt::format("ConvSpec dgrad with stride {}x{} and dilation {}x{}: strided dgrad has no kernel for "
                            "dilation above 1 (CUTLASS's strided-dgrad kernel takes dilation 1)",
                            s.stride_h, s.stride_w, s.dilation_h, s.dilation_w));
  if (s.operation == ConvOperation::dgrad && is_strided(s) && s.element != DType::bf16 && s.element != DType::f16)
    return fail(errc::unsupported,
                fmt::format("ConvSpec dgrad {} with stride {}x{}: strided dgrad has kernels for bf16 and f16 only",
                            name(s.element), s.stride_h, s.stride_w));
  if (is_low_precision_float(s.element) || is_low_precision_float(s.output))
    return fail(errc::unsupported,
                fmt::format("ConvSpec {}->{}: fp8 convolution has no kernel (no cuactor conv instance is validated "
                            "for fp8; use bf16, f16 or f32)",
                            name(s.element), name(s.output)));
  const auto is_16_or_32 = [](DType t) { return t == DType::bf16 || t == DType::f16 || t == DType::f32; };
  if (!is_16_or_32(s.element) || !is_16_or_32(s.output))
    return fail(errc::unsupported, fmt::format("ConvSpec {}->{}: convolution takes bf16, f16 or f32 tensors",
                                               name(s.element), name(s.output)));
  if (arch.sm() < 80)
    return fail(errc::unsupported,
                fmt::format("convolution kernels need sm_80 or later (sm_90a implicit GEMM on Hopper, CUTLASS 2.x "
                            "implicit GEMM elsewhere); a {} device has none",
                            arch.name()));
  return ok();
}

/// What the kernels of `sku`'s architecture compute. sm_90a (TMA im2col): unit-stride dgrad only, and
/// the corners of the first and last window, -pad and pad - (R - 1) * dilation per axis, in [-128,
/// 127] with filter offsets (R - 1) * dilation below 255. sm_80 (CUTLASS 2.x, optimized iterators):
/// 16-bit tensors, filters of at most 32 x 32 for fprop and dgrad, dgrad (always the strided-dgrad
/// kernel) with dilation 1, no wgrad split (finish()).
Status check_sku_computes(const GemmSku& sku, const ConvSpec& s) {
  if (!sku.arch.arch_specific) {
    if (s.element != DType::bf16 && s.element != DType::f16)
      return fail(errc::unsupported, fmt::format("convolution kernel {}: sm_80 convolution takes bf16 or f16, not {}",
                                                 sku.to_string(), name(s.element)));
    if (s.operation != ConvOperation::wgrad && (s.r > kMaxSm80Filter || s.s > kMaxSm80Filter))
      return fail(errc::unsupported,
                  fmt::format("convolution kernel {}: sm_80 {} takes filters of at most {}x{}, not {}x{}",
                              sku.to_string(), name(s.operation), kMaxSm80Filter, kMaxSm80Filter, s.r, s.s));
    if (s.operation == ConvOperation::dgrad && (s.dilation_h != 1 || s.dilation_w != 1))
      return fail(errc::unsupported,
                  fmt::format("convolution kernel {}: sm_80 dgrad (CUTLASS's strided-dgrad kernel) takes dilation 1, "
                              "not {}x{}",
                              sku.to_string(), s.dilation_h, s.dilation_w));
    return ok();
  }
  if (s.operation == ConvOperation::dgrad && is_strided(s))
    return fail(errc::unsupported,
                fmt::format("convolution kernel {}: the sm_90a implicit GEMM computes dgrad with unit stride only, "
                            "not {}x{} (strided dgrad runs on the sm_80 kernels)",
                            sku.to_string(), s.stride_h, s.stride_w));
  const std::int64_t offset_h = (s.r - 1) * s.dilation_h, offset_w = (s.s - 1) * s.dilation_w;
  for (const auto& [axis, pad, offset] : {std::tuple{"h", s.pad_h, offset_h}, std::tuple{"w", s.pad_w, offset_w}}) {
    if (pad > -kMinCorner)
      return fail(errc::unsupported,
                  fmt::format("ConvSpec pad_{}={} exceeds {} (TMA im2col corner limit)", axis, pad, -kMinCorner));
    if (offset >= kMaxFilterOffset)
      return fail(errc::unsupported,
                  fmt::format("ConvSpec dilated filter extent ({}-1)*dilation_{}={} must be below {} (TMA im2col "
                              "offset limit)",
                              axis == std::string_view("h") ? "R" : "S", axis, offset, kMaxFilterOffset));
    if (pad - offset < kMinCorner || pad - offset > kMaxCorner)
      return fail(errc::unsupported,
                  fmt::format("ConvSpec pad_{}={} minus the dilated filter extent {} is {}, outside [{}, {}] (TMA "
                              "im2col corner limit)",
                              axis, pad, offset, pad - offset, kMinCorner, kMaxCorner));
  }
  return ok();
}

/// ABI arguments of a spec with the operation's tensors in their implicit-GEMM roles.
cuactor_conv_args make_args(const ConvSpec& s, const ConvTensors& t, const ConvPlanOptions& o, ConvSplit split) {
  cuactor_conv_args a{};
  a.n = static_cast<int>(s.n);
  a.h = static_cast<int>(s.h);
  a.w = static_cast<int>(s.w);
  a.c = static_cast<int>(s.c);
  a.k = static_cast<int>(s.k);
  a.r = static_cast<int>(s.r);
  a.s = static_cast<int>(s.s);
  a.pad_h = static_cast<int>(s.pad_h);
  a.pad_w = static_cast<int>(s.pad_w);
  a.stride_h = static_cast<int>(s.stride_h);
  a.stride_w = static_cast<int>(s.stride_w);
  a.dilation_h = static_cast<int>(s.dilation_h);
  a.dilation_w = static_cast<int>(s.dilation_w);
  switch (s.operation) {
    case ConvOperation::fprop:
      a.a = t.x;
      a.b = t.w;
      break;
    case ConvOperation::dgrad:
      a.a = t.dy;
      a.b = t.w;
      break;
    case ConvOperation::wgrad:
      a.a = t.dy;
      a.b = t.x;
      break;
  }
  a.d = t.out;
  a.c_source = t.source != nullptr ? t.source : t.out;
  a.alpha = t.alpha;
  a.beta = t.beta;
  a.device = o.device;
  a.sm_count = o.sm_count;
  a.split_n = split.images;
  a.split_p = split.rows;
  a.split_c = split.channels;
  return a;
}

/// The dense GEMM operands of a pointwise fprop (pointwise_problem): packed rows of C channels in x
/// and w, of K in y and its source.
GemmOperands pointwise_operands(const ConvSpec& s, const ConvTensors& t) {
  GemmOperands o;
  o.a = t.x;
  o.b = t.w;
  o.c = t.source;
  o.d = t.out;
  o.lda = o.ldb = s.c;
  o.ldc = o.ldd = s.k;
  o.alpha = t.alpha;
  o.beta = t.beta;
  return o;
}

/// The tensors an operation reads, by name and role.
struct Operand {
  const char* name;
  const void* ptr;
};
std::array<Operand, 2> inputs_of(ConvOperation op, const ConvTensors& t) {
  switch (op) {
    case ConvOperation::fprop:
      return {{{"x", t.x}, {"w", t.w}}};
    case ConvOperation::dgrad:
      return {{{"dy", t.dy}, {"w", t.w}}};
    case ConvOperation::wgrad:
      return {{{"dy", t.dy}, {"x", t.x}}};
  }
  return {{{"x", t.x}, {"w", t.w}}};
}

Status check_pointer(const char* what, const void* p) {
  if (p == nullptr) return fail(errc::invalid_argument, fmt::format("convolution tensor {}: pointer is null", what));
  if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0)
    return fail(errc::invalid_argument,
                fmt::format("convolution tensor {}: pointer {} is not 16-byte aligned (16-byte vector and TMA loads)",
                            what, fmt::ptr(p)));
  return ok();
}

}  // namespace

std::string_view name(ConvOperation op) noexcept {
  for (const auto& [n, v] : kOperations)
    if (v == op) return n;
  return "unknown";
}

std::optional<ConvOperation> parse_conv_operation(std::string_view s) noexcept {
  for (const auto& [n, v] : kOperations)
    if (n == s) return v;
  return std::nullopt;
}

GemmFamily family_of(ConvOperation op) noexcept {
  switch (op) {
    case ConvOperation::fprop:
      return GemmFamily::conv_fprop;
    case ConvOperation::dgrad:
      return GemmFamily::conv_dgrad;
    case ConvOperation::wgrad:
      return GemmFamily::conv_wgrad;
  }
  return GemmFamily::conv_fprop;
}

namespace {
/// Windows of a dilated filter over a padded extent: floor((in + 2 pad - span) / stride) + 1, and 0
/// when the span does not fit (C++ division truncates towards zero, so a slightly negative
/// numerator would otherwise count one window).
std::int64_t windows(std::int64_t in, std::int64_t pad, std::int64_t filter, std::int64_t dilation,
                     std::int64_t stride) noexcept {
  const std::int64_t room = in + 2 * pad - dilation * (filter - 1) - 1;
  if (stride < 1 || room < 0) return 0;
  return room / stride + 1;
}
}  // namespace

std::int64_t ConvSpec::p() const noexcept {
  return windows(h, pad_h, r, dilation_h, stride_h);
}

std::int64_t ConvSpec::q() const noexcept {
  return windows(w, pad_w, s, dilation_w, stride_w);
}

std::int64_t ConvSpec::result_elements() const noexcept {
  switch (operation) {
    case ConvOperation::fprop:
      return output_elements();
    case ConvOperation::dgrad:
      return activation_elements();
    case ConvOperation::wgrad:
      return filter_elements();
  }
  return 0;
}

double ConvSpec::flops() const noexcept {
  return 2.0 * static_cast<double>(n) * static_cast<double>(p()) * static_cast<double>(q()) * static_cast<double>(k) *
         static_cast<double>(c) * static_cast<double>(r) * static_cast<double>(s);
}

std::array<std::int64_t, 3> ConvSpec::implicit_gemm() const noexcept {
  switch (operation) {
    case ConvOperation::fprop:
      return {n * p() * q(), k, c * r * s};
    case ConvOperation::dgrad:
      return {n * h * w, c, k * r * s};
    case ConvOperation::wgrad:
      break;
  }
  return {k, c * r * s, n * p() * q()};
}

std::string ConvSplit::to_string() const {
  return channels == 1 ? fmt::format("{}x{}", images, rows) : fmt::format("{}x{}x{}", images, rows, channels);
}

std::string ConvSpec::to_string() const {
  return fmt::format("{} {}->{} n={} h={} w={} c={} k={} r={} s={} pad={},{} stride={},{} dilation={},{}{}",
                     name(operation), name(element), name(output), n, h, w, c, k, r, s, pad_h, pad_w, stride_h,
                     stride_w, dilation_h, dilation_w, groups != 1 ? fmt::format(" groups={}", groups) : "");
}

std::size_t hash_value(const ConvSpec& s) noexcept {
  std::size_t h = 0x9e3779b97f4a7c15ull;
  for (long long v :
       {static_cast<long long>(s.operation), static_cast<long long>(s.element), static_cast<long long>(s.output),
        static_cast<long long>(s.n), static_cast<long long>(s.h), static_cast<long long>(s.w),
        static_cast<long long>(s.c), static_cast<long long>(s.k), static_cast<long long>(s.r),
        static_cast<long long>(s.s), static_cast<long long>(s.pad_h), static_cast<long long>(s.pad_w),
        static_cast<long long>(s.stride_h), static_cast<long long>(s.stride_w), static_cast<long long>(s.dilation_h),
        static_cast<long long>(s.dilation_w), static_cast<long long>(s.groups)})
    boost::hash_combine(h, v);
  return h;
}

GemmSku ConvPlan::sku_for(const ConvSpec& spec, GpuArch arch, Shape3 tile, Shape3 cluster, GemmSchedule schedule,
                          int stages) {
  const auto layouts = layouts_of(spec.operation);
  GemmSku sku;
  sku.family = family_of(spec.operation);
  sku.arch = arch;
  sku.a = sku.b = spec.element;
  sku.c = sku.d = spec.output;
  sku.accumulator = DType::f32;
  sku.layout_a = layouts[0];
  sku.layout_b = layouts[1];
  sku.layout_c = layouts[2];
  sku.tile = tile;
  sku.cluster = cluster;
  sku.stages = stages;
  sku.schedule = schedule;
  sku.epilogue = GemmEpilogue::linear_combination;
  return sku;
}

Result<ConvPlan> ConvPlan::create(const ConvSpec& spec, GpuArch device_arch, const ConvPlanOptions& options) {
  const nvtx::Range range("conv.plan");
  CUACTOR_TRY(check_spec(spec));
  CUACTOR_TRY(check_supported(spec, device_arch));
  CUACTOR_TRY(check_options(options));
  const CatalogEntry* chosen = nullptr;
  if (options.sku_override && options.sku_override->family == GemmFamily::dense) {
    const GemmSku& want = *options.sku_override;
    if (!is_pointwise_fprop(spec))
      return fail(errc::invalid_argument,
                  fmt::format("ConvPlan override {}: a dense GEMM kernel computes only fprop with a 1x1 filter, unit "
                              "stride and no padding, not {}",
                              want.to_string(), spec.to_string()));
    if (options.split_override && *options.split_override != ConvSplit{})
      return fail(errc::invalid_argument,
                  fmt::format("ConvPlan override {}: a dense GEMM kernel does not split (split {})", want.to_string(),
                              options.split_override->to_string()));
    return finish_pointwise(spec, device_arch, want, PlanSource::overridden, options);
  }
  if (options.sku_override) {
    const GemmSku& want = *options.sku_override;
    if (!sku_computes(want, spec))
      return fail(errc::invalid_argument,
                  fmt::format("ConvPlan override {} does not compute {}", want.to_string(), spec.to_string()));
    if (!runs_on(want, device_arch))
      return fail(errc::unsupported, fmt::format("ConvPlan override {}: {} kernels cannot run on a {} device",
                                                 want.to_string(), want.arch.name(), device_arch.name()));
    CUACTOR_TRY(check_sku_computes(want, spec));
    chosen = find_in_catalog(want);
    if (chosen == nullptr)
      return fail(errc::unsupported,
                  fmt::format("ConvPlan override {} is not compiled into this build's catalog (the JIT can "
                              "instantiate it: cuactor jit warm --conv)",
                              want.to_string()));
  } else {
    // sm_90a kernels first wherever one computes the spec; sm_80 ones for the rest (strided dgrad,
    // devices before Hopper). Costs compare kernels of one architecture.
    double best_cost = 0;
    std::optional<Error> refusal;                // why a kernel that matches the spec's types cannot compute it
    const CatalogEntry* unconsidered = nullptr;  // a kernel that computes it but that the model does not consider
    // An explicit channel split asks for a kernel that splits channels. Where none computes the spec,
    // the usual choice follows, and its plan refuses the split naming the rule.
    const bool channel_split = options.split_override && options.split_override->channels > 1;
    for (const bool splitting_only : {channel_split, false}) {
      for (const CatalogEntry& e : catalog()) {
        if (!sku_computes(e.sku, spec) || !runs_on(e.sku, device_arch) || !heuristic_candidate(e.sku)) continue;
        if (splitting_only && !splits_channels(e.sku, spec)) continue;
        if (Status fits = check_sku_computes(e.sku, spec); !fits) {
          if (!refusal) refusal = fits.error();
          continue;
        }
        const bool split_wgrad = spec.operation == ConvOperation::wgrad && e.sku.arch.arch_specific;
        const double cost = split_wgrad ? best_wgrad_split(e.sku, spec, options.sm_count, true).micros
                                        : estimated_cost(e.sku, spec, options.sm_count);
        if (cost == std::numeric_limits<double>::infinity()) {  // no considered split, or a class it never won
          if (unconsidered == nullptr) unconsidered = &e;
          continue;
        }
        const bool better_arch = chosen != nullptr && e.sku.arch.arch_specific && !chosen->sku.arch.arch_specific;
        const bool same_arch = chosen != nullptr && e.sku.arch == chosen->sku.arch;
        if (chosen == nullptr || better_arch || (same_arch && cost < best_cost)) {
          chosen = &e;
          best_cost = cost;
        }
      }
      if (chosen != nullptr || unconsidered != nullptr || !splitting_only) break;
    }
    // A build whose only kernels for the spec are ones the model does not consider (paired ones only)
    // still runs it, with the kernel's best split of all.
    if (chosen == nullptr) chosen = unconsidered;
    // Without a kernel to ask (a build without this family), the sm_90a rules still explain a refusal.
    if (chosen == nullptr && !refusal && can_run(kSm90a, device_arch))
      if (Status fits = check_sku_computes(sku_for(spec, kSm90a, {128, 128, 64}), spec); !fits) refusal = fits.error();
    if (chosen == nullptr && refusal) {
      // A spec that the sm_80 kernels compute (strided dgrad) refused by a build without them: the
      // build lacks them, which "no ... kernel in this build" says (scripts and tests key on it).
      const GemmSku sm80 = sku_for(spec, GpuArch{8, 0, false}, {128, 128, 64}, {1, 1, 1}, GemmSchedule::multistage, 3);
      // (The catalog compiles sm_80 dgrad with the output type of the input.)
      if (spec.operation == ConvOperation::dgrad && spec.output == spec.element && runs_on(sm80, device_arch) &&
          check_sku_computes(sm80, spec))
        return fail(errc::unsupported,
                    fmt::format("no convolution kernel in this build's catalog computes {} on a {} device: {}; the "
                                "sm_80 kernels that would are not compiled in (CUACTOR_KERNEL_ARCHS, CUACTOR_CATALOG "
                                "and CUACTOR_CATALOG_FILTER select what is compiled)",
                                spec.to_string(), device_arch.name(), refusal->message()));
      return fail(*refusal);
    }
    if (chosen == nullptr)
      return fail(
          errc::unsupported,
          fmt::format("no convolution kernel in this build's catalog computes {} on a {} device (catalog: sm_90a "
                      "fprop bf16/f16/f32, dgrad and wgrad bf16/f16, sm_80 dgrad bf16/f16, output type = "
                      "input type; CUACTOR_KERNEL_ARCHS selects the compiled families; the JIT can "
                      "instantiate others)",
                      spec.to_string(), device_arch.name()));
  }
  if (!options.sku_override && !options.split_override && in_pointwise_class(spec, options.sm_count) &&
      !(splits_channels(chosen->sku, spec) && best_channel_split(chosen->sku, spec, options.sm_count).channels > 1))
    if (const CatalogEntry* dense = pointwise_kernel(pointwise_problem(spec));
        dense != nullptr && runs_on(dense->sku, device_arch))
      return finish_pointwise(spec, device_arch, dense->sku, PlanSource::heuristic, options);
  return finish(spec, device_arch, chosen->sku, *chosen->instance, nullptr,
                options.sku_override ? PlanSource::overridden : PlanSource::heuristic, options);
}

Result<ConvPlan> ConvPlan::finish_pointwise(const ConvSpec& spec, GpuArch arch, const GemmSku& sku, PlanSource source,
                                            const ConvPlanOptions& options) {
  GemmPlanOptions gemm_options;
  gemm_options.sku_override = sku;
  gemm_options.sm_count = options.sm_count;
  gemm_options.device = options.device;
  auto gemm = GemmPlan::make(pointwise_problem(spec), arch, gemm_options);
  if (!gemm) return fail(gemm.error());
  ConvPlan plan(spec, arch, sku, nullptr, nullptr, source, options, ConvSplit{}, gemm->workspace_size());
  plan.gemm_ = std::move(*gemm);
  return plan;
}

Result<ConvPlan> ConvPlan::with_instance(const ConvSpec& spec, GpuArch device_arch, const GemmSku& sku,
                                         const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                         PlanSource source, const ConvPlanOptions& options) {
  CUACTOR_TRY(check_spec(spec));
  CUACTOR_TRY(check_supported(spec, device_arch));
  CUACTOR_TRY(check_options(options));
  if (!sku_computes(sku, spec))
    return fail(errc::invalid_argument,
                fmt::format("convolution kernel {} does not compute {}", sku.to_string(), spec.to_string()));
  if (!runs_on(sku, device_arch))
    return fail(errc::unsupported, fmt::format("convolution kernel {}: {} kernels cannot run on a {} device",
                                               sku.to_string(), sku.arch.name(), device_arch.name()));
  CUACTOR_TRY(check_sku_computes(sku, spec));
  return finish(spec, device_arch, sku, instance, std::move(owner), source, options);
}

Result<ConvPlan> ConvPlan::finish(const ConvSpec& spec, GpuArch arch, const GemmSku& sku,
                                  const cuactor_gemm_instance& instance, std::shared_ptr<const void> owner,
                                  PlanSource source, const ConvPlanOptions& options) {
  CUACTOR_TRY(check_instance_abi(instance, sizeof(cuactor_conv_args)));
  ConvSplit split;
  if (options.split_override) {
    split = *options.split_override;
    CUACTOR_TRY(check_split(spec, sku, split));
  } else if (splits_channels(sku, spec)) {
    split = best_channel_split(sku, spec, options.sm_count);
  } else if (spec.operation == ConvOperation::wgrad && sku.arch.arch_specific) {
    // A paired kernel the heuristic chose keeps the split it was chosen with; any other kernel, or
    // one for which the model considers no split (chosen for want of another), takes the best of all.
    const WgradChoice chosen = best_wgrad_split(sku, spec, options.sm_count, source == PlanSource::heuristic);
    split = chosen.micros != std::numeric_limits<double>::infinity()
                ? chosen.split
                : best_wgrad_split(sku, spec, options.sm_count, false).split;
  }
  // can_implement and workspace_size read the problem only; a set SM count keeps the instance from
  // querying the device, so plans can be made on a machine without one.
  ConvPlanOptions probe = options;
  if (probe.sm_count == 0) probe.sm_count = kDefaultSmCount;
  const auto args = make_args(spec, ConvTensors{}, probe, split);
  if (const int s = instance.can_implement(&args); s != CUACTOR_KERNEL_OK)
    return fail(errc::unsupported,
                fmt::format("convolution kernel {} rejects {} (status {}; CUTLASS's can_implement: {})",
                            sku.to_string(), spec.to_string(), s,
                            sku.arch.arch_specific ? "TMA alignment, im2col corners or extents"
                                                   : "iterator limits, alignment or tensors of 2 GiB or more"));
  const std::size_t workspace = instance.workspace_size(&args);
  return ConvPlan(spec, arch, sku, &instance, std::move(owner), source, options, split, workspace);
}

Status ConvPlan::validate(const ConvTensors& t) const {
  for (const Operand& in : inputs_of(spec_.operation, t)) CUACTOR_TRY(check_pointer(in.name, in.ptr));
  CUACTOR_TRY(check_pointer("out", t.out));
  if (t.source == nullptr) {
    if (t.beta != 0.0f)
      return fail(
          errc::invalid_argument,
          fmt::format("convolution: beta={} but source is null (source may be omitted only when beta is 0)", t.beta));
  } else {
    CUACTOR_TRY(check_pointer("source", t.source));
  }
  return ok();
}

Status ConvPlan::check_buffer_sizes(std::size_t x_bytes, std::size_t w_bytes, std::size_t dy_bytes,
                                    std::size_t out_bytes, std::size_t source_bytes) const {
  const ConvSpec& s = spec_;
  struct Need {
    const char* name;
    bool used;
    std::int64_t elements;
    DType type;
    std::size_t bytes;
  };
  const ConvReads reads = reads_of(s.operation);
  const Need needs[] = {
      {"x (N x H x W x C)", reads.x, s.activation_elements(), s.element, x_bytes},
      {"w (K x R x S x C)", reads.w, s.filter_elements(), s.element, w_bytes},
      {"dy (N x P x Q x K)", reads.dy, s.output_elements(), s.element, dy_bytes},
      {"out", true, s.result_elements(), s.output, out_bytes},
      {"source", source_bytes != 0, s.result_elements(), s.output, source_bytes},
  };
  for (const Need& n : needs) {
    if (!n.used) continue;
    const std::size_t need = storage_bytes(n.type, static_cast<std::size_t>(n.elements));
    if (n.bytes < need)
      return fail(errc::invalid_argument,
                  fmt::format("convolution tensor {} of {}: needs {} bytes but the buffer has {}", n.name,
                              s.to_string(), need, n.bytes));
  }
  return ok();
}

Status ConvPlan::run(const ConvTensors& tensors, void* workspace, std::size_t workspace_bytes,
                     cudaStream_t stream) const {
  CUACTOR_TRY(validate(tensors));
  if (workspace_bytes < workspace_size_ || (workspace_size_ > 0 && workspace == nullptr))
    return fail(errc::workspace_too_small,
                fmt::format("convolution {}: workspace of {} bytes at {} is smaller than the {} bytes the plan needs",
                            sku_.to_string(), workspace_bytes, fmt::ptr(workspace), workspace_size_));
  if (workspace_size_ > 0 && reinterpret_cast<std::uintptr_t>(workspace) % 16 != 0)
    return fail(errc::invalid_argument,
                fmt::format("convolution {}: workspace {} is not 16-byte aligned (the split's fp32 partials are "
                            "written and summed in 16-byte vectors)",
                            sku_.to_string(), fmt::ptr(workspace)));
  if (gemm_) return gemm_->run(pointwise_operands(spec_, tensors), workspace, workspace_bytes, stream);
  const auto args = make_args(spec_, tensors, options_, split_);
  switch (instance_->run(&args, workspace, workspace_bytes, stream)) {
    case CUACTOR_KERNEL_OK:
      return ok();
    case CUACTOR_KERNEL_WORKSPACE_TOO_SMALL:
      return fail(errc::workspace_too_small,
                  fmt::format("convolution {}: workspace of {} bytes is too small", sku_.to_string(), workspace_bytes));
    case CUACTOR_KERNEL_LAUNCH_FAILED:
      CUACTOR_TRY(gpu::check(cudaPeekAtLastError(), "convolution launch"));
      return fail(errc::internal, fmt::format("convolution {}: kernel launch failed", sku_.to_string()));
    default:
      return fail(errc::internal,
                  fmt::format("convolution {}: building the kernel parameters failed", sku_.to_string()));
  }
}

}  // namespace cuactor::kernels
