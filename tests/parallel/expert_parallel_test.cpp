// The expert-parallel layer without a device: every field of the spec that create() rejects, each
// error naming the value and the rule; and what create() plans (each rank's share of the experts,
// the worst-case row layout, the workspace, the local FFN's gate/up layout).
#include "cuactor/parallel/expert_parallel.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/epilogue.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::parallel {
namespace {

using test_support::expect_error;

ExpertParallelSpec valid() {
  ExpertParallelSpec s;
  s.hidden = 128;
  s.ffn = 64;
  s.experts = 16;
  s.top_k = 4;
  s.tokens_per_rank = 33;
  s.ranks = 4;
  s.rank = 3;
  s.sm_count = 132;
  return s;
}

TEST(ExpertParallelRules, RejectsRanksOutsideTheGroup) {
  ExpertParallelSpec s = valid();
  s.rank = 4;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "rank=4 must be in [0, ranks=4)");
  s = valid();
  s.ranks = 0;
  s.rank = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "ranks >= 1");
}

TEST(ExpertParallelRules, ExpertsSplitEvenlyAndTopKFits) {
  ExpertParallelSpec s = valid();
  s.experts = 18;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument,
               "experts=18 must be a positive multiple of ranks=4");
  s = valid();
  s.top_k = 17;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "top_k=17 must be in [1, experts=16]");
  s.top_k = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "top_k=0");
  s = valid();
  s.experts = 4 * 8193;
  expect_error(ExpertParallelMoe::create(s), errc::unsupported, "8193 experts per rank, at most 8192");
}

TEST(ExpertParallelRules, TokensAndHiddenAreChecked) {
  ExpertParallelSpec s = valid();
  s.tokens_per_rank = 0;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "tokens_per_rank=0 must be at least 1");
  s = valid();
  s.hidden = 100;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "hidden=100 must be a positive multiple of 8");
  s = valid();
  s.tokens_per_rank = 1 << 28;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "must fit in int32");
}

TEST(ExpertParallelRules, TheExpertFfnRulesApplyToTheLocalExperts) {
  ExpertParallelSpec s = valid();
  s.ffn = 60;
  expect_error(ExpertParallelMoe::create(s), errc::invalid_argument, "ffn=60 must be multiples of 8");
  s = valid();
  s.dtype = DType::f32;
  expect_error(ExpertParallelMoe::create(s), errc::unsupported, "dtype=f32");
}

// run_local drives every rank of the layer in one thread: with none (or, on devices, with fewer than
// the layer's ranks) the collectives would wait for the missing ones, so the call is refused first.
TEST(ExpertParallelRules, RunLocalNeedsEveryRank) {
  expect_error(ExpertParallelMoe::run_local({}, {}, {}, {}, 0, {}), errc::invalid_argument,
               "run_local drives every rank of the layer: 0 given");
}

// The plans below take the local experts' FFN from the bf16 sm_90a grouped catalog (the routing-weighted
// down projection has no sm_80 kernel).
bool catalog_has_bf16_grouped() {
  for (const kernels::CatalogEntry* e : kernels::catalog_entries(kernels::GemmFamily::grouped))
    if (e->sku.a == DType::bf16 && e->sku.arch == GpuArch{9, 0, true}) return true;
  return false;
}

