// Epilogue trees ([K8]) without a device: tokens, builders, symbol and type rendering, the SKU
// round trip, and the plan rules that reject trees and their operands.
#include "cuactor/kernels/epilogue.hpp"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/sku.hpp"
#include "kernels/instance_abi.h"
#include "support/fake_dense_instance.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

using test_support::expect_error;
using test_support::fake;
using test_support::fake_mut;

constexpr GpuArch kHopper{9, 0, true};
constexpr GpuArch kAmpere{8, 0, false};

EpilogueSpec parsed(std::string_view token) {
  auto e = EpilogueSpec::parse(token);
  EXPECT_TRUE(e.has_value()) << token << ": " << (e ? "" : e.error().message());
  return e ? *e : EpilogueSpec{};
}

TEST(EpilogueSpec, TokensRoundTrip) {
  for (std::string_view token :
       {"linear_combination", "scaled_linear_combination", "acc", "relu(acc)", "silu(add(acc,colbias))",
        "gelu(fma(alpha,acc,rowbias))", "gelutanh(add(mul(alpha,acc),mul(beta,c)))",
        "add(mul(mul(acc,rowscale),colscale),colbias)", "amax(clamp(sigmoid(acc)))", "mul(acc,rowscale)",
        "rowsum(gelu(aux(add(acc,colbias))))", "amax(aux(rowsum(acc)))", "swiglu(acc)", "swiglu(add(acc,colbias))"}) {
    SCOPED_TRACE(token);
    EXPECT_EQ(parsed(token).token(), token);
  }
}

TEST(EpilogueSpec, BuildersEqualParsedTokens) {
  using namespace epi;
  EXPECT_EQ(apply(EpilogueNode::silu, add(acc(), col_bias())), parsed("silu(add(acc,colbias))"));
  EXPECT_EQ(add(mul(mul(acc(), row_scale()), col_scale()), col_bias()),
            parsed("add(mul(mul(acc,rowscale),colscale),colbias)"));
  EXPECT_EQ(apply(EpilogueNode::amax, fma(alpha(), acc(), c())), parsed("amax(fma(alpha,acc,c))"));
  EXPECT_TRUE(apply(EpilogueNode::relu, acc()).check().has_value());
  EXPECT_EQ(EpilogueSpec(GemmEpilogue::linear_combination), parsed("linear_combination"));
  EXPECT_NE(parsed("relu(acc)"), parsed("gelu(acc)"));
  EXPECT_NE(hash_value(parsed("add(acc,colbias)")), hash_value(parsed("add(acc,rowbias)")));
}

TEST(EpilogueSpec, RendersSymbolAndCxxType) {
  const EpilogueSpec e = parsed("silu(fma(acc,rowscale,colbias))");
  EXPECT_EQ(e.symbol_key(), "silu_fma_acc_rowscale_colbias");
  EXPECT_EQ(e.cxx_type(),
            "cuactor::kernels::tags::silu<cuactor::kernels::tags::fma<cuactor::kernels::tags::acc,"
            "cuactor::kernels::tags::rowscale,cuactor::kernels::tags::colbias>>");
  EXPECT_EQ(EpilogueSpec().symbol_key(), "linear_combination");
  EXPECT_EQ(EpilogueSpec().cxx_type(), "cuactor::kernels::tags::linear_combination");
  EXPECT_TRUE(e.uses(EpilogueNode::row_scale));
  EXPECT_FALSE(e.uses(EpilogueNode::c));
  EXPECT_TRUE(EpilogueSpec().uses(EpilogueNode::c));
}

