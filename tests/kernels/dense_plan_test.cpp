// GemmPlan choices and rejections, and the cuBLAS back end's rules over the same vocabulary; none of
// this touches a device (operand checks use fake pointers).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/cublas_gemm.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "kernels/split_k.hpp"
#include "support/fake_dense_instance.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

constexpr GpuArch kHopper{9, 0, true};
constexpr GpuArch kAmpere{8, 0, false};
constexpr GpuArch kAda{8, 9, false};

GemmProblem bf16_problem(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

GemmProblem fp8_problem() {
  GemmProblem p = bf16_problem(256, 256, 256);
  p.a = p.b = DType::e4m3;
  p.epilogue = GemmEpilogue::scaled_linear_combination;
  return p;
}

using test_support::expect_error;
using test_support::fake;
using test_support::fake_dense_instance;
using test_support::fake_mut;

bool in_catalog(const GemmProblem& p, GpuArch arch) {
  for (const CatalogEntry* e : catalog_entries(GemmFamily::dense))
    if (e->sku.a == p.a && e->sku.d == p.d && e->sku.layout_b == p.layout_b && runs_on(e->sku, arch)) return true;
  return false;
}

TEST(DensePlan, RejectsFp8BelowAda) {
  expect_error(GemmPlan::make(fp8_problem(), kAmpere), errc::unsupported, "needs sm_89 or newer");
}

TEST(DensePlan, RejectsFp4BelowBlackwell) {
  GemmProblem p = bf16_problem(128, 128, 128);
  p.a = p.b = DType::e2m1;
  expect_error(GemmPlan::make(p, kHopper), errc::unsupported, "needs sm_100 or newer");
}

TEST(DensePlan, RejectsFp8WithoutScales) {
  GemmProblem p = fp8_problem();
  p.epilogue = GemmEpilogue::linear_combination;
  expect_error(GemmPlan::make(p, kHopper), errc::invalid_argument, "scaled_linear_combination");
}

TEST(DensePlan, RejectsBadSizes) {
  expect_error(GemmPlan::make(bf16_problem(-1, 8, 8), kHopper), errc::invalid_argument, "m=-1");
  expect_error(GemmPlan::make(bf16_problem(8, 8, 0), kHopper), errc::invalid_argument, "k=0");
  GemmProblem p = bf16_problem(8, 8, 8);
  p.batch = 0;
  expect_error(GemmPlan::make(p, kHopper), errc::invalid_argument, "batch=0");
  expect_error(GemmPlan::make(bf16_problem(8, std::int64_t{1} << 32, 8), kHopper), errc::invalid_argument, "<=");
}

TEST(DensePlan, RejectsUnservedCombination) {
  GemmProblem p = bf16_problem(64, 64, 64);
  p.a = p.b = DType::i8;
  expect_error(GemmPlan::make(p, kHopper), errc::unsupported, "A=i8");
  // fp8 is valid on Ada, but the catalog holds no sm_89 kernel.
  expect_error(GemmPlan::make(fp8_problem(), kAda), errc::unsupported, "on sm_89 ");
}

TEST(DensePlan, OverrideRules) {
  GemmSku sm90 = GemmSku{};  // bf16 TN cooperative 128x256x64 on sm_90a
  sm90.cluster = {2, 1, 1};
  GemmPlanOptions o;
  o.sku_override = sm90;
  expect_error(GemmPlan::make(bf16_problem(256, 256, 256), kAmpere, o), errc::unsupported,
               "sm_90a kernels cannot run on a sm_80 device");
  GemmProblem f16 = bf16_problem(256, 256, 256);
  f16.a = f16.b = f16.c = f16.d = DType::f16;
  expect_error(GemmPlan::make(f16, kHopper, o), errc::invalid_argument, "does not compute the problem");
  GemmSku odd = sm90;
  odd.tile = {192, 96, 32};
  o.sku_override = odd;
  expect_error(GemmPlan::make(bf16_problem(256, 256, 256), kHopper, o), errc::unsupported, "not compiled into");
  GemmSku grouped = sm90;
  grouped.family = GemmFamily::grouped;
  o.sku_override = grouped;
  expect_error(GemmPlan::make(bf16_problem(256, 256, 256), kHopper, o), errc::invalid_argument, "is not dense");
}

TEST(DensePlan, OverrideIsHonoured) {
  for (const CatalogEntry* e : catalog_entries(GemmFamily::dense)) {
    GemmProblem p = bf16_problem(1000, 1000, 1000);
    p.a = e->sku.a;
    p.b = e->sku.b;
    p.c = e->sku.c;
    p.d = e->sku.d;
    p.layout_a = e->sku.layout_a;
    p.layout_b = e->sku.layout_b;
    p.layout_c = e->sku.layout_c;
    p.epilogue = e->sku.epilogue;
    GemmPlanOptions o;
    o.sku_override = e->sku;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, e->sku.arch.sm() == 90 ? kHopper : kAmpere, o));
    EXPECT_EQ(plan.sku(), e->sku);
    EXPECT_EQ(plan.source(), PlanSource::overridden);
  }
}

