// Grouped GEMM rules that need no GPU ([K3], [K5], [E2]): plan-time rejections, every validation
// rule with its message, the workspace layout and the metadata packing.
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>
#include <vector>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/grouped_plan_cache.hpp"
#include "kernels/grouped_instance_abi.h"
#include "kernels/grouped_layout.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

using detail::validate_group;

// Fake device addresses: validation only looks at their values.
const void* at(std::uintptr_t v) {
  return reinterpret_cast<const void*>(v);
}
void* at_mut(std::uintptr_t v) {
  return reinterpret_cast<void*>(v);
}

GroupedGemmSpec hopper_spec(DType t = DType::bf16) {
  GroupedGemmSpec s;
  s.a = s.b = t;
  s.d = t == DType::e4m3 ? DType::bf16 : t;
  s.arch = GpuArch{9, 0, true};
  s.sm_count = 132;
  return s;
}

/// A valid bf16 TN group of m x n x k with tightly packed operands.
GroupedProblem good_group(int m = 100, int n = 256, int k = 128) {
  GroupedProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = at(0x10000);
  p.lda = k;
  p.b = at(0x20000);
  p.ldb = k;
  p.c = at(0x30000);
  p.ldc = n;
  p.d = at_mut(0x40000);
  p.ldd = n;
  return p;
}

void expect_invalid(const Status& s, const std::string& fragment) {
  ASSERT_FALSE(s.has_value()) << "expected a rejection containing: " << fragment;
  EXPECT_EQ(s.error().code(), make_error_code(errc::invalid_argument)) << s.error().to_string();
  EXPECT_NE(s.error().message().find(fragment), std::string::npos) << s.error().message();
}

bool has_grouped_sm90() {
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
    if (e->sku.arch == GpuArch{9, 0, true}) return true;
  return false;
}

TEST(GroupedValidation, AcceptsAGoodGroup) {
  EXPECT_TRUE(validate_group(0, good_group(), hopper_spec(), 0.0f).has_value());
  EXPECT_TRUE(validate_group(0, good_group(1, 8, 8), hopper_spec(), 0.0f).has_value());
}

TEST(GroupedValidation, LeadingDimensionNotMultipleOfAlignmentNamesGroupAndRule) {
  auto p = good_group();
  p.lda = 1001;
  expect_invalid(validate_group(7, p, hopper_spec(), 0.0f), "group 7: lda=1001 is not a multiple of 8 for bf16");
  p = good_group();
  p.ldb = 132;
  expect_invalid(validate_group(2, p, hopper_spec(), 0.0f), "group 2: ldb=132 is not a multiple of 8 for bf16");
  p = good_group();
  p.ldd = 260;
  expect_invalid(validate_group(3, p, hopper_spec(), 0.0f), "group 3: ldd=260 is not a multiple of 8 for bf16");
  p = good_group();
  p.ldc = 264 + 4;
  expect_invalid(validate_group(4, p, hopper_spec(), 1.0f), "group 4: ldc=268 is not a multiple of 8 for bf16");
}

TEST(GroupedValidation, Fp8NeedsSixteenElementMultiples) {
  auto p = good_group(64, 256, 136);  // 136 is a multiple of 8 but not of 16
  p.lda = p.ldb = 136;
  expect_invalid(validate_group(1, p, hopper_spec(DType::e4m3), 0.0f),
                 "group 1: k=136 is not a multiple of 16 for e4m3");
  p = good_group(64, 256, 144);
  p.lda = 152;
  p.ldb = 144;
  expect_invalid(validate_group(5, p, hopper_spec(DType::e4m3), 0.0f),
                 "group 5: lda=152 is not a multiple of 16 for e4m3");
  p.lda = 144;
  EXPECT_TRUE(validate_group(5, p, hopper_spec(DType::e4m3), 0.0f).has_value());
}

TEST(GroupedValidation, LeadingDimensionShorterThanRow) {
  auto p = good_group();
  p.lda = 120;
  expect_invalid(validate_group(0, p, hopper_spec(), 0.0f), "group 0: lda=120 is less than k=128");
  p = good_group();
  p.ldd = 248;
  expect_invalid(validate_group(0, p, hopper_spec(), 0.0f), "group 0: ldd=248 is less than n=256");
}