TEST(EpilogueSpec, RejectsMalformedTokensNamingTheRule) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"", "expected a node name"},
      {"bias(acc)", "'bias' is not an epilogue node"},
      {"relu", "takes 1 operand(s)"},
      {"relu(acc", "expected ')'"},
      {"add(acc)", "expected ','"},
      {"add(acc,c,c)", "expected ')'"},
      {"relu(acc))", "trailing text"},
      {"acc acc", "trailing text"},
      {"relu(colbias)", "never reads the accumulator"},
      {"amax(amax(acc))", "2 amax nodes"},
      {"gelu(aux(add(aux(acc),colbias)))", "2 aux nodes; one aux output"},
      {"rowsum(relu(rowsum(acc)))", "2 rowsum nodes; one rowsum output"},
      {"Relu(acc)", "expected a node name"},
      {"linear_combination(acc)", "'linear' is not an epilogue node"},
  };
  for (const auto& [token, rule] : cases) {
    SCOPED_TRACE(token);
    expect_error(EpilogueSpec::parse(token), errc::invalid_argument, std::string(rule));
  }
  std::string deep = "acc";
  for (int i = 0; i < 70; ++i) deep = "relu(" + deep + ")";
  expect_error(EpilogueSpec::parse(deep), errc::invalid_argument, "more than 64 nodes");
  EpilogueSpec built = epi::acc();
  for (int i = 0; i < 70; ++i) built = epi::apply(EpilogueNode::relu, built);
  expect_error(built.check(), errc::invalid_argument, "more than 64 nodes");
  // A preset used as a builder's child leaves the tree short.
  expect_error(epi::add(epi::acc(), EpilogueSpec(GemmEpilogue::linear_combination)).check(), errc::invalid_argument,
               "short of 1 operand");
}

TEST(EpilogueSpec, IsPartOfTheSkuIdentity) {
  const std::string text =
      "dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:2x1x1:s0:cooperative:silu(add(acc,colbias))";
  auto sku = GemmSku::parse(text);
  ASSERT_TRUE(sku.has_value()) << sku.error().message();
  EXPECT_EQ(sku->to_string(), text);
  EXPECT_EQ(
      sku->symbol_name(),
      "cuactor_gemm_dense_sm90a_bf16_bf16_bf16_bf16_f32_rcr_128x256x64_2x1x1_s0_cooperative_silu_add_acc_colbias");
  GemmSku other = *sku;
  other.epilogue = parsed("relu(add(acc,colbias))");
  EXPECT_NE(*sku, other);
  expect_error(GemmSku::parse("dense:sm_90a:bf16,bf16,bf16,bf16,f32:row,col,row:128x256x64:2x1x1:s0:cooperative:"
                              "silu(add(acc,bias))"),
               errc::invalid_argument, "'bias' is not an epilogue node");
}

// --- plan rules ------------------------------------------------------------------------------

using FakeKernel = test_support::FakeDenseKernel;
using test_support::fake_dense_instance;

GemmProblem tree_problem(std::string_view token) {
  GemmProblem p;
  p.m = 256;
  p.n = 512;
  p.k = 128;
  p.epilogue = parsed(token);
  return p;
}

Result<GemmPlan> fake_plan(const GemmProblem& p) {
  auto sku = GemmPlan::sku_for(p, kHopper);
  if (!sku) return fail(sku.error());
  return GemmPlan::with_instance(p, kHopper, *sku, fake_dense_instance(), nullptr, PlanSource::heuristic);
}

GemmOperands operands() {
  GemmOperands o;
  o.a = fake();
  o.b = fake(0x10000);
  o.d = fake_mut();
  return o;
}

TEST(EpiloguePlan, SkuForCarriesTheTreeAndPicksATile) {
  GemmProblem prefill = tree_problem("silu(add(acc,colbias))");
  prefill.m = prefill.n = 4096;
  auto big = GemmPlan::sku_for(prefill, kHopper);
  ASSERT_TRUE(big.has_value()) << big.error().message();
  EXPECT_EQ(big->epilogue.token(), "silu(add(acc,colbias))");
  // Pingpong 128x128: one warpgroup's epilogue under the other's mainloop.
  EXPECT_EQ(big->schedule, GemmSchedule::pingpong);
  EXPECT_EQ(big->tile, (Shape3{128, 128, 64}));
  EXPECT_EQ(big->cluster, (Shape3{2, 1, 1}));
  GemmProblem decode = tree_problem("silu(add(acc,colbias))");
  decode.m = 16;
  decode.n = 1024;
  auto small = GemmPlan::sku_for(decode, kHopper);
  ASSERT_TRUE(small.has_value());
  EXPECT_EQ(small->schedule, GemmSchedule::pingpong);
}