TEST(DensePlan, HeuristicPicksTileByShapeAndArch) {
  const GemmProblem large = bf16_problem(4096, 4096, 4096);
  if (!in_catalog(large, kHopper)) GTEST_SKIP() << "no sm_90a bf16 kernels in this build";
  CUACTOR_SKIP_IF_PARTIAL_CATALOG();
  CUACTOR_ASSERT_OK_AND_ASSIGN(big, GemmPlan::make(large, kHopper));
  // Large 16-bit problems: pingpong 128x128 (each warpgroup's epilogue under the other's mainloop),
  // ahead of cooperative 128x256 on an H200 (estimated_cost).
  EXPECT_EQ(big.sku().schedule, GemmSchedule::pingpong) << big.sku().to_string();
  EXPECT_EQ(big.sku().tile, (Shape3{128, 128, 64})) << big.sku().to_string();
  // Long reductions (K > 8192) and the largest problems (M*N*K >= 1.5e12): cooperative 128x256, which
  // moves fewer bytes per flop.
  CUACTOR_ASSERT_OK_AND_ASSIGN(huge, GemmPlan::make(bf16_problem(8192, 28672, 8192), kHopper));
  EXPECT_EQ(huge.sku().schedule, GemmSchedule::cooperative) << huge.sku().to_string();
  EXPECT_EQ(huge.sku().tile, (Shape3{128, 256, 64})) << huge.sku().to_string();
  EXPECT_TRUE(big.sku().arch.arch_specific);
  EXPECT_EQ(big.source(), PlanSource::heuristic);
  // Decode-like shapes: the small pingpong tile (measured on an H100 ahead of stream-K and of the large
  // cooperative tile: 40.7 / 32.1 / 26.6 TFLOP/s at 16x8192x8192, 46.4 vs 40.2 at 16x28672x8192).
  // Where the grid of 64x128 tiles fills at most half the SMs, 64x64x64 tiles (heuristic_candidate,
  // small_m_tile_k); else 64x128x128. (Unswapped and unsplit: DecodePlansSwapAndSplit covers those.)
  GemmPlanOptions plain;
  plain.swap_ab = 1;
  plain.split_k = 1;
  for (const auto& [m, n, k, width, depth] : {std::tuple{16, 4096, 4096, 64, 64},
                                              {16, 8192, 8192, 64, 64},
                                              {16, 28672, 8192, 128, 128},
                                              {128, 4096, 14336, 64, 64},
                                              {128, 8192, 8192, 128, 128},
                                              {1, 12288, 4096, 128, 128}}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(decode, GemmPlan::make(bf16_problem(m, n, k), kHopper, plain));
    EXPECT_EQ(decode.sku().schedule, GemmSchedule::pingpong)
        << m << "x" << n << "x" << k << ": " << decode.sku().to_string();
    EXPECT_EQ(decode.sku().tile, (Shape3{64, width, depth}))
        << m << "x" << n << "x" << k << ": " << decode.sku().to_string();
  }
  if (in_catalog(large, kAmpere)) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(ampere, GemmPlan::make(large, kAmpere));
    EXPECT_EQ(ampere.sku().arch.sm(), 80);
  }
  EXPECT_DOUBLE_EQ(big.flops(), 2.0 * 4096.0 * 4096.0 * 4096.0);
}

// The configuration the JIT would build (sku_for) takes the same tile as the catalog's choice: 64x64x64
// for 16-bit small-M problems on grids of at most half the SMs in 64x128 tiles, else 64x128x128; fp8
// 64x128x128.
TEST(DensePlan, SmallMTileFollowsTheGridSize) {
  GemmPlanOptions h100;
  h100.sm_count = 132;
  struct Case {
    GemmProblem problem;
    Shape3 tile;
  };
  GemmProblem fp8_decode = fp8_problem();
  fp8_decode.m = 16;
  fp8_decode.n = 4096;
  for (const Case& c : {Case{bf16_problem(16, 4096, 14336), {64, 64, 64}},    // 32 tiles of 64x128
                        Case{bf16_problem(128, 4096, 8192), {64, 64, 64}},    // 64 tiles
                        Case{bf16_problem(80, 6144, 12288), {64, 128, 128}},  // 96 tiles
                        Case{bf16_problem(64, 4096, 4096), {64, 64, 64}}, Case{fp8_decode, {64, 128, 128}}}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(sku, GemmPlan::sku_for(c.problem, kHopper, h100));
    EXPECT_EQ(sku.schedule,
              is_low_precision_float(c.problem.a) ? GemmSchedule::pingpong_fp8_fast_accum : GemmSchedule::pingpong);
    EXPECT_EQ(sku.tile, c.tile) << c.problem.m << "x" << c.problem.n << ": " << sku.to_string();
  }
  GemmPlanOptions small_gpu;
  small_gpu.sm_count = 48;  // 32 tiles fill more than half of 48 SMs
  CUACTOR_ASSERT_OK_AND_ASSIGN(sku, GemmPlan::sku_for(bf16_problem(16, 4096, 14336), kHopper, small_gpu));
  EXPECT_EQ(sku.tile, (Shape3{64, 128, 128}));
}

class DensePlanOperands : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!in_catalog(problem_, kHopper)) GTEST_SKIP() << "no sm_90a bf16 kernels in this build";
    auto plan = GemmPlan::make(problem_, kHopper);
    ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
    plan_.emplace(*plan);
    good_.a = fake();
    good_.b = fake(0x10000);
    good_.d = fake_mut();
  }
  GemmProblem problem_ = bf16_problem(200, 136, 72);  // A 200x72 row, B 136x72 (TN), D 200x136 row
  std::optional<GemmPlan> plan_;
  GemmOperands good_;
};

TEST_F(DensePlanOperands, AcceptsPackedAndPaddedOperands) {
  CUACTOR_ASSERT_OK(plan_->validate(good_));
  GemmOperands padded = good_;
  padded.lda = 80;
  padded.ldb = 96;
  padded.ldd = 256;
  padded.c = fake(0x20000);
  padded.ldc = 144;
  padded.beta = 0.5f;
  CUACTOR_ASSERT_OK(plan_->validate(padded));
}

TEST_F(DensePlanOperands, RejectsEachRuleNamingTheOperand) {
  GemmOperands o = good_;
  o.a = nullptr;
  expect_error(plan_->validate(o), errc::invalid_argument, "operand A: pointer is null");
  o = good_;
  o.b = fake(8);
  expect_error(plan_->validate(o), errc::invalid_argument, "operand B: pointer");
  o = good_;
  o.lda = 64;
  expect_error(plan_->validate(o), errc::invalid_argument, "ldA=64 is less than its contiguous extent 72");
  o = good_;
  o.ldb = 76;
  expect_error(plan_->validate(o), errc::invalid_argument, "ldB=76 is not a multiple of 8 for bf16");
  o = good_;
  o.beta = 1.0f;
  expect_error(plan_->validate(o), errc::invalid_argument, "C: pointer is null but beta=1");
  o = good_;
  o.scale_a = static_cast<const float*>(fake());
  expect_error(plan_->validate(o), errc::invalid_argument, "no per-tensor scales");
  o = good_;
  o.d = fake_mut(2);
  expect_error(plan_->validate(o), errc::invalid_argument, "operand D: pointer");
}