TEST(GroupedValidation, ContiguousExtentsMustBeSixteenByteMultiples) {
  expect_invalid(validate_group(9, good_group(64, 250, 128), hopper_spec(), 0.0f),
                 "group 9: n=250 is not a multiple of 8 for bf16");
  auto p = good_group(64, 256, 100);
  p.lda = p.ldb = 104;
  expect_invalid(validate_group(6, p, hopper_spec(), 0.0f), "group 6: k=100 is not a multiple of 8 for bf16");
}

TEST(GroupedValidation, BaseAndPointerAlignment) {
  auto p = good_group();
  p.a = at(0x10008);
  expect_invalid(validate_group(3, p, hopper_spec(), 0.0f), "group 3: a=0x10008 is not 16-byte aligned");
  p = good_group();
  p.d = at_mut(0x40002);
  expect_invalid(validate_group(3, p, hopper_spec(), 0.0f), "group 3: d=0x40002 is not 16-byte aligned");
  p = good_group();
  p.b = nullptr;
  expect_invalid(validate_group(8, p, hopper_spec(), 0.0f), "group 8: b is null");
}

TEST(GroupedValidation, BetaNeedsC) {
  auto p = good_group();
  p.c = nullptr;
  EXPECT_TRUE(validate_group(0, p, hopper_spec(), 0.0f).has_value());  // C unread when beta = 0
  expect_invalid(validate_group(4, p, hopper_spec(), 0.5f), "group 4: c is null but beta=0.5 reads C");
}

TEST(GroupedValidation, EmptyGroupsAndKZero) {
  GroupedProblem empty;  // m = n = k = 0, no pointers at all
  EXPECT_TRUE(validate_group(0, empty, hopper_spec(), 1.0f).has_value());
  auto p = good_group(0, 256, 128);
  p.a = nullptr;
  EXPECT_TRUE(validate_group(0, p, hopper_spec(), 0.0f).has_value());
  auto k0 = good_group(64, 256, 0);  // D = beta * C: A and B are never read
  k0.a = k0.b = nullptr;
  EXPECT_TRUE(validate_group(0, k0, hopper_spec(), 2.0f).has_value());
  k0.d = nullptr;
  expect_invalid(validate_group(1, k0, hopper_spec(), 2.0f), "group 1: d is null");
  auto neg = good_group();
  neg.m = -1;
  expect_invalid(validate_group(2, neg, hopper_spec(), 0.0f), "group 2: m=-1");
}

TEST(GroupedValidation, RowMajorBChecksN) {
  auto spec = hopper_spec();
  spec.layout_b = MatrixLayout::row;
  auto p = good_group(64, 256, 128);
  p.ldb = 256;  // K x N row-major
  EXPECT_TRUE(validate_group(0, p, spec, 0.0f).has_value());
  p.ldb = 128;
  expect_invalid(validate_group(1, p, spec, 0.0f), "group 1: ldb=128 is less than n=256");
}

// The packed MoE layout: A and D stacked by row, one N x K weight matrix per group back to back.
TEST(GroupedValidation, PackedDeviceGroupsDescribeTheMoeLayout) {
  const auto* offsets = static_cast<const std::int32_t*>(at(0x50000));
  const DeviceSizedGroups g =
      packed_device_groups(4, offsets, 1024, 256, 128, at(0x10000), at(0x20000), at_mut(0x40000), 264);
  EXPECT_EQ(g.group_count, 4);
  EXPECT_EQ(g.offsets, offsets);
  EXPECT_EQ(g.rows, nullptr);
  EXPECT_EQ(g.capacity_rows, 1024);
  EXPECT_EQ(std::tuple(g.n, g.k, g.lda, g.ldb, g.ldd), std::tuple(256, 128, 128, 128, 264));
  EXPECT_EQ(g.b_group_stride, 256 * 128);
  EXPECT_EQ(g.c, nullptr);
  EXPECT_TRUE(detail::validate_device_sized(g, hopper_spec(), 0.0f).has_value());
}

TEST(GroupedValidation, DeviceSizedRules) {
  // The packed layout with neither rows nor offsets yet.
  DeviceSizedGroups g =
      packed_device_groups(4, nullptr, 1024, 256, 128, at(0x10000), at(0x20000), at_mut(0x40000), 256);
  const auto* rows = static_cast<const std::int32_t*>(at(0x50000));
  expect_invalid(detail::validate_device_sized(g, hopper_spec(), 0.0f), "give exactly one of rows and offsets");
  g.rows = rows;
  EXPECT_TRUE(detail::validate_device_sized(g, hopper_spec(), 0.0f).has_value());
  g.offsets = rows;
  expect_invalid(detail::validate_device_sized(g, hopper_spec(), 0.0f), "give exactly one of rows and offsets");
  g.offsets = nullptr;
  g.b_group_stride = 1000;
  expect_invalid(detail::validate_device_sized(g, hopper_spec(), 0.0f),
                 "b_group_stride=1000 is less than one B matrix");
  g.b_group_stride = 256 * 128;
  expect_invalid(detail::validate_device_sized(g, hopper_spec(), 1.0f), "c is null but beta=1 reads C");
  g.group_count = 0;
  expect_invalid(detail::validate_device_sized(g, hopper_spec(), 0.0f), "group_count=0");
}

