// Dense GEMM epilogue trees ([K8]) on a GPU: every tree in the catalog and trees compiled by the JIT,
// against an fp64 host evaluation of the same tree from the same rounded inputs, on shapes with
// tails, with edge values (negative activation inputs, a zero row scale, large biases), NaN / inf
// propagation, the side outputs (amax, aux, row sums) with batches and padded rows, and poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "support/epilogue_reference.hpp"
#include "support/gpu_test.hpp"
#include "support/hopper_gpu_test.hpp"
#include "support/host_elements.hpp"
#include "support/jit_gpu_cache.hpp"

namespace cuactor::kernels {
namespace {

using test_support::EpilogueLeaves;
using test_support::HostVector;
using test_support::load;
using test_support::random_values;
using test_support::set_value;

constexpr GpuArch kHopper{9, 0, true};

class EpilogueGpuTest : public test_support::HopperGpuTest {
 protected:
  Result<gpu::DeviceBuffer> upload(const std::vector<std::uint8_t>& bytes) {
    auto buf = gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(bytes.size(), 16), stream_.get());
    if (!buf) return buf;
    if (!bytes.empty()) CUACTOR_TRY(gpu::copy_async(buf->data(), bytes.data(), bytes.size(), stream_.get()));
    return buf;
  }

  /// Inputs of one case; tests edit them (edge values) before run().
  /// D, C and aux share the leading dimension ldd = n + pad; batches are packed one after another.
  struct Case {
    int m = 0, n = 0, k = 0, batch = 1, pad = 0;
    float alpha = 1.0f, beta = 0.0f;
    HostVector a, b, c, row_scale, col_scale, row_bias, col_bias;
    [[nodiscard]] std::size_t ldd() const { return static_cast<std::size_t>(n + pad); }
    [[nodiscard]] std::size_t d_elements() const { return static_cast<std::size_t>(batch) * m * ldd(); }
  };

  Case make_case(const GemmSku& sku, int m, int n, int k, std::mt19937_64& rng, int batch = 1, int pad = 0) {
    Case cs;
    cs.m = m;
    cs.n = n;
    cs.k = k;
    cs.batch = batch;
    cs.pad = pad;
    const double range = sku.a == DType::e4m3 ? 4.0 : 1.0;
    const auto batches = static_cast<std::size_t>(batch);
    cs.a = random_values(sku.a, batches * m * k, -range, range, rng);  // batch x M x K row-major
    cs.b = random_values(sku.b, batches * n * k, -range, range, rng);  // batch x N x K row-major ("col")
    cs.c = random_values(sku.c, cs.d_elements(), -2.0, 2.0, rng);
    cs.row_scale = random_values(DType::f32, m, -2.0, 2.0, rng);
    set_value(cs.row_scale, DType::f32, 0, 0.0);  // a zero scale (MoE: a token with weight 0)
    cs.col_scale = random_values(DType::f32, n, 0.25, 2.0, rng);
    cs.row_bias = random_values(sku.c, m, -4.0, 4.0, rng);
    cs.col_bias = random_values(sku.c, n, -4.0, 4.0, rng);
    cs.alpha = 0.75f;
    cs.beta = -0.5f;
    return cs;
  }