TEST_F(DensePlanOperands, RejectsUnalignedContiguousExtent) {
  GemmProblem p = problem_;
  p.k = 70;  // A's rows (and B's) are 70 elements: 140 bytes, not a multiple of 16
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, kHopper));
  GemmOperands o = good_;
  o.lda = 72;
  o.ldb = 72;
  expect_error(plan.validate(o), errc::invalid_argument, "contiguous extent 70 is not a multiple of 8");
}

TEST_F(DensePlanOperands, RejectsOverlappingBatches) {
  GemmProblem p = problem_;
  p.batch = 2;
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, kHopper));
  GemmOperands o = good_;
  o.batch_stride_d = 136 * 100;
  expect_error(plan.validate(o), errc::invalid_argument, "operand D: batch stride 13600 is less than one matrix");
  CUACTOR_ASSERT_OK(plan.validate(good_));
}

TEST_F(DensePlanOperands, RunRejectsMissingWorkspaceBeforeLaunch) {
  GemmOperands o = good_;
  o.a = nullptr;
  expect_error(plan_->run(o, nullptr, 0, nullptr), errc::invalid_argument, "operand A");
}

TEST(DensePlan, EmptyProblemsAreNoOps) {
  GemmPlan::make(bf16_problem(0, 64, 64), kHopper)
      .and_then([](const GemmPlan& plan) { return plan.run(GemmOperands{}, nullptr, 0, nullptr); })
      .or_else([](const Error& e) -> Status {
        if (e == errc::unsupported) return {};  // no bf16 kernel compiled in
        ADD_FAILURE() << e.to_string();
        return {};
      });
}

TEST(DensePlan, Sm80KernelsRunOnAmpereAdaAndHopperOnly) {
  GemmSku s;
  s.arch = kAmpere;
  s.schedule = GemmSchedule::multistage;
  EXPECT_TRUE(runs_on(s, kAmpere));
  EXPECT_TRUE(runs_on(s, GpuArch{8, 6, false}));
  EXPECT_TRUE(runs_on(s, kAda));
  EXPECT_TRUE(runs_on(s, kHopper));
  EXPECT_FALSE(runs_on(s, GpuArch{7, 5, false}));
  EXPECT_FALSE(runs_on(s, GpuArch{10, 0, true}));
  EXPECT_FALSE(runs_on(GemmSku{}, GpuArch{10, 0, true}));  // sm_90a needs exactly 9.0
  EXPECT_TRUE(runs_on(GemmSku{}, kHopper));
}

TEST(DensePlan, RejectsBadRasterisation) {
  GemmPlanOptions o;
  o.max_swizzle = 3;
  expect_error(GemmPlan::make(bf16_problem(64, 64, 64), kHopper, o), errc::invalid_argument, "max_swizzle=3");
  o.max_swizzle = 0;
  o.raster_order = 5;
  expect_error(GemmPlan::make(bf16_problem(64, 64, 64), kHopper, o), errc::invalid_argument, "raster_order=5");
}

TEST(DensePlan, CacheReusesPlansAndKeysEveryChoice) {
  if (!in_catalog(bf16_problem(64, 64, 64), kHopper)) GTEST_SKIP() << "no sm_90a bf16 kernels in this build";
  GemmPlanCache cache(2);
  CUACTOR_ASSERT_OK(cache.get(bf16_problem(64, 64, 64), kHopper));
  CUACTOR_ASSERT_OK(cache.get(bf16_problem(64, 64, 64), kHopper));
  EXPECT_EQ(cache.hits(), 1u);
  GemmPlanOptions o;
  o.max_swizzle = 4;
  CUACTOR_ASSERT_OK(cache.get(bf16_problem(64, 64, 64), kHopper, o));  // another key
  EXPECT_EQ(cache.size(), 2u);
  GemmPlanOptions never_split;
  never_split.split_k = 1;
  CUACTOR_ASSERT_OK(cache.get(bf16_problem(64, 64, 64), kHopper, never_split));  // another key
  EXPECT_EQ(cache.misses(), 3u);
  CUACTOR_ASSERT_OK(cache.get(bf16_problem(128, 64, 64), kHopper));  // evicts the least recent
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.misses(), 4u);
  EXPECT_FALSE(cache.get(bf16_problem(-1, 64, 64), kHopper).has_value());  // failures are not cached
  EXPECT_EQ(cache.size(), 2u);
}

// Split-K ([K9]): which decode shapes the plan splits, into how many slices, and the rules a forced
// split must meet. Shape only here; the slices' results are checked on a GPU (dense_gemm_test.cpp).
TEST(DensePlan, SplitKSlicesFollowTheGridOf64x64Tiles) {
  for (const auto& [m, n, k, slices] : {std::tuple{16, 2048, 8192, 4},  // 32 tiles: 4 x 32 fill 128 of 132 SMs
                                        {8, 1024, 8192, 8},             // 16 tiles, 1024-deep slices
                                        {16, 4096, 14336, 2},           // 64 tiles
                                        {1, 1536, 12288, 4},            // 24 tiles: 5 slices are not whole tiles
                                        {32, 512, 4096, 8},             // 8 tiles, 512-deep slices
                                        {33, 1024, 8192, 4},            // past 32 rows slices >= 32 m deep
                                        {60, 1280, 8192, 4},            // 20 tiles
                                        {44, 1280, 4608, 3},            // 4 slices would be 1152 deep
                                        {52, 1152, 9216, 4},            // 6 slices: 1536 deep, under 32 x 52
                                        {64, 2816, 8192, 1},            // 44 tiles: more than 132 / 4
                                        {64, 2048, 4096, 1},            // 3 slices are not whole, 4 too shallow
                                        {65, 1024, 8192, 1},            // more than 64 rows
                                        {16, 2048, 3072, 1},            // K under 4096
                                        {16, 8192, 8192, 1},            // 128 tiles fill the SMs
                                        {1, 12288, 4096, 1},            // 192 tiles
                                        {16, 2048, 4100, 1},            // K no multiple of 2 x 64
                                        {0, 2048, 8192, 1}}) {
    EXPECT_EQ(detail::split_k_for(bf16_problem(m, n, k), 132), slices) << m << "x" << n << "x" << k;
  }
  EXPECT_EQ(detail::split_k_for(bf16_problem(16, 2048, 8192), 48), 1);  // 32 tiles fill more than half of 48 SMs
  // Swapped: up to 64 rows, weight tiles at most a fifth of the SMs, the swapped grid at most a quarter
  // (twice the weight tiles past 32 rows), slices at least 1024 deep.
  for (const auto& [m, n, k, slices] : {std::tuple{16, 2048, 8192, 1},  // 32 weight tiles: more than 132 / 5
                                        {24, 1024, 11264, 8},           // 16 tiles, 1408-deep slices
                                        {1, 512, 8192, 8},              // 8 tiles, 1024-deep slices
                                        {12, 1280, 16384, 4},           // 20 tiles: 5 and 6 slices are not whole
                                        {8, 1024, 4096, 4},             // 8 slices would be 512 deep
                                        {33, 1024, 8192, 4},            // a grid of 2 x 16 tiles
                                        {64, 768, 4096, 4},             // 2 x 12 tiles: 5 slices are not whole
                                        {48, 1536, 8192, 1},            // 2 x 24 tiles: more than 132 / 4
                                        {65, 512, 8192, 1},             // more than 64 rows
                                        {16, 1024, 3072, 1}}) {         // K under 4096
    EXPECT_EQ(detail::split_k_for(bf16_problem(m, n, k), 132, true), slices) << m << "x" << n << "x" << k;
  }
}

