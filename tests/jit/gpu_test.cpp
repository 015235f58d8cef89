// JIT kernels on a GPU ([J2], [J5]): NVRTC modules launch and compute right, warmed entries load
// without compiling, JIT-only CUTLASS configurations (dense, stream-K, e4m3 stream-K and clustered
// pingpong, and the grouped ones that `cuactor tune grouped` picks) match an fp64 reference, and a JIT instance matches
// the ahead-of-time instance of the same SKU bit for bit.
#include "support/gpu_test.hpp"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/module.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "cuactor/kernels/grouped_gemm.hpp"
#include "jit/test_support.hpp"
#include "kernels/instance_abi.h"
#include "support/jit_gpu_cache.hpp"

namespace cuactor::jit {
namespace {

using kernels::GemmSku;
using test_support::saxpy_request;
using test_support::TempDir;

GpuArch device_arch() {
  auto p = gpu::device_properties(0);
  return p ? p->arch : GpuArch{9, 0, true};
}

// Round-to-nearest-even float -> bf16 bits, and back.
std::uint16_t to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}
float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

class JitGpu : public cuactor::test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    JitOptions o;
    o.disk.directory = dir_.path();
    o.workers = 4;
    auto e = JitEngine::create(o);
    ASSERT_TRUE(e.has_value()) << e.error().to_string();
    engine_ = *e;
  }
  // CUTLASS compiles go to the cache every GPU test process shares (support/jit_gpu_cache.hpp).
  static std::shared_ptr<JitEngine> shared_engine() {
    auto e = ::cuactor::test_support::gpu_test_jit_engine(4);
    EXPECT_TRUE(e.has_value()) << e.error().to_string();
    return e ? *e : nullptr;
  }
  TempDir dir_;
  std::shared_ptr<JitEngine> engine_;
};

TEST_F(JitGpu, NvrtcKernelLaunchesAndComputes) {
  const auto& r = engine_->module(saxpy_request("gpu-launch", device_arch())).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const JitModule& m = **r;
  EXPECT_FALSE(m.from_disk());
  constexpr int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5f * static_cast<float>(i) + 1.0f;
    y[i] = 3.0f - 0.25f * static_cast<float>(i);
  }
  float *dx = nullptr, *dy = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dx), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dy), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  CUACTOR_ASSERT_OK_AND_ASSIGN(saxpy, m.kernel("saxpy"));
  CUACTOR_ASSERT_OK_AND_ASSIGN(scale, m.kernel("scale<float>"));
  const gpu::LaunchConfig cfg{dim3((n + 127) / 128), dim3(128), 0, nullptr};
  CUACTOR_ASSERT_OK(gpu::launch(saxpy, cfg, n, 2.0f, static_cast<const float*>(dx), dy));
  CUACTOR_ASSERT_OK(gpu::launch(scale, cfg, n, -1.5f, dy));
  std::vector<float> out(n);
  ASSERT_EQ(cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; ++i) ASSERT_FLOAT_EQ(out[i], -1.5f * (2.0f * x[i] + y[i])) << i;
  // A wrong argument list is rejected before launching.
  auto bad = gpu::launch(saxpy, cfg, n, 2.0f, dy);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error(), errc::invalid_argument);
  ASSERT_EQ(cudaFree(dx), cudaSuccess);
  ASSERT_EQ(cudaFree(dy), cudaSuccess);
}

TEST_F(JitGpu, WarmedEntryLoadsWithoutCompiling) {
  const auto req = saxpy_request("gpu-warm", device_arch());
  CUACTOR_ASSERT_OK(engine_->warm(req));  // as `cuactor jit warm` does on a machine without a GPU
  JitOptions o;
  o.disk.directory = dir_.path();
  CUACTOR_ASSERT_OK_AND_ASSIGN(fresh, JitEngine::create(o));
  const auto& r = fresh->module(req).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  EXPECT_TRUE((*r)->from_disk());
  EXPECT_EQ(fresh->stats().disk.builds, 0u);
  CUACTOR_ASSERT_OK((*r)->kernel("saxpy"));
  // The second request is a plan-cache hit returning the same module.
  const auto& again = fresh->module(req).get();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->get(), r->get());
  EXPECT_EQ(fresh->stats().nvrtc_plans.hits, 1u);
}