TEST(GroupedLayout, RegionsAreAlignedAndScratchLast) {
  const auto l = detail::make_grouped_layout(7, true, true, true, 84480);
  for (std::size_t off :
       {l.shapes, l.ptr_a, l.ptr_b, l.ptr_c, l.ptr_d, l.ld_a, l.ld_b, l.ld_c, l.ld_d, l.k0_rows, l.alpha, l.error_flag})
    EXPECT_EQ(off % 16, 0u);
  EXPECT_GE(l.ptr_a, 7u * 12u);
  EXPECT_LE(l.k0_rows + 7 * 4, l.upload_bytes);
  EXPECT_GE(l.alpha, l.upload_bytes);  // written on the device, never uploaded
  EXPECT_EQ(l.scratch % detail::kWorkspaceAlignment, 0u);
  EXPECT_GT(l.scratch, l.error_flag);
  EXPECT_EQ(l.total, l.scratch + 84480);
  const auto plain = detail::make_grouped_layout(7, false, false, false, 0);
  EXPECT_EQ(plain.k0_rows, detail::GroupedLayout::none);
  EXPECT_EQ(plain.alpha, detail::GroupedLayout::none);
}

TEST(GroupedLayout, PackSkipsEmptyAndKZeroGroupsAndSubstitutesD) {
  std::vector<GroupedProblem> groups{good_group(100, 256, 128), good_group(0, 256, 128), good_group(64, 256, 0)};
  groups[0].c = nullptr;  // beta = 0: C := D
  const auto l = detail::make_grouped_layout(3, true, false, false, 0);
  std::vector<std::byte> image(l.upload_bytes);
  detail::pack_grouped_metadata(groups, l, image);
  auto i32 = [&](std::size_t off, int i) {
    std::int32_t v;
    std::memcpy(&v, image.data() + off + 4 * i, 4);
    return v;
  };
  auto ptr = [&](std::size_t off, int i) {
    const void* v;
    std::memcpy(&v, image.data() + off + sizeof(void*) * i, sizeof(void*));
    return v;
  };
  auto i64 = [&](std::size_t off, int i) {
    std::int64_t v;
    std::memcpy(&v, image.data() + off + 8 * i, 8);
    return v;
  };
  EXPECT_EQ(i32(l.shapes, 0), 100);
  EXPECT_EQ(i32(l.shapes, 1), 256);
  EXPECT_EQ(i32(l.shapes, 2), 128);
  EXPECT_EQ(i32(l.shapes, 3), 0);    // empty group
  EXPECT_EQ(i32(l.shapes, 6), 0);    // K = 0 group: not given to the GEMM kernel ...
  EXPECT_EQ(i32(l.k0_rows, 2), 64);  // ... but to D = beta * C
  EXPECT_EQ(i32(l.k0_rows, 0), 0);
  EXPECT_EQ(ptr(l.ptr_c, 0), groups[0].d);
  EXPECT_EQ(i64(l.ld_c, 0), groups[0].ldd);
  EXPECT_EQ(ptr(l.ptr_a, 0), groups[0].a);
  EXPECT_EQ(i64(l.ld_b, 0), 128);
}

