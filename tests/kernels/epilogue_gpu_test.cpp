// Dense GEMM epilogue trees ([K8]) on a GPU: every tree in the catalog and trees compiled by the JIT,
// against an fp64 host evaluation of the same tree from the same rounded inputs, on shapes with
// tails, with edge values (negative activation inputs, a zero row scale, large biases), NaN / inf
// propagation, amax outputs, and poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "support/epilogue_reference.hpp"
#include "support/gpu_test.hpp"
#include "support/host_elements.hpp"

namespace cuactor::kernels {
namespace {

using test_support::EpilogueLeaves;
using test_support::load;
using test_support::store;

constexpr GpuArch kHopper{9, 0, true};

/// Random values rounded to `t`: the device bytes and the rounded doubles.
struct HostVector {
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};
HostVector random_values(DType t, std::size_t count, double lo, double hi, std::mt19937_64& rng) {
  HostVector v;
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::size_t i = 0; i < count; ++i) v.values.push_back(store(t, dist(rng), v.bytes));
  return v;
}
/// Overwrites element i of `v` with `x` (rounded to `t`).
void set_value(HostVector& v, DType t, std::size_t i, double x) {
  std::vector<std::uint8_t> one;
  v.values[i] = store(t, x, one);
  std::memcpy(v.bytes.data() + i * one.size(), one.data(), one.size());
}

class EpilogueGpuTest : public test_support::GpuTest {
 protected:
  void SetUp() override {
    test_support::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    if (props_.arch != kHopper) GTEST_SKIP() << "epilogue trees run on sm_90a; this device is " << props_.arch.name();
    auto stream = gpu::Stream::create(0);
    ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
    stream_ = std::move(*stream);
    auto pool = gpu::MemPool::device_default(0);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    pool_ = std::move(*pool);
  }

  Result<gpu::DeviceBuffer> upload(const std::vector<std::uint8_t>& bytes) {
    auto buf = gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(bytes.size(), 16), stream_.get());
    if (!buf) return buf;
    if (!bytes.empty()) CUACTOR_TRY(gpu::copy_async(buf->data(), bytes.data(), bytes.size(), stream_.get()));
    return buf;
  }

  /// Inputs of one case; tests edit them (edge values) before run().
  struct Case {
    int m = 0, n = 0, k = 0;
    float alpha = 1.0f, beta = 0.0f;
    HostVector a, b, c, row_scale, col_scale, row_bias, col_bias;
  };

  Case make_case(const GemmSku& sku, int m, int n, int k, std::mt19937_64& rng) {
    Case cs;
    cs.m = m;
    cs.n = n;
    cs.k = k;
    const double range = sku.a == DType::e4m3 ? 4.0 : 1.0;
    cs.a = random_values(sku.a, static_cast<std::size_t>(m) * k, -range, range, rng);  // M x K row-major
    cs.b = random_values(sku.b, static_cast<std::size_t>(n) * k, -range, range, rng);  // N x K row-major ("col")
    cs.c = random_values(sku.c, static_cast<std::size_t>(m) * n, -2.0, 2.0, rng);
    cs.row_scale = random_values(DType::f32, m, -2.0, 2.0, rng);
    set_value(cs.row_scale, DType::f32, 0, 0.0);  // a zero scale (MoE: a token with weight 0)
    cs.col_scale = random_values(DType::f32, n, 0.25, 2.0, rng);
    cs.row_bias = random_values(sku.c, m, -4.0, 4.0, rng);
    cs.col_bias = random_values(sku.c, n, -4.0, 4.0, rng);
    cs.alpha = 0.75f;
    cs.beta = -0.5f;
    return cs;
  }

