// The configurations `cuactor tune gemm` sweeps (tools/cuactor/tune_candidates.hpp): each carries the
// problem's types, layouts and epilogue, a schedule of its element width, and a JIT request that
// renders for sm_90a; the quick list is part of the full one.
#include "tune_candidates.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "cuactor/jit/gemm.hpp"

namespace cuactor::cli {
namespace {

using kernels::GemmEpilogue;
using kernels::GemmProblem;
using kernels::GemmSchedule;
using kernels::GemmSku;
using kernels::MatrixLayout;

GemmProblem problem(DType t, std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = p.b = p.c = p.d = t;
  if (t == DType::e4m3) {  // as `tune gemm --dtype e4m3` states it
    p.c = p.d = DType::bf16;
    p.epilogue = GemmEpilogue::scaled_linear_combination;
  }
  return p;
}

bool is_fp8_schedule(GemmSchedule s) {
  return s == GemmSchedule::cooperative_fp8_fast_accum || s == GemmSchedule::pingpong_fp8_fast_accum ||
         s == GemmSchedule::cooperative_fp8_fast_accum_streamk;
}

/// The checks every list must pass, for `p` and both lengths.
void expect_sound(const GemmProblem& p, std::size_t full_size, std::size_t quick_size) {
  SCOPED_TRACE(std::string(name(p.a)) + " n=" + std::to_string(p.n));
  const std::vector<GemmSku> full = dense_tune_candidates(p, false), quick = dense_tune_candidates(p, true);
  EXPECT_EQ(full.size(), full_size);
  EXPECT_EQ(quick.size(), quick_size);
  std::set<std::string> names;
  const bool fp8 = p.a == DType::e4m3;
  for (const GemmSku& s : full) {
    SCOPED_TRACE(s.to_string());
    EXPECT_TRUE(names.insert(s.to_string()).second) << "listed twice";
    EXPECT_EQ(s.family, kernels::GemmFamily::dense);
    EXPECT_EQ(s.a, p.a);
    EXPECT_EQ(s.b, p.b);
    EXPECT_EQ(s.c, p.c);
    EXPECT_EQ(s.d, p.d);
    EXPECT_EQ(s.layout_b, p.layout_b);
    EXPECT_EQ(s.layout_c, MatrixLayout::row);
    EXPECT_EQ(s.epilogue, p.epilogue);
    EXPECT_EQ(is_fp8_schedule(s.schedule), fp8);
    // At least 128-byte K slices: 64 deep for 16-bit elements, 128 for fp8.
    EXPECT_GE(s.tile.k * size_bits(p.a) / 8, 128);
    if (p.n <= 64) {
      EXPECT_LE(s.tile.n, 64) << "few columns take tiles of their width";
    }
    auto request = jit::instance_request(s, GpuArch{9, 0, true});
    EXPECT_TRUE(request.has_value()) << request.error().to_string();
  }
  for (const GemmSku& s : quick) EXPECT_EQ(names.count(s.to_string()), 1u) << s.to_string() << " only in --quick";
}

TEST(TuneCandidates, SixteenBitListsKeepTheirLengths) {
  for (DType t : {DType::bf16, DType::f16}) {
    expect_sound(problem(t, 4096, 4096, 4096), 17, 5);
    expect_sound(problem(t, 8192, 16, 4096), 6, 3);
  }
}

TEST(TuneCandidates, Fp8ListsUseTheFastAccumulationSchedulesAndTheCatalogsTileFirst) {
  const GemmProblem large = problem(DType::e4m3, 4096, 4096, 4096);
  expect_sound(large, 12, 5);
  expect_sound(problem(DType::e4m3, 8192, 32, 8192), 4, 2);
  const GemmSku first = dense_tune_candidates(large, true).front();
  EXPECT_EQ(first.tile, (kernels::Shape3{256, 128, 128}));
  EXPECT_EQ(first.cluster, (kernels::Shape3{1, 2, 1}));
  EXPECT_EQ(first.schedule, GemmSchedule::cooperative_fp8_fast_accum);
  // Stream-K is among both lists, as for 16-bit problems.
  for (const GemmProblem& p : {large, problem(DType::e4m3, 8192, 32, 8192)}) {
    const auto quick = dense_tune_candidates(p, true);
    EXPECT_TRUE(std::any_of(quick.begin(), quick.end(), [](const GemmSku& s) {
      return s.schedule == GemmSchedule::cooperative_fp8_fast_accum_streamk;
    }));
  }
}

// Decode schedules: problems of at most 64 rows only; swapped unsplit first; 16-bit inputs also split
// 2-8 ways, swapped and not (e4m3 cannot split); --quick a subset; no schedule twice.
TEST(TuneCandidates, DecodeSchedulesCoverSwapAndSplitForAtMost64Rows) {
  EXPECT_TRUE(decode_tune_schedules(problem(DType::bf16, 65, 4096, 4096), false).empty());
  EXPECT_TRUE(decode_tune_schedules(problem(DType::bf16, 4096, 4096, 4096), true).empty());
  const std::vector<DecodeSchedule> fp8 = decode_tune_schedules(problem(DType::e4m3, 16, 8192, 8192), false);
  EXPECT_EQ(fp8, (std::vector<DecodeSchedule>{{true, 1}}));
  for (const DType t : {DType::bf16, DType::f16})
    for (const std::int64_t m : {1, 16, 32, 64}) {
      const auto full = decode_tune_schedules(problem(t, m, 8192, 8192), false);
      const auto quick = decode_tune_schedules(problem(t, m, 8192, 8192), true);
      ASSERT_EQ(full.size(), 15u);
      EXPECT_EQ(full.front(), (DecodeSchedule{true, 1}));
      std::set<std::pair<bool, int>> seen;
      for (const DecodeSchedule& d : full) {
        EXPECT_TRUE(seen.insert({d.swap_ab, d.split_k}).second) << d.swap_ab << " " << d.split_k;
        EXPECT_TRUE(d.split_k == 1 ? d.swap_ab : d.split_k >= 2 && d.split_k <= 8) << d.split_k;
      }
      EXPECT_EQ(quick, (std::vector<DecodeSchedule>{{true, 1}, {true, 4}, {false, 4}}));
    }
  EXPECT_EQ(decode_schedule_name(false, 1), "");
  EXPECT_EQ(decode_schedule_name(true, 1), " swap-AB");
  EXPECT_EQ(decode_schedule_name(true, 4), " swap-AB split-K 4");
  EXPECT_EQ(decode_schedule_name(false, 8), " split-K 8");
}

// Grouped lists: the grouped family on sm_90a, B col, C and D of the input type (bf16 for e4m3), the
// element width's schedules and epilogue, 128-byte K slices (the 64x128 pingpong tile 128 deep), 11 each,
// renderable JIT requests, no SKU twice, --quick a subset; the catalog's large tile first.
TEST(TuneCandidates, GroupedListsKeepTheirLengthsAndTypes) {
  for (const DType in : {DType::bf16, DType::f16, DType::e4m3}) {
    SCOPED_TRACE(std::string(name(in)));
    const bool fp8 = in == DType::e4m3;
    const auto full = grouped_tune_candidates(in, false), quick = grouped_tune_candidates(in, true);
    EXPECT_EQ(full.size(), 11u);
    std::set<std::string> names;
    for (const GemmSku& s : full) {
      SCOPED_TRACE(s.to_string());
      EXPECT_TRUE(names.insert(s.to_string()).second) << "listed twice";
      EXPECT_EQ(s.family, kernels::GemmFamily::grouped);
      EXPECT_EQ(s.arch, (GpuArch{9, 0, true}));
      EXPECT_EQ(s.a, in);
      EXPECT_EQ(s.b, in);
      EXPECT_EQ(s.d, fp8 ? DType::bf16 : in);
      EXPECT_EQ(s.layout_b, MatrixLayout::col);
      EXPECT_EQ(is_fp8_schedule(s.schedule), fp8);
      EXPECT_EQ(s.epilogue, kernels::EpilogueSpec(fp8 ? GemmEpilogue::scaled_linear_combination
                                                      : GemmEpilogue::linear_combination));
      EXPECT_GE(s.tile.k * size_bits(in) / 8, 128);
      auto request = jit::instance_request(s, GpuArch{9, 0, true});
      EXPECT_TRUE(request.has_value()) << request.error().to_string();
    }
    EXPECT_FALSE(quick.empty());
    for (const GemmSku& s : quick) EXPECT_EQ(names.count(s.to_string()), 1u) << s.to_string() << " only in --quick";
    EXPECT_EQ(full.front().tile, fp8 ? (kernels::Shape3{256, 128, 128}) : (kernels::Shape3{128, 256, 64}));
  }
}

}  // namespace
}  // namespace cuactor::cli