// Up to 32 rows always; 33-64 rows where the grid of 64x64 tiles fills at most half the SMs.
TEST(DensePlan, SwapAbForDecodeRowsAndSmallGrids) {
  for (const auto& [m, n, swap] : {std::tuple{1, 28672, true},
                                   {32, 8192, true},
                                   {64, 2048, true},   // 32 tiles
                                   {48, 4096, true},   // 64 tiles: 128 of 132 SMs
                                   {64, 5120, false},  // 80 tiles
                                   {65, 1024, false}}) {
    EXPECT_EQ(detail::swap_ab_for(bf16_problem(m, n, 4096), 132), swap) << m << "x" << n;
  }
  EXPECT_FALSE(detail::swap_ab_for(bf16_problem(64, 2048, 4096), 48));  // 32 tiles fill more than half of 48 SMs
}

// The rules split-K and swap-AB plans share, each naming the broken value; then each kind's own.
TEST(DensePlan, DecodePlanRulesNameTheValue) {
  GemmProblem fp8 = fp8_problem(), tree = bf16_problem(16, 2048, 8192), batched = tree, b_row = tree, mixed = tree;
  tree.epilogue = EpilogueSpec::parse("relu(acc)").value();
  batched.batch = 2;
  b_row.layout_b = MatrixLayout::row;
  mixed.d = DType::f32;
  for (const std::string what : {"split-K", "swap-AB"}) {
    EXPECT_EQ(detail::decode_plan_rule(bf16_problem(16, 2048, 8192), kHopper, what), "");
    for (const auto& [p, arch, rule] :
         {std::tuple{bf16_problem(16, 2048, 8192), kAmpere, "sm_90a kernels; the device is sm_80"},
          {fp8, kHopper, "takes bf16 or f16 A and B, not A=e4m3"},
          {mixed, kHopper, "C and D of one type, not C=bf16 D=f32"},
          {tree, kHopper, "not the epilogue 'relu(acc)'"},
          {batched, kHopper, "batch=2"},
          {b_row, kHopper, "not row,row,row"}}) {
      const std::string why = detail::decode_plan_rule(p, arch, what);
      EXPECT_EQ(why.rfind(what, 0), 0u) << why;
      EXPECT_NE(why.find(rule), std::string::npos) << why;
    }
  }
  EXPECT_EQ(detail::swap_ab_rule(b_row, kHopper), detail::decode_plan_rule(b_row, kHopper, "swap-AB", true));
  EXPECT_NE(detail::split_k_rule(b_row, kHopper, 2).find("split-K takes layouts"), std::string::npos);
  // swap-AB also takes e4m3 with per-tensor scales and bf16 out (split-K does not: above).
  GemmProblem fp8_decode = fp8_problem(), fp8_f16 = fp8_decode, fp8_plain = fp8_decode, fp8_mixed = fp8_decode;
  fp8_decode.m = 16;
  fp8_f16.c = fp8_f16.d = DType::f16;
  fp8_plain.epilogue = GemmEpilogue::linear_combination;
  fp8_mixed.b = DType::e5m2;
  EXPECT_EQ(detail::swap_ab_rule(fp8_decode, kHopper), "");
  for (const auto& [p, rule] : {std::pair{fp8_f16, "writes bf16 C and D from e4m3 inputs, not f16"},
                                {fp8_plain,
                                 "applies 'scaled_linear_combination' to e4m3 inputs, not the epilogue "
                                 "'linear_combination'"},
                                {fp8_mixed, "takes bf16 or f16 A and B (or e4m3 ones), not A=e4m3 B=e5m2"}})
    EXPECT_NE(detail::swap_ab_rule(p, kHopper).find(rule), std::string::npos) << detail::swap_ab_rule(p, kHopper);
  GemmProblem f32_out = bf16_problem(16, 2048, 8192), e4m3_out = f32_out;
  f32_out.c = f32_out.d = DType::f32;
  e4m3_out.c = e4m3_out.d = DType::e4m3;
  EXPECT_EQ(detail::split_k_rule(f32_out, kHopper, 4), "");
  EXPECT_NE(detail::split_k_rule(e4m3_out, kHopper, 4).find("bf16, f16 or f32 C and D, not e4m3"), std::string::npos);
  EXPECT_NE(detail::split_k_rule(bf16_problem(16, 2048, 1000), kHopper, 2).find("k=1000 to be a multiple of 128"),
            std::string::npos);
}