// Every rank owns E / R consecutive experts; the local experts' rows cover the worst routing (every
// slot of every gathered token local, R T k rows) and the workspace holds every buffer of a forward.
TEST(ExpertParallelLayout, EachRankOwnsItsShareAndTheWorkspaceHoldsTheWorstRouting) {
  if (!catalog_has_bf16_grouped()) GTEST_SKIP() << "no bf16 grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  constexpr int kExperts = 24;
  for (const int ranks : {1, 2, 3, 8}) {
    std::size_t first_workspace = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      SCOPED_TRACE("rank " + std::to_string(rank) + " of " + std::to_string(ranks));
      ExpertParallelSpec s = valid();
      s.experts = kExperts;
      s.ranks = ranks;
      s.rank = rank;
      CUACTOR_ASSERT_OK_AND_ASSIGN(layer, ExpertParallelMoe::create(s));
      const int local = kExperts / ranks;
      EXPECT_EQ(layer.local_experts(), local);
      EXPECT_EQ(layer.first_local_expert(), rank * local);
      const std::int64_t slots = static_cast<std::int64_t>(ranks) * s.tokens_per_rank * s.top_k;
      EXPECT_EQ(layer.capacity_rows(), slots);
      EXPECT_EQ(layer.ffn().spec().experts, local);
      EXPECT_EQ(layer.ffn().spec().capacity_rows, slots);
      EXPECT_TRUE(layer.ffn().spec().weighted) << "the down projection scales rows by their routing weight";

      const std::size_t workspace = layer.workspace_size();
      EXPECT_EQ(workspace % 256, 0u);
      const auto rows = static_cast<std::size_t>(slots);
      const auto row_bytes = static_cast<std::size_t>(s.hidden) * 2;
      // Expert inputs and outputs, each slot's row, each row's token and weight, the FFN's own space.
      std::size_t least = 2 * rows * row_bytes + rows * (4 + 4 + 4) + layer.ffn().workspace_size();
      // With peers: the gathered tokens and the per-token partial sums, the gathered ids and weights.
      const auto gathered = static_cast<std::size_t>(ranks) * static_cast<std::size_t>(s.tokens_per_rank);
      if (ranks > 1) least += 2 * gathered * row_bytes + rows * (4 + 4);
      EXPECT_GE(workspace, least);
      std::vector<std::byte> host(workspace);
      const auto counter = reinterpret_cast<const std::byte*>(layer.routing_error_count(host.data())) - host.data();
      EXPECT_GE(counter, 0);
      EXPECT_LE(static_cast<std::size_t>(counter) + sizeof(std::int32_t), workspace);
      if (rank == 0) first_workspace = workspace;
      EXPECT_EQ(workspace, first_workspace) << "every rank of one layer needs the same workspace";
    }
  }
}

// The gate/up layout reaches the local experts' FFN: interleaved weights fuse the SwiGLU into the
// gate/up GEMM where the catalog has that kernel's swiglu form (MoeExpertFfn's rule), stacked never.
TEST(ExpertParallelLayout, InterleavedGateUpWeightsReachTheLocalFfn) {
  if (!catalog_has_bf16_grouped()) GTEST_SKIP() << "no bf16 grouped kernels in this build (CUACTOR_KERNEL_ARCHS)";
  ExpertParallelSpec s = valid();
  CUACTOR_ASSERT_OK_AND_ASSIGN(stacked, ExpertParallelMoe::create(s));
  EXPECT_EQ(stacked.ffn().spec().gate_up_layout, kernels::GateUpLayout::stacked);
  EXPECT_FALSE(stacked.ffn().fused_swiglu());
  s.gate_up_layout = kernels::GateUpLayout::interleaved;
  CUACTOR_ASSERT_OK_AND_ASSIGN(interleaved, ExpertParallelMoe::create(s));
  EXPECT_EQ(interleaved.ffn().spec().gate_up_layout, kernels::GateUpLayout::interleaved);
  CUACTOR_ASSERT_OK_AND_ASSIGN(swiglu, kernels::EpilogueSpec::parse("swiglu(acc)"));
  kernels::GemmSku swiglu_form = stacked.ffn().gate_up_sku();
  swiglu_form.epilogue = swiglu;
  EXPECT_EQ(interleaved.ffn().fused_swiglu(), kernels::find_in_catalog(swiglu_form) != nullptr)
      << swiglu_form.to_string();
  if (interleaved.ffn().fused_swiglu()) {
    EXPECT_TRUE(kernels::pairs_columns(interleaved.ffn().gate_up_sku().epilogue));
    EXPECT_LT(interleaved.workspace_size(), stacked.workspace_size()) << "the fused FFN writes no 2F-wide h";
  }
}

}  // namespace
}  // namespace cuactor::parallel
