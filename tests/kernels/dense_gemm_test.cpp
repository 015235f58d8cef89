// Dense GEMM correctness on a GPU: every catalog SKU the device can run, against an fp64 host
// reference computed from the very same rounded inputs, on random shapes with tails that are not
// multiples of the tile, padded leading dimensions, batches, alpha/beta with C, fp8 scales, and
// poisoned outputs so that a tile the kernel skips cannot pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/gemm_plan.hpp"
#include "kernels/split_k.hpp"
#include "support/gpu_test.hpp"
#include "support/host_elements.hpp"

namespace cuactor::kernels {
namespace {

using test_support::load;
using test_support::store;

/// A host matrix stack (batch x rows x cols in `layout` with leading dimension ld) of random values,
/// kept both as device bytes and as the rounded doubles the reference uses.
struct HostMatrix {
  std::int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0, batch = 1;
  MatrixLayout layout = MatrixLayout::row;
  DType type = DType::bf16;
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;  // same indexing as the device buffer

  std::size_t index(std::int64_t l, std::int64_t r, std::int64_t c) const {
    return static_cast<std::size_t>(l * batch_stride + (layout == MatrixLayout::row ? r * ld + c : c * ld + r));
  }
  double at(std::int64_t l, std::int64_t r, std::int64_t c) const { return values[index(l, r, c)]; }
};

HostMatrix random_matrix(DType t, std::int64_t rows, std::int64_t cols, MatrixLayout layout, std::int64_t pad,
                         std::int64_t batch, std::mt19937_64& rng, double range) {
  HostMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.layout = layout;
  m.type = t;
  m.batch = batch;
  m.ld = (layout == MatrixLayout::row ? cols : rows) + pad;
  m.batch_stride = (layout == MatrixLayout::row ? rows : cols) * m.ld + pad * 3;
  const auto total = static_cast<std::size_t>(m.batch_stride * batch);
  std::uniform_real_distribution<double> dist(-range, range);
  m.values.resize(total);
  for (std::size_t i = 0; i < total; ++i) m.values[i] = store(t, dist(rng), m.bytes);
  return m;
}

/// Relative Frobenius error ||D - ref|| / ||ref|| over the logical elements; NaN if any is NaN.
double relative_error(const HostMatrix& d, const std::vector<std::uint8_t>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::int64_t l = 0; l < d.batch; ++l)
    for (std::int64_t r = 0; r < d.rows; ++r)
      for (std::int64_t c = 0; c < d.cols; ++c) {
        const std::size_t i = d.index(l, r, c);
        const double diff = load(d.type, got, i) - ref[i];
        num += diff * diff;
        den += ref[i] * ref[i];
      }
  return std::sqrt(num / den);
}

/// Tolerance by output type (inputs are rounded identically for kernel and reference, so what is
/// left is fp32 accumulation order and the output rounding).
double tolerance(const GemmSku& s) {
  if (s.d == DType::f32) return 1e-5;
  if (s.d == DType::f16) return 2e-3;
  if (s.a == DType::e4m3) return 1.5e-2;  // fast accumulation keeps fewer bits than fp32
  return 8e-3;                            // bf16 output
}

class DenseGemmTest : public test_support::GpuTest {
 protected:
  void SetUp() override {
    test_support::GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    auto stream = gpu::Stream::create(0);
    ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
    stream_ = std::move(*stream);
    auto pool = gpu::MemPool::device_default(0);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    pool_ = std::move(*pool);
  }

  Result<gpu::DeviceBuffer> upload(const std::vector<std::uint8_t>& bytes) {
    auto buf = gpu::DeviceBuffer::allocate(pool_, bytes.size(), stream_.get());
    if (!buf) return buf;
    CUACTOR_TRY(gpu::copy_async(buf->data(), bytes.data(), bytes.size(), stream_.get()));
    return buf;
  }

  struct Case {
    std::int64_t m, n, k, batch = 1, pad = 0;
    float alpha = 1.0f, beta = 0.0f;
    bool scales = false;
  };