TEST(DensePlan, SplitKOptionsAreCheckedAndForcedSplitsObeyTheRules) {
  GemmPlanOptions o;
  for (int bad : {-1, 17}) {
    o.split_k = bad;
    expect_error(GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, o), errc::invalid_argument,
                 "split_k=" + std::to_string(bad) + " must be 0");
  }
  o.split_k = 2;
  expect_error(GemmPlan::make(fp8_problem(), kHopper, o), errc::unsupported, "split_k=2: split-K takes bf16 or f16");
  expect_error(GemmPlan::make(bf16_problem(16, 2048, 1000), kHopper, o), errc::unsupported, "k=1000");
  GemmPlanOptions with_override = o;
  with_override.sku_override = detail::split_k_slice_sku(bf16_problem(16, 2048, 8192));
  expect_error(GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, with_override), errc::invalid_argument,
               "a split plan runs its own slice kernel");
  if (!in_catalog(bf16_problem(16, 2048, 8192), kHopper)) return;
  const GemmSku slice = detail::split_k_slice_sku(bf16_problem(16, 2048, 8192));
  auto forced = GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, o);
  if (find_in_catalog(slice) == nullptr) {
    expect_error(forced, errc::unsupported, "is not compiled into this build's catalog");
    return;
  }
  ASSERT_TRUE(forced.has_value()) << forced.error().to_string();
  EXPECT_EQ(forced->split_k(), 2);
  EXPECT_EQ(forced->sku(), forced->swap_ab() ? detail::split_k_slice_sku(bf16_problem(16, 2048, 8192), true) : slice);
  EXPECT_GE(forced->workspace_size(), 2u * 16u * 2048u * sizeof(float));
  o.split_k = 1;  // never: the heuristic's kernel, unsplit
  CUACTOR_ASSERT_OK_AND_ASSIGN(unsplit, GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, o));
  EXPECT_EQ(unsplit.split_k(), 1);
  EXPECT_EQ(unsplit.sku().d, DType::bf16);
  // Automatic: the swapped kernel unsplit on 32 tiles where the catalog has it, else 4 slices of 64x64 tiles.
  CUACTOR_ASSERT_OK_AND_ASSIGN(automatic, GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper));
  EXPECT_EQ(automatic.split_k(), automatic.swap_ab() ? 1 : 4);
  GemmPlanOptions unswapped;
  unswapped.swap_ab = 1;
  CUACTOR_ASSERT_OK_AND_ASSIGN(split, GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, unswapped));
  EXPECT_EQ(split.split_k(), 4);
}

// A given kernel (a tuned one) runs swapped or as split slices when the options say so: the SKU must
// compute that kernel problem, and the forced split's and swap's rules hold as in make().
TEST(DensePlan, WithInstanceRunsAGivenKernelSwappedOrAsTheSlicesOfASplit) {
  const GemmProblem p = bf16_problem(16, 2048, 8192);
  const auto given = [&](const GemmSku& sku, int swap_ab, int split_k, const GemmProblem& problem) {
    GemmPlanOptions o;
    o.swap_ab = swap_ab;
    o.split_k = split_k;
    return GemmPlan::with_instance(problem, kHopper, sku, fake_dense_instance(), nullptr, PlanSource::tuned, o);
  };
  const GemmSku swapped = detail::swapped_sku(p);
  CUACTOR_ASSERT_OK_AND_ASSIGN(swapped_plan, given(swapped, 2, 0, p));
  EXPECT_TRUE(swapped_plan.swap_ab());
  EXPECT_EQ(swapped_plan.split_k(), 1);
  EXPECT_EQ(swapped_plan.source(), PlanSource::tuned);
  for (const int split : {2, 4, 8}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(split_swapped, given(detail::split_k_slice_sku(p, true), 2, split, p));
    EXPECT_TRUE(split_swapped.swap_ab());
    EXPECT_EQ(split_swapped.split_k(), split);
    EXPECT_GE(split_swapped.workspace_size(), static_cast<std::size_t>(split) * 16u * 2048u * sizeof(float));
    CUACTOR_ASSERT_OK_AND_ASSIGN(split_plain, given(detail::split_k_slice_sku(p, false), 1, split, p));
    EXPECT_FALSE(split_plain.swap_ab());
    EXPECT_EQ(split_plain.split_k(), split);
  }
  // The SKU must compute the kernel problem the options make.
  expect_error(given(swapped, 0, 0, p), errc::invalid_argument, "does not compute the problem");
  expect_error(given(detail::split_k_slice_sku(p, false), 2, 0, p), errc::invalid_argument,
               "does not compute the swapped problem");
  expect_error(given(swapped, 2, 4, p), errc::invalid_argument, "as the slices of split_k=4");
  expect_error(given(detail::split_k_slice_sku(p, true), 2, 1, p), errc::invalid_argument,
               "does not compute the swapped problem");
  // The rules of a forced split or swap, as make() names them.
  expect_error(
      given(detail::split_k_slice_sku(bf16_problem(16, 2048, 1000), false), 1, 2, bf16_problem(16, 2048, 1000)),
      errc::unsupported, "k=1000");
  expect_error(given(swapped, 2, 2, fp8_problem()), errc::unsupported, "split_k=2: split-K takes bf16 or f16");
  GemmProblem batched = p;
  batched.batch = 2;
  expect_error(given(swapped, 2, 0, batched), errc::unsupported, "swap_ab=2: swap-AB takes one GEMM, not batch=2");
  GemmPlanOptions swap;
  swap.swap_ab = 2;
  expect_error(GemmPlan::with_instance(p, kAmpere, swapped, fake_dense_instance(), nullptr, PlanSource::tuned, swap),
               errc::unsupported, "swap-AB kernels are sm_90a kernels; the device is sm_80");
}

// Swap-AB ([K9]): the option's range, and a forced swap meets the rules and runs its own kernel.
TEST(DensePlan, SwapAbOptionsAreChecked) {
  GemmPlanOptions o;
  for (int bad : {-1, 3}) {
    o.swap_ab = bad;
    expect_error(GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, o), errc::invalid_argument,
                 "swap_ab=" + std::to_string(bad) + " must be 0");
  }
  o.swap_ab = 2;
  GemmProblem fp8_f32 = fp8_problem();
  fp8_f32.c = fp8_f32.d = DType::f32;
  expect_error(GemmPlan::make(fp8_f32, kHopper, o), errc::unsupported,
               "swap_ab=2: swap-AB writes bf16 C and D from e4m3 inputs, not f32");
  o.sku_override = detail::swapped_sku(bf16_problem(16, 2048, 8192));
  expect_error(GemmPlan::make(bf16_problem(16, 2048, 8192), kHopper, o), errc::invalid_argument,
               "a swapped plan runs its own kernel");
}

