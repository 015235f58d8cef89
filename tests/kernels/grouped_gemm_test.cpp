// Grouped GEMM on a GPU: every grouped SKU of the catalog against an fp64 reference, element by
// element (a single wrong tile fails), on ragged groups with M = 0 groups and tails, many
// iterations with fresh data, K = 0 groups, capture == eager, device-resident sizes ([K6]).
#include "cuactor/kernels/grouped_gemm.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "kernels/grouped_test_kernels.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::kernels {
namespace {

using test_support::RefProblem;

struct Dims {
  int m, n, k;
};

std::size_t align_up(std::size_t v, std::size_t a) {
  return (v + a - 1) / a * a;
}

/// Tolerances per output type: the output rounding plus fp32 (fp8: fast) accumulation.
std::pair<double, double> tolerances(const GemmSku& sku) {
  const double rel = sku.d == DType::bf16 ? 1.0 / 256 : sku.d == DType::f16 ? 1.0 / 1024 : 1e-6;
  const double mag = sku.a == DType::e4m3 ? 4e-3 : 1e-4;
  return {rel, mag};
}

GroupedGemmSpec spec_for(const GemmSku& sku, const gpu::DeviceProperties& props) {
  GroupedGemmSpec s;
  s.a = sku.a;
  s.b = sku.b;
  s.d = sku.d;
  s.layout_b = sku.layout_b;
  s.arch = props.arch;
  s.sm_count = props.multiprocessors;
  s.device = props.ordinal;
  s.sku_override = sku;
  return s;
}

class GroupedGemmGpu : public cuactor::test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    auto stream = gpu::Stream::create(0);
    ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
    stream_ = std::move(*stream);
    auto pool = gpu::MemPool::create(0);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    pool_ = std::move(*pool);
  }

  /// Grouped SKUs of the catalog this device can run (epilogue trees: the expert FFN's tests).
  std::vector<GemmSku> runnable_skus() const {
    std::vector<GemmSku> out;
    for (const CatalogEntry* e : catalog_entries(GemmFamily::grouped))
      if (grouped_sku_runs_on(e->sku, props_.arch) && e->sku.epilogue.is_preset()) out.push_back(e->sku);
    return out;
  }

  Result<gpu::DeviceBuffer> alloc(std::size_t bytes) {
    return gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(bytes, 256), stream_.get());
  }

  /// Operands of one grouped problem, each group in its own 256-byte aligned slice with a padded
  /// leading dimension on odd groups; D poisoned with NaN.
  struct Operands {
    gpu::DeviceBuffer a, b, c, d;
    std::vector<GroupedProblem> groups;
  };

  Result<Operands> make_operands(const GemmSku& sku, const std::vector<Dims>& dims, bool with_c, std::uint64_t seed) {
    Operands o;
    const std::size_t ea = size_bits(sku.a) / 8, ed = size_bits(sku.d) / 8;
    const int align_a = grouped_alignment_elements(sku.a), align_d = grouped_alignment_elements(sku.d);
    const bool b_col = sku.layout_b == MatrixLayout::col;
    std::size_t off_a = 0, off_b = 0, off_cd = 0;
    std::vector<std::size_t> oa, ob, ocd;
    for (std::size_t g = 0; g < dims.size(); ++g) {
      const auto [m, n, k] = dims[g];
      const std::int64_t pad_a = g % 2 ? align_a : 0, pad_d = g % 2 ? align_d : 0;
      GroupedProblem p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.lda = std::max(k, 1) + pad_a;
      p.ldb = (b_col ? std::max(k, 1) : n) + pad_a;
      p.ldc = p.ldd = n + pad_d;
      oa.push_back(off_a);
      ob.push_back(off_b);
      ocd.push_back(off_cd);
      off_a = align_up(off_a + static_cast<std::size_t>(m) * p.lda * ea, 256);
      off_b = align_up(off_b + static_cast<std::size_t>(b_col ? n : k) * p.ldb * ea, 256);
      off_cd = align_up(off_cd + static_cast<std::size_t>(m) * p.ldd * ed, 256);
      o.groups.push_back(p);
    }
    auto a = alloc(off_a);
    auto b = alloc(off_b);
    auto c = alloc(off_cd);
    auto d = alloc(off_cd);
    for (auto* r : {&a, &b, &c, &d})
      if (!*r) return fail(r->error());
    const cudaStream_t s = stream_.get();
    CUACTOR_CUDA_TRY(test_support::fill_random(sku.a, a->data(), off_a / ea, seed * 4 + 1, 1.0f, s));
    CUACTOR_CUDA_TRY(test_support::fill_random(sku.b, b->data(), off_b / ea, seed * 4 + 2, 1.0f, s));
    CUACTOR_CUDA_TRY(test_support::fill_random(sku.d, c->data(), off_cd / ed, seed * 4 + 3, 1.0f, s));
    CUACTOR_TRY(gpu::memset_async(d->data(), 0xff, d->size(), s));  // poison: NaN in every float type
    for (std::size_t g = 0; g < dims.size(); ++g) {
      GroupedProblem& p = o.groups[g];
      p.a = a->data_as<std::byte>() + oa[g];
      p.b = b->data_as<std::byte>() + ob[g];
      p.c = with_c ? c->data_as<std::byte>() + ocd[g] : nullptr;
      p.d = d->data_as<std::byte>() + ocd[g];
    }
    o.a = std::move(*a);
    o.b = std::move(*b);
    o.c = std::move(*c);
    o.d = std::move(*d);
    return o;
  }

  /// Checks every element of every group against the fp64 reference; returns the wrong-element
  /// count (0 expected) and prints the worst groups.
  Result<unsigned long long> check(const GemmSku& sku, const std::vector<GroupedProblem>& groups,
                                   const std::vector<float>& alphas, float beta, const std::string& what) {
    std::size_t max_mn = 1;
    for (const auto& p : groups) max_mn = std::max(max_mn, static_cast<std::size_t>(p.m) * p.n);
    auto ref = alloc(max_mn * sizeof(double));
    auto mag = alloc(max_mn * sizeof(double));
    auto counters = alloc(groups.size() * 2 * sizeof(double));
    for (auto* r : {&ref, &mag, &counters})
      if (!*r) return fail(r->error());
    const cudaStream_t s = stream_.get();
    CUACTOR_TRY(gpu::memset_async(counters->data(), 0, counters->size(), s));
    auto* bad = counters->data_as<unsigned long long>();
    auto* worst = reinterpret_cast<double*>(bad + groups.size());
    const auto [rel, magtol] = tolerances(sku);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const GroupedProblem& p = groups[g];
      if (p.m == 0 || p.n == 0) continue;
      RefProblem r{p.m,   p.n,   p.k,       p.a,
                   p.lda, p.b,   p.ldb,     sku.layout_b == MatrixLayout::col,
                   p.c,   p.ldc, alphas[g], p.c != nullptr ? beta : 0.0f};
      CUACTOR_CUDA_TRY(
          test_support::reference_gemm(sku.a, sku.d, r, ref->data_as<double>(), mag->data_as<double>(), s));
      CUACTOR_CUDA_TRY(test_support::compare_output(sku.d, p.d, p.ldd, ref->data_as<double>(), mag->data_as<double>(),
                                                    p.m, p.n, rel, magtol, bad + g, worst + g, s));
    }
    std::vector<unsigned long long> host(groups.size() * 2);
    CUACTOR_TRY(gpu::copy_async(host.data(), counters->data(), host.size() * 8, s));
    CUACTOR_TRY(stream_.synchronize());
    unsigned long long total = 0;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      total += host[g];
      if (host[g] != 0) {
        double w;
        std::memcpy(&w, &host[groups.size() + g], 8);
        ADD_FAILURE() << what << " " << sku.to_string() << ": group " << g << " (" << groups[g].m << "x" << groups[g].n
                      << "x" << groups[g].k << ") has " << host[g] << " wrong elements, worst error/bound " << w;
      }
    }
    return total;
  }

  /// Runs `prepared` on a fresh workspace.
  Status run(const PreparedGroupedGemm& prepared) {
    auto ws = alloc(prepared.workspace_size());
    if (!ws) return fail(ws.error());
    CUACTOR_TRY(prepared.run(stream_.get(), ws->data(), ws->size()));
    CUACTOR_TRY(stream_.synchronize());
    return ok();
  }

  /// fp8: per-tensor scales on the device (scale_a for A, scale_b[g] per expert) and the alpha[g]
  /// they imply for the reference.
  Status fp8_scales(int groups, float alpha, GroupedScalars& scalars, std::vector<float>& alphas) {
    std::vector<float> host(static_cast<std::size_t>(groups) + 1);
    host[0] = 0.5f;
    for (int g = 0; g < groups; ++g) host[static_cast<std::size_t>(g) + 1] = 0.25f * static_cast<float>(g % 3 + 1);
    auto buf = alloc(host.size() * sizeof(float));
    if (!buf) return fail(buf.error());
    CUACTOR_TRY(gpu::copy_async(buf->data(), host.data(), host.size() * sizeof(float), stream_.get()));
    CUACTOR_TRY(stream_.synchronize());
    scalars.scale_a = buf->data_as<float>();
    scalars.scale_b = buf->data_as<float>() + 1;
    for (int g = 0; g < groups; ++g)
      alphas[static_cast<std::size_t>(g)] = alpha * host[0] * host[static_cast<std::size_t>(g) + 1];
    scale_buffers_.push_back(std::move(*buf));
    return ok();
  }

  /// One full check of `sku` on `dims`; returns the wrong-element count.
  Result<unsigned long long> run_case(const GemmSku& sku, const std::vector<Dims>& dims, float alpha, float beta,
                                      std::uint64_t seed, const std::string& what) {
    auto plan = GroupedGemmPlan::create(spec_for(sku, props_));
    if (!plan) return fail(plan.error());
    auto ops = make_operands(sku, dims, beta != 0.0f, seed);
    if (!ops) return fail(ops.error());
    GroupedScalars scalars{alpha, beta};
    std::vector<float> alphas(dims.size(), alpha);
    if (sku.a == DType::e4m3) CUACTOR_TRY(fp8_scales(static_cast<int>(dims.size()), alpha, scalars, alphas));
    auto prepared = plan->prepare(ops->groups, scalars);
    if (!prepared) return fail(prepared.error());
    if (prepared->sku() != sku) return fail(errc::internal, "prepared SKU differs from the plan's");
    CUACTOR_TRY(run(*prepared));
    return check(sku, ops->groups, alphas, beta, what);
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
  std::vector<gpu::DeviceBuffer> scale_buffers_;
};