// Trees over at most 32 columns (a router's logits with a bias) take the narrow-column tile of the
// preset plans (64 rows, 16 columns, 32 past 16, pingpong, no cluster), not a 64-column one; wider,
// batched, other layouts and fp8 keep the cost comparison.
TEST(EpiloguePlan, SkuForGivesTreesOfFewColumnsTheNarrowTile) {
  for (const auto& [n, tile_n] : {std::pair{8, 16}, std::pair{16, 16}, std::pair{24, 32}, std::pair{32, 32}}) {
    GemmProblem router = tree_problem("add(acc,colbias)");
    router.m = 8192;
    router.n = n;
    router.k = 4096;
    auto sku = GemmPlan::sku_for(router, kHopper);
    ASSERT_TRUE(sku.has_value()) << sku.error().message();
    EXPECT_EQ(sku->tile, (Shape3{64, tile_n, 128})) << n;
    EXPECT_EQ(sku->schedule, GemmSchedule::pingpong) << n;
    EXPECT_EQ(sku->cluster, (Shape3{1, 1, 1})) << n;
    EXPECT_EQ(sku->epilogue.token(), "add(acc,colbias)");
  }
  const auto tile_n = [](GemmProblem p) {
    auto sku = GemmPlan::sku_for(p, kHopper);
    EXPECT_TRUE(sku.has_value()) << sku.error().message();
    return sku ? sku->tile.n : 0;
  };
  GemmProblem base = tree_problem("add(acc,colbias)");
  base.m = 8192;
  base.n = 32;
  base.k = 4096;
  GemmProblem wide = base;
  wide.n = 40;
  EXPECT_GE(tile_n(wide), 64);
  GemmProblem batched = base;
  batched.batch = 2;
  EXPECT_GE(tile_n(batched), 64);
  GemmProblem b_row = base;
  b_row.layout_b = MatrixLayout::row;
  EXPECT_GE(tile_n(b_row), 64);
  GemmProblem f32_out = base;
  f32_out.c = f32_out.d = DType::f32;
  EXPECT_GE(tile_n(f32_out), 64);
  GemmProblem aux = base;
  aux.epilogue = parsed("relu(aux(add(acc,colbias)))");
  EXPECT_GE(tile_n(aux), 64);
  GemmProblem fp8 = tree_problem("mul(mul(acc,rowscale),colscale)");  // row-wise scaling
  fp8.m = 8192;
  fp8.n = 32;
  fp8.k = 4096;
  fp8.a = fp8.b = DType::e4m3;
  EXPECT_GE(tile_n(fp8), 64);
}

/// Runs `plan` (made over fake_dense_instance()) on fake operand pointers, with `scale_a` if given; the
/// kernel's arguments land in FakeKernel::last (cleared first, programmatic_launch to -1).
bool run_fake(const GemmPlan& plan, const float* scale_a = nullptr) {
  GemmOperands o;
  o.a = fake();
  o.b = fake(0x1000000);
  o.d = fake_mut(0x10000000);
  o.scale_a = scale_a;
  FakeKernel::last = {};
  FakeKernel::last.programmatic_launch = -1;
  return plan.run(o, nullptr, 0, nullptr).has_value();
}