TEST(DensePlan, SwappedProblemTradesTheOperands) {
  GemmProblem p = bf16_problem(16, 2048, 8192);
  p.d = p.c = DType::f16;
  const GemmProblem s = detail::swapped_problem(p);
  EXPECT_EQ(std::tuple(s.m, s.n, s.k), std::tuple(2048, 16, 8192));
  EXPECT_EQ(std::tuple(s.layout_a, s.layout_b, s.layout_c),
            std::tuple(MatrixLayout::row, MatrixLayout::col, MatrixLayout::col));
  EXPECT_EQ(s.d, DType::f16);
  GemmOperands o;
  o.a = fake(0x100);
  o.b = fake(0x200);
  o.lda = 8200;
  o.ldb = 8256;
  const GemmOperands so = detail::swapped_operands(o);
  EXPECT_EQ(so.a, o.b);
  EXPECT_EQ(so.b, o.a);
  EXPECT_EQ(so.lda, 8256);
  EXPECT_EQ(so.ldb, 8200);
  EXPECT_EQ(detail::swapped_sku(p).tile, (Shape3{64, 16, 128}));
  EXPECT_EQ(detail::swapped_sku(bf16_problem(17, 2048, 8192)).tile, (Shape3{64, 32, 128}));
  EXPECT_EQ(detail::split_k_slice_sku(p, true).tile, (Shape3{64, 16, 64}));  // slices are whole 64-deep steps
  EXPECT_EQ(detail::split_k_slice_sku(p, true).d, DType::f32);
  // e4m3: the per-tensor scales trade places with their operands; the fp8 kernel, twice as deep.
  o.scale_a = static_cast<const float*>(fake(0x300));
  o.scale_b = static_cast<const float*>(fake(0x400));
  const GemmOperands scaled = detail::swapped_operands(o);
  EXPECT_EQ(std::pair(scaled.scale_a, scaled.scale_b), std::pair(o.scale_b, o.scale_a));
  GemmProblem fp8 = fp8_problem();
  fp8.m = 16;
  const GemmSku fp8_sku = detail::swapped_sku(fp8);
  EXPECT_EQ(fp8_sku.tile, (Shape3{64, 16, 256}));
  EXPECT_EQ(fp8_sku.schedule, GemmSchedule::pingpong_fp8_fast_accum);
  EXPECT_EQ(std::tuple(fp8_sku.a, fp8_sku.d, fp8_sku.layout_c, fp8_sku.epilogue),
            std::tuple(DType::e4m3, DType::bf16, MatrixLayout::col, fp8.epilogue));
}

// In a build with the swapped e4m3 kernel: e4m3 decode rows run swapped, never split.
TEST(DensePlan, Fp8DecodePlansSwapUnsplit) {
  GemmProblem p = fp8_problem();
  p.m = 16;
  p.n = p.k = 8192;
  if (find_in_catalog(detail::swapped_sku(p)) == nullptr) GTEST_SKIP() << "no swapped e4m3 decode kernel in this build";
  for (const auto& [m, n, k] : {std::tuple{16, 8192, 8192}, {1, 4096, 4096}, {8, 1024, 8192}}) {
    p.m = m;
    p.n = n;
    p.k = k;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, kHopper));
    EXPECT_TRUE(plan.swap_ab()) << m << "x" << n << "x" << k;
    EXPECT_EQ(plan.split_k(), 1) << m << "x" << n << "x" << k;
    EXPECT_EQ(plan.sku(), detail::swapped_sku(p));
  }
  GemmProblem wider = p;  // 17-32 rows: the 32-column tile, where the build has it
  wider.m = 24;
  if (find_in_catalog(detail::swapped_sku(wider)) != nullptr) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(wider, kHopper));
    EXPECT_TRUE(plan.swap_ab());
    EXPECT_EQ(plan.sku().tile, (Shape3{64, 32, 256}));
  }
  GemmPlanOptions never;
  never.swap_ab = 1;
  CUACTOR_ASSERT_OK_AND_ASSIGN(unswapped, GemmPlan::make(p, kHopper, never));
  EXPECT_FALSE(unswapped.swap_ab());
  EXPECT_EQ(unswapped.sku().layout_c, MatrixLayout::row);
}

// 16-bit problems of at most 32 columns (router logits, low-rank projections) run the 16- or
// 32-column tile, unswapped and unsplit, where the build has it; wider ones, other types and layouts,
// and decode rows (swapped) do not.
TEST(DensePlan, NarrowColumnPlansTakeTheNarrowTile) {
  const GemmProblem router = bf16_problem(4096, 8, 4096);
  const CatalogEntry* sixteen = detail::narrow_kernel(router, kHopper);
  if (sixteen == nullptr) GTEST_SKIP() << "no 16-column kernel in this build";
  EXPECT_EQ(sixteen->sku.tile, (Shape3{64, 16, 128}));
  EXPECT_EQ(sixteen->sku.layout_c, MatrixLayout::row);
  EXPECT_EQ(sixteen->sku.schedule, GemmSchedule::pingpong);
  GemmProblem f16 = bf16_problem(65536, 16, 2048);
  f16.a = f16.b = f16.c = f16.d = DType::f16;
  for (const GemmProblem& p : {router, bf16_problem(8192, 16, 8192), bf16_problem(100, 8, 72), f16}) {
    if (detail::narrow_kernel(p, kHopper) == nullptr) continue;  // f16 twin not in a sample build
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, kHopper));
    EXPECT_EQ(plan.sku().tile, (Shape3{64, 16, 128})) << p.m << "x" << p.n << "x" << p.k;
    EXPECT_FALSE(plan.swap_ab());
    EXPECT_EQ(plan.split_k(), 1);
    EXPECT_EQ(plan.source(), PlanSource::heuristic);
  }
  if (const CatalogEntry* wider = detail::narrow_kernel(bf16_problem(4096, 24, 4096), kHopper)) {
    EXPECT_EQ(wider->sku.tile, (Shape3{64, 32, 128}));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(bf16_problem(4096, 32, 4096), kHopper));
    EXPECT_EQ(plan.sku().tile, (Shape3{64, 32, 128}));
  }
  GemmProblem b_row = router, f32_out = router, fp8 = fp8_problem();
  b_row.layout_b = MatrixLayout::row;
  f32_out.c = f32_out.d = DType::f32;
  fp8.n = 16;
  for (const GemmProblem& p : {bf16_problem(4096, 40, 4096), b_row, f32_out, fp8})
    EXPECT_EQ(detail::narrow_kernel(p, kHopper), nullptr) << p.n << " columns, " << name(p.b) << " " << name(p.d);
  EXPECT_EQ(detail::narrow_kernel(router, kAmpere), nullptr);
  CUACTOR_ASSERT_OK_AND_ASSIGN(wide, GemmPlan::make(bf16_problem(4096, 40, 4096), kHopper));
  EXPECT_GE(wide.sku().tile.n, 64);
  // An override still runs as given.
  GemmPlanOptions given;
  given.sku_override = wide.sku();
  CUACTOR_ASSERT_OK_AND_ASSIGN(overridden, GemmPlan::make(router, kHopper, given));
  EXPECT_EQ(overridden.sku(), wide.sku());
  // Decode rows of few columns still run swapped where the swapped kernel is compiled.
  if (find_in_catalog(detail::swapped_sku(bf16_problem(16, 16, 4096))) != nullptr) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(decode, GemmPlan::make(bf16_problem(16, 16, 4096), kHopper));
    EXPECT_TRUE(decode.swap_ab());
  }
}