/// Random ragged groups: M = 0 groups, M = 1, tails around the tile sizes; N and K multiples of the
/// 16-byte alignment but not of the tiles.
std::vector<Dims> ragged_dims(std::mt19937& rng, const GemmSku& sku, int groups) {
  static constexpr int ms[] = {0, 1, 17, 63, 64, 65, 100, 128, 129, 255, 300, 513};
  const int fp8 = sku.a == DType::e4m3 ? 2 : 1;
  const int ns[] = {64, 136, 256, 264, 520};
  const int ks[] = {64 * fp8, 136 * fp8, 512, 72 * fp8};
  std::vector<Dims> out;
  const int n = ns[rng() % std::size(ns)], k = ks[rng() % std::size(ks)];
  for (int g = 0; g < groups; ++g) {
    // Experts share N and K in an MoE layer; every third case varies them per group too.
    const bool vary = groups % 3 == 0;
    out.push_back(
        {ms[rng() % std::size(ms)], vary ? ns[rng() % std::size(ns)] : n, vary ? ks[rng() % std::size(ks)] : k});
  }
  return out;
}

TEST_F(GroupedGemmGpu, EverySkuRaggedGroupsEveryElement) {
  const auto skus = runnable_skus();
  ASSERT_FALSE(skus.empty()) << "no grouped kernel in this build runs on " << props_.arch.name();
  std::mt19937 rng(2162);
  for (const GemmSku& sku : skus) {
    for (int it = 0; it < 4; ++it) {
      const auto dims = ragged_dims(rng, sku, 3 + static_cast<int>(rng() % 10));
      const float beta = it % 2 ? 0.5f : 0.0f;
      auto bad = run_case(sku, dims, 1.25f, beta, 100 + static_cast<std::uint64_t>(it),
                          "ragged iteration " + std::to_string(it));
      ASSERT_TRUE(bad.has_value()) << sku.to_string() << ": " << bad.error().to_string();
      EXPECT_EQ(*bad, 0u) << sku.to_string();
    }
    std::cout << "[ checked  ] " << sku.to_string() << ": 4 ragged cases, every element\n";
  }
}