// The heuristic's 16-bit plans of 128-row sm_90a tiles group tiles along N by the widest swizzle that
// pads their grid by at most 3% (CUTLASS runs the padding tiles); callers' settings, tuned plans and
// the other tiles keep theirs.
TEST(DensePlanRasterisation, LargeTilesSwizzleAlongNUnlessSet) {
  const auto problem = [](std::int64_t m, std::int64_t n) {
    GemmProblem p;
    p.m = m;
    p.n = n;
    p.k = 512;
    return p;
  };
  GemmSku large = dense_sku_for(problem(1, 1));
  large.schedule = GemmSchedule::pingpong;
  large.tile = {128, 128, 64};
  large.cluster = {2, 1, 1};
  GemmSku small = large;
  small.tile = {64, 128, 64};
  small.cluster = {1, 1, 1};
  GemmPlanOptions caller;
  caller.max_swizzle = 2;
  struct Case {
    GemmProblem p;
    GemmSku sku;
    PlanSource source;
    GemmPlanOptions options;
    int swizzle, raster;
  };
  for (const Case& c : {
           Case{problem(4096, 4096), large, PlanSource::heuristic, {}, 8, 2},  // 32 x 32 tiles: no padding
           Case{problem(1000, 3000), large, PlanSource::heuristic, {}, 4, 2},  // 8 x 24: 8 would pad M to 16
           Case{problem(2048, 2056), large, PlanSource::heuristic, {}, 0, 0},  // 16 x 17: even 2 pads 6%
           Case{problem(4096, 4096), large, PlanSource::tuned, {}, 0, 0},
           Case{problem(4096, 4096), large, PlanSource::heuristic, caller, 2, 0},
           Case{problem(4096, 4096), small, PlanSource::heuristic, {}, 0, 0},
       }) {
    auto plan = GemmPlan::with_instance(c.p, kHopper, c.sku, fake_dense_instance(), nullptr, c.source, c.options);
    ASSERT_TRUE(plan.has_value()) << plan.error().message();
    ASSERT_TRUE(run_fake(*plan)) << c.sku.to_string();
    const std::string what = std::to_string(c.p.m) + "x" + std::to_string(c.p.n) + " " + c.sku.to_string() + " " +
                             std::string(name(c.source));
    EXPECT_EQ(FakeKernel::last.max_swizzle, c.swizzle) << what;
    EXPECT_EQ(FakeKernel::last.raster_order, c.raster) << what;
    EXPECT_EQ(plan->max_swizzle(), c.swizzle) << what;
  }
}

// Plans launch their kernel as a programmatic dependent (float32 outputs, a split plan's slices among
// them, included) unless the options say not to or the run passes device scales (read before the
// kernel's wait); the plan cache keeps the two option values apart.
TEST(DensePlanLaunch, ProgrammaticUnlessDisabledOrDeviceScales) {
  GemmSku large = dense_sku_for(GemmProblem{});
  large.schedule = GemmSchedule::pingpong;
  large.tile = {128, 128, 64};
  large.cluster = {2, 1, 1};
  GemmPlanOptions plain;
  plain.programmatic_launch = false;
  for (const auto& [options, out, expected] :
       {std::tuple{GemmPlanOptions{}, DType::bf16, 1}, {plain, DType::bf16, 0}, {GemmPlanOptions{}, DType::f32, 1}}) {
    GemmProblem p;
    p.m = p.n = p.k = 256;
    p.c = p.d = out;
    GemmSku sku = large;
    sku.c = sku.d = out;
    auto plan =
        GemmPlan::with_instance(p, kHopper, sku, fake_dense_instance(), nullptr, PlanSource::heuristic, options);
    ASSERT_TRUE(plan.has_value()) << plan.error().message();
    ASSERT_TRUE(run_fake(*plan));
    EXPECT_EQ(FakeKernel::last.programmatic_launch, expected)
        << "programmatic_launch=" << options.programmatic_launch << " D " << name(out);
  }
  GemmProblem scaled;
  scaled.m = scaled.n = scaled.k = 256;
  scaled.a = scaled.b = DType::e4m3;
  scaled.epilogue = GemmEpilogue::scaled_linear_combination;
  GemmSku fp8 = large;
  fp8.a = fp8.b = DType::e4m3;
  fp8.epilogue = scaled.epilogue;
  auto plan = GemmPlan::with_instance(scaled, kHopper, fp8, fake_dense_instance(), nullptr, PlanSource::heuristic);
  ASSERT_TRUE(plan.has_value()) << plan.error().message();
  ASSERT_TRUE(run_fake(*plan));
  EXPECT_EQ(FakeKernel::last.programmatic_launch, 1) << "no device scales";
  ASSERT_TRUE(run_fake(*plan, static_cast<const float*>(fake(0x20000000))));
  EXPECT_EQ(FakeKernel::last.programmatic_launch, 0) << "scale_a is read before the wait";
  int made = 0;
  GemmPlanCache cache(4, [&](const GemmProblem& problem, GpuArch arch, const GemmPlanOptions& options) {
    ++made;
    return GemmPlan::with_instance(problem, arch, large, fake_dense_instance(), nullptr, PlanSource::heuristic,
                                   options);
  });
  GemmProblem p;
  p.m = p.n = p.k = 256;
  ASSERT_TRUE(cache.get(p, kHopper).has_value());
  ASSERT_TRUE(cache.get(p, kHopper, plain).has_value());
  ASSERT_TRUE(cache.get(p, kHopper).has_value());
  EXPECT_EQ(made, 2);
}