  /// Runs `plan` on `cs`, compares D and the tree's side outputs (amax, aux, row sums) with the fp64
  /// evaluation of the plan's tree, and returns D (batch x M x N, padding dropped) as doubles.
  std::vector<double> run_and_check(const GemmPlan& plan, const Case& cs, double tolerance) {
    const GemmSku& sku = plan.sku();
    const EpilogueSpec& tree = sku.epilogue;
    SCOPED_TRACE(::testing::Message() << sku.to_string() << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k
                                      << " batch=" << cs.batch << " pad=" << cs.pad);
    EXPECT_EQ(sku.layout_a, MatrixLayout::row);
    EXPECT_EQ(sku.layout_b, MatrixLayout::col);
    EXPECT_EQ(sku.layout_c, MatrixLayout::row);
    const std::size_t d_bytes = cs.d_elements() * size_bits(sku.d) / 8;
    const std::size_t aux_bytes = cs.d_elements() * size_bits(sku.c) / 8;
    const std::size_t sums = static_cast<std::size_t>(cs.batch) * cs.m;
    // 0xff is NaN in every float type: outputs (and padding, which must stay so) start poisoned.
    auto da = upload(cs.a.bytes), db = upload(cs.b.bytes), dc = upload(cs.c.bytes),
         dd = upload(std::vector<std::uint8_t>(d_bytes, 0xff));
    auto rs = upload(cs.row_scale.bytes), cscale = upload(cs.col_scale.bytes), rb = upload(cs.row_bias.bytes),
         cb = upload(cs.col_bias.bytes), amax = upload(std::vector<std::uint8_t>(4, 0xff)),
         aux = upload(std::vector<std::uint8_t>(aux_bytes, 0xff)),
         row_sum = upload(std::vector<std::uint8_t>(sums * 4, 0xff));
    auto ws = gpu::DeviceBuffer::allocate(pool_, std::max<std::size_t>(plan.workspace_size(), 16), stream_.get());
    for (auto* b : {&da, &db, &dc, &dd, &rs, &cscale, &rb, &cb, &amax, &aux, &row_sum, &ws})
      if (!b->has_value()) {
        ADD_FAILURE() << b->error().to_string();
        return {};
      }
    GemmOperands o;
    o.a = da->data();
    o.b = db->data();
    o.c = tree.uses(EpilogueNode::c) ? dc->data() : nullptr;
    o.d = dd->data();
    o.ldd = o.ldc = static_cast<std::int64_t>(cs.ldd());
    o.alpha = cs.alpha;
    o.beta = cs.beta;
    auto& e = o.epilogue;
    if (tree.uses(EpilogueNode::row_scale)) e.row_scale = rs->data_as<const float>();
    if (tree.uses(EpilogueNode::col_scale)) e.col_scale = cscale->data_as<const float>();
    if (tree.uses(EpilogueNode::row_bias)) e.row_bias = rb->data();
    if (tree.uses(EpilogueNode::col_bias)) e.col_bias = cb->data();
    if (tree.uses(EpilogueNode::amax)) e.amax = amax->data_as<float>();
    if (tree.uses(EpilogueNode::aux)) e.aux = aux->data();
    if (tree.uses(EpilogueNode::row_sum)) e.row_sum = row_sum->data_as<float>();
    e.clamp_lo = -1.5f;
    e.clamp_hi = 2.5f;
    const Status ran = plan.run(o, ws->data(), ws->size(), stream_.get());
    EXPECT_TRUE(ran.has_value()) << ran.error().to_string();
    std::vector<std::uint8_t> got(d_bytes), got_aux(aux_bytes);
    std::vector<float> got_sums(sums);
    float amax_got = 0;
    EXPECT_TRUE(gpu::copy_async(got.data(), dd->data(), got.size(), stream_.get()).has_value());
    EXPECT_TRUE(gpu::copy_async(got_aux.data(), aux->data(), got_aux.size(), stream_.get()).has_value());
    EXPECT_TRUE(gpu::copy_async(got_sums.data(), row_sum->data(), sums * 4, stream_.get()).has_value());
    EXPECT_TRUE(gpu::copy_async(&amax_got, amax->data(), 4, stream_.get()).has_value());
    EXPECT_TRUE(stream_.synchronize().has_value());

    std::vector<double> out;
    out.reserve(static_cast<std::size_t>(cs.batch) * cs.m * cs.n);
    test_support::EpilogueSideOutputs side;
    double num = 0, den = 0, aux_num = 0, aux_den = 0, sum_num = 0, sum_den = 0;
    bool sums_finite = true;
    for (int l = 0; l < cs.batch; ++l)
      for (int i = 0; i < cs.m; ++i) {
        double row_sum_ref = 0;
        const std::size_t row = (static_cast<std::size_t>(l) * cs.m + i) * cs.ldd();
        for (int j = 0; j < cs.n; ++j) {
          EpilogueLeaves v;
          const std::size_t a0 = (static_cast<std::size_t>(l) * cs.m + i) * cs.k;
          const std::size_t b0 = (static_cast<std::size_t>(l) * cs.n + j) * cs.k;
          for (int kk = 0; kk < cs.k; ++kk) v.acc += cs.a.values[a0 + kk] * cs.b.values[b0 + kk];
          v.c = cs.c.values[row + j];
          v.alpha = cs.alpha;
          v.beta = cs.beta;
          v.row_scale = cs.row_scale.values[i];
          v.col_scale = cs.col_scale.values[j];
          v.row_bias = cs.row_bias.values[i];
          v.col_bias = cs.col_bias.values[j];
          v.clamp_lo = -1.5;
          v.clamp_hi = 2.5;
          const double ref = test_support::evaluate_epilogue(tree, v, side);
          row_sum_ref += side.row_sum_term;
          out.push_back(load(sku.d, got, row + j));
          if (tree.uses(EpilogueNode::aux) && std::isfinite(side.aux)) {
            const double x = load(sku.c, got_aux, row + j);
            aux_num += (x - side.aux) * (x - side.aux);
            aux_den += side.aux * side.aux;
          }
          if (!std::isfinite(ref)) continue;  // propagation is checked by the caller
          num += (out.back() - ref) * (out.back() - ref);
          den += ref * ref;
        }
        for (int j = cs.n; j < cs.n + cs.pad; ++j) {
          EXPECT_TRUE(std::isnan(load(sku.d, got, row + j))) << "D padding written at batch " << l << " row " << i;
          if (tree.uses(EpilogueNode::aux)) {
            EXPECT_TRUE(std::isnan(load(sku.c, got_aux, row + j))) << "aux padding written at row " << i;
          }
        }
        if (!tree.uses(EpilogueNode::row_sum)) continue;
        const double s = got_sums[static_cast<std::size_t>(l) * cs.m + i];
        if (!std::isfinite(row_sum_ref)) {
          sums_finite = false;
          continue;
        }
        sum_num += (s - row_sum_ref) * (s - row_sum_ref);
        sum_den += row_sum_ref * row_sum_ref;
      }
    auto relative = [](double n2, double d2) { return d2 > 0 ? std::sqrt(n2 / d2) : std::sqrt(n2); };
    EXPECT_LT(relative(num, den), tolerance) << "relative error of D";
    if (tree.uses(EpilogueNode::amax) && std::isfinite(side.amax)) {
      EXPECT_NEAR(amax_got, side.amax, 1e-3 * side.amax + 1e-6) << "amax";
    }
    // aux holds the node's input rounded once to C's dtype; D may round it again through more nodes.
    if (tree.uses(EpilogueNode::aux)) {
      EXPECT_LT(relative(aux_num, aux_den), tolerance) << "relative error of aux";
    }
    // Row sums are f32 sums of f32 values that D rounds to its (narrower) dtype afterwards.
    if (tree.uses(EpilogueNode::row_sum) && sums_finite) {
      EXPECT_LT(relative(sum_num, sum_den), tolerance) << "relative error of the row sums";
    }
    return out;
  }
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

/// The sm_90a SKU the plans pick for the tree `token` on a large problem (what the JIT tests compile).
Result<GemmSku> tree_sku(const char* token) {
  GemmProblem p;
  p.m = 4096;
  p.n = 4096;
  p.k = 64;
  auto tree = EpilogueSpec::parse(token);
  if (!tree) return fail(tree.error());
  p.epilogue = *tree;
  return GemmPlan::sku_for(p, kHopper);
}

// Trees that are not in the catalog go through the JIT (sm_90a compile on this machine, cached).
TEST_F(EpilogueGpuTest, JitTreesMatchFp64Reference) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, test_support::gpu_test_jit_engine(4));
  jit::GemmJit gemm(engine);
  std::vector<GemmSku> skus;
  for (const char* token : {"amax(clamp(gelutanh(fma(beta,c,mul(alpha,acc)))))",
                            "sigmoid(add(mul(acc,rowscale),rowbias))", "relu(mul(add(acc,colbias),colscale))"}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(sku, tree_sku(token));
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

// Trees over at most 32 columns (a router's logits with a bias, in bf16 and f16) get the narrow-column
// tile from the JIT through jit::plan_dense_gemm, the route of the CLI, the worker and the Python
// plans; also a tree the catalog holds in a 128-column configuration (silu over a column bias).
TEST_F(EpilogueGpuTest, NarrowTreesTakeTheNarrowTileThroughTheJit) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, test_support::gpu_test_jit_engine(4));
  jit::GemmJit gemm(engine);
  CUACTOR_ASSERT_OK_AND_ASSIGN(device, jit::TuningDevice::of(0));
  struct Shape {
    const char* token;
    DType type;
    int m, n, k;
  };
  const std::vector<Shape> shapes = {{"add(acc,colbias)", DType::bf16, 1000, 8, 4096},
                                     {"add(acc,colbias)", DType::bf16, 257, 16, 520},
                                     {"silu(add(acc,colbias))", DType::bf16, 96, 32, 1024},
                                     {"silu(add(acc,colbias))", DType::bf16, 257, 24, 520},
                                     {"sigmoid(add(mul(acc,rowscale),rowbias))", DType::f16, 130, 16, 256}};
  std::vector<GemmProblem> problems;
  std::vector<jit::JitFuture<jit::ResolvedInstance>> compiles;  // in parallel, before the first plan waits
  for (const Shape& s : shapes) {
    GemmProblem p;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.a = p.b = p.c = p.d = s.type;
    CUACTOR_ASSERT_OK_AND_ASSIGN(tree, EpilogueSpec::parse(s.token));
    p.epilogue = tree;
    CUACTOR_ASSERT_OK_AND_ASSIGN(sku, GemmPlan::sku_for(p, kHopper));
    compiles.push_back(gemm.resolve(sku));
    problems.push_back(p);
  }
  std::mt19937_64 rng(23);
  for (const GemmProblem& p : problems) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, jit::plan_dense_gemm(p, device, {}, nullptr, &gemm));
    SCOPED_TRACE(plan.sku().to_string());
    EXPECT_EQ(plan.sku().tile, (Shape3{64, p.n <= 16 ? 16 : 32, 128}));
    EXPECT_EQ(plan.split_k(), 1);
    run_and_check(plan, make_case(plan.sku(), static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), rng),
                  tolerance(plan.sku()));
  }
  for (auto& c : compiles) EXPECT_TRUE(c.get().has_value());
}

