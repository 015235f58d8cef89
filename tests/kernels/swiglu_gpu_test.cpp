// The swiglu epilogue root on a GPU ([K8]): grouped GEMMs whose epilogue pairs adjacent columns,
// D[m, j] = silu(x[m, 2j]) * x[m, 2j + 1] (N / 2 columns), from the catalog and the JIT, against an
// fp64 host reference on ragged device-sized groups (empty experts, padded D rows, rows past the
// routed total that must stay poisoned), eager and replayed from one graph for new routings; and the
// expert FFN with interleaved weights (the fused SwiGLU) against the stacked layout and fp64.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "cuactor/kernels/moe_ffn.hpp"
#include "support/epilogue_reference.hpp"
#include "support/gpu_test.hpp"
#include "support/hopper_gpu_test.hpp"
#include "support/host_elements.hpp"
#include "support/jit_gpu_cache.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

using test_support::expect_error;
using test_support::HostVector;
using test_support::load;
using test_support::random_values;

constexpr GpuArch kHopper{9, 0, true};

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

using SwigluGpu = test_support::HopperGpuTest;

GemmSku swiglu_sku(DType t, Shape3 tile, Shape3 cluster, GemmSchedule schedule, const char* tree) {
  GemmSku s;
  s.family = GemmFamily::grouped;
  s.arch = kHopper;
  s.a = s.b = s.c = s.d = t;
  s.tile = tile;
  s.cluster = cluster;
  s.schedule = schedule;
  auto parsed = EpilogueSpec::parse(tree);
  EXPECT_TRUE(parsed.has_value()) << tree;
  if (parsed) s.epilogue = *parsed;
  return s;
}