TEST(EpiloguePlan, RejectsTreesOffHopperAndFp8Biases) {
  expect_error(GemmPlan::make(tree_problem("relu(acc)"), kAmpere), errc::unsupported, "needs an sm_90a device");
  expect_error(GemmPlan::sku_for(tree_problem("relu(acc)"), kAmpere), errc::unsupported, "'relu(acc)'");
  GemmProblem p = tree_problem("add(acc,colbias)");
  p.a = p.b = p.c = DType::e4m3;
  expect_error(GemmPlan::make(p, kHopper), errc::unsupported, "bias vectors take C's dtype");
  // fp8 with a tree of row / column scales is a valid problem (row-wise scaling).
  GemmProblem rowwise = tree_problem("mul(mul(acc,rowscale),colscale)");
  rowwise.a = rowwise.b = DType::e4m3;
  EXPECT_TRUE(GemmPlan::sku_for(rowwise, kHopper).has_value());
}

TEST(EpiloguePlan, ValidatesTreeOperands) {
  auto plan = fake_plan(tree_problem("silu(fma(acc,rowscale,colbias))"));
  ASSERT_TRUE(plan.has_value()) << plan.error().message();
  GemmOperands o = operands();
  expect_error(plan->validate(o), errc::invalid_argument, "reads rowscale but its pointer is null");
  o.epilogue.row_scale = static_cast<const float*>(fake(0x20000));
  expect_error(plan->validate(o), errc::invalid_argument, "reads colbias");
  o.epilogue.col_bias = fake(0x30008);
  expect_error(plan->validate(o), errc::invalid_argument, "colbias at");
  o.epilogue.col_bias = fake(0x30000);
  EXPECT_TRUE(plan->validate(o).has_value());
  o.epilogue.amax = static_cast<float*>(fake_mut(0x40000));
  expect_error(plan->validate(o), errc::invalid_argument, "amax is set but the epilogue");
  o.epilogue.amax = nullptr;
  o.c = fake(0x50000);
  expect_error(plan->validate(o), errc::invalid_argument, "does not read it");
  o.c = nullptr;
  o.scale_a = static_cast<const float*>(fake(0x60000));
  expect_error(plan->validate(o), errc::invalid_argument, "no per-tensor scales");
}

