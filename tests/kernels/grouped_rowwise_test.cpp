// fp8 grouped GEMM with row-wise scales on a GPU (torch._scaled_grouped_mm's form, the epilogue tree
// rowwise_scaled_epilogue()): every such catalog kernel against an fp64 reference on ragged
// device-sized groups (empty groups, rows past the routed total that must stay poisoned, scales with
// zeros and negatives), eager and replayed from one captured graph for new routings; and the plan's
// choice of the row-wise kernel of each size class.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "support/hopper_gpu_test.hpp"
#include "support/host_elements.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

using test_support::HostVector;
using test_support::load;
using test_support::random_values;

class GroupedRowwiseGpu : public test_support::HopperGpuTest {
 protected:
  /// The row-wise kernels of this build that run here.
  std::vector<GemmSku> rowwise_skus() const {
    std::vector<GemmSku> out;
    for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
      if (e->sku.epilogue == rowwise_scaled_epilogue() && grouped_sku_runs_on(e->sku, props_.arch))
        out.push_back(e->sku);
    return out;
  }

  GroupedGemmSpec spec(int rows_hint) const {
    GroupedGemmSpec s;
    s.a = s.b = DType::e4m3;
    s.d = DType::bf16;
    s.arch = props_.arch;
    s.sm_count = props_.multiprocessors;
    s.rows_per_group_hint = rows_hint;
    s.n_hint = 1024;
    s.k_hint = 1024;
    s.epilogue = rowwise_scaled_epilogue();
    return s;
  }
};

std::string no_rowwise_kernel() {
  return "no e4m3 grouped kernel with row-wise scales in this build's catalog (" + std::string(name(catalog_scope())) +
         " scope; CUACTOR_CATALOG_FILTER selects what is compiled)";
}

TEST_F(GroupedRowwiseGpu, EveryRowwiseKernelMatchesFp64OnRaggedRoutings) {
  const std::vector<GemmSku> skus = rowwise_skus();
  if (skus.empty()) GTEST_SKIP() << no_rowwise_kernel();
  constexpr int kGroups = 6, kCapacity = 600, kN = 264, kK = 272, kLdd = kN + 8;
  const std::vector<std::vector<int>> routings = {
      {0, 1, 190, 64, 0, 257}, {520, 0, 0, 0, 0, 17}, {63, 65, 127, 129, 0, 200}};
  std::mt19937_64 rng(20261127);
  const HostVector a = random_values(DType::e4m3, std::size_t{kCapacity} * kK, -4.0, 4.0, rng);
  const HostVector b = random_values(DType::e4m3, std::size_t{kGroups} * kN * kK, -4.0, 4.0, rng);
  // Scales as quantisers make them, with a zero and negatives among them (the tree multiplies, it does
  // not assume positive scales).
  HostVector sa = random_values(DType::f32, kCapacity, 1.0 / 64, 1.0 / 8, rng);
  HostVector sb = random_values(DType::f32, std::size_t{kGroups} * kN, -1.0 / 16, 1.0 / 16, rng);
  test_support::set_value(sa, DType::f32, 5, 0.0);
  test_support::set_value(sb, DType::f32, 7, 0.0);
  CUACTOR_ASSERT_OK_AND_ASSIGN(da, upload(a.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(db, upload(b.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dsa, upload(sa.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dsb, upload(sb.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dd, alloc(std::size_t{kCapacity} * kLdd * 2));
  CUACTOR_ASSERT_OK_AND_ASSIGN(offs, alloc(kGroups * sizeof(std::int32_t)));

  for (const GemmSku& sku : skus) {
    SCOPED_TRACE(sku.to_string());
    GroupedGemmSpec sp = spec(0);
    sp.sku_override = sku;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GroupedGemmPlan::create(sp));
    DeviceSizedGroups g = packed_device_groups(kGroups, offs.data_as<std::int32_t>(), kCapacity, kN, kK, da.data(),
                                               db.data(), dd.data(), kLdd);
    g.epilogue.row_scale = dsa.data_as<float>();
    g.epilogue.col_scale = dsb.data_as<float>();
    CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, plan.prepare(g));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(prepared.workspace_size()));

    auto check = [&](const std::vector<int>& rows, const std::string& what) {
      SCOPED_TRACE(what);
      CUACTOR_ASSERT_OK_AND_ASSIGN(got, download(dd, std::size_t{kCapacity} * kLdd * 2));
      test_support::RelativeError err;
      long stray = 0;
      int begin = 0;
      for (int e = 0; e < kGroups; ++e) {
        for (int r = begin; r < begin + rows[static_cast<std::size_t>(e)]; ++r) {
          for (int j = 0; j < kN; ++j) {
            double acc = 0;
            for (int kk = 0; kk < kK; ++kk)
              acc += a.values[static_cast<std::size_t>(r) * kK + kk] *
                     b.values[(static_cast<std::size_t>(e) * kN + j) * kK + kk];
            const double ref =
                acc * sa.values[static_cast<std::size_t>(r)] * sb.values[static_cast<std::size_t>(e) * kN + j];
            err.add(load(DType::bf16, got, static_cast<std::size_t>(r) * kLdd + j), ref);
          }
          for (int j = kN; j < kLdd; ++j)
            stray += std::isnan(load(DType::bf16, got, static_cast<std::size_t>(r) * kLdd + j)) ? 0 : 1;
        }
        begin += rows[static_cast<std::size_t>(e)];
      }
      for (std::size_t x = static_cast<std::size_t>(begin) * kLdd; x < std::size_t{kCapacity} * kLdd; ++x)
        stray += std::isnan(load(DType::bf16, got, x)) ? 0 : 1;
      EXPECT_EQ(err.misses, 0) << "non-finite outputs where the reference is finite";
      EXPECT_LT(err.value(), 1.5e-2) << "relative error of D (fp8 fast accumulation, bf16 output)";
      EXPECT_EQ(stray, 0) << "elements written outside the routed rows' N columns";
    };

    run_eager_then_replayed(
        routings, offs.data_as<std::int32_t>(), dd,
        [&](cudaStream_t stream) { return prepared.run(stream, ws.data(), ws.size()); }, check);
    if (HasFailure()) return;
  }
}

// The plan takes the row-wise kernel of the hint's size class: 64x128 pingpong for decode, 64x256
// pingpong for medium groups, 256x128 cooperative in a 1x2 cluster for large ones.
TEST_F(GroupedRowwiseGpu, PlansTakeTheRowwiseKernelOfEachSizeClass) {
  CUACTOR_SKIP_IF_PARTIAL_CATALOG();
  struct Case {
    int rows;
    Shape3 tile;
  };
  for (const Case& c : {Case{8, {64, 128, 128}}, Case{200, {64, 256, 128}}, Case{2048, {256, 128, 128}}}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GroupedGemmPlan::create(spec(c.rows)));
    EXPECT_EQ(plan.sku().epilogue, rowwise_scaled_epilogue()) << plan.sku().to_string();
    EXPECT_EQ(plan.sku().tile, c.tile) << c.rows << " rows per group: " << plan.sku().to_string();
  }
}

}  // namespace
}  // namespace cuactor::kernels