// CUTLASS issue #2162 reports a rare wrong output tile in the ptr-array cooperative kernel: many
// launches with fresh data, every element of every group checked.
TEST_F(GroupedGemmGpu, ManyIterationsFreshDataEveryElement) {
  std::mt19937 rng(7);
  for (const GemmSku& sku : runnable_skus()) {
    if (sku.schedule != GemmSchedule::cooperative && sku.schedule != GemmSchedule::cooperative_fp8_fast_accum &&
        sku.schedule != GemmSchedule::multistage)
      continue;
    unsigned long long total = 0;
    for (int it = 0; it < 12; ++it) {
      std::vector<Dims> dims;
      for (int g = 0; g < 16; ++g) dims.push_back({static_cast<int>(rng() % 700), 512, 512});
      auto bad = run_case(sku, dims, 1.0f, 0.0f, 1000 + static_cast<std::uint64_t>(it),
                          "stress iteration " + std::to_string(it));
      ASSERT_TRUE(bad.has_value()) << sku.to_string() << ": " << bad.error().to_string();
      total += *bad;
    }
    EXPECT_EQ(total, 0u) << sku.to_string();
  }
}

TEST_F(GroupedGemmGpu, KZeroGroupIsBetaTimesC) {
  for (const GemmSku& sku : runnable_skus()) {
    if (sku.a == DType::e4m3) continue;
    auto bad = run_case(sku, {{96, 128, 0}, {70, 128, 64}, {0, 128, 0}, {33, 128, 0}}, 1.0f, 2.0f, 5, "K = 0");
    ASSERT_TRUE(bad.has_value()) << sku.to_string() << ": " << bad.error().to_string();
    EXPECT_EQ(*bad, 0u) << sku.to_string();
    // beta = 0 with K = 0: D = 0, written over the poison.
    auto zero = run_case(sku, {{40, 64, 0}, {8, 64, 64}}, 1.0f, 0.0f, 6, "K = 0, beta = 0");
    ASSERT_TRUE(zero.has_value()) << sku.to_string() << ": " << zero.error().to_string();
    EXPECT_EQ(*zero, 0u) << sku.to_string();
  }
}