TEST(EpiloguePlan, ValidatesCAndClampOfTrees) {
  auto plan = fake_plan(tree_problem("clamp(fma(beta,c,acc))"));
  ASSERT_TRUE(plan.has_value()) << plan.error().message();
  GemmOperands o = operands();
  expect_error(plan->validate(o), errc::invalid_argument, "pointer is null but the epilogue");
  o.c = fake(0x50000);
  o.beta = 0.5f;
  EXPECT_TRUE(plan->validate(o).has_value());
  o.epilogue.clamp_lo = 1.0f;
  o.epilogue.clamp_hi = -1.0f;
  expect_error(plan->validate(o), errc::invalid_argument, "clamp bounds");
}

TEST(EpiloguePlan, ValidatesSideOutputs) {
  auto plan = fake_plan(tree_problem("rowsum(gelu(aux(add(acc,colbias))))"));
  ASSERT_TRUE(plan.has_value()) << plan.error().message();
  GemmOperands o = operands();
  o.epilogue.col_bias = fake(0x30000);
  expect_error(plan->validate(o), errc::invalid_argument, "reads aux but its pointer is null");
  o.epilogue.aux = fake_mut(0x70008);
  expect_error(plan->validate(o), errc::invalid_argument, "aux at");
  o.epilogue.aux = fake_mut();  // D's address
  expect_error(plan->validate(o), errc::invalid_argument, "reads rowsum but its pointer is null");
  o.epilogue.row_sum = static_cast<float*>(fake_mut(0x200004));
  expect_error(plan->validate(o), errc::invalid_argument, "rowsum at");
  o.epilogue.row_sum = static_cast<float*>(fake_mut(0x200000));
  // Side outputs need memory of their own: D is 256 x 512 bf16 at fake_mut() (0x40000 bytes), A and B
  // lie at fake() and fake(0x10000).
  expect_error(plan->validate(o), errc::invalid_argument, "the side output aux (262144 bytes at");
  o.epilogue.aux = fake_mut(0x3fff0);  // the last 16 bytes of D
  expect_error(plan->validate(o), errc::invalid_argument, "overlaps D (262144 bytes");
  o.epilogue.aux = fake_mut(0x70000);
  o.epilogue.row_sum = static_cast<float*>(fake_mut(0xaff00));  // inside aux's last row
  expect_error(plan->validate(o), errc::invalid_argument, "the side output row_sum (1024 bytes at");
  o.epilogue.row_sum = static_cast<float*>(const_cast<void*>(fake(0x2fc00)));  // over B's end
  expect_error(plan->validate(o), errc::invalid_argument, "overlaps B");
  o.epilogue.row_sum = static_cast<float*>(fake_mut(0x200000));
  o.epilogue.aux = fake_mut(0x40000);  // right after D
  EXPECT_TRUE(plan->validate(o).has_value());
  o.epilogue.aux = fake_mut(0x70000);
  // aux shares D's leading dimension and batch stride: the kernel receives D's.
  o.ldd = 516;
  expect_error(plan->validate(o), errc::invalid_argument, "ldD=516 is not a multiple of 8");
  o.ldd = 520;  // D and aux now span 0x41000 - 0x10 bytes each: still apart
  EXPECT_TRUE(plan->validate(o).has_value());
  ASSERT_TRUE(plan->run(o, nullptr, 0, nullptr).has_value());
  EXPECT_EQ(FakeKernel::last.epilogue.aux, o.epilogue.aux);
  EXPECT_EQ(FakeKernel::last.epilogue.row_sum, o.epilogue.row_sum);
  EXPECT_EQ(FakeKernel::last.ldd, 520);
  // A tree without side outputs takes none.
  auto plain = fake_plan(tree_problem("gelu(add(acc,colbias))"));
  ASSERT_TRUE(plain.has_value()) << plain.error().message();
  GemmOperands p = operands();
  p.epilogue.col_bias = fake(0x30000);
  p.epilogue.aux = fake_mut(0x70000);
  expect_error(plain->validate(p), errc::invalid_argument, "aux is set but the epilogue");
  p.epilogue.aux = nullptr;
  p.epilogue.row_sum = static_cast<float*>(fake_mut(0x80000));
  expect_error(plain->validate(p), errc::invalid_argument, "rowsum is set but the epilogue");
}