// Every swiglu SKU of the catalog (pingpong, and the cooperative bf16 one), and through the JIT two
// more cooperative ones: f16 with a 2x1 cluster, and bf16 with a per-expert column bias before the pairing. 7 experts
// with empty ones, rows not multiples of the tile, D rows padded.
TEST_F(SwigluGpu, GroupedTreesPairColumnsOfEveryGroup) {
  std::vector<GemmSku> skus;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
    if (pairs_columns(e->sku.epilogue) && grouped_sku_runs_on(e->sku, props_.arch)) skus.push_back(e->sku);
  skus.push_back(swiglu_sku(DType::f16, {128, 256, 64}, {2, 1, 1}, GemmSchedule::cooperative, "swiglu(acc)"));
  skus.push_back(
      swiglu_sku(DType::bf16, {128, 128, 64}, {1, 1, 1}, GemmSchedule::cooperative, "swiglu(add(acc,colbias))"));
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, test_support::gpu_test_jit_engine(4));
  jit::GemmJit gemm(engine);
  std::vector<jit::JitFuture<jit::ResolvedInstance>> instances;
  for (const GemmSku& s : skus) instances.push_back(gemm.resolve(s));

  constexpr int kExperts = 7, kCapacity = 480, kF = 136, kN = 2 * kF, kK = 136, kLdd = kF + 8;
  const std::vector<std::vector<int>> routings = {
      {0, 1, 130, 64, 0, 201, 37}, {300, 0, 0, 0, 0, 0, 179}, {17, 63, 64, 65, 0, 128, 129}};
  std::mt19937_64 rng(20261125);
  for (std::size_t i = 0; i < skus.size(); ++i) {
    const GemmSku& sku = skus[i];
    SCOPED_TRACE(sku.to_string());
    const auto& resolved = instances[i].get();
    ASSERT_TRUE(resolved.has_value()) << resolved.error().to_string();
    GroupedGemmSpec spec;
    spec.a = spec.b = spec.d = sku.a;
    spec.arch = props_.arch;
    spec.sm_count = props_.multiprocessors;
    spec.epilogue = sku.epilogue;
    CUACTOR_ASSERT_OK_AND_ASSIGN(
        plan, GroupedGemmPlan::with_instance(spec, sku, *(*resolved)->abi, (*resolved)->jit, PlanSource::overridden));
    const DType t = sku.a;
    const std::size_t elem = size_bits(t) / 8;
    const HostVector a = random_values(t, std::size_t{kCapacity} * kK, -1.0, 1.0, rng);
    const HostVector b = random_values(t, std::size_t{kExperts} * kN * kK, -1.0, 1.0, rng);
    const HostVector bias = random_values(t, std::size_t{kExperts} * kN, -2.0, 2.0, rng);
    const bool biased = sku.epilogue.uses(EpilogueNode::col_bias);
    CUACTOR_ASSERT_OK_AND_ASSIGN(da, upload(a.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(db, upload(b.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dbias, upload(bias.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dd, alloc(std::size_t{kCapacity} * kLdd * elem));
    CUACTOR_ASSERT_OK_AND_ASSIGN(offs, alloc(kExperts * sizeof(std::int32_t)));
    DeviceSizedGroups g = packed_device_groups(kExperts, offs.data_as<std::int32_t>(), kCapacity, kN, kK, da.data(),
                                               db.data(), dd.data(), kLdd);
    if (biased) g.epilogue.col_bias = dbias.data();
    CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, plan.prepare(g));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(prepared.workspace_size()));

    auto check = [&](const std::vector<int>& rows, const std::string& what) {
      SCOPED_TRACE(what);
      auto got = download(dd, std::size_t{kCapacity} * kLdd * elem);
      ASSERT_TRUE(got.has_value()) << got.error().to_string();
      test_support::RelativeError err;
      long stray = 0;
      int begin = 0;
      for (int e = 0; e < kExperts; ++e) {
        for (int r = begin; r < begin + rows[static_cast<std::size_t>(e)]; ++r) {
          for (int j = 0; j < kF; ++j) {
            test_support::EpilogueLeaves gate, up;
            for (int kk = 0; kk < kK; ++kk) {
              const double x = a.values[static_cast<std::size_t>(r) * kK + kk];
              gate.acc += x * b.values[(static_cast<std::size_t>(e) * kN + 2 * j) * kK + kk];
              up.acc += x * b.values[(static_cast<std::size_t>(e) * kN + 2 * j + 1) * kK + kk];
            }
            gate.col_bias = bias.values[static_cast<std::size_t>(e) * kN + 2 * j];
            up.col_bias = bias.values[static_cast<std::size_t>(e) * kN + 2 * j + 1];
            err.add(load(t, *got, static_cast<std::size_t>(r) * kLdd + j),
                    test_support::evaluate_swiglu(sku.epilogue, gate, up));
          }
          for (int j = kF; j < kLdd; ++j)
            stray += std::isnan(load(t, *got, static_cast<std::size_t>(r) * kLdd + j)) ? 0 : 1;
        }
        begin += rows[static_cast<std::size_t>(e)];
      }
      for (std::size_t x = static_cast<std::size_t>(begin) * kLdd; x < std::size_t{kCapacity} * kLdd; ++x)
        stray += std::isnan(load(t, *got, x)) ? 0 : 1;
      EXPECT_EQ(err.misses, 0) << "non-finite outputs where the reference is finite";
      EXPECT_LT(err.value(), t == DType::bf16 ? 8e-3 : 2e-3) << "relative error of D";
      EXPECT_EQ(stray, 0) << "elements written outside the routed rows' N / 2 columns";
    };

    run_eager_then_replayed(
        routings, offs.data_as<std::int32_t>(), dd,
        [&](cudaStream_t stream) { return prepared.run(stream, ws.data(), ws.size()); }, check);
    if (HasFailure()) return;
  }
}

/// out = w * (silu(x Wg^T) * (x Wu^T)) Wd^T per expert in fp64, from stacked weights.
std::vector<double> ffn_reference(const HostVector& x, const HostVector& wgu, const HostVector& wd,
                                  const std::vector<float>& w, const std::vector<int>& rows, int hidden, int ffn) {
  std::vector<double> out;
  int begin = 0;
  std::vector<double> act(static_cast<std::size_t>(ffn));
  for (std::size_t e = 0; e < rows.size(); ++e) {
    for (int r = begin; r < begin + rows[e]; ++r) {
      for (int f = 0; f < ffn; ++f) {
        double g = 0, u = 0;
        for (int h = 0; h < hidden; ++h) {
          const double v = x.values[static_cast<std::size_t>(r) * hidden + h];
          g += v * wgu.values[(e * 2 * ffn + f) * hidden + h];
          u += v * wgu.values[(e * 2 * ffn + ffn + f) * hidden + h];
        }
        act[static_cast<std::size_t>(f)] = silu(g) * u;
      }
      for (int h = 0; h < hidden; ++h) {
        double y = 0;
        for (int f = 0; f < ffn; ++f) y += act[static_cast<std::size_t>(f)] * wd.values[(e * hidden + h) * ffn + f];
        out.push_back(y * w[static_cast<std::size_t>(r)]);
      }
    }
    begin += rows[e];
  }
  return out;
}

// The expert FFN on interleaved weights (interleave_gate_up of the stacked ones) fuses the SwiGLU
// where the build has the fused form of the size class's kernel, both placements can be forced, and
// every form matches the fp64 reference.
TEST_F(SwigluGpu, ExpertFfnInterleavedMatchesStackedAndFp64) {
  constexpr int kExperts = 8, kHidden = 256, kFfn = 384, kTokens = 700;
  const std::vector<int> rows = {300, 0, 1, 150, 0, 64, 100, 33};  // 52 rows past the total
  MoeFfnSpec spec;
  spec.hidden = kHidden;
  spec.ffn = kFfn;
  spec.experts = kExperts;
  spec.capacity_rows = kTokens;
  spec.arch = props_.arch;
  spec.sm_count = props_.multiprocessors;
  spec.rows_per_expert_hint = kTokens / kExperts;  // the medium size class: a pingpong gate/up kernel
  auto stacked = MoeExpertFfn::create(spec);
  if (!stacked && stacked.error().code() == errc::unsupported)
    GTEST_SKIP() << "no grouped kernels for the expert FFN in this build: " << stacked.error().message();
  ASSERT_TRUE(stacked.has_value()) << stacked.error().to_string();
  spec.gate_up_layout = GateUpLayout::interleaved;
  CUACTOR_ASSERT_OK_AND_ASSIGN(fused, MoeExpertFfn::create(spec));
  bool catalog_has_swiglu = false;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
    catalog_has_swiglu |= pairs_columns(e->sku.epilogue) && e->sku.a == DType::bf16;
  EXPECT_FALSE(stacked->fused_swiglu());
  EXPECT_EQ(fused.fused_swiglu(), catalog_has_swiglu) << fused.gate_up_sku().to_string();
  if (fused.fused_swiglu()) {
    EXPECT_LT(fused.workspace_size(), stacked->workspace_size()) << "the fused plan needs no T x 2F intermediate";
  }
  // Large experts (cooperative kernels): automatic fuses only where the catalog has the swiglu form of
  // the kernel the separate GEMM runs.
  MoeFfnSpec large = spec;
  large.rows_per_expert_hint = 1024;
  MoeFfnSpec large_stacked = large;
  large_stacked.gate_up_layout = GateUpLayout::stacked;
  CUACTOR_ASSERT_OK_AND_ASSIGN(large_separate_plan, MoeExpertFfn::create(large_stacked));
  GemmSku large_swiglu = large_separate_plan.gate_up_sku();
  large_swiglu.epilogue = epi::apply(EpilogueNode::swiglu, epi::acc());
  const bool catalog_has_large_swiglu = find_in_catalog(large_swiglu) != nullptr;
  CUACTOR_ASSERT_OK_AND_ASSIGN(large_auto, MoeExpertFfn::create(large));
  EXPECT_EQ(large_auto.fused_swiglu(), catalog_has_large_swiglu) << large_auto.gate_up_sku().to_string();
  // The placement forced either way, whatever the size class would pick.
  MoeFfnSpec large_separate = large;
  large_separate.swiglu = SwigluPlacement::separate;
  CUACTOR_ASSERT_OK_AND_ASSIGN(interleaved_unfused, MoeExpertFfn::create(large_separate));
  EXPECT_FALSE(interleaved_unfused.fused_swiglu());
  MoeFfnSpec medium_separate = spec;
  medium_separate.swiglu = SwigluPlacement::separate;
  CUACTOR_ASSERT_OK_AND_ASSIGN(forced_separate, MoeExpertFfn::create(medium_separate));
  EXPECT_FALSE(forced_separate.fused_swiglu());
  MoeFfnSpec large_fused = large;
  large_fused.swiglu = SwigluPlacement::epilogue;
  auto forced_fused = MoeExpertFfn::create(large_fused);
  if (catalog_has_swiglu) {
    ASSERT_TRUE(forced_fused.has_value()) << forced_fused.error().to_string();
    EXPECT_TRUE(forced_fused->fused_swiglu());
  } else {
    expect_error(forced_fused, errc::unsupported, "swiglu");
  }

  std::mt19937_64 rng(77);
  const HostVector x = random_values(DType::bf16, std::size_t{kTokens} * kHidden, -1.0, 1.0, rng);
  const HostVector wgu = random_values(DType::bf16, std::size_t{kExperts} * 2 * kFfn * kHidden, -0.0625, 0.0625, rng);
  const HostVector wd = random_values(DType::bf16, std::size_t{kExperts} * kHidden * kFfn, -0.05, 0.05, rng);
  std::vector<float> w(kTokens);
  std::uniform_real_distribution<float> wdist(0.0f, 1.0f);
  for (float& v : w) v = wdist(rng);
  std::vector<std::int32_t> ends(kExperts);
  int total = 0;
  for (int e = 0; e < kExperts; ++e) ends[static_cast<std::size_t>(e)] = total += rows[static_cast<std::size_t>(e)];
  std::vector<std::uint8_t> w_bytes(w.size() * sizeof(float)), end_bytes(ends.size() * sizeof(std::int32_t));
  std::memcpy(w_bytes.data(), w.data(), w_bytes.size());
  std::memcpy(end_bytes.data(), ends.data(), end_bytes.size());
  CUACTOR_ASSERT_OK_AND_ASSIGN(dx, upload(x.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dwgu, upload(wgu.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dwd, upload(wd.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dw, upload(w_bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(doffs, upload(end_bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(dinter, alloc(wgu.bytes.size()));
  const std::size_t out_bytes = std::size_t{kTokens} * kHidden * 2;
  const cudaStream_t s = stream_.get();
  CUACTOR_ASSERT_OK(interleave_gate_up(DType::bf16, dwgu.data(), dinter.data(), kExperts, kFfn, kHidden, s));
  CUACTOR_ASSERT_OK_AND_ASSIGN(inter, download(dinter, wgu.bytes.size()));
  long misplaced = 0;
  for (std::size_t e = 0; e < kExperts; ++e)
    for (std::size_t row = 0; row < 2 * kFfn; ++row) {
      const std::size_t from = e * 2 * kFfn + (row % 2 == 0 ? row / 2 : kFfn + row / 2);
      misplaced += std::memcmp(inter.data() + (e * 2 * kFfn + row) * kHidden * 2, wgu.bytes.data() + from * kHidden * 2,
                               kHidden * 2) != 0;
    }
  EXPECT_EQ(misplaced, 0) << "interleave_gate_up put rows in the wrong place";

  const std::vector<double> ref = ffn_reference(x, wgu, wd, w, rows, kHidden, kFfn);
  std::vector<const MoeExpertFfn*> plans = {&*stacked, &fused, &large_auto, &interleaved_unfused, &forced_separate};
  if (forced_fused) plans.push_back(&*forced_fused);
  for (const auto* plan : plans) {
    const bool interleaved = plan->spec().gate_up_layout == GateUpLayout::interleaved;
    SCOPED_TRACE(std::string(plan->fused_swiglu() ? "fused "
                             : interleaved        ? "interleaved, separate kernel "
                                                  : "stacked ") +
                 plan->gate_up_sku().to_string());
    CUACTOR_ASSERT_OK_AND_ASSIGN(out, alloc(out_bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(plan->workspace_size()));
    CUACTOR_ASSERT_OK(gpu::memset_async(out.data(), 0xff, out_bytes, s));
    MoeFfnTensors t;
    t.x = dx.data();
    t.w_gate_up = interleaved ? dinter.data() : dwgu.data();
    t.w_down = dwd.data();
    t.offsets = doffs.data_as<std::int32_t>();
    t.routing_weights = dw.data_as<float>();
    t.out = out.data();
    CUACTOR_ASSERT_OK(plan->run(t, ws.data(), ws.size(), s));
    CUACTOR_ASSERT_OK_AND_ASSIGN(got, download(out, out_bytes));
    test_support::RelativeError err;
    for (std::size_t i = 0; i < ref.size(); ++i) err.add(load(DType::bf16, got, i), ref[i]);
    long stray = 0;
    for (std::size_t i = ref.size(); i < std::size_t{kTokens} * kHidden; ++i)
      stray += std::isnan(load(DType::bf16, got, i)) ? 0 : 1;
    EXPECT_EQ(err.misses, 0);
    EXPECT_LT(err.value(), 1e-2) << "relative error against fp64";
    EXPECT_EQ(stray, 0) << "rows past offsets[E-1] were written";
  }
}

}  // namespace
}  // namespace cuactor::kernels