// Narrow-column problems on grids of at most a quarter of the SMs in 64-row tiles split K of 8192 or
// more into the most slices that fit one wave, at least 1024 deep; the slices run on a narrow tile
// where the build has it, else (forced splits only) on the 64-column one.
TEST(DensePlan, NarrowSplitRule) {
  for (const auto& [m, n, k, splits] : {std::tuple{1000, 32, 14336, 8},  // 16 row tiles: 8 x 16 <= 132
                                        {1536, 8, 8192, 4},              // 24 tiles; 5 slices do not divide K
                                        {2048, 16, 8192, 4},             // 32 tiles
                                        {2048, 16, 4096, 1},             // K under 8192
                                        {2240, 16, 8192, 1},             // 35 tiles: more than a quarter
                                        {8192, 16, 8192, 1},             // 128 tiles
                                        {64, 16, 8192, 1},               // a decode row: split_k_for's
                                        {1000, 40, 14336, 1},            // 40 columns: not narrow
                                        {130, 24, 16384, 8}}) {
    EXPECT_EQ(detail::narrow_split_for(bf16_problem(m, n, k), 132), splits) << m << "x" << n << "x" << k;
  }
  EXPECT_EQ(detail::split_k_slice_sku(bf16_problem(1000, 8, 8192)).tile, (Shape3{64, 16, 64}));
  EXPECT_EQ(detail::split_k_slice_sku(bf16_problem(1000, 24, 8192)).tile, (Shape3{64, 32, 64}));
  EXPECT_EQ(detail::split_k_slice_sku(bf16_problem(1000, 40, 8192)).tile, (Shape3{64, 64, 64}));
  const GemmProblem narrow = bf16_problem(1536, 8, 8192);
  const CatalogEntry* slices = detail::split_k_slice_kernel(narrow);
  if (find_in_catalog(detail::split_k_slice_sku(narrow)) != nullptr && detail::narrow_kernel(narrow, kHopper)) {
    ASSERT_NE(slices, nullptr);
    EXPECT_EQ(slices->sku, detail::split_k_slice_sku(narrow));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(narrow, kHopper));
    EXPECT_EQ(plan.split_k(), 4);
    EXPECT_EQ(plan.sku(), detail::split_k_slice_sku(narrow));
    GemmPlanOptions never;
    never.split_k = 1;
    CUACTOR_ASSERT_OK_AND_ASSIGN(unsplit, GemmPlan::make(narrow, kHopper, never));
    EXPECT_EQ(unsplit.split_k(), 1);
    EXPECT_EQ(unsplit.sku().tile, (Shape3{64, 16, 128}));
  } else if (slices != nullptr) {  // the 64-column fallback: forced splits only
    EXPECT_EQ(slices->sku.tile, (Shape3{64, 64, 64}));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(narrow, kHopper));
    EXPECT_EQ(plan.split_k(), 1);
    GemmPlanOptions forced;
    forced.split_k = 2;
    CUACTOR_ASSERT_OK_AND_ASSIGN(split, GemmPlan::make(narrow, kHopper, forced));
    EXPECT_EQ(split.split_k(), 2);
    EXPECT_EQ(split.sku().tile, (Shape3{64, 64, 64}));
  }
}