TEST_F(GroupedGemmGpu, CapturedGraphEqualsEager) {
  const auto skus = runnable_skus();
  ASSERT_FALSE(skus.empty());
  const GemmSku& sku = skus.front();
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GroupedGemmPlan::create(spec_for(sku, props_)));
  std::mt19937 rng(11);
  const auto dims = ragged_dims(rng, sku, 9);
  CUACTOR_ASSERT_OK_AND_ASSIGN(ops, make_operands(sku, dims, true, 77));
  GroupedScalars scalars{0.75f, 0.5f};
  std::vector<float> alphas(dims.size(), 0.75f);
  if (sku.a == DType::e4m3) CUACTOR_ASSERT_OK(fp8_scales(static_cast<int>(dims.size()), 0.75f, scalars, alphas));
  CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, plan.prepare(ops.groups, scalars));
  CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(prepared.workspace_size()));
  const cudaStream_t s = stream_.get();
  CUACTOR_ASSERT_OK(prepared.run(s, ws.data(), ws.size()));
  std::vector<std::byte> eager(ops.d.size()), graphed(ops.d.size());
  CUACTOR_ASSERT_OK(gpu::copy_async(eager.data(), ops.d.data(), eager.size(), s));
  CUACTOR_ASSERT_OK(gpu::memset_async(ops.d.data(), 0xff, ops.d.size(), s));
  CUACTOR_ASSERT_OK(gpu::memset_async(ws.data(), 0, ws.size(), s));  // the graph must re-upload everything
  CUACTOR_ASSERT_OK(stream_.synchronize());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUACTOR_ASSERT_OK(gpu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture"));
  const auto captured = prepared.run(s, ws.data(), ws.size());
  CUACTOR_ASSERT_OK(gpu::check(cudaStreamEndCapture(s, &graph), "end capture"));
  CUACTOR_ASSERT_OK(captured);
  CUACTOR_ASSERT_OK(gpu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
  for (int replay = 0; replay < 3; ++replay) CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, s), "graph launch"));
  CUACTOR_ASSERT_OK(gpu::copy_async(graphed.data(), ops.d.data(), graphed.size(), s));
  CUACTOR_ASSERT_OK(stream_.synchronize());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_TRUE(eager == graphed) << "graph replay differs from eager execution for " << sku.to_string();
  CUACTOR_ASSERT_OK_AND_ASSIGN(bad, check(sku, ops.groups, alphas, 0.5f, "graph"));
  EXPECT_EQ(bad, 0u);
}

