// Grouped epilogue trees and the expert FFN without a device: the rules that reject specs and
// operands, and the per-group vector arrays of the workspace layout.
#include "cuactor/kernels/moe_ffn.hpp"

#include <gtest/gtest.h>

#include <string>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "kernels/grouped_layout.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

using test_support::expect_error;
using test_support::fake;
using test_support::fake_mut;

GroupedGemmSpec tree_spec(const EpilogueSpec& tree) {
  GroupedGemmSpec s;
  s.sm_count = 132;
  s.epilogue = tree;
  return s;
}

DeviceSizedGroups moe_groups() {
  return packed_device_groups(4, static_cast<const std::int32_t*>(fake(0x100)), 256, 128, 64, fake(0x1000),
                              fake(0x20000), fake_mut(), 128);
}

TEST(GroupedEpilogue, RejectsDenseOnlyOutputsAndNonHopperDevices) {
  using namespace epi;
  expect_error(GroupedGemmPlan::create(tree_spec(apply(EpilogueNode::amax, acc()))), errc::unsupported,
               "amax is supported for dense GEMM only");
  expect_error(GroupedGemmPlan::create(tree_spec(apply(EpilogueNode::gelu, apply(EpilogueNode::aux, acc())))),
               errc::unsupported, "aux is supported for dense GEMM only");
  expect_error(GroupedGemmPlan::create(tree_spec(apply(EpilogueNode::row_sum, acc()))), errc::unsupported,
               "rowsum is supported for dense GEMM only");
  GroupedGemmSpec ampere = tree_spec(mul(acc(), row_scale()));
  ampere.arch = GpuArch{8, 0, false};
  expect_error(GroupedGemmPlan::create(ampere), errc::unsupported, "needs an sm_90a device");
  expect_error(GroupedGemmPlan::create(tree_spec(add(acc(), EpilogueSpec()))), errc::invalid_argument, "short of");
}

TEST(GroupedEpilogue, ValidatesDeviceSizedTreeOperands) {
  const GroupedGemmSpec spec = tree_spec(epi::mul(epi::acc(), epi::row_scale()));
  DeviceSizedGroups g = moe_groups();
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::invalid_argument,
               "reads rowscale but its pointer is null");
  g.epilogue.row_scale = static_cast<const float*>(fake(0x40004));
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::invalid_argument, "not 16-byte aligned");
  g.epilogue.row_scale = static_cast<const float*>(fake(0x40000));
  EXPECT_TRUE(detail::validate_device_sized(g, spec, 0.0f).has_value());
  g.epilogue.col_bias = fake(0x50000);
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::invalid_argument, "colbias is set");
  g.epilogue.col_bias = nullptr;
  g.k = 0;
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::unsupported, "k=0");
  const GroupedGemmSpec with_c = tree_spec(epi::fma(epi::beta(), epi::c(), epi::acc()));
  expect_error(detail::validate_device_sized(moe_groups(), with_c, 0.0f), errc::invalid_argument,
               "c is null but the epilogue");
  // A preset epilogue takes no tree operands.
  DeviceSizedGroups preset = moe_groups();
  preset.epilogue.row_scale = static_cast<const float*>(fake(0x40000));
  expect_error(detail::validate_device_sized(preset, tree_spec(EpilogueSpec()), 0.0f), errc::invalid_argument,
               "rowscale is set");
}

TEST(GroupedEpilogue, SwigluStoresHalfTheColumns) {
  const GroupedGemmSpec spec = tree_spec(epi::apply(EpilogueNode::swiglu, epi::acc()));
  DeviceSizedGroups g = moe_groups();  // n = 128: D holds 64 columns
  g.ldd = 64;
  const Status fits = detail::validate_device_sized(g, spec, 0.0f);
  EXPECT_TRUE(fits.has_value()) << fits.error().message();
  g.ldd = 56;
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::invalid_argument, "ldd=56 is less than n / 2=64");
  g.ldd = 64;
  g.n = 136;  // 68 output columns: not 16-byte rows of bf16
  expect_error(detail::validate_device_sized(g, spec, 0.0f), errc::invalid_argument,
               "n=136 is not a multiple of 16 for bf16 (swiglu writes n / 2 columns");
  g.n = 144;
  g.ldd = 72;
  g.b_group_stride = 144 * 64;
  EXPECT_TRUE(detail::validate_device_sized(g, spec, 0.0f).has_value());
}

TEST(GroupedEpilogue, LayoutHoldsOnePointerArrayPerTreeVector) {
  const auto tree = epi::add(epi::mul(epi::acc(), epi::row_scale()), epi::col_bias());
  const detail::GroupedLayout l = detail::make_grouped_layout(10, false, false, true, 4096, tree);
  EXPECT_NE(l.row_scale, detail::GroupedLayout::none);
  EXPECT_NE(l.col_bias, detail::GroupedLayout::none);
  EXPECT_EQ(l.col_scale, detail::GroupedLayout::none);
  EXPECT_EQ(l.row_bias, detail::GroupedLayout::none);
  EXPECT_GE(l.col_bias, l.row_scale + 10 * sizeof(void*));
  EXPECT_LE(l.col_bias + 10 * sizeof(void*), l.scratch);
  const detail::GroupedLayout plain = detail::make_grouped_layout(10, false, false, true, 4096);
  EXPECT_EQ(plain.row_scale, detail::GroupedLayout::none);
}