  /// Runs one case with `sku` and compares against the fp64 reference. With `split_k` or `swap_ab`
  /// > 0 the plan is made for sku's types and layouts with those GemmPlanOptions instead of the override.
  void check_case(const GemmSku& sku, const Case& cs, std::mt19937_64& rng, int split_k = 0, int swap_ab = 0) {
    SCOPED_TRACE(::testing::Message() << sku.to_string() << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k
                                      << " batch=" << cs.batch << " pad=" << cs.pad << " alpha=" << cs.alpha
                                      << " beta=" << cs.beta << " split_k=" << split_k << " swap_ab=" << swap_ab);
    GemmProblem p;
    p.m = cs.m;
    p.n = cs.n;
    p.k = cs.k;
    p.batch = cs.batch;
    p.a = sku.a;
    p.b = sku.b;
    p.c = sku.c;
    p.d = sku.d;
    p.layout_a = sku.layout_a;
    p.layout_b = sku.layout_b;
    p.layout_c = sku.layout_c;
    p.epilogue = sku.epilogue;
    GemmPlanOptions opts;
    const bool chosen_by_options = split_k > 0 || swap_ab > 0;
    if (chosen_by_options) {
      opts.split_k = split_k;
      opts.swap_ab = swap_ab;
    } else {
      opts.sku_override = sku;
    }
    opts.sm_count = props_.multiprocessors;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch, opts));
    if (!chosen_by_options) {
      ASSERT_EQ(plan.sku(), sku);
    }
    if (split_k > 1) {
      ASSERT_EQ(plan.split_k(), split_k);
    }
    if (swap_ab > 0) {
      ASSERT_EQ(plan.swap_ab(), swap_ab == 2);
    }

    const bool fp8 = sku.a == DType::e4m3;
    const double range = fp8 ? 4.0 : 1.0;
    const std::int64_t pad_a = cs.pad * (fp8 ? 16 : 8), pad_cd = cs.pad * (sku.d == DType::f32 ? 4 : 8);
    HostMatrix a = random_matrix(sku.a, cs.m, cs.k, sku.layout_a, pad_a, cs.batch, rng, range);
    HostMatrix b = random_matrix(sku.b, cs.k, cs.n, sku.layout_b, pad_a, cs.batch, rng, range);
    HostMatrix c = random_matrix(sku.c, cs.m, cs.n, sku.layout_c, pad_cd, cs.batch, rng, 1.0);
    HostMatrix d = random_matrix(sku.d, cs.m, cs.n, sku.layout_c, pad_cd, cs.batch, rng, 1.0);
    std::fill(d.bytes.begin(), d.bytes.end(), std::uint8_t{0xff});  // poison: NaN in every float type

    std::uniform_real_distribution<double> sdist(0.25, 2.0);
    const float scale_values[2] = {cs.scales ? static_cast<float>(sdist(rng)) : 1.0f,
                                   cs.scales ? static_cast<float>(sdist(rng)) : 1.0f};
    std::vector<std::uint8_t> scale_bytes(sizeof scale_values);
    std::memcpy(scale_bytes.data(), scale_values, sizeof scale_values);