// [K6]: rows per group come from device memory; one captured graph serves every routing, and a
// routing that overruns the capacity skips the bad group and says which, instead of faulting.
TEST_F(GroupedGemmGpu, DeviceSizedOffsetsOneGraphEveryRouting) {
  for (const GemmSku& sku : runnable_skus()) {
    if (sku.schedule == GemmSchedule::pingpong || sku.schedule == GemmSchedule::cooperative_fp8_fast_accum) continue;
    constexpr int kGroups = 8, kCapacity = 1024, kN = 256, kK = 128;
    const std::size_t ea = size_bits(sku.a) / 8, ed = size_bits(sku.d) / 8;
    const bool b_col = sku.layout_b == MatrixLayout::col;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GroupedGemmPlan::create(spec_for(sku, props_)));
    CUACTOR_ASSERT_OK_AND_ASSIGN(a, alloc(std::size_t{kCapacity} * kK * ea));
    CUACTOR_ASSERT_OK_AND_ASSIGN(b, alloc(std::size_t{kGroups} * kN * kK * ea));
    CUACTOR_ASSERT_OK_AND_ASSIGN(d, alloc(std::size_t{kCapacity} * kN * ed));
    CUACTOR_ASSERT_OK_AND_ASSIGN(offs, alloc(kGroups * sizeof(std::int32_t)));
    const cudaStream_t s = stream_.get();
    CUACTOR_ASSERT_OK(gpu::check(test_support::fill_random(sku.a, a.data(), a.size() / ea, 31, 1.0f, s), "fill a"));
    CUACTOR_ASSERT_OK(gpu::check(test_support::fill_random(sku.b, b.data(), b.size() / ea, 32, 1.0f, s), "fill b"));
    DeviceSizedGroups groups = packed_device_groups(kGroups, offs.data_as<std::int32_t>(), kCapacity, kN, kK, a.data(),
                                                    b.data(), d.data(), kN);
    groups.ldb = b_col ? kK : kN;  // B as K x N row-major: its rows hold N
    GroupedScalars scalars;
    std::vector<float> alphas(kGroups, 1.0f);
    if (sku.a == DType::e4m3) CUACTOR_ASSERT_OK(fp8_scales(kGroups, 1.0f, scalars, alphas));
    CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, plan.prepare(groups, scalars));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(prepared.workspace_size()));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "begin capture"));
    const auto captured = prepared.run(s, ws.data(), ws.size());
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamEndCapture(s, &graph), "end capture"));
    CUACTOR_ASSERT_OK(captured);
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
    std::mt19937 rng(99);
    for (int routing = 0; routing < 5; ++routing) {
      std::vector<std::int32_t> rows(kGroups), ends(kGroups);
      int total = 0;
      for (int g = 0; g < kGroups; ++g) {
        rows[g] = (g + routing) % 3 == 0 ? 0 : static_cast<int>(rng() % 200);  // some experts get no tokens
        total += rows[g];
        ends[g] = total;
      }
      ASSERT_LE(total, kCapacity);
      CUACTOR_ASSERT_OK(gpu::copy_async(offs.data(), ends.data(), sizeof(std::int32_t) * kGroups, s));
      CUACTOR_ASSERT_OK(gpu::memset_async(d.data(), 0xff, d.size(), s));
      CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, s), "graph launch"));
      std::int32_t flag = -1;
      CUACTOR_ASSERT_OK(gpu::copy_async(&flag, prepared.routing_error_flag(ws.data()), sizeof(flag), s));
      CUACTOR_ASSERT_OK(stream_.synchronize());
      EXPECT_EQ(flag, 0);
      std::vector<GroupedProblem> view(kGroups);
      int begin = 0;
      for (int g = 0; g < kGroups; ++g) {
        GroupedProblem& p = view[static_cast<std::size_t>(g)];
        p = {rows[g],    kN,
             kK,         a.data_as<std::byte>() + std::size_t(begin) * kK * ea,
             kK,         b.data_as<std::byte>() + std::size_t(g) * kN * kK * ea,
             groups.ldb, nullptr,
             0,          d.data_as<std::byte>() + std::size_t(begin) * kN * ed,
             kN};
        begin = ends[g];
      }
      CUACTOR_ASSERT_OK_AND_ASSIGN(bad, check(sku, view, alphas, 0.0f, "routing " + std::to_string(routing)));
      EXPECT_EQ(bad, 0u) << sku.to_string() << " routing " << routing;
    }
    // Group 5 ends beyond the capacity: skipped and reported, no fault.
    std::vector<std::int32_t> overrun{10, 20, 30, 40, 50, kCapacity + 7, kCapacity + 7, kCapacity + 7};
    CUACTOR_ASSERT_OK(gpu::copy_async(offs.data(), overrun.data(), sizeof(std::int32_t) * kGroups, s));
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, s), "graph launch"));
    std::int32_t flag = -1;
    CUACTOR_ASSERT_OK(gpu::copy_async(&flag, prepared.routing_error_flag(ws.data()), sizeof(flag), s));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    EXPECT_EQ(flag, 6) << "1 + the first out-of-range group (5) must be reported";
    // The next replay with a good routing clears the report (the kernel writes the flag every run).
    CUACTOR_ASSERT_OK(gpu::copy_async(offs.data(), overrun.data(), sizeof(std::int32_t) * 5, s));
    const std::int32_t good_tail[3] = {60, 70, 80};
    CUACTOR_ASSERT_OK(gpu::copy_async(offs.data_as<std::int32_t>() + 5, good_tail, sizeof(good_tail), s));
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, s), "graph launch"));
    CUACTOR_ASSERT_OK(gpu::copy_async(&flag, prepared.routing_error_flag(ws.data()), sizeof(flag), s));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    EXPECT_EQ(flag, 0) << "a good routing after a bad one must clear the report";
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