TEST(MoeExpertFfn, RejectsSpecsNamingTheRule) {
  MoeFfnSpec s;
  s.hidden = 256;
  s.ffn = 512;
  s.experts = 8;
  s.capacity_rows = 1024;
  s.sm_count = 132;
  MoeFfnSpec f32 = s;
  f32.dtype = DType::f32;
  expect_error(MoeExpertFfn::create(f32), errc::unsupported, "dtype=f32");
  MoeFfnSpec zero = s;
  zero.experts = 0;
  expect_error(MoeExpertFfn::create(zero), errc::invalid_argument, "experts=0");
  MoeFfnSpec odd = s;
  odd.ffn = 100;
  expect_error(MoeExpertFfn::create(odd), errc::invalid_argument, "multiples of 8");
  MoeFfnSpec negative = s;
  negative.capacity_rows = -1;
  expect_error(MoeExpertFfn::create(negative), errc::invalid_argument, "capacity_rows=-1");
  MoeFfnSpec fused_stacked = s;  // the stacked layout has no adjacent gate/up pairs to fuse
  fused_stacked.swiglu = SwigluPlacement::epilogue;
  expect_error(MoeExpertFfn::create(fused_stacked), errc::invalid_argument,
               "swiglu=epilogue needs gate_up_layout=interleaved");
  MoeFfnSpec fused_ampere = s;  // the swiglu root is an sm_90a epilogue visitor
  fused_ampere.arch = GpuArch{8, 0, false};
  fused_ampere.gate_up_layout = GateUpLayout::interleaved;
  fused_ampere.swiglu = SwigluPlacement::epilogue;
  expect_error(MoeExpertFfn::create(fused_ampere), errc::unsupported, "needs an sm_90a device");
}

// Planning only (no GPU): automatic fuses where the catalog has the swiglu form of the kernel the
// separate GEMM runs, so the fused plan runs that very kernel; epilogue takes any swiglu kernel.
TEST(MoeExpertFfn, AutomaticFusesWhereTheCatalogHasTheFusedKernel) {
  bool has_swiglu = false;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped)) has_swiglu |= pairs_columns(e->sku.epilogue);
  if (!has_swiglu) GTEST_SKIP() << "no swiglu kernels in this build (CUACTOR_KERNEL_ARCHS)";
  CUACTOR_SKIP_IF_PARTIAL_CATALOG();
  struct Case {
    DType dtype;
    int rows_per_expert;
    bool fused;
  };
  // Qwen3-like experts (H 4096, F 1536): decode, medium and large classes; f16 has no large swiglu kernel.
  for (const Case c : {Case{DType::bf16, 4, true}, Case{DType::bf16, 100, true}, Case{DType::bf16, 256, true},
                       Case{DType::f16, 4, true}, Case{DType::f16, 100, true}, Case{DType::f16, 256, false}}) {
    SCOPED_TRACE(std::string(name(c.dtype)) + " " + std::to_string(c.rows_per_expert) + " rows per expert");
    MoeFfnSpec s;
    s.dtype = c.dtype;
    s.hidden = 4096;
    s.ffn = 1536;
    s.experts = 128;
    s.capacity_rows = 128 * c.rows_per_expert;
    s.sm_count = 132;
    s.rows_per_expert_hint = c.rows_per_expert;
    auto stacked = MoeExpertFfn::create(s);
    ASSERT_TRUE(stacked.has_value()) << stacked.error().to_string();
    s.gate_up_layout = GateUpLayout::interleaved;
    auto automatic = MoeExpertFfn::create(s);
    ASSERT_TRUE(automatic.has_value()) << automatic.error().to_string();
    EXPECT_EQ(automatic->fused_swiglu(), c.fused) << automatic->gate_up_sku().to_string();
    GemmSku same = stacked->gate_up_sku();
    same.epilogue = automatic->gate_up_sku().epilogue;
    EXPECT_EQ(automatic->gate_up_sku(), same) << "the fused plan runs the separate plan's kernel";
    s.swiglu = SwigluPlacement::epilogue;
    auto forced = MoeExpertFfn::create(s);
    ASSERT_TRUE(forced.has_value()) << forced.error().to_string();
    EXPECT_TRUE(forced->fused_swiglu());
  }
}

TEST(MoeExpertFfn, SpecHashTellsTheGateUpLayoutsAndSwigluPlacementsApart) {
  MoeFfnSpec s;
  s.hidden = 256;
  s.ffn = 512;
  MoeFfnSpec interleaved = s;
  interleaved.gate_up_layout = GateUpLayout::interleaved;
  EXPECT_NE(s, interleaved);
  EXPECT_NE(hash_value(s), hash_value(interleaved));
  MoeFfnSpec separate = interleaved;
  separate.swiglu = SwigluPlacement::separate;
  EXPECT_NE(interleaved, separate);
  EXPECT_NE(hash_value(interleaved), hash_value(separate));
}

TEST(InterleaveGateUp, RejectsBeforeTouchingTheDevice) {
  const void* src = fake();
  void* dst = fake_mut(0x400000);
  expect_error(interleave_gate_up(DType::f32, src, dst, 8, 64, 128, nullptr), errc::unsupported, "dtype=f32");
  expect_error(interleave_gate_up(DType::bf16, src, dst, 0, 64, 128, nullptr), errc::invalid_argument, "experts=0");
  expect_error(interleave_gate_up(DType::bf16, nullptr, dst, 8, 64, 128, nullptr), errc::invalid_argument,
               "must not be null");
  // 8 experts x 128 rows x 128 bf16 = 256 KiB each: a destination 4 KiB into the source overlaps it.
  void* inside = static_cast<char*>(const_cast<void*>(src)) + 0x1000;
  expect_error(interleave_gate_up(DType::bf16, src, inside, 8, 64, 128, nullptr), errc::invalid_argument, "overlap");
}

}  // namespace
}  // namespace cuactor::kernels