  /// Runs `plan` on `cs`, compares D (and amax) with the fp64 evaluation of the plan's tree, and
  /// returns D as doubles for further checks.
  std::vector<double> run_and_check(const GemmPlan& plan, const Case& cs, double tolerance) {
    const GemmSku& sku = plan.sku();
    const EpilogueSpec& tree = sku.epilogue;
    SCOPED_TRACE(::testing::Message() << sku.to_string() << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k);
    EXPECT_EQ(sku.layout_a, MatrixLayout::row);
    EXPECT_EQ(sku.layout_b, MatrixLayout::col);
    EXPECT_EQ(sku.layout_c, MatrixLayout::row);
    const std::size_t d_bytes = static_cast<std::size_t>(cs.m) * cs.n * size_bits(sku.d) / 8;
    std::vector<std::uint8_t> poison(d_bytes, 0xff);  // NaN in every float type
    auto da = upload(cs.a.bytes), db = upload(cs.b.bytes), dc = upload(cs.c.bytes), dd = upload(poison);
    auto rs = upload(cs.row_scale.bytes), cscale = upload(cs.col_scale.bytes), rb = upload(cs.row_bias.bytes),
         cb = upload(cs.col_bias.bytes), amax = upload(std::vector<std::uint8_t>(4, 0));
    auto ws = gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(plan.workspace_size(), 16), stream_.get());
    for (auto* b : {&da, &db, &dc, &dd, &rs, &cscale, &rb, &cb, &amax, &ws})
      if (!b->has_value()) {
        ADD_FAILURE() << b->error().to_string();
        return {};
      }
    GemmOperands o;
    o.a = da->data();
    o.b = db->data();
    o.c = tree.uses(EpilogueNode::c) ? dc->data() : nullptr;
    o.d = dd->data();
    o.alpha = cs.alpha;
    o.beta = cs.beta;
    auto& e = o.epilogue;
    if (tree.uses(EpilogueNode::row_scale)) e.row_scale = rs->data_as<const float>();
    if (tree.uses(EpilogueNode::col_scale)) e.col_scale = cscale->data_as<const float>();
    if (tree.uses(EpilogueNode::row_bias)) e.row_bias = rb->data();
    if (tree.uses(EpilogueNode::col_bias)) e.col_bias = cb->data();
    if (tree.uses(EpilogueNode::amax)) e.amax = amax->data_as<float>();
    e.clamp_lo = -1.5f;
    e.clamp_hi = 2.5f;
    const Status ran = plan.run(o, ws->data(), ws->size(), stream_.get());
    EXPECT_TRUE(ran.has_value()) << ran.error().to_string();
    std::vector<std::uint8_t> got(d_bytes);
    float amax_got = 0;
    EXPECT_TRUE(gpu::copy_async(got.data(), dd->data(), got.size(), stream_.get()).has_value());
    EXPECT_TRUE(gpu::copy_async(&amax_got, amax->data(), 4, stream_.get()).has_value());
    EXPECT_TRUE(stream_.synchronize().has_value());

    std::vector<double> out(static_cast<std::size_t>(cs.m) * cs.n);
    double num = 0, den = 0, amax_ref = 0;
    for (int i = 0; i < cs.m; ++i)
      for (int j = 0; j < cs.n; ++j) {
        EpilogueLeaves v;
        for (int kk = 0; kk < cs.k; ++kk)
          v.acc += cs.a.values[static_cast<std::size_t>(i) * cs.k + kk] *
                   cs.b.values[static_cast<std::size_t>(j) * cs.k + kk];
        const std::size_t ij = static_cast<std::size_t>(i) * cs.n + j;
        v.c = cs.c.values[ij];
        v.alpha = cs.alpha;
        v.beta = cs.beta;
        v.row_scale = cs.row_scale.values[i];
        v.col_scale = cs.col_scale.values[j];
        v.row_bias = cs.row_bias.values[i];
        v.col_bias = cs.col_bias.values[j];
        v.clamp_lo = -1.5;
        v.clamp_hi = 2.5;
        const double ref = test_support::evaluate_epilogue(tree, v, amax_ref);
        out[ij] = load(sku.d, got, ij);
        if (!std::isfinite(ref)) continue;  // propagation is checked by the caller
        num += (out[ij] - ref) * (out[ij] - ref);
        den += ref * ref;
      }
    const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LT(err, tolerance) << "relative error " << err;
    if (tree.uses(EpilogueNode::amax) && std::isfinite(amax_ref)) {
      EXPECT_NEAR(amax_got, amax_ref, 1e-3 * amax_ref + 1e-6) << "amax";
    }
    return out;
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
};

double tolerance(const GemmSku& s) {
  return s.a == DType::e4m3 ? 1.5e-2 : 8e-3;
}

Result<GemmPlan> plan_for(const GemmSku& sku, int m, int n, int k, int sm_count) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = sku.a;
  p.b = sku.b;
  p.c = sku.c;
  p.d = sku.d;
  p.epilogue = sku.epilogue;
  GemmPlanOptions opts;
  opts.sku_override = sku;
  opts.sm_count = sm_count;
  return GemmPlan::make(p, kHopper, opts);
}

std::vector<const CatalogEntry*> catalog_trees() {
  std::vector<const CatalogEntry*> out;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::dense))
    if (!e->sku.epilogue.is_preset()) out.push_back(e);
  return out;
}