TEST(GroupedPlan, RejectsUnsupportedDtypeArchAndLayout) {
  auto expect_unsupported = [](const GroupedGemmSpec& s, const std::string& fragment) {
    auto plan = GroupedGemmPlan::create(s);
    ASSERT_FALSE(plan.has_value()) << fragment;
    EXPECT_EQ(plan.error().code(), make_error_code(errc::unsupported)) << plan.error().to_string();
    EXPECT_NE(plan.error().message().find(fragment), std::string::npos) << plan.error().message();
  };
  auto fp8_ampere = hopper_spec(DType::e4m3);
  fp8_ampere.arch = GpuArch{8, 0, false};
  expect_unsupported(fp8_ampere, "e4m3 needs sm_89 or newer; device is sm_80");
  auto fp4 = hopper_spec();
  fp4.a = fp4.b = DType::e2m1;
  expect_unsupported(fp4, "e2m1 (fp4) needs sm_100");
  auto mixed = hopper_spec();
  mixed.b = DType::f16;
  expect_unsupported(mixed, "a=bf16 with b=f16");
  auto fp8_nn = hopper_spec(DType::e4m3);
  fp8_nn.layout_b = MatrixLayout::row;
  expect_unsupported(fp8_nn, "not layout_b=row");
  auto fp8_f16 = hopper_spec(DType::e4m3);
  fp8_f16.d = DType::f16;
  expect_unsupported(fp8_f16, "write d=bf16 only, not d=f16");
  auto f64 = hopper_spec();
  f64.a = f64.b = DType::f64;
  expect_unsupported(f64, "a=f64 is not supported");
  auto blackwell_fp8 = hopper_spec(DType::e4m3);
  blackwell_fp8.arch = GpuArch{10, 0, true};  // sm_90a kernels do not run there
  expect_unsupported(blackwell_fp8, "no kernel in this build computes a=e4m3");
  auto sku = hopper_spec();
  GemmSku bogus;
  bogus.family = GemmFamily::grouped;
  bogus.tile = {96, 96, 96};
  sku.sku_override = bogus;
  expect_unsupported(sku, "is not compiled into this build");
}

// Row-wise fp8 scales are the tree mul(mul(acc,rowscale),colscale): its vectors must be given (per packed
// row, per group and column) and it runs on sm_90a only.
TEST(GroupedPlan, RowwiseScalesAreATreeOfRowAndColumnScales) {
  const EpilogueSpec rowwise = rowwise_scaled_epilogue();
  EXPECT_EQ(rowwise.token(), "mul(mul(acc,rowscale),colscale)");
  EXPECT_TRUE(rowwise.uses(EpilogueNode::row_scale) && rowwise.uses(EpilogueNode::col_scale));
  auto ampere = hopper_spec(DType::e4m3);
  ampere.arch = GpuArch{8, 9, false};
  ampere.epilogue = rowwise;
  auto plan = GroupedGemmPlan::create(ampere);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code(), make_error_code(errc::unsupported)) << plan.error().to_string();
  EXPECT_NE(plan.error().message().find("needs an sm_90a device, not sm_89"), std::string::npos)
      << plan.error().message();
  EpilogueOperands missing_col;
  missing_col.row_scale = static_cast<const float*>(test_support::fake());
  test_support::expect_error(check_epilogue_operands(rowwise, missing_col, "grouped GEMM"), errc::invalid_argument,
                             "reads colscale but its pointer is null");
}

TEST(GroupedPlan, RejectsMissingSmCount) {
  auto s = hopper_spec();
  s.sm_count = 0;
  auto plan = GroupedGemmPlan::create(s);
  ASSERT_FALSE(plan.has_value());
  EXPECT_EQ(plan.error().code(), make_error_code(errc::invalid_argument));
  EXPECT_NE(plan.error().message().find("sm_count=0"), std::string::npos);
}

// Shape hints come from users (GroupedGemmPlan's n_hint / k_hint in Python): negative ones are rejected
// naming the hint, before any kernel is looked for.
TEST(GroupedPlan, RejectsNegativeShapeHints) {
  auto n = hopper_spec();
  n.n_hint = -1;
  test_support::expect_error(GroupedGemmPlan::create(n), errc::invalid_argument,
                             "n_hint=-1 must be 0 (unknown) or positive");
  auto k = hopper_spec(DType::e4m3);
  k.k_hint = -4096;
  test_support::expect_error(GroupedGemmPlan::create(k), errc::invalid_argument,
                             "k_hint=-4096 must be 0 (unknown) or positive");
}