TEST(EpilogueSpec, NamesTheSideOutputsOnlyDenseGemmWrites) {
  EXPECT_EQ(dense_only_output(parsed("silu(add(acc,colbias))")), std::nullopt);
  EXPECT_EQ(dense_only_output(EpilogueSpec()), std::nullopt);
  EXPECT_EQ(dense_only_output(parsed("gelu(aux(acc))")), EpilogueNode::aux);
  EXPECT_EQ(dense_only_output(parsed("rowsum(acc)")), EpilogueNode::row_sum);
  EXPECT_EQ(dense_only_output(parsed("amax(acc)")), EpilogueNode::amax);
}

TEST(EpilogueSpec, SwigluIsARootThatHalvesD) {
  const EpilogueSpec root = parsed("swiglu(mul(acc,rowscale))");
  EXPECT_TRUE(pairs_columns(root));
  EXPECT_EQ(output_columns(root, 2 * 1536), 1536);
  EXPECT_FALSE(pairs_columns(parsed("silu(acc)")));
  EXPECT_FALSE(pairs_columns(EpilogueSpec()));
  EXPECT_EQ(output_columns(parsed("silu(acc)"), 272), 272);
  EXPECT_EQ(dense_only_output(root), std::nullopt);
  EXPECT_EQ(root.cxx_type(),
            "cuactor::kernels::tags::swiglu<cuactor::kernels::tags::mul<cuactor::kernels::tags::acc,"
            "cuactor::kernels::tags::rowscale>>");
  // Anywhere but the root it would have to pair columns of an inner value: rejected, naming the node.
  expect_error(EpilogueSpec::parse("relu(swiglu(acc))"), errc::invalid_argument, "swiglu (node 1) must be the root");
  expect_error(EpilogueSpec::parse("swiglu(swiglu(acc))"), errc::invalid_argument, "must be the root");
  expect_error(epi::apply(EpilogueNode::gelu, epi::apply(EpilogueNode::swiglu, epi::acc())).check(),
               errc::invalid_argument, "must be the root");
  // Dense GEMM has no swiglu kernel: rejected at plan time.
  expect_error(GemmPlan::sku_for(tree_problem("swiglu(acc)"), kHopper), errc::unsupported,
               "swiglu is supported for grouped GEMM only");
}

TEST(EpiloguePlan, RunPassesTreeOperandsThroughTheAbi) {
  auto plan = fake_plan(tree_problem("amax(clamp(add(mul(alpha,acc),colbias)))"));
  ASSERT_TRUE(plan.has_value()) << plan.error().message();
  GemmOperands o = operands();
  o.alpha = 0.25f;
  o.epilogue.col_bias = fake(0x30000);
  o.epilogue.amax = static_cast<float*>(fake_mut(0x40000));
  o.epilogue.clamp_lo = -2.0f;
  o.epilogue.clamp_hi = 3.0f;
  ASSERT_TRUE(plan->run(o, nullptr, 0, nullptr).has_value());
  EXPECT_EQ(FakeKernel::last.epilogue.col_bias, o.epilogue.col_bias);
  EXPECT_EQ(FakeKernel::last.epilogue.amax, o.epilogue.amax);
  EXPECT_EQ(FakeKernel::last.epilogue.clamp_lo, -2.0f);
  EXPECT_EQ(FakeKernel::last.epilogue.clamp_hi, 3.0f);
  EXPECT_EQ(FakeKernel::last.alpha, 0.25f);
  EXPECT_EQ(FakeKernel::last.epilogue.row_scale, nullptr);
}

}  // namespace
}  // namespace cuactor::kernels