// Side outputs through the JIT: the pre-activation (aux) and per-row sums, on batches whose D (and so
// aux) rows are padded; the padding must stay untouched, and the row sums land per batch.
TEST_F(EpilogueGpuTest, JitSideOutputsMatchFp64ReferenceOnBatchesAndPaddedRows) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, test_support::gpu_test_jit_engine(4));
  jit::GemmJit gemm(engine);
  std::vector<GemmSku> skus;
  for (const char* token :
       {"rowsum(gelu(aux(add(acc,colbias))))", "amax(aux(rowsum(fma(acc,rowscale,mul(beta,c)))))"}) {
    CUACTOR_ASSERT_OK_AND_ASSIGN(sku, tree_sku(token));
    skus.push_back(sku);
  }
  std::vector<jit::JitFuture<jit::ResolvedInstance>> futures;
  for (const GemmSku& s : skus) futures.push_back(gemm.resolve(s));
  std::mt19937_64 rng(29);
  for (std::size_t i = 0; i < skus.size(); ++i) {
    const auto& r = futures[i].get();
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    struct Shape {
      int m, n, k, batch, pad;
    };
    for (const Shape& sh : {Shape{257, 264, 520, 3, 8}, Shape{33, 1032, 128, 1, 0}, Shape{700, 40, 64, 2, 16}}) {
      GemmProblem p;
      p.m = sh.m;
      p.n = sh.n;
      p.k = sh.k;
      p.batch = sh.batch;
      p.epilogue = skus[i].epilogue;
      CUACTOR_ASSERT_OK_AND_ASSIGN(
          plan, GemmPlan::with_instance(p, kHopper, skus[i], *(*r)->abi, (*r)->jit, PlanSource::heuristic));
      run_and_check(plan, make_case(skus[i], sh.m, sh.n, sh.k, rng, sh.batch, sh.pad), tolerance(skus[i]));
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace cuactor::kernels