TEST(GroupedPlan, ChoosesBySkuShapeHintAndOverride) {
  if (!has_grouped_sm90()) GTEST_SKIP() << "no sm_90a grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  CUACTOR_SKIP_IF_PARTIAL_CATALOG();
  auto large = hopper_spec();
  auto plan = GroupedGemmPlan::create(large);
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  EXPECT_EQ(plan->sku().family, GemmFamily::grouped);
  EXPECT_EQ(plan->sku().schedule, GemmSchedule::cooperative);
  EXPECT_EQ(plan->sku().arch, (GpuArch{9, 0, true}));
  auto decode = hopper_spec();
  decode.rows_per_group_hint = 16;
  auto small = GroupedGemmPlan::create(decode);
  ASSERT_TRUE(small.has_value()) << small.error().to_string();
  EXPECT_EQ(small->sku().schedule, GemmSchedule::pingpong);
  auto fp8 = GroupedGemmPlan::create(hopper_spec(DType::e4m3));
  ASSERT_TRUE(fp8.has_value()) << fp8.error().to_string();
  EXPECT_EQ(fp8->sku().schedule, GemmSchedule::cooperative_fp8_fast_accum);
  // Medium groups (about a hundred rows, N and K <= 4096): the pingpong 64x256 kernel of each type.
  for (DType t : {DType::bf16, DType::f16, DType::e4m3}) {
    auto medium = hopper_spec(t);
    medium.rows_per_group_hint = 100;
    medium.n_hint = 1536;
    medium.k_hint = 2048;
    auto plan_medium = GroupedGemmPlan::create(medium);
    ASSERT_TRUE(plan_medium.has_value()) << plan_medium.error().to_string();
    EXPECT_TRUE(plan_medium->sku().schedule == GemmSchedule::pingpong ||
                plan_medium->sku().schedule == GemmSchedule::pingpong_fp8_fast_accum)
        << plan_medium->sku().to_string();
    EXPECT_EQ(plan_medium->sku().tile.n, 256) << plan_medium->sku().to_string();
    // Wider than 4096: the large-M kernel again.
    medium.n_hint = 14336;
    auto wide = GroupedGemmPlan::create(medium);
    ASSERT_TRUE(wide.has_value()) << wide.error().to_string();
    EXPECT_FALSE(wide->sku().schedule == GemmSchedule::pingpong ||
                 wide->sku().schedule == GemmSchedule::pingpong_fp8_fast_accum)
        << wide->sku().to_string();
  }
  auto pinned = hopper_spec();
  pinned.sku_override = small->sku();
  auto overridden = GroupedGemmPlan::create(pinned);
  ASSERT_TRUE(overridden.has_value()) << overridden.error().to_string();
  EXPECT_EQ(overridden->sku(), small->sku());
  auto wrong = hopper_spec(DType::f16);
  wrong.sku_override = small->sku();  // a bf16 SKU for an f16 spec
  auto mismatch = GroupedGemmPlan::create(wrong);
  ASSERT_FALSE(mismatch.has_value());
  EXPECT_EQ(mismatch.error().code(), make_error_code(errc::unsupported));
}

TEST(GroupedPlan, SizeClassesByRowsAndShape) {
  GroupedGemmSpec s;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::large);  // nothing known
  s.rows_per_group_hint = 1;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::decode);
  s.rows_per_group_hint = 64;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::decode);
  s.rows_per_group_hint = 65;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::large) << "medium needs N and K";
  s.n_hint = 4096;
  s.k_hint = 4096;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::medium);
  s.rows_per_group_hint = 192;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::medium);
  s.rows_per_group_hint = 193;  // 16-bit: the cooperative 128x256 kernel from here
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::large);
  GroupedGemmSpec fp8 = s;
  fp8.a = fp8.b = DType::e4m3;
  EXPECT_EQ(grouped_size_class(fp8), GroupedSizeClass::medium);
  fp8.rows_per_group_hint = 256;
  EXPECT_EQ(grouped_size_class(fp8), GroupedSizeClass::medium);
  fp8.rows_per_group_hint = 257;
  EXPECT_EQ(grouped_size_class(fp8), GroupedSizeClass::large);
  fp8.rows_per_group_hint = 128;  // e4m3: medium up to N and K of 8192
  fp8.k_hint = 8192;
  EXPECT_EQ(grouped_size_class(fp8), GroupedSizeClass::medium);
  fp8.n_hint = 8193;
  EXPECT_EQ(grouped_size_class(fp8), GroupedSizeClass::large);
  s.rows_per_group_hint = 128;
  s.k_hint = 4097;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::large);
  s.k_hint = 1024;
  s.n_hint = 0;
  EXPECT_EQ(grouped_size_class(s), GroupedSizeClass::large);
}