    CUACTOR_ASSERT_OK_AND_ASSIGN(da, upload(a.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(db, upload(b.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dc, upload(c.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dd, upload(d.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dscale, upload(scale_bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(workspace, gpu::DeviceBuffer::allocate(pool_, plan.workspace_size(), stream_.get()));

    GemmOperands o;
    o.a = da.data();
    o.b = db.data();
    o.c = cs.beta != 0.0f ? dc.data() : nullptr;
    o.d = dd.data();
    o.lda = a.ld;
    o.ldb = b.ld;
    o.ldc = c.ld;
    o.ldd = d.ld;
    o.batch_stride_a = a.batch_stride;
    o.batch_stride_b = b.batch_stride;
    o.batch_stride_c = c.batch_stride;
    o.batch_stride_d = d.batch_stride;
    o.alpha = cs.alpha;
    o.beta = cs.beta;
    if (cs.scales) {
      o.scale_a = dscale.data_as<const float>();
      o.scale_b = dscale.data_as<const float>() + 1;
    }
    CUACTOR_ASSERT_OK(plan.run(o, workspace.data(), workspace.size(), stream_.get()));
    std::vector<std::uint8_t> got(d.bytes.size());
    CUACTOR_ASSERT_OK(gpu::copy_async(got.data(), dd.data(), got.size(), stream_.get()));
    CUACTOR_ASSERT_OK(stream_.synchronize());

    const double scale = static_cast<double>(cs.alpha) * scale_values[0] * scale_values[1];
    std::vector<double> ref(d.values.size(), 0.0);
    for (std::int64_t l = 0; l < cs.batch; ++l)
      for (std::int64_t i = 0; i < cs.m; ++i)
        for (std::int64_t j = 0; j < cs.n; ++j) {
          double acc = 0;
          for (std::int64_t kk = 0; kk < cs.k; ++kk) acc += a.at(l, i, kk) * b.at(l, kk, j);
          ref[d.index(l, i, j)] = scale * acc + (cs.beta != 0.0f ? static_cast<double>(cs.beta) * c.at(l, i, j) : 0.0);
        }
    const double err = relative_error(d, got, ref);
    EXPECT_TRUE(err < tolerance(sku)) << "relative error " << err << " exceeds " << tolerance(sku);
    // Padding between rows and batches must be untouched (still the poison pattern).
    for (std::int64_t l = 0; l < cs.batch && cs.pad > 0; ++l)
      EXPECT_EQ(got[static_cast<std::size_t>(d.index(l, 0, 0) + (sku.layout_c == MatrixLayout::row ? cs.n : cs.m)) *
                    static_cast<std::size_t>(size_bits(sku.d) / 8)],
                0xff)
          << "the kernel wrote into the padding of D";
  }

  std::vector<const CatalogEntry*> runnable() const {
    std::vector<const CatalogEntry*> out;
    for (const CatalogEntry* e : catalog_entries(GemmFamily::dense))  // trees: epilogue_gpu_test.cpp
      if (runs_on(e->sku, props_.arch) && e->sku.epilogue.is_preset()) out.push_back(e);
    return out;
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
};

TEST_F(DenseGemmTest, EverySkuMatchesFp64ReferenceOnRandomShapes) {
  const auto entries = runnable();
  ASSERT_FALSE(entries.empty()) << "no dense kernel in the catalog runs on " << props_.arch.name();
  if (props_.arch.sm() == 90) {  // Hopper runs every family: sm_90a and sm_80 (as sm_90 SASS)
    std::size_t presets = 0;
    for (const CatalogEntry* e : catalog_entries(GemmFamily::dense)) presets += e->sku.epilogue.is_preset() ? 1 : 0;
    EXPECT_EQ(entries.size(), presets);
  }
  std::mt19937_64 rng(20261122);
  for (const CatalogEntry* e : entries) {
    const std::int64_t kq = e->sku.a == DType::e4m3 ? 16 : 8;  // K (and B's N) alignment
    const std::int64_t nq = e->sku.d == DType::f32 ? 4 : 8;
    const bool scaled = e->sku.epilogue == GemmEpilogue::scaled_linear_combination;
    std::uniform_int_distribution<std::int64_t> mdist(1, 300), ndist(1, 40), kdist(1, 40);
    std::vector<Case> cases = {
        {1, 8 * nq, kq},                                 // smallest
        {257, 264, 528, 1, 0, 1.0f, 0.0f, scaled},       // tails in every dimension
        {128, 256, 64 * kq, 1, 0, 0.5f, 0.0f, scaled},   // exactly one tile
        {96, 136, 48 * kq, 3, 1, 1.5f, -0.75f, scaled},  // batched, padded, alpha/beta with C
        {1000, 520, 384, 1, 2, 1.0f, 1.0f, scaled},      // several waves
    };
    for (int i = 0; i < 6; ++i)  // fresh random shapes and data
      cases.push_back({mdist(rng), ndist(rng) * 8 * (nq == 4 ? 2 : 1), kdist(rng) * kq * 2, 1 + (i % 2), i % 3,
                       i % 2 ? 1.0f : 0.75f, i % 3 == 0 ? 0.5f : 0.0f, scaled});
    if (e->sku.layout_c == MatrixLayout::col)  // M is then D's contiguous extent: 16-byte multiples
      for (Case& c : cases) c.m = (c.m + nq - 1) / nq * nq;
    for (const Case& cs : cases) {
      check_case(e->sku, cs, rng);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(DenseGemmTest, RepeatedRunsWithFreshDataStayCorrect) {
  // A rare wrong tile (as CUTLASS issue #2162 reports for a ptr-array kernel) shows up only over many
  // launches; run the default bf16 plan many times at a multi-wave shape.
  GemmProblem p;
  p.m = 1536;
  p.n = 1024;
  p.k = 256;
  auto plan = GemmPlan::make(p, props_.arch);
  if (!plan && plan.error() == errc::unsupported) GTEST_SKIP() << plan.error().to_string();
  ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
  std::mt19937_64 rng(7);
  for (int it = 0; it < 12; ++it) {
    check_case(plan->sku(), {p.m, p.n, p.k, 1, 0, 1.0f, 0.0f, false}, rng);
    if (HasFatalFailure()) return;
  }
}

/// The bf16 / f16 (or f32-output) decode SKU a split-K plan is made for, or nullopt with the reason
/// to skip: split-K needs sm_90a and the slice kernel in the catalog.
std::optional<GemmSku> split_k_template(const gpu::DeviceProperties& props, DType in, DType out, std::string& why) {
  GemmSku s;
  s.a = s.b = in;
  s.c = s.d = out;
  GemmProblem p;
  p.n = 1024;  // the 64-column slices (narrower problems prefer narrower ones where compiled)
  p.a = p.b = in;
  p.c = p.d = out;
  if (props.arch != GpuArch{9, 0, true}) {
    why = "split-K runs on sm_90a; device is " + props.arch.name();
    return std::nullopt;
  }
  if (find_in_catalog(detail::split_k_slice_sku(p)) == nullptr) {
    why = "no split-K slice kernel in this build: " + detail::split_k_slice_sku(p).to_string();
    return std::nullopt;
  }
  return s;
}

TEST_F(DenseGemmTest, SplitKMatchesFp64Reference) {
  std::mt19937_64 rng(20261128);
  for (const auto& [in, out] :
       {std::pair{DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::bf16, DType::f32}}) {
    std::string why;
    const auto sku = split_k_template(props_, in, out, why);
    if (!sku) GTEST_SKIP() << why;
    // Slices of whole 64-deep tiles; tails in M and N, padding, alpha and beta with C.
    for (const auto& [cs, splits] : {std::pair{Case{16, 2048, 1024}, 4},
                                     {Case{1, 136, 512}, 2},
                                     {Case{100, 520, 768, 1, 1, 0.5f, -0.75f}, 3},
                                     {Case{64, 264, 4096, 1, 0, 1.5f, 1.0f}, 8},
                                     {Case{7, 8, 128}, 2},
                                     {Case{200, 72, 1024, 1, 2}, 16}}) {
      for (int swap_ab : {1, 2}) {  // the 64x64 slices, and the swapped ones (forced past 32 rows too)
        check_case(*sku, cs, rng, splits, swap_ab);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_F(DenseGemmTest, SwapAbMatchesFp64Reference) {
  std::mt19937_64 rng(20261129);
  for (const auto& [in, out] :
       {std::pair{DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::bf16, DType::f32}}) {
    GemmProblem p;
    p.a = p.b = in;
    p.c = p.d = out;
    if (props_.arch != GpuArch{9, 0, true}) GTEST_SKIP() << "swap-AB runs on sm_90a; device is " << props_.arch.name();
    if (detail::swapped_kernel(p) == nullptr)
      GTEST_SKIP() << "no swapped decode kernel in this build: " << detail::swapped_sku(p).to_string();
    GemmSku sku;
    sku.a = sku.b = in;
    sku.c = sku.d = out;
    // 16- and 32-column tiles over the rows (with tails), K tails, padding, alpha and beta with C.
    for (const Case& cs : {Case{1, 8, 72}, Case{7, 136, 200}, Case{16, 2048, 1024, 1, 1, 0.5f, -0.75f},
                           Case{17, 264, 512, 1, 2, 1.0f, 1.0f}, Case{32, 520, 4096}, Case{100, 72, 136, 1, 1}}) {
      check_case(sku, cs, rng, 1, 2);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(DenseGemmTest, Fp8SwapAbMatchesFp64Reference) {
  // e4m3 decode rows with per-tensor scales, computed as D^T = B^T A^T (forced here; which rows the plan
  // swaps on its own, the CPU tests check): 16- and 32-column tiles with tails, K tails of the 256-deep
  // tile, padding, alpha and beta with C.
  GemmSku sku;
  sku.a = sku.b = DType::e4m3;
  sku.c = sku.d = DType::bf16;
  sku.epilogue = GemmEpilogue::scaled_linear_combination;
  GemmProblem p;
  p.a = p.b = sku.a;
  p.epilogue = sku.epilogue;
  if (props_.arch != GpuArch{9, 0, true}) GTEST_SKIP() << "swap-AB runs on sm_90a; device is " << props_.arch.name();
  if (detail::swapped_kernel(p) == nullptr)
    GTEST_SKIP() << "no swapped e4m3 decode kernel in this build: " << detail::swapped_sku(p).to_string();
  std::mt19937_64 rng(20261128);
  for (const Case& cs : {Case{1, 8, 64, 1, 0, 1.0f, 0.0f, true}, Case{7, 136, 208, 1, 0, 1.0f, 0.0f, true},
                         Case{16, 2048, 1024, 1, 1, 0.5f, -0.75f, true}, Case{17, 264, 512, 1, 2, 1.0f, 1.0f, true},
                         Case{32, 520, 4096, 1, 0, 1.0f, 0.0f, true}, Case{100, 72, 144, 1, 1, 1.0f, 0.0f, true}}) {
    check_case(sku, cs, rng, 0, 2);
    if (HasFatalFailure()) return;
  }
}

TEST_F(DenseGemmTest, NarrowColumnPlansMatchFp64Reference) {
  // 16-bit problems of at most 32 columns as GemmPlan chooses them unswapped and unsplit (swap_ab 1,
  // split_k 1; narrow splits: NarrowSplitPlansMatchFp64Reference), on the 16- and 32-column tiles with
  // D row-major: row and column tails, K tails of the 128-deep tile, padding, alpha and beta with C.
  if (props_.arch != GpuArch{9, 0, true})
    GTEST_SKIP() << "narrow-column tiles are sm_90a; device is " << props_.arch.name();
  std::mt19937_64 rng(20261130);
  int ran = 0;
  for (const DType t : {DType::bf16, DType::f16}) {
    GemmSku sku;
    sku.a = sku.b = sku.c = sku.d = t;
    for (const Case& cs : {Case{1000, 8, 4096}, Case{4096, 16, 1000, 1, 1, 0.5f, -0.75f}, Case{130, 24, 136, 1, 2},
                           Case{96, 32, 8192, 1, 0, 1.0f, 1.0f}, Case{8192, 16, 256}, Case{33, 8, 72}}) {
      GemmProblem p;
      p.m = cs.m;
      p.n = cs.n;
      p.k = cs.k;
      p.a = p.b = p.c = p.d = t;
      const CatalogEntry* narrow = detail::narrow_kernel(p, props_.arch);
      if (narrow == nullptr) continue;  // not in this build (f16 and 32-column twins: full catalog only)
      GemmPlanOptions plain;
      plain.swap_ab = 1;
      plain.split_k = 1;
      CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch, plain));
      ASSERT_EQ(plan.sku().to_string(), narrow->sku.to_string()) << cs.m << "x" << cs.n << "x" << cs.k;
      check_case(sku, cs, rng, 1, 1);
      if (HasFatalFailure()) return;
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no narrow-column kernel in this build";
}

TEST_F(DenseGemmTest, NarrowSplitPlansMatchFp64Reference) {
  // Narrow-column problems on grids of few row tiles over long K, as GemmPlan splits them on its own
  // (narrow_split_for) on the narrow slice kernels: row and column tails, padding, alpha and beta with C.
  if (props_.arch != GpuArch{9, 0, true})
    GTEST_SKIP() << "narrow-column tiles are sm_90a; device is " << props_.arch.name();
  std::mt19937_64 rng(20261131);
  int ran = 0;
  for (const DType t : {DType::bf16, DType::f16}) {
    GemmSku sku;
    sku.a = sku.b = sku.c = sku.d = t;
    for (const Case& cs : {Case{1000, 32, 14336}, Case{1536, 8, 8192, 1, 1, 0.5f, -0.75f}, Case{130, 24, 16384, 1, 2},
                           Case{700, 16, 8192, 1, 0, 1.0f, 1.0f}}) {
      GemmProblem p;
      p.m = cs.m;
      p.n = cs.n;
      p.k = cs.k;
      p.a = p.b = p.c = p.d = t;
      if (detail::narrow_kernel(p, props_.arch) == nullptr ||
          find_in_catalog(detail::split_k_slice_sku(p)) == nullptr ||
          detail::narrow_split_for(p, props_.multiprocessors) <= 1)
        continue;  // not in this build (full catalog only), or a device of few SMs
      GemmPlanOptions opts;
      opts.sm_count = props_.multiprocessors;
      CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch, opts));
      ASSERT_EQ(plan.split_k(), detail::narrow_split_for(p, opts.sm_count)) << cs.m << "x" << cs.n << "x" << cs.k;
      ASSERT_GT(plan.split_k(), 1);
      ASSERT_EQ(plan.sku().to_string(), detail::split_k_slice_sku(p).to_string());
      check_case(sku, cs, rng, 0, 1);
      if (HasFatalFailure()) return;
      ++ran;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no narrow split-K slice kernel in this build";
}

TEST_F(DenseGemmTest, SplitKIsDeterministicCapturableAndChosenForDecode) {
  std::string why;
  const auto sku = split_k_template(props_, DType::bf16, DType::bf16, why);
  if (!sku) GTEST_SKIP() << why;
  GemmProblem p;
  p.m = 16;
  p.n = 1024;  // 16 tiles: split swapped or not on 80 or more SMs
  p.k = 8192;
  GemmPlanOptions opts;
  opts.sm_count = props_.multiprocessors;
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch, opts));
  EXPECT_GT(plan.split_k(), 1) << "a 16x1024x8192 decode GEMM on " << opts.sm_count
                               << " SMs: " << plan.sku().to_string();
  if (find_in_catalog(detail::swapped_sku(p)) != nullptr) {
    EXPECT_TRUE(plan.swap_ab()) << plan.sku().to_string();
  }
  std::mt19937_64 rng(3);
  HostMatrix a = random_matrix(p.a, p.m, p.k, MatrixLayout::row, 0, 1, rng, 1.0);
  HostMatrix b = random_matrix(p.b, p.k, p.n, MatrixLayout::col, 0, 1, rng, 1.0);
  CUACTOR_ASSERT_OK_AND_ASSIGN(da, upload(a.bytes));
  CUACTOR_ASSERT_OK_AND_ASSIGN(db, upload(b.bytes));
  const std::size_t d_bytes = static_cast<std::size_t>(p.m * p.n) * 2;
  std::vector<std::uint8_t> poison(d_bytes, 0xff);
  CUACTOR_ASSERT_OK_AND_ASSIGN(d1, upload(poison));
  CUACTOR_ASSERT_OK_AND_ASSIGN(d2, upload(poison));
  CUACTOR_ASSERT_OK_AND_ASSIGN(workspace, gpu::DeviceBuffer::allocate(pool_, plan.workspace_size(), stream_.get()));
  GemmOperands o;
  o.a = da.data();
  o.b = db.data();
  o.d = d1.data();
  CUACTOR_ASSERT_OK(plan.run(o, workspace.data(), workspace.size(), stream_.get()));
  // The same plan captured into a CUDA graph and replayed twice writes the same bits.
  o.d = d2.data();
  CUACTOR_ASSERT_OK(stream_.synchronize());
  cudaGraph_t graph = nullptr;
  CUACTOR_ASSERT_OK(gpu::check(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "capture"));
  const Status captured = plan.run(o, workspace.data(), workspace.size(), stream_.get());
  CUACTOR_ASSERT_OK(gpu::check(cudaStreamEndCapture(stream_.get(), &graph), "end capture"));
  CUACTOR_ASSERT_OK(captured);
  cudaGraphExec_t exec = nullptr;
  CUACTOR_ASSERT_OK(gpu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
  for (int i = 0; i < 2; ++i) CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, stream_.get()), "replay"));
  std::vector<std::uint8_t> first(d_bytes), replayed(d_bytes);
  CUACTOR_ASSERT_OK(gpu::copy_async(first.data(), d1.data(), d_bytes, stream_.get()));
  CUACTOR_ASSERT_OK(gpu::copy_async(replayed.data(), d2.data(), d_bytes, stream_.get()));
  CUACTOR_ASSERT_OK(stream_.synchronize());
  CUACTOR_ASSERT_OK(gpu::check(cudaGraphExecDestroy(exec), "destroy exec"));
  CUACTOR_ASSERT_OK(gpu::check(cudaGraphDestroy(graph), "destroy graph"));
  EXPECT_EQ(first, replayed) << "split-K results differ between runs";
  std::vector<double> ref(static_cast<std::size_t>(p.m * p.n));
  HostMatrix d = random_matrix(p.d, p.m, p.n, MatrixLayout::row, 0, 1, rng, 1.0);
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t j = 0; j < p.n; ++j) {
      double acc = 0;
      for (std::int64_t kk = 0; kk < p.k; ++kk) acc += a.at(0, i, kk) * b.at(0, kk, j);
      ref[d.index(0, i, j)] = acc;
    }
  const double err = relative_error(d, first, ref);
  EXPECT_LT(err, 8e-3);
}

TEST_F(DenseGemmTest, ProgrammaticLaunchReadsThePreviousGemmsOutput) {
  // D1 = A B1, then D2 = D1 B2 launched right after it, as a programmatic dependent (the default): the
  // second GEMM's CTAs become resident while the first finishes (its last tiles' epilogues, or a split
  // plan's reduction), and must not read D1 before it is complete. D1 is poisoned (NaN) before every
  // first GEMM, so a read that runs ahead shows up as NaN or stale values in D2. Once enqueued back to
  // back, and once captured into a CUDA graph (programmatic edges) and replayed.
  if (props_.arch != GpuArch{9, 0, true})
    GTEST_SKIP() << "programmatic launches are sm_90a's; device is " << props_.arch.name();
  struct Pair {
    std::int64_t m, n1, k1, n2;  // D1 = m x n1 (K k1), D2 = m x n2 (K n1)
  };
  // 8 tiles over a K of 4096 (epilogues last); a split, swapped decode plan and its reduction.
  for (const Pair& pair : {Pair{128, 1024, 4096, 256}, Pair{16, 1024, 8192, 512}}) {
    SCOPED_TRACE(::testing::Message() << "D1 " << pair.m << "x" << pair.n1 << "x" << pair.k1 << ", D2 " << pair.m << "x"
                                      << pair.n2 << "x" << pair.n1);
    GemmProblem p1, p2;
    p1.m = p2.m = pair.m;
    p1.n = pair.n1;
    p1.k = pair.k1;
    p2.n = pair.n2;
    p2.k = pair.n1;
    GemmPlanOptions opts;
    opts.sm_count = props_.multiprocessors;
    auto plan1 = GemmPlan::make(p1, props_.arch, opts);
    if (!plan1 && plan1.error() == errc::unsupported) GTEST_SKIP() << plan1.error().to_string();
    ASSERT_TRUE(plan1.has_value()) << plan1.error().to_string();
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan2, GemmPlan::make(p2, props_.arch, opts));
    std::mt19937_64 rng(static_cast<std::uint64_t>(pair.m * 31 + pair.n2));
    HostMatrix a = random_matrix(p1.a, p1.m, p1.k, MatrixLayout::row, 0, 1, rng, 1.0);
    // Two first-GEMM weights, taken in turn: a read of the previous run's D1 (or of a split plan's
    // partial products) is as wrong as a read of the poison.
    const HostMatrix b1[2] = {random_matrix(p1.b, p1.k, p1.n, MatrixLayout::col, 0, 1, rng, 1.0),
                              random_matrix(p1.b, p1.k, p1.n, MatrixLayout::col, 0, 1, rng, 1.0)};
    HostMatrix b2 = random_matrix(p2.b, p2.k, p2.n, MatrixLayout::col, 0, 1, rng, 1.0);
    // The reference rounds D1 to bf16 as the first GEMM stores it.
    HostMatrix d1 = random_matrix(p1.d, p1.m, p1.n, MatrixLayout::row, 0, 1, rng, 1.0);
    HostMatrix d2 = random_matrix(p2.d, p2.m, p2.n, MatrixLayout::row, 0, 1, rng, 1.0);
    std::vector<std::uint8_t> scratch;
    std::vector<double> ref[2], ref1[2];
    for (int w = 0; w < 2; ++w) {
      ref1[w].resize(d1.values.size());
      for (std::int64_t i = 0; i < p1.m; ++i)
        for (std::int64_t j = 0; j < p1.n; ++j) {
          double acc = 0;
          for (std::int64_t kk = 0; kk < p1.k; ++kk) acc += a.at(0, i, kk) * b1[w].at(0, kk, j);
          ref1[w][d1.index(0, i, j)] = acc;
          d1.values[d1.index(0, i, j)] = store(p1.d, acc, scratch);
        }
      ref[w].resize(d2.values.size());
      for (std::int64_t i = 0; i < p2.m; ++i)
        for (std::int64_t j = 0; j < p2.n; ++j) {
          double acc = 0;
          for (std::int64_t kk = 0; kk < p2.k; ++kk) acc += d1.at(0, i, kk) * b2.at(0, kk, j);
          ref[w][d2.index(0, i, j)] = acc;
        }
    }
    CUACTOR_ASSERT_OK_AND_ASSIGN(da, upload(a.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(db1a, upload(b1[0].bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(db1b, upload(b1[1].bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(db2, upload(b2.bytes));
    CUACTOR_ASSERT_OK_AND_ASSIGN(dd1, gpu::DeviceBuffer::allocate(pool_, d1.bytes.size(), stream_.get()));
    constexpr int kRuns = 8;  // each writes its own D2
    std::vector<gpu::DeviceBuffer> dd2;
    for (int r = 0; r <= kRuns; ++r) {
      CUACTOR_ASSERT_OK_AND_ASSIGN(buf, gpu::DeviceBuffer::allocate(pool_, d2.bytes.size(), stream_.get()));
      CUACTOR_ASSERT_OK(gpu::memset_async(buf.data(), 0xff, buf.size(), stream_.get()));
      dd2.push_back(std::move(buf));
    }
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws1, gpu::DeviceBuffer::allocate(pool_, plan1->workspace_size(), stream_.get()));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws2, gpu::DeviceBuffer::allocate(pool_, plan2.workspace_size(), stream_.get()));
    // Run r of the first GEMM, into `d1_out`, with B1 number r % 2.
    const auto first = [&](int r, void* d1_out) {
      GemmOperands o1;
      o1.a = da.data();
      o1.b = r % 2 == 0 ? db1a.data() : db1b.data();
      o1.d = d1_out;
      return plan1->run(o1, ws1.data(), ws1.size(), stream_.get());
    };
    const auto chain = [&](int r) -> Status {
      CUACTOR_TRY(gpu::memset_async(dd1.data(), 0xff, dd1.size(), stream_.get()));
      CUACTOR_TRY(first(r, dd1.data()));
      GemmOperands o2;
      o2.a = dd1.data();
      o2.b = db2.data();
      o2.d = dd2[static_cast<std::size_t>(r)].data();
      return plan2.run(o2, ws2.data(), ws2.size(), stream_.get());
    };
    for (int r = 0; r < kRuns; ++r) CUACTOR_ASSERT_OK(chain(r));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    cudaGraph_t graph = nullptr;
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal), "capture"));
    const Status captured = chain(kRuns);
    CUACTOR_ASSERT_OK(gpu::check(cudaStreamEndCapture(stream_.get(), &graph), "end capture"));
    CUACTOR_ASSERT_OK(captured);
    cudaGraphExec_t exec = nullptr;
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
    for (int i = 0; i < 3; ++i) CUACTOR_ASSERT_OK(gpu::check(cudaGraphLaunch(exec, stream_.get()), "replay"));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphExecDestroy(exec), "destroy exec"));
    CUACTOR_ASSERT_OK(gpu::check(cudaGraphDestroy(graph), "destroy graph"));
    // The first GEMM alone, back to back with nothing between its runs (a split plan's reduction then
    // precedes the next run's slices), each run into its own poisoned D1.
    std::vector<gpu::DeviceBuffer> dd1s;
    for (int r = 0; r < kRuns; ++r) {
      CUACTOR_ASSERT_OK_AND_ASSIGN(buf, gpu::DeviceBuffer::allocate(pool_, d1.bytes.size(), stream_.get()));
      CUACTOR_ASSERT_OK(gpu::memset_async(buf.data(), 0xff, buf.size(), stream_.get()));
      dd1s.push_back(std::move(buf));
    }
    for (int r = 0; r < kRuns; ++r) CUACTOR_ASSERT_OK(first(r, dd1s[static_cast<std::size_t>(r)].data()));
    // Each output of `layout` (D1 or D2) in `outputs` against the reference of its run's B1.
    const auto check = [&](const HostMatrix& layout, const std::vector<gpu::DeviceBuffer>& outputs,
                           const std::vector<double>(&refs)[2], const std::string& what) {
      for (std::size_t r = 0; r < outputs.size(); ++r) {
        std::vector<std::uint8_t> got(layout.bytes.size());
        CUACTOR_ASSERT_OK(gpu::copy_async(got.data(), outputs[r].data(), got.size(), stream_.get()));
        CUACTOR_ASSERT_OK(stream_.synchronize());
        const double err = relative_error(layout, got, refs[r % 2]);
        EXPECT_TRUE(err < 8e-3) << what << ", " << (r == kRuns ? "graph replay" : "run " + std::to_string(r))
                                << ": relative error " << err << " (plans " << plan1->sku().to_string() << " split "
                                << plan1->split_k() << ", then " << plan2.sku().to_string() << ")";
      }
    };
    check(d1, dd1s, ref1, "first GEMM alone");
    check(d2, dd2, ref, "D2");
  }
}

TEST_F(DenseGemmTest, HeuristicChoosesArchSpecificKernelOnHopper) {
  if (props_.arch.sm() != 90) GTEST_SKIP() << "device is " << props_.arch.name();
  GemmProblem p;
  p.m = p.n = p.k = 4096;
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, GemmPlan::make(p, props_.arch));
  EXPECT_EQ(plan.sku().arch, props_.arch) << plan.sku().to_string();
  // The heuristic's 128-row tiles run swizzled (8 along N): tails in M and N, and batches, against fp64.
  ASSERT_EQ(plan.sku().tile.m, 128) << plan.sku().to_string();
  std::mt19937_64 rng(20261128);
  for (const Case& cs : {Case{2000, 2040, 1024}, Case{1000, 3000, 512, 2}}) {  // swizzle 8 and 4
    check_case(plan.sku(), cs, rng, 1, 1);  // split_k=1, swap_ab=1: the heuristic's plan, never split or swapped
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace cuactor::kernels