// In a build with the swapped kernels: decode rows run swapped, split where the grid is very small.
TEST(DensePlan, DecodePlansSwapAndSplit) {
  const GemmProblem narrow = bf16_problem(16, 2048, 8192), tiny = bf16_problem(24, 1024, 11264);
  if (find_in_catalog(detail::swapped_sku(narrow)) == nullptr ||
      find_in_catalog(detail::split_k_slice_sku(tiny, true)) == nullptr)
    GTEST_SKIP() << "no swapped decode kernels in this build";
  CUACTOR_ASSERT_OK_AND_ASSIGN(split, GemmPlan::make(tiny, kHopper));
  EXPECT_TRUE(split.swap_ab());
  EXPECT_EQ(split.split_k(), 8);
  EXPECT_EQ(split.sku(), detail::split_k_slice_sku(tiny, true));
  for (const GemmProblem& p : {narrow, bf16_problem(16, 28672, 8192), bf16_problem(64, 2048, 4096)}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(unsplit, GemmPlan::make(p, kHopper));
    EXPECT_TRUE(unsplit.swap_ab()) << p.m << "x" << p.n;
    EXPECT_EQ(unsplit.split_k(), 1) << p.m << "x" << p.n;
    EXPECT_EQ(unsplit.sku(), detail::swapped_sku(p));
  }
  const GemmProblem wide = bf16_problem(64, 1024, 8192);  // 2 x 16 swapped tiles: 4 slices fill 128 SMs
  CUACTOR_ASSERT_OK_AND_ASSIGN(wide_split, GemmPlan::make(wide, kHopper));
  EXPECT_TRUE(wide_split.swap_ab());
  EXPECT_EQ(wide_split.split_k(), 4);
  EXPECT_EQ(wide_split.sku(), detail::split_k_slice_sku(wide, true));
  // Past 32 rows, where the swapped grid is too large to split, the unswapped split replaces the swap;
  // unless splits are off.
  const GemmProblem rows60 = bf16_problem(60, 1280, 8192);  // 20 weight tiles, 40 swapped ones
  CUACTOR_ASSERT_OK_AND_ASSIGN(unswapped_split, GemmPlan::make(rows60, kHopper));
  EXPECT_FALSE(unswapped_split.swap_ab());
  EXPECT_EQ(unswapped_split.split_k(), 4);
  EXPECT_EQ(unswapped_split.sku(), detail::split_k_slice_sku(rows60, false));
  GemmPlanOptions no_split;
  no_split.split_k = 1;
  CUACTOR_ASSERT_OK_AND_ASSIGN(swapped_whole, GemmPlan::make(rows60, kHopper, no_split));
  EXPECT_TRUE(swapped_whole.swap_ab());
  EXPECT_EQ(swapped_whole.split_k(), 1);
  CUACTOR_ASSERT_OK_AND_ASSIGN(rows64, GemmPlan::make(bf16_problem(64, 5120, 5120), kHopper));
  EXPECT_FALSE(rows64.swap_ab());
  GemmPlanOptions never;
  never.swap_ab = 1;
  CUACTOR_ASSERT_OK_AND_ASSIGN(unswapped, GemmPlan::make(narrow, kHopper, never));
  EXPECT_FALSE(unswapped.swap_ab());
  EXPECT_EQ(unswapped.sku(), detail::split_k_slice_sku(narrow, false));
}

TEST(DensePlan, ProblemHashSeparatesFields) {
  GemmProblem a = bf16_problem(1, 2, 3);
  GemmProblem b = a;
  b.layout_b = MatrixLayout::row;
  EXPECT_NE(hash_value(a), hash_value(b));
  EXPECT_EQ(std::hash<GemmProblem>{}(a), hash_value(bf16_problem(1, 2, 3)));
}

// cuBLAS: the same problem and operands; its own element types, no alignment rules.

GemmProblem f32_problem(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmProblem p = bf16_problem(m, n, k);
  p.a = p.b = p.c = p.d = DType::f32;
  return p;
}

GemmOperands unaligned_operands() {
  GemmOperands o;
  o.a = fake(4);
  o.b = fake(0x1000 + 12);
  o.d = fake_mut(4);
  return o;
}

TEST(DenseCublas, AcceptsOddShapesAndUnalignedPointers) {
  CUACTOR_ASSERT_OK(validate_cublas_gemm(f32_problem(97, 75, 61), unaligned_operands()));
  GemmProblem p = f32_problem(97, 75, 61);
  p.a = p.b = DType::bf16;  // 16-bit inputs may write f32
  CUACTOR_ASSERT_OK(validate_cublas_gemm(p, unaligned_operands()));
  CUACTOR_ASSERT_OK(validate_cublas_gemm(f32_problem(0, 75, 61), GemmOperands{}));  // nothing to compute
}

TEST(DenseCublas, RejectsTypesCublasGemmExDoesNotTake) {
  GemmProblem p = fp8_problem();
  expect_error(validate_cublas_gemm(p, unaligned_operands()), errc::unsupported, "A=e4m3");
  p = f32_problem(8, 8, 8);
  p.b = DType::f16;
  expect_error(validate_cublas_gemm(p, unaligned_operands()), errc::unsupported, "A=f32 B=f16");
  p = f32_problem(8, 8, 8);
  p.c = p.d = DType::f16;  // f32 inputs cannot write f16
  expect_error(validate_cublas_gemm(p, unaligned_operands()), errc::unsupported, "D=f16");
  GemmOperands o = unaligned_operands();
  o.scale_a = static_cast<const float*>(fake());
  expect_error(validate_cublas_gemm(f32_problem(8, 8, 8), o), errc::unsupported, "scale_a is set");
}

TEST(DenseCublas, RejectsBadGeometryNamingTheOperand) {
  const GemmProblem p = f32_problem(64, 48, 32);
  expect_error(validate_cublas_gemm(f32_problem(-1, 48, 32), unaligned_operands()), errc::invalid_argument, "m=-1");
  GemmOperands o = unaligned_operands();
  o.lda = 16;
  expect_error(validate_cublas_gemm(p, o), errc::invalid_argument, "ldA=16 is less than its contiguous extent 32");
  o = unaligned_operands();
  o.b = nullptr;
  expect_error(validate_cublas_gemm(p, o), errc::invalid_argument, "operand B: pointer is null");
  o = unaligned_operands();
  o.beta = 1.0f;
  expect_error(validate_cublas_gemm(p, o), errc::invalid_argument, "C: pointer is null but beta=1");
  GemmProblem batched = p;
  batched.batch = 2;
  o = unaligned_operands();
  o.batch_stride_d = 100;
  expect_error(validate_cublas_gemm(batched, o), errc::invalid_argument, "operand D: batch stride 100");
  o = unaligned_operands();
  o.c = o.d;
  o.ldc = 64;  // in place, but C read at another leading dimension than D is written
  expect_error(validate_cublas_gemm(p, o), errc::invalid_argument, "alias but ldc=64 ldd=48");
}

TEST(DenseCublas, BufferSizesNameTheOperand) {
  const GemmProblem p = f32_problem(64, 48, 32);
  const GemmOperands o = unaligned_operands();
  CUACTOR_ASSERT_OK(check_gemm_buffer_sizes(p, o, 64 * 32 * 4, 48 * 32 * 4, 0, 64 * 48 * 4));
  expect_error(check_gemm_buffer_sizes(p, o, 64 * 32 * 4, 48 * 32 * 4, 0, 40), errc::invalid_argument,
               "operand D (64x48 row-major, ld 48, batch 1): needs 12288 bytes but the buffer has 40");
}

}  // namespace
}  // namespace cuactor::kernels