TEST(GroupedPlanCache, KeysOnTheEpilogueTreeAndTheShapeClass) {
  if (!has_grouped_sm90()) GTEST_SKIP() << "no sm_90a grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  CUACTOR_SKIP_IF_PARTIAL_CATALOG();
  GroupedPlanCache cache;
  auto plain = cache.get(hopper_spec());
  ASSERT_TRUE(plain.has_value()) << plain.error().to_string();
  auto weighted_spec = hopper_spec();
  weighted_spec.epilogue = epi::mul(epi::acc(), epi::row_scale());
  auto weighted = cache.get(weighted_spec);
  ASSERT_TRUE(weighted.has_value()) << weighted.error().to_string();
  EXPECT_NE((*plain)->sku(), (*weighted)->sku());  // the tree is part of the SKU, hence of the key
  EXPECT_EQ((*weighted)->sku().epilogue, weighted_spec.epilogue);
  auto large_hint = hopper_spec();
  large_hint.rows_per_group_hint = 4096;
  auto again = cache.get(large_hint);  // the same large-M class: the same plan object
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->get(), plain->get());
  auto decode = hopper_spec();
  decode.rows_per_group_hint = 16;
  auto small = cache.get(decode);
  ASSERT_TRUE(small.has_value());
  EXPECT_NE(small->get(), plain->get());
  auto medium_spec = hopper_spec();
  medium_spec.rows_per_group_hint = 100;
  medium_spec.n_hint = medium_spec.k_hint = 2048;
  auto medium = cache.get(medium_spec);
  ASSERT_TRUE(medium.has_value());
  EXPECT_NE(medium->get(), plain->get());
  EXPECT_NE(medium->get(), small->get());
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_EQ(cache.stats().hits, 1u);
}

TEST(GroupedPlan, AmpereAndAdaGetTheSm80KernelsAndHopperMayToo) {
  const GemmSku* sm80 = nullptr;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
    if (e->sku.arch == GpuArch{8, 0, false} && e->sku.a == DType::bf16) sm80 = &e->sku;
  if (sm80 == nullptr) GTEST_SKIP() << "no sm_80 grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  auto ada = hopper_spec();
  ada.arch = GpuArch{8, 9, false};
  auto plan = GroupedGemmPlan::create(ada);
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  EXPECT_EQ(plan->sku(), *sm80);
  EXPECT_EQ(plan->sku().schedule, GemmSchedule::multistage);
  EXPECT_TRUE(grouped_sku_runs_on(*sm80, GpuArch{9, 0, true}));  // compiled to sm_90 SASS as well
  EXPECT_FALSE(grouped_sku_runs_on(*sm80, GpuArch{7, 5, false}));
  auto hopper = hopper_spec();
  hopper.sku_override = *sm80;
  auto forced = GroupedGemmPlan::create(hopper);
  ASSERT_TRUE(forced.has_value()) << forced.error().to_string();
  EXPECT_EQ(forced->sku(), *sm80);
  auto turing = hopper_spec();
  turing.arch = GpuArch{7, 5, false};
  auto none = GroupedGemmPlan::create(turing);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code(), make_error_code(errc::unsupported));
}

TEST(GroupedPlan, PrepareRejectsBeforeTouchingTheDevice) {
  if (!has_grouped_sm90()) GTEST_SKIP() << "no sm_90a grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  auto plan = GroupedGemmPlan::create(hopper_spec());
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  auto none = plan->prepare(std::span<const GroupedProblem>{});
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code(), make_error_code(errc::invalid_argument));
  std::vector<GroupedProblem> groups(12, good_group());
  groups[7].lda = 1001;
  auto bad = plan->prepare(groups);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message(), "group 7: lda=1001 is not a multiple of 8 for bf16");
  GroupedScalars fp8_scales;
  fp8_scales.scale_b = static_cast<const float*>(at(0x1000));
  auto scaled = plan->prepare(std::span<const GroupedProblem>(groups.data(), 7), fp8_scales);
  ASSERT_FALSE(scaled.has_value());
  EXPECT_EQ(scaled.error().code(), make_error_code(errc::invalid_argument));
}

TEST(GroupedInstances, ScratchIsPerSmTmaDescriptors) {
  if (!has_grouped_sm90()) GTEST_SKIP() << "no sm_90a grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped)) {
    if (!e->sku.arch.arch_specific) continue;
    EXPECT_TRUE(check_instance_abi(*e->instance, sizeof(cuactor_grouped_args)).has_value());
    cuactor_grouped_args args{};
    args.group_count = 1;
    args.sm_count = 132;
    EXPECT_EQ(e->instance->workspace_size(&args), 84480u) << e->sku.to_string();  // 132 x 5 x 128 B
    EXPECT_EQ(e->instance->can_implement(&args), CUACTOR_KERNEL_OK) << e->sku.to_string();
  }
}

}  // namespace
}  // namespace cuactor::kernels