TEST_F(EpilogueGpuTest, CatalogTreesMatchFp64Reference) {
  const auto trees = catalog_trees();
  ASSERT_FALSE(trees.empty()) << "the catalog holds no epilogue tree";
  std::mt19937_64 rng(20261124);
  std::uniform_int_distribution<int> mdist(1, 700), ndist(1, 60), kdist(1, 40);
  for (const CatalogEntry* e : trees) {
    const int kq = e->sku.a == DType::e4m3 ? 16 : 8;
    std::vector<std::array<int, 3>> shapes = {{1, 8, kq}, {257, 264, 528}, {1000, 520, 384}, {128, 256, 64}};
    for (int i = 0; i < 3; ++i) shapes.push_back({mdist(rng), ndist(rng) * 8, kdist(rng) * kq});
    for (const auto& [m, n, k] : shapes) {
      CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(e->sku, m, n, k, props_.multiprocessors));
      run_and_check(plan, make_case(e->sku, m, n, k, rng), tolerance(e->sku));
      if (HasFailure()) return;
    }
  }
}

TEST_F(EpilogueGpuTest, PlansChooseCatalogTreesByProblem) {
  GemmProblem p;
  p.m = 512;
  p.n = 1024;
  p.k = 256;
  p.epilogue = epi::apply(EpilogueNode::silu, epi::add(epi::acc(), epi::col_bias()));
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch));
  EXPECT_EQ(plan.sku().epilogue, p.epilogue);
  EXPECT_EQ(plan.source(), PlanSource::heuristic);
}

TEST_F(EpilogueGpuTest, NanAndInfinityPropagateThroughBiasAndActivation) {
  auto want = EpilogueSpec::parse("silu(add(acc,colbias))");
  ASSERT_TRUE(want.has_value());
  const CatalogEntry* entry = nullptr;
  for (const CatalogEntry* e : catalog_trees())
    if (e->sku.epilogue == *want && e->sku.a == DType::bf16) entry = e;
  ASSERT_NE(entry, nullptr) << "silu(add(acc,colbias)) for bf16 must be in the catalog";
  std::mt19937_64 rng(5);
  Case cs = make_case(entry->sku, 130, 72, 64, rng);
  set_value(cs.col_bias, entry->sku.c, 3, std::numeric_limits<double>::quiet_NaN());
  set_value(cs.col_bias, entry->sku.c, 5, std::numeric_limits<double>::infinity());
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(entry->sku, cs.m, cs.n, cs.k, props_.multiprocessors));
  const auto d = run_and_check(plan, cs, tolerance(entry->sku));
  ASSERT_EQ(d.size(), static_cast<std::size_t>(cs.m) * cs.n);
  for (int i = 0; i < cs.m; ++i) {
    EXPECT_TRUE(std::isnan(d[static_cast<std::size_t>(i) * cs.n + 3])) << "row " << i;
    EXPECT_EQ(d[static_cast<std::size_t>(i) * cs.n + 5], std::numeric_limits<double>::infinity()) << "row " << i;
  }
}

// Trees that are not in the catalog go through the JIT (sm_90a compile on this machine, cached).
TEST_F(EpilogueGpuTest, JitTreesMatchFp64Reference) {
  jit::JitOptions options;
  options.disk.directory = std::filesystem::temp_directory_path() / "cuactor-jit-gpu-test-cache";
  options.workers = 4;
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, jit::JitEngine::create(options));
  jit::GemmJit gemm(engine);
  std::vector<GemmSku> skus;
  for (const char* token : {"amax(clamp(gelutanh(fma(beta,c,mul(alpha,acc)))))",
                            "sigmoid(add(mul(acc,rowscale),rowbias))", "relu(mul(add(acc,colbias),colscale))"}) {
    GemmProblem p;
    p.m = 4096;
    p.n = 4096;
    p.k = 64;
    CUACTOR_ASSERT_OK_AND_ASSIGN(tree, EpilogueSpec::parse(token));
    p.epilogue = tree;
    CUACTOR_ASSERT_OK_AND_ASSIGN(sku, GemmPlan::sku_for(p, kHopper));
    ASSERT_EQ(find_in_catalog(sku), nullptr) << sku.to_string() << " is in the catalog; pick another JIT tree";
    skus.push_back(sku);
  }
  std::vector<jit::JitFuture<jit::ResolvedInstance>> futures;
  for (const GemmSku& s : skus) futures.push_back(gemm.resolve(s));  // compiled in parallel
  std::mt19937_64 rng(11);
  for (std::size_t i = 0; i < skus.size(); ++i) {
    const auto& r = futures[i].get();
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    for (const auto& [m, n, k] : {std::array<int, 3>{257, 264, 520}, std::array<int, 3>{33, 1032, 128}}) {
      GemmProblem p;
      p.m = m;
      p.n = n;
      p.k = k;
      p.epilogue = skus[i].epilogue;
      CUACTOR_ASSERT_OK_AND_ASSIGN(
          plan, GemmPlan::with_instance(p, kHopper, skus[i], *(*r)->abi, (*r)->jit, PlanSource::heuristic));
      run_and_check(plan, make_case(skus[i], m, n, k, rng), tolerance(skus[i]));
    }
  }
}

}  // namespace
}  // namespace cuactor::kernels