TEST_F(GroupedGemmGpu, WorkspaceTooSmallAndMisalignedAreRejected) {
  const auto skus = runnable_skus();
  ASSERT_FALSE(skus.empty());
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GroupedGemmPlan::create(spec_for(skus.front(), props_)));
  CUACTOR_ASSERT_OK_AND_ASSIGN(ops, make_operands(skus.front(), {{64, 128, 64}}, false, 3));
  CUACTOR_ASSERT_OK_AND_ASSIGN(prepared, plan.prepare(ops.groups));
  EXPECT_EQ(prepared.group_count(), 1);
  CUACTOR_ASSERT_OK_AND_ASSIGN(ws, alloc(prepared.workspace_size() + 256));
  auto small = prepared.run(stream_.get(), ws.data(), prepared.workspace_size() - 1);
  ASSERT_FALSE(small.has_value());
  EXPECT_EQ(small.error().code(), make_error_code(errc::workspace_too_small));
  auto misaligned = prepared.run(stream_.get(), ws.data_as<std::byte>() + 16, prepared.workspace_size());
  ASSERT_FALSE(misaligned.has_value());
  EXPECT_EQ(misaligned.error().code(), make_error_code(errc::invalid_argument));
  CUACTOR_ASSERT_OK(stream_.synchronize());
}

}  // namespace
}  // namespace cuactor::kernels