// Device buffers of one bf16 GEMM problem with random data; D is poisoned with NaN before each run.
struct DenseProblem {
  int m, n, k, batch;
  std::vector<std::uint16_t> a, b, c;  // row-major A (m x k), B as n x k (column-major k x n), C (m x n)
  void *da = nullptr, *db = nullptr, *dc = nullptr, *dd = nullptr;

  DenseProblem(int m_, int n_, int k_, int batch_, unsigned seed) : m(m_), n(n_), k(k_), batch(batch_) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    auto fill = [&](std::vector<std::uint16_t>& v, std::size_t count) {
      v.resize(count);
      for (auto& x : v) x = to_bf16(dist(gen));
    };
    fill(a, std::size_t(batch) * m * k);
    fill(b, std::size_t(batch) * n * k);
    fill(c, std::size_t(batch) * m * n);
    EXPECT_EQ(cudaMalloc(&da, a.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&db, b.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dc, c.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dd, c.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dc, c.data(), c.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DenseProblem() {
    EXPECT_EQ(cudaFree(da), cudaSuccess);
    EXPECT_EQ(cudaFree(db), cudaSuccess);
    EXPECT_EQ(cudaFree(dc), cudaSuccess);
    EXPECT_EQ(cudaFree(dd), cudaSuccess);
  }
  cuactor_dense_args args(float alpha, float beta, int sms) const {
    cuactor_dense_args r{};
    r.m = m, r.n = n, r.k = k, r.batch = batch;
    r.a = da, r.b = db, r.c = dc, r.d = dd;
    r.lda = k, r.ldb = k, r.ldc = n, r.ldd = n;
    r.batch_stride_a = std::int64_t(m) * k, r.batch_stride_b = std::int64_t(n) * k;
    r.batch_stride_c = r.batch_stride_d = std::int64_t(m) * n;
    r.alpha = alpha, r.beta = beta;
    r.device = 0, r.sm_count = sms;
    return r;
  }
  // Runs `inst` once on a NaN-poisoned D and returns D.
  std::vector<std::uint16_t> run(const cuactor_gemm_instance& inst, float alpha, float beta) const {
    const auto problem = args(alpha, beta, gpu::device_properties(0)->multiprocessors);
    EXPECT_EQ(inst.can_implement(&problem), CUACTOR_KERNEL_OK);
    const std::size_t ws_bytes = inst.workspace_size(&problem);
    void* ws = nullptr;
    if (ws_bytes) {
      EXPECT_EQ(cudaMalloc(&ws, ws_bytes), cudaSuccess);
    }
    EXPECT_EQ(cudaMemset(dd, 0xff, c.size() * 2), cudaSuccess);  // 0xffff is a bf16 NaN
    EXPECT_EQ(inst.run(&problem, ws, ws_bytes, nullptr), CUACTOR_KERNEL_OK);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint16_t> out(c.size());
    EXPECT_EQ(cudaMemcpy(out.data(), dd, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    if (ws) {
      EXPECT_EQ(cudaFree(ws), cudaSuccess);
    }
    return out;
  }
  // ||D - D_ref|| / ||D_ref|| against an fp64 host reference from the same bf16 inputs.
  double relative_error(const std::vector<std::uint16_t>& d, float alpha, float beta) const {
    double num = 0, den = 0;
    for (int l = 0; l < batch; ++l)
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          const auto* ar = &a[(std::size_t(l) * m + i) * k];
          const auto* br = &b[(std::size_t(l) * n + j) * k];
          for (int p = 0; p < k; ++p) acc += double(from_bf16(ar[p])) * double(from_bf16(br[p]));
          const std::size_t idx = (std::size_t(l) * m + i) * n + j;
          const double ref = alpha * acc + beta * double(from_bf16(c[idx]));
          const double got = from_bf16(d[idx]);
          if (std::isnan(got)) return INFINITY;
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
    return std::sqrt(num / den);
  }
};

GemmSku jit_only_sku() {
  GemmSku s;  // bf16, row/col/row, sm_90a, linear combination
  s.tile = {128, 128, 64};
  s.cluster = {1, 1, 1};
  s.schedule = kernels::GemmSchedule::cooperative;
  return s;
}

TEST_F(JitGpu, JitOnlyCutlassConfigurationMatchesReference) {
  if (device_arch() != GpuArch{9, 0, true}) GTEST_SKIP() << "needs an sm_90a device, this is " << device_arch().name();
  const GemmSku sku = jit_only_sku();
  ASSERT_EQ(kernels::find_in_catalog(sku), nullptr) << "this configuration must not be in the AOT matrix";
  auto engine = shared_engine();
  ASSERT_NE(engine, nullptr);
  GemmJit gemm(engine);
  const auto& r = gemm.resolve(sku).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  ASSERT_FALSE((*r)->from_catalog());
  const cuactor_gemm_instance& inst = *(*r)->abi;
  CUACTOR_ASSERT_OK(kernels::check_instance_abi(inst, sizeof(cuactor_dense_args)));
  // Shapes with tails that are not multiples of the tile; several iterations with fresh data.
  struct Case {
    int m, n, k, batch;
    float alpha, beta;
  };
  unsigned seed = 1;
  for (const Case c : {Case{257, 136, 264, 1, 1.f, 0.f}, Case{1000, 520, 1032, 1, 0.5f, 1.f},
                       Case{129, 384, 72, 3, 1.f, -0.5f}, Case{64, 8, 8, 1, 2.f, 0.f}}) {
    DenseProblem p(c.m, c.n, c.k, c.batch, seed++);
    const auto d = p.run(inst, c.alpha, c.beta);
    const double err = p.relative_error(d, c.alpha, c.beta);
    EXPECT_LT(err, 1e-2) << c.m << "x" << c.n << "x" << c.k << " batch " << c.batch;
  }
}

// Stream-K (CUTLASS's StreamKScheduler, through the JIT only): decode-like long-K shapes whose K is
// split over SMs and reduced in the workspace, tails, batches and beta, against the fp64 reference;
// each shape twice, so a workspace left dirty by the first run would show in the second.
TEST_F(JitGpu, StreamKConfigurationMatchesReference) {
  if (device_arch() != GpuArch{9, 0, true}) GTEST_SKIP() << "needs an sm_90a device, this is " << device_arch().name();
  GemmSku sku = jit_only_sku();
  sku.tile = {128, 128, 64};
  sku.schedule = kernels::GemmSchedule::cooperative_streamk;
  auto engine = shared_engine();
  ASSERT_NE(engine, nullptr);
  GemmJit gemm(engine);
  const auto& r = gemm.resolve(sku).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  const cuactor_gemm_instance& inst = *(*r)->abi;
  struct Case {
    int m, n, k, batch;
    float alpha, beta;
  };
  unsigned seed = 40;
  for (const Case c : {Case{16, 512, 8192, 1, 1.f, 0.f}, Case{8, 264, 6152, 2, 0.5f, 1.f},
                       Case{257, 136, 4104, 1, 1.f, -0.5f}, Case{64, 8, 8, 1, 2.f, 0.f}}) {
    DenseProblem p(c.m, c.n, c.k, c.batch, seed++);
    const auto args = p.args(c.alpha, c.beta, gpu::device_properties(0)->multiprocessors);
    if (c.k >= 4096) {  // few tiles, long K: split over SMs, partial tiles reduced in the workspace
      EXPECT_GT(inst.workspace_size(&args), 0u) << c.m << "x" << c.n << "x" << c.k;
    }
    for (int repeat = 0; repeat < 2; ++repeat) {
      const auto d = p.run(inst, c.alpha, c.beta);
      EXPECT_LT(p.relative_error(d, c.alpha, c.beta), 1e-2)
          << c.m << "x" << c.n << "x" << c.k << " batch " << c.batch << " run " << repeat;
    }
  }
}

TEST_F(JitGpu, JitInstanceMatchesAotInstanceBitForBit) {
  if (device_arch() != GpuArch{9, 0, true}) GTEST_SKIP() << "needs an sm_90a device, this is " << device_arch().name();
  const kernels::CatalogEntry* aot = nullptr;
  for (const auto& e : kernels::catalog())
    if (e.sku.family == kernels::GemmFamily::dense && e.sku.arch == GpuArch{9, 0, true} && e.sku.a == DType::bf16 &&
        e.sku.d == DType::bf16 && e.sku.layout_b == kernels::MatrixLayout::col &&
        e.sku.epilogue == kernels::GemmEpilogue::linear_combination)
      aot = &e;
  if (aot == nullptr) GTEST_SKIP() << "no dense bf16 sm_90a instance in this build's catalog";
  auto engine = shared_engine();
  ASSERT_NE(engine, nullptr);
  GemmJit gemm(engine);
  const auto& r = gemm.compile(aot->sku).get();
  ASSERT_TRUE(r.has_value()) << r.error().to_string();
  for (unsigned seed : {11u, 12u}) {
    DenseProblem p(515, 264, 392, 1, seed);
    const auto from_aot = p.run(*aot->instance, 1.f, 0.75f);
    const auto from_jit = p.run((*r)->abi(), 1.f, 0.75f);
    ASSERT_EQ(from_aot.size(), from_jit.size());
    EXPECT_EQ(std::memcmp(from_aot.data(), from_jit.data(), from_aot.size() * 2), 0) << aot->sku.to_string();
    EXPECT_LT(p.relative_error(from_jit, 1.f, 0.75f), 1e-2);
  }
}

// e4m3 bits -> float (bias 7, subnormals at exponent 0; the test data holds no NaN).
float from_e4m3(std::uint8_t v) {
  const int sign = v >> 7, exponent = (v >> 3) & 0xf, mantissa = v & 7;
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/// A device-sized grouped problem: ragged groups (one empty, tails of every tile), N x K experts, fp8
/// per-tensor scales; the plan's D against an fp64 host reference.
struct GroupedProblemOnDevice {
  GroupedProblemOnDevice(DType in, std::vector<int> group_rows, int n_, int k_, unsigned seed)
      : t(in), rows(std::move(group_rows)), n(n_), k(k_) {
    for (int m : rows) total += m;
    const std::size_t ei = storage_bytes(in, 1);
    a.resize(static_cast<std::size_t>(total) * k * ei);
    b.resize(rows.size() * n * k * ei);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto fill = [&](std::vector<std::uint8_t>& v) {
      if (in == DType::e4m3) {
        for (auto& x : v) x = static_cast<std::uint8_t>(rng() & 0xb7);  // never NaN, |x| < 2
      } else {
        for (std::size_t i = 0; i < v.size(); i += 2) {
          const std::uint16_t h = to_bf16(u(rng));
          std::memcpy(&v[i], &h, 2);
        }
      }
    };
    fill(a);
    fill(b);
    std::int32_t end = 0;
    for (int m : rows) offsets.push_back(end += m);
    scales.assign(rows.size() + 4, 0.0f);
    scales[0] = 0.5f;
    for (std::size_t g = 0; g < rows.size(); ++g) scales[4 + g] = 0.25f + 0.125f * static_cast<float>(g);
    EXPECT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&db, b.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dd, static_cast<std::size_t>(total) * n * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&doffs, offsets.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dscales, scales.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(doffs, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dscales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~GroupedProblemOnDevice() {
    for (void* p : {da, db, dd, doffs, dscales}) EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
  [[nodiscard]] float value(const std::vector<std::uint8_t>& v, std::size_t i) const {
    if (t == DType::e4m3) return from_e4m3(v[i]);
    std::uint16_t h;
    std::memcpy(&h, &v[2 * i], 2);
    return from_bf16(h);
  }
  /// Runs `plan` once on a NaN-poisoned D; ||D - D_ref|| / ||D_ref||.
  double run_and_compare(const kernels::GroupedGemmPlan& plan) const {
    kernels::DeviceSizedGroups g = kernels::packed_device_groups(
        static_cast<int>(rows.size()), static_cast<const std::int32_t*>(doffs), total, n, k, da, db, dd, n);
    kernels::GroupedScalars s;
    if (t == DType::e4m3) {
      s.scale_a = static_cast<const float*>(dscales);
      s.scale_b = static_cast<const float*>(dscales) + 4;
    }
    auto prepared = plan.prepare(g, s);
    EXPECT_TRUE(prepared.has_value()) << prepared.error().to_string();
    if (!prepared) return INFINITY;
    void* ws = nullptr;
    EXPECT_EQ(cudaMalloc(&ws, prepared->workspace_size()), cudaSuccess);
    EXPECT_EQ(cudaMemset(dd, 0xff, static_cast<std::size_t>(total) * n * 2), cudaSuccess);  // bf16 NaN
    const Status ran = prepared->run(nullptr, ws, prepared->workspace_size());
    EXPECT_TRUE(ran.has_value()) << ran.error().to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint16_t> d(static_cast<std::size_t>(total) * n);
    EXPECT_EQ(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaFree(ws), cudaSuccess);
    double num = 0, den = 0;
    std::size_t row = 0;
    for (std::size_t grp = 0; grp < rows.size(); ++grp)
      for (int i = 0; i < rows[grp]; ++i, ++row)
        for (int j = 0; j < n; ++j) {
          double acc = 0;
          for (int p = 0; p < k; ++p) acc += double(value(a, row * k + p)) * double(value(b, (grp * n + j) * k + p));
          if (t == DType::e4m3) acc *= double(scales[0]) * double(scales[4 + grp]);
          const double got = from_bf16(d[row * n + j]);
          if (std::isnan(got)) return INFINITY;
          num += (got - acc) * (got - acc);
          den += acc * acc;
        }
    return std::sqrt(num / den);
  }

  DType t;
  std::vector<int> rows;
  int n, k;
  std::int64_t total = 0;
  std::vector<std::uint8_t> a, b;
  std::vector<std::int32_t> offsets;
  std::vector<float> scales;
  void *da = nullptr, *db = nullptr, *dd = nullptr, *doffs = nullptr, *dscales = nullptr;
};

// The grouped configurations that `cuactor tune grouped` records for H100 classes (pingpong 64x256
// for many experts with a few hundred rows, now also the catalog's medium-class kernels; cooperative
// 128x256 without a cluster for large fp8 groups, compiled by the JIT), resolved through GemmJit
// (the catalog's instance, else the JIT's) and planned with GroupedGemmPlan::with_instance.
TEST_F(JitGpu, TunedGroupedConfigurationsMatchReference) {
  if (device_arch() != GpuArch{9, 0, true}) GTEST_SKIP() << "needs an sm_90a device, this is " << device_arch().name();
  auto engine = shared_engine();
  ASSERT_NE(engine, nullptr);
  GemmJit gemm(engine);
  auto props = gpu::device_properties(0);
  ASSERT_TRUE(props.has_value());
  struct Config {
    DType t;
    kernels::Shape3 tile;
    kernels::GemmSchedule schedule;
  };
  const Config configs[] = {{DType::bf16, {64, 256, 64}, kernels::GemmSchedule::pingpong},
                            {DType::e4m3, {64, 256, 128}, kernels::GemmSchedule::pingpong_fp8_fast_accum},
                            {DType::e4m3, {128, 256, 128}, kernels::GemmSchedule::cooperative_fp8_fast_accum}};
  std::vector<GemmSku> skus;
  std::vector<JitFuture<ResolvedInstance>> compiles;  // all at once: each compile takes about a minute
  for (const Config& c : configs) {
    GemmSku sku;
    sku.family = kernels::GemmFamily::grouped;
    sku.a = sku.b = c.t;
    sku.c = sku.d = DType::bf16;
    sku.tile = c.tile;
    sku.cluster = {1, 1, 1};
    sku.schedule = c.schedule;
    sku.epilogue = c.t == DType::e4m3 ? kernels::GemmEpilogue::scaled_linear_combination
                                      : kernels::GemmEpilogue::linear_combination;
    skus.push_back(sku);
    compiles.push_back(gemm.resolve(sku));
  }
  for (std::size_t i = 0; i < skus.size(); ++i) {
    const Config& c = configs[i];
    const GemmSku& sku = skus[i];
    const auto& r = compiles[i].get();
    ASSERT_TRUE(r.has_value()) << r.error().to_string();
    kernels::GroupedGemmSpec spec;
    spec.a = spec.b = c.t;
    spec.d = DType::bf16;
    spec.sm_count = props->multiprocessors;
    CUACTOR_ASSERT_OK_AND_ASSIGN(
        plan, kernels::GroupedGemmPlan::with_instance(spec, sku, *(*r)->abi, (*r)->jit, kernels::PlanSource::tuned));
    EXPECT_EQ(plan.source(), kernels::PlanSource::tuned);
    unsigned seed = 70;
    for (const auto& rows : {std::vector<int>{37, 0, 130, 64, 201}, std::vector<int>{3, 1, 8, 0, 5, 2, 7}}) {
      GroupedProblemOnDevice p(c.t, rows, 272, 272, seed++);
      EXPECT_LT(p.run_and_compare(plan), 1e-2) << sku.to_string() << " groups " << rows.size();
    }
  }
}

/// Device buffers of one e4m3 GEMM with per-tensor scales (A m x k row-major, B as n x k, C and D bf16
/// m x n), random data that is never NaN, and its fp64 reference.
struct Fp8DenseProblem {
  Fp8DenseProblem(int m_, int n_, int k_, unsigned seed) : m(m_), n(n_), k(k_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    a.resize(std::size_t(m) * k);
    b.resize(std::size_t(n) * k);
    c.resize(std::size_t(m) * n);
    for (auto& x : a) x = static_cast<std::uint8_t>(rng() & 0xb7);  // |x| < 2
    for (auto& x : b) x = static_cast<std::uint8_t>(rng() & 0xb7);
    for (auto& x : c) x = to_bf16(dist(rng));
    EXPECT_EQ(cudaMalloc(&da, a.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&db, b.size()), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dc, c.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dd, c.size() * 2), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&dscales, sizeof scales), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dc, c.data(), c.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dscales, scales, sizeof scales, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Fp8DenseProblem() {
    for (void* p : {da, db, dc, dd, dscales}) EXPECT_EQ(cudaFree(p), cudaSuccess);
  }
  [[nodiscard]] kernels::GemmProblem problem() const {
    kernels::GemmProblem p;
    p.m = m, p.n = n, p.k = k;
    p.a = p.b = DType::e4m3;
    p.c = p.d = DType::bf16;
    p.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
    return p;
  }
  /// alpha * scale_a * scale_b * A B^T + beta * C in fp64.
  [[nodiscard]] std::vector<double> reference(float alpha, float beta) const {
    float decoded[256];
    for (int v = 0; v < 256; ++v) decoded[v] = from_e4m3(static_cast<std::uint8_t>(v));
    const double scale = double(alpha) * double(scales[0]) * double(scales[4]);
    std::vector<double> ref(c.size());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        const std::uint8_t* ar = &a[std::size_t(i) * k];
        const std::uint8_t* br = &b[std::size_t(j) * k];
        for (int p = 0; p < k; ++p) acc += double(decoded[ar[p]]) * double(decoded[br[p]]);
        const std::size_t idx = std::size_t(i) * n + j;
        ref[idx] = scale * acc + double(beta) * double(from_bf16(c[idx]));
      }
    return ref;
  }
  /// Runs `plan` once on a NaN-poisoned D (C read where beta != 0) with `workspace`;
  /// ||D - ref|| / ||ref||.
  double run_and_compare(const kernels::GemmPlan& plan, void* workspace, float alpha, float beta,
                         const std::vector<double>& ref) const {
    kernels::GemmOperands o;
    o.a = da, o.b = db, o.c = beta != 0.0f ? dc : nullptr, o.d = dd;
    o.lda = k, o.ldb = k, o.ldc = n, o.ldd = n;
    o.alpha = alpha, o.beta = beta;
    o.scale_a = static_cast<const float*>(dscales);
    o.scale_b = static_cast<const float*>(dscales) + 4;          // each scale in its own 16-byte slot
    EXPECT_EQ(cudaMemset(dd, 0xff, c.size() * 2), cudaSuccess);  // 0xffff is a bf16 NaN
    const Status ran = plan.run(o, workspace, plan.workspace_size(), nullptr);
    EXPECT_TRUE(ran.has_value()) << ran.error().to_string();
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<std::uint16_t> d(c.size());
    EXPECT_EQ(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < d.size(); ++i) {
      const double got = from_bf16(d[i]);
      if (std::isnan(got)) return INFINITY;
      num += (got - ref[i]) * (got - ref[i]);
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
  }

  int m, n, k;
  std::vector<std::uint8_t> a, b;
  std::vector<std::uint16_t> c;
  float scales[8] = {0.5f, 0, 0, 0, 0.25f, 0, 0, 0};
  void *da = nullptr, *db = nullptr, *dc = nullptr, *dd = nullptr, *dscales = nullptr;
};

// e4m3 configurations only the JIT builds, which `cuactor tune gemm --dtype e4m3` sweeps: stream-K
// (its K split over SMs and reduced in a workspace) and a pingpong tile in a cluster, with per-tensor
// scales, tails, beta with C and long K, against the fp64 reference. Each case runs twice on one
// workspace that starts as garbage, so a stream-K reduction reading what the first run left would show
// in the second. (K stays at most 4112, as in the other e4m3 tests: fast accumulation keeps fewer bits.)
TEST_F(JitGpu, Fp8JitConfigurationsMatchReference) {
  if (device_arch() != GpuArch{9, 0, true}) GTEST_SKIP() << "needs an sm_90a device, this is " << device_arch().name();
  auto engine = shared_engine();
  ASSERT_NE(engine, nullptr);
  GemmJit gemm(engine);
  auto props = gpu::device_properties(0);
  ASSERT_TRUE(props.has_value());
  struct Config {
    kernels::Shape3 tile, cluster;
    kernels::GemmSchedule schedule;
  };
  const Config configs[] = {{{128, 128, 128}, {1, 1, 1}, kernels::GemmSchedule::cooperative_fp8_fast_accum_streamk},
                            {{128, 128, 128}, {1, 2, 1}, kernels::GemmSchedule::pingpong_fp8_fast_accum}};
  std::vector<GemmSku> skus;
  std::vector<JitFuture<ResolvedInstance>> compiles;  // all at once: each compile takes about a minute
  for (const Config& c : configs) {
    GemmSku sku;
    sku.a = sku.b = DType::e4m3;
    sku.c = sku.d = DType::bf16;
    sku.tile = c.tile;
    sku.cluster = c.cluster;
    sku.schedule = c.schedule;
    sku.epilogue = kernels::GemmEpilogue::scaled_linear_combination;
    ASSERT_EQ(kernels::find_in_catalog(sku), nullptr) << sku.to_string() << " must come from the JIT";
    skus.push_back(sku);
    compiles.push_back(gemm.resolve(sku));
  }
  struct Case {
    int m, n, k;
    float alpha, beta;
  };
  const Case cases[] = {
      {16, 512, 4096, 1.f, 0.f}, {257, 136, 4112, 0.5f, 1.f}, {1000, 520, 1024, 1.f, -0.5f}, {64, 16, 16, 2.f, 0.f}};
  unsigned seed = 90;
  for (const Case& c : cases) {
    Fp8DenseProblem p(c.m, c.n, c.k, seed++);
    const std::vector<double> ref = p.reference(c.alpha, c.beta);
    for (std::size_t i = 0; i < skus.size(); ++i) {
      const auto& r = compiles[i].get();
      ASSERT_TRUE(r.has_value()) << r.error().to_string();
      kernels::GemmPlanOptions options;
      options.sm_count = props->multiprocessors;
      CUACTOR_ASSERT_OK_AND_ASSIGN(
          plan, kernels::GemmPlan::with_instance(p.problem(), props->arch, skus[i], *(*r)->abi, (*r)->jit,
                                                 kernels::PlanSource::tuned, options));
      const bool stream_k = skus[i].schedule == kernels::GemmSchedule::cooperative_fp8_fast_accum_streamk;
      if (stream_k && c.k >= 4096) {  // 4 or 6 output tiles over long K: split over SMs
        EXPECT_GT(plan.workspace_size(), 0u) << c.m << "x" << c.n << "x" << c.k;
      }
      void* ws = nullptr;
      if (plan.workspace_size() > 0) {
        ASSERT_EQ(cudaMalloc(&ws, plan.workspace_size()), cudaSuccess);
        ASSERT_EQ(cudaMemset(ws, 0xff, plan.workspace_size()), cudaSuccess);  // garbage
      }
      for (int repeat = 0; repeat < 2; ++repeat)
        EXPECT_LT(p.run_and_compare(plan, ws, c.alpha, c.beta, ref), 1.5e-2)
            << skus[i].to_string() << " " << c.m << "x" << c.n << "x" << c.k << " run " << repeat;
      if (ws) {
        EXPECT_EQ(cudaFree(ws), cudaSuccess);
      }
    }
  }
}
}  // namespace
}  // namespace cuactor::jit
