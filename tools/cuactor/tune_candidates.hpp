// The configurations `cuactor tune gemm` and `tune grouped` sweep. Free of CUDA, the CLI and
// printing, so the unit tests check the lists themselves (types, schedules, depths, the quick subset).
#pragma once

#include <fmt/format.h>

#include <set>
#include <span>
#include <string>
#include <vector>

#include "cuactor/core/dtype.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/sku.hpp"

namespace cuactor::cli {

/// The sm_90a configurations swept for a problem. 16-bit: data-parallel cooperative and pingpong
/// tiles, clusters, and stream-K; for at most 64 columns (a decode GEMM written D^T = B^T A^T, weights
/// as A), tiles of the columns' width (16, 32 or 64) over 64 to 256 rows, stream-K among them. e4m3
/// (per-tensor scales, fast accumulation): the same families on 128-deep tiles (the bytes of the 16-bit
/// 64-deep ones), the catalog's 256x128 in a 1x2 cluster first; for at most 64 columns, tiles of the
/// columns' width over 64 or 128 rows, the first 256 deep. (The heuristic's own plan, swapped or
/// split-K included, is timed beside them.)
inline std::vector<kernels::GemmSku> dense_tune_candidates(const kernels::GemmProblem& p, bool quick) {
  using kernels::GemmSchedule;
  struct Config {
    kernels::Shape3 tile, cluster;
    GemmSchedule schedule;
    bool in_quick;
  };
  const int narrow = p.n <= 16 ? 16 : p.n <= 32 ? 32 : 64;
  const Config narrow_configs[] = {
      {{64, narrow, 128}, {1, 1, 1}, GemmSchedule::pingpong, true},
      {{64, narrow, 256}, {1, 1, 1}, GemmSchedule::pingpong, false},
      {{128, narrow, 128}, {1, 1, 1}, GemmSchedule::cooperative, false},
      {{128, narrow, 128}, {1, 1, 1}, GemmSchedule::cooperative_streamk, true},
      {{128, narrow, 64}, {1, 1, 1}, GemmSchedule::cooperative_streamk, false},
      {{256, narrow, 64}, {1, 1, 1}, GemmSchedule::cooperative_streamk, true},
  };
  const Config configs[] = {
      {{128, 256, 64}, {2, 1, 1}, GemmSchedule::cooperative, true},
      {{128, 256, 64}, {1, 1, 1}, GemmSchedule::cooperative, false},
      {{128, 128, 64}, {1, 1, 1}, GemmSchedule::cooperative, false},
      {{256, 128, 64}, {1, 2, 1}, GemmSchedule::cooperative, true},
      {{256, 128, 64}, {2, 1, 1}, GemmSchedule::cooperative, false},  // B multicast across the M pair
      {{128, 256, 64}, {1, 2, 1}, GemmSchedule::cooperative, false},  // A multicast across the N pair
      // The heuristic's large 16-bit tile (pingpong 128x128, 2x1) in the other cluster shapes, and wider.
      {{128, 128, 64}, {1, 1, 1}, GemmSchedule::pingpong, false},
      {{128, 128, 64}, {1, 2, 1}, GemmSchedule::pingpong, false},
      {{128, 128, 64}, {2, 2, 1}, GemmSchedule::pingpong, false},
      {{128, 192, 64}, {2, 1, 1}, GemmSchedule::pingpong, false},  // fewer tile loads per output
      {{64, 128, 128}, {1, 1, 1}, GemmSchedule::pingpong, true},
      {{64, 128, 64}, {1, 1, 1}, GemmSchedule::pingpong, false},
      {{64, 256, 64}, {1, 1, 1}, GemmSchedule::pingpong, false},
      {{64, 64, 64}, {1, 1, 1}, GemmSchedule::pingpong, false},  // decode on grids of few 64x128 tiles
      {{128, 128, 64}, {1, 1, 1}, GemmSchedule::cooperative_streamk, true},
      {{128, 256, 64}, {1, 1, 1}, GemmSchedule::cooperative_streamk, true},
      {{128, 128, 64}, {2, 1, 1}, GemmSchedule::cooperative_streamk, false},
  };
  // e4m3: the schedules with fast accumulation; the first narrow tile 256 deep, as the catalog's
  // swapped fp8 decode tiles are.
  constexpr GemmSchedule kCoop8 = GemmSchedule::cooperative_fp8_fast_accum,
                         kPing8 = GemmSchedule::pingpong_fp8_fast_accum,
                         kStreamK8 = GemmSchedule::cooperative_fp8_fast_accum_streamk;
  const Config fp8_narrow_configs[] = {
      {{64, narrow, 256}, {1, 1, 1}, kPing8, true},
      {{64, narrow, 128}, {1, 1, 1}, kPing8, false},
      {{128, narrow, 128}, {1, 1, 1}, kCoop8, false},
      {{128, narrow, 128}, {1, 1, 1}, kStreamK8, true},
  };
  const Config fp8_configs[] = {
      {{256, 128, 128}, {1, 2, 1}, kCoop8, true},  // the catalog's large fp8 tile
      {{256, 128, 128}, {2, 1, 1}, kCoop8, false},
      {{128, 256, 128}, {2, 1, 1}, kCoop8, true},
      {{128, 256, 128}, {1, 1, 1}, kCoop8, false},
      {{128, 128, 128}, {1, 1, 1}, kCoop8, false},
      {{128, 128, 128}, {1, 1, 1}, kPing8, false},
      {{128, 128, 128}, {1, 2, 1}, kPing8, true},
      {{128, 128, 128}, {2, 1, 1}, kPing8, false},
      {{64, 128, 128}, {1, 1, 1}, kPing8, true},  // the catalog's small-M fp8 tile
      {{64, 256, 128}, {1, 1, 1}, kPing8, false},
      {{128, 128, 128}, {1, 1, 1}, kStreamK8, true},
      {{128, 256, 128}, {1, 1, 1}, kStreamK8, false},
  };
  const bool fp8 = p.a == DType::e4m3, few_columns = p.n <= 64;
  const std::span<const Config> list =
      fp8 ? (few_columns ? std::span<const Config>(fp8_narrow_configs) : std::span<const Config>(fp8_configs))
          : (few_columns ? std::span<const Config>(narrow_configs) : std::span<const Config>(configs));
  std::vector<kernels::GemmSku> out;
  for (const Config& c : list) {
    if (quick && !c.in_quick) continue;
    kernels::GemmSku s = kernels::dense_sku_for(p);
    s.tile = c.tile;
    s.cluster = c.cluster;
    s.schedule = c.schedule;
    out.push_back(s);
  }
  return out;
}

/// A decode plan's scheduling on the catalog's swapped and slice kernels: GemmPlanOptions::swap_ab 2
/// (true) or 1, and split_k.
struct DecodeSchedule {
  bool swap_ab = false;
  int split_k = 1;
  friend bool operator==(const DecodeSchedule&, const DecodeSchedule&) = default;
};

/// " swap-AB split-K 4": a decode plan's scheduling, after short_sku_name (empty for neither).
inline std::string decode_schedule_name(bool swap_ab, int split_k) {
  return fmt::format("{}{}", swap_ab ? " swap-AB" : "", split_k > 1 ? fmt::format(" split-K {}", split_k) : "");
}

/// The decode schedules swept for a problem of at most 64 rows (none past that): swapped unsplit;
/// and for 16-bit inputs (split-K's rule) K split into 2 to 8 slices (the heuristic's range), swapped and not (the
/// unswapped unsplit plan is dense_tune_candidates' 64-row tiles). `--quick`: swapped unsplit, and 4 slices each way.
/// GemmPlan::make builds each from the catalog and names the rule a shape breaks (K not a multiple of the slices'
/// depth).
inline std::vector<DecodeSchedule> decode_tune_schedules(const kernels::GemmProblem& p, bool quick) {
  if (p.m > 64) return {};
  std::vector<DecodeSchedule> out{{true, 1}};
  if (p.a != DType::bf16 && p.a != DType::f16) return out;
  for (const bool swap : {true, false})
    for (const int split : {2, 3, 4, 5, 6, 7, 8})  // every count the heuristic may choose
      if (!quick || split == 4) out.push_back({swap, split});
  return out;
}

/// The sm_90a grouped configurations swept for `in` (16-bit: linear combination; e4m3: fast
/// accumulation with the per-tensor scales folded into alpha).
inline std::vector<kernels::GemmSku> grouped_tune_candidates(DType in, bool quick) {
  struct Config {
    kernels::Shape3 tile, cluster;
    bool pingpong;
    bool in_quick;
  };
  const bool fp8 = in == DType::e4m3;
  const int k16 = 64, k8 = 128;  // 128-byte K slices
  const int tk = fp8 ? k8 : k16;
  // The first: fp8's large tile, the catalog's (256x128, 1x2); for 16-bit, 128x256 in a 2x1 cluster.
  const std::vector<Config> configs = {
      {{fp8 ? 256 : 128, fp8 ? 128 : 256, tk}, {fp8 ? 1 : 2, fp8 ? 2 : 1, 1}, false, true},
      {{128, 256, tk}, {1, 1, 1}, false, !fp8},  // 16-bit: the catalog's large
      {{128, 128, tk}, {1, 1, 1}, false, true},
      {{128, 128, tk}, {2, 1, 1}, false, false},
      {{fp8 ? 128 : 256, fp8 ? 256 : 128, tk}, {fp8 ? 2 : 1, fp8 ? 1 : 2, 1}, false, true},
      {{64, 128, 128}, {1, 1, 1}, true, true},  // the catalog's small-M
      {{64, 256, tk}, {1, 1, 1}, true, true},
      {{64, 128, tk}, {2, 1, 1}, true, false},
      // Narrower and pingpong-wide tiles for the rows between the classes (100-300 rows per group):
      // less padding per group than 128x256, more than one tile per SM in flight.
      {{128, 192, tk}, {1, 1, 1}, false, false},
      {{64, 192, tk}, {1, 1, 1}, true, false},
      {{128, 128, tk}, {1, 1, 1}, true, false},
  };
  std::vector<kernels::GemmSku> out;
  std::set<std::string> seen;
  for (const Config& c : configs) {
    if (quick && !c.in_quick) continue;
    kernels::GemmSku s;
    s.family = kernels::GemmFamily::grouped;
    s.arch = GpuArch{9, 0, true};
    s.a = s.b = in;
    s.c = s.d = fp8 ? DType::bf16 : in;
    s.layout_b = kernels::MatrixLayout::col;
    s.tile = c.tile;
    s.cluster = c.cluster;
    s.schedule = fp8 ? (c.pingpong ? kernels::GemmSchedule::pingpong_fp8_fast_accum
                                   : kernels::GemmSchedule::cooperative_fp8_fast_accum)
                     : (c.pingpong ? kernels::GemmSchedule::pingpong : kernels::GemmSchedule::cooperative);
    s.epilogue = kernels::EpilogueSpec(fp8 ? kernels::GemmEpilogue::scaled_linear_combination
                                           : kernels::GemmEpilogue::linear_combination);
    if (seen.insert(s.to_string()).second) out.push_back(s);
  }
  return out;
}

}  // namespace cuactor::cli
