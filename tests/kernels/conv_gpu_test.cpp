// ConvPlan ([K7]) on a GPU: every sm_90a catalog convolution against an fp64 host reference of the
// cross-correlation, with tails in every extent, padding, stride, dilation, non-square filters,
// alpha/beta with a source (also aliasing the output), poisoned outputs with a guard past their
// end, wgrad split into image and row ranges, and CUDA-graph replays bit-identical to the eager run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/conv_plan.hpp"
#include "support/conv_reference.hpp"
#include "support/conv_test_common.hpp"
#include "support/gpu_test.hpp"
#include "support/host_elements.hpp"
#include "support/jit_gpu_cache.hpp"

namespace cuactor::kernels {
namespace {

using conv_test::base_spec;
using conv_test::conv_entries;
using conv_test::kAmpere;
using conv_test::kHopper;
using conv_test::kOperations;
using conv_test::operation_of;

// ---- GPU helpers: host tensors, errors against the fp64 reference (support/conv_reference.hpp), cases ----

using test_support::load;
using test_support::store;

/// A packed tensor of random values in [-1, 1]: its device bytes and the rounded doubles.
struct HostTensor {
  std::vector<std::uint8_t> bytes;
  std::vector<double> values;
};

HostTensor random_tensor(DType t, std::int64_t elements, std::mt19937_64& rng) {
  HostTensor h;
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  h.values.resize(static_cast<std::size_t>(elements));
  for (double& v : h.values) v = store(t, dist(rng), h.bytes);
  return h;
}

/// Relative Frobenius error ||got - ref|| / ||ref||; NaN if any element is NaN (poison left over).
double relative_error(DType t, const std::vector<std::uint8_t>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double diff = load(t, got, i) - ref[i];
    num += diff * diff;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

/// Inputs are rounded identically for kernel and reference; what is left is the output rounding
/// (16-bit) or tf32 arithmetic on fp32 tensors, and fp32 accumulation order.
double tolerance(const GemmSku& sku) {
  return sku.d == DType::f32 ? 5e-3 : 1e-2;
}

/// Where the epilogue's source C comes from.
enum class Source { none, separate, aliased };

/// A (height, width) pair: filter extent, padding, stride or dilation.
struct HW {
  std::int64_t h = 0, w = 0;
};

/// One GPU case.
struct Case {
  std::int64_t n = 1, h = 1, w = 1, c = 8, k = 8;
  HW filter{1, 1}, pad{0, 0}, stride{1, 1}, dilation{1, 1};
  float alpha = 1.0f, beta = 0.0f;
  Source source = Source::none;
};

/// `cs` with alpha = 2, beta = 0.5 and a source.
Case scaled(Case cs, Source source) {
  cs.alpha = 2.0f;
  cs.beta = 0.5f;
  cs.source = source;
  return cs;
}

ConvSpec spec_of(const GemmSku& sku, const Case& cs) {
  ConvSpec spec;
  // A dense GEMM kernel computes pointwise fprop (ConvPlan's route for 1x1 filters on few tiles).
  spec.operation = sku.family == GemmFamily::dense ? ConvOperation::fprop : operation_of(sku.family);
  spec.element = sku.a;
  spec.output = sku.d;
  spec.n = cs.n;
  spec.h = cs.h;
  spec.w = cs.w;
  spec.c = cs.c;
  spec.k = cs.k;
  spec.r = cs.filter.h;
  spec.s = cs.filter.w;
  spec.pad_h = cs.pad.h;
  spec.pad_w = cs.pad.w;
  spec.stride_h = cs.stride.h;
  spec.stride_w = cs.stride.w;
  spec.dilation_h = cs.dilation.h;
  spec.dilation_w = cs.dilation.w;
  return spec;
}

/// Shapes with tails: odd H and W, channels that are not multiples of the tile (24, 40, 136),
/// 1x1 / 3x3 / 7x7 / 3x7 filters, padding 0 to 3, N = 1 and 3, several tiles in M and N; stride 2
/// (for dgrad on the sm_80 kernels only, with strides 2 and 3, a 1x1 filter whose stride leaves dx
/// pixels no tap reaches, and no dilation, which strided dgrad lacks), dilation 2, alpha/beta with a
/// source.
std::vector<Case> cases_for(const GemmSku& sku) {
  const ConvOperation op = operation_of(sku.family);
  const DType element = sku.a;
  const bool strided_dgrad = op == ConvOperation::dgrad && !sku.arch.arch_specific;
  const Case small{.n = 1, .h = 7, .w = 9, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}};
  const Case batched{.n = 3, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}};
  std::vector<Case> cases = {
      small,
      {.n = 3, .h = 13, .w = 11, .c = 136, .k = 40, .filter = {3, 3}, .pad = {1, 1}},
      {.n = 3, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {7, 7}, .pad = {3, 3}},
      {.n = 1, .h = 9, .w = 7, .c = 32, .k = 24, .filter = {3, 3}, .pad = {2, 2}, .dilation = {2, 2}},
      {.n = 1, .h = 7, .w = 9, .c = 24, .k = 40, .filter = {3, 7}, .pad = {1, 3}},     // non-square filter
      {.n = 3, .h = 13, .w = 11, .c = 40, .k = 24, .filter = {3, 3}},                  // no padding
      {.n = 3, .h = 7, .w = 9, .c = 40, .k = 136},                                     // 1x1
      {.n = 3, .h = 16, .w = 16, .c = 64, .k = 136, .filter = {3, 3}, .pad = {1, 1}},  // several tiles
      scaled(batched, Source::separate),
      scaled(small, Source::aliased),
  };
  if (strided_dgrad) {
    std::erase_if(cases, [](const Case& c) { return c.dilation.h != 1 || c.dilation.w != 1; });
    cases.push_back({.n = 3, .h = 13, .w = 11, .c = 64, .k = 72, .filter = {3, 3}, .pad = {1, 1}, .stride = {2, 2}});
    cases.push_back({.n = 1, .h = 13, .w = 11, .c = 24, .k = 40, .stride = {2, 2}});
    cases.push_back({.n = 2, .h = 10, .w = 9, .c = 32, .k = 24, .filter = {3, 3}, .stride = {3, 2}});
    cases.push_back(
        scaled({.n = 2, .h = 15, .w = 16, .c = 136, .k = 40, .filter = {3, 3}, .pad = {1, 1}, .stride = {2, 2}},
               Source::separate));
  }
  if (op != ConvOperation::dgrad) {
    cases.push_back({.n = 3, .h = 13, .w = 11, .c = 64, .k = 72, .filter = {3, 3}, .pad = {1, 1}, .stride = {2, 2}});
    cases.push_back({.n = 1, .h = 13, .w = 11, .c = 24, .k = 40, .stride = {2, 2}});
    Case mixed{.n = 1, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {3, 1}};
    mixed.stride = {2, 1};  // a different stride, dilation and padding along each axis
    mixed.dilation = {1, 2};
    cases.push_back(mixed);
  }
  if (op == ConvOperation::wgrad)  // a long reduction (N P Q = 3072)
    cases.push_back({.n = 3, .h = 32, .w = 32, .c = 64, .k = 64, .filter = {3, 3}, .pad = {1, 1}});
  if (element == DType::f32)  // fp32 needs channels in multiples of 4 only
    cases.push_back({.n = 1, .h = 7, .w = 9, .c = 12, .k = 20, .filter = {3, 3}, .pad = {1, 1}});
  return cases;
}

/// Bytes of poison after the output that a run must leave alone.
constexpr std::size_t kGuard = 256;

// ---- On a GPU: every sm_90a catalog convolution against the fp64 reference ----

class ConvGpu : public test_support::GpuTest {
 protected:
  void SetUp() override {
    set_up_device();
    if (IsSkipped() || HasFatalFailure()) return;
    if (conv_entries(props_.arch).empty()) {
      bool sm90a_catalog = false;
      for (const CatalogEntry& e : catalog()) sm90a_catalog |= e.sku.arch == kHopper;
      // Only a whole catalog must hold them: a sample or filtered one may leave them out.
      if (sm90a_catalog && props_.arch == kHopper && catalog_scope() == CatalogScope::full)
        FAIL() << "the catalog has sm_90a kernels but no convolution";
      GTEST_SKIP() << "no convolution kernel in this build's catalog runs on " << props_.arch.name() << " ("
                   << name(catalog_scope())
                   << " scope; CUACTOR_KERNEL_ARCHS and CUACTOR_CATALOG_FILTER select what is compiled)";
    }
  }

  /// The device's properties, a stream and its memory pool (no catalog needed).
  void set_up_device() {
    GpuTest::SetUp();
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

  /// A device copy of `bytes` in `buf` (a null buffer for none).
  Status upload(const std::vector<std::uint8_t>& bytes, gpu::DeviceBuffer& buf) {
    auto allocated = gpu::DeviceBuffer::allocate(pool_, bytes.size(), stream_.get());
    if (!allocated) return fail(allocated.error());
    buf = std::move(*allocated);
    if (bytes.empty()) return ok();
    return gpu::copy_async(buf.data(), bytes.data(), bytes.size(), stream_.get());
  }

  /// One case on the device: the host inputs (those the operation ignores stay empty), their device
  /// copies, the output (poisoned with 0xff, or holding the source when it aliases) with kGuard
  /// poisoned bytes after it, and the expected result.
  struct Problem {
    HostTensor x, w, dy, source;
    gpu::DeviceBuffer dx, dw, ddy, dsource, dout;
    std::size_t out_bytes = 0;
    ConvTensors tensors;
    std::vector<double> expected;
  };

  Status prepare(const ConvSpec& spec, const Case& cs, std::mt19937_64& rng, Problem& p) {
    const ConvOperation op = spec.operation;
    if (op != ConvOperation::dgrad) p.x = random_tensor(spec.element, spec.activation_elements(), rng);
    if (op != ConvOperation::wgrad) p.w = random_tensor(spec.element, spec.filter_elements(), rng);
    if (op != ConvOperation::fprop) p.dy = random_tensor(spec.element, spec.output_elements(), rng);
    if (cs.source != Source::none) p.source = random_tensor(spec.output, spec.result_elements(), rng);
    p.out_bytes = storage_bytes(spec.output, static_cast<std::size_t>(spec.result_elements()));
    std::vector<std::uint8_t> out(p.out_bytes + kGuard, std::uint8_t{0xff});  // NaN in every float type
    if (cs.source == Source::aliased) std::copy(p.source.bytes.begin(), p.source.bytes.end(), out.begin());
    CUACTOR_TRY(upload(p.x.bytes, p.dx));
    CUACTOR_TRY(upload(p.w.bytes, p.dw));
    CUACTOR_TRY(upload(p.dy.bytes, p.ddy));
    CUACTOR_TRY(upload(out, p.dout));
    if (cs.source == Source::separate) CUACTOR_TRY(upload(p.source.bytes, p.dsource));
    p.tensors.x = p.dx.data();
    p.tensors.w = p.dw.data();
    p.tensors.dy = p.ddy.data();
    p.tensors.out = p.dout.data();
    p.tensors.source = cs.source == Source::separate  ? p.dsource.data()
                       : cs.source == Source::aliased ? p.dout.data()
                                                      : nullptr;
    p.tensors.alpha = cs.alpha;
    p.tensors.beta = cs.beta;
    p.expected = test_support::conv_reference(spec, p.x.values, p.w.values, p.dy.values);
    for (std::size_t i = 0; i < p.expected.size(); ++i)
      p.expected[i] = static_cast<double>(cs.alpha) * p.expected[i] +
                      (cs.source != Source::none ? static_cast<double>(cs.beta) * p.source.values[i] : 0.0);
    return ok();
  }

  /// The output and its guard, copied back after everything queued so far.
  Result<std::vector<std::uint8_t>> download(const Problem& p) {
    std::vector<std::uint8_t> got(p.out_bytes + kGuard);
    CUACTOR_TRY(gpu::copy_async(got.data(), p.dout.data(), got.size(), stream_.get()));
    CUACTOR_TRY(stream_.synchronize());
    return got;
  }

  /// Compares a downloaded output with the expected result and checks that the guard is intact.
  void expect_matches(const GemmSku& sku, const Problem& p, const std::vector<std::uint8_t>& got) {
    const double err = relative_error(sku.d, got, p.expected);
    EXPECT_TRUE(err < tolerance(sku)) << "relative error " << err << " exceeds " << tolerance(sku);
    std::size_t touched = 0;
    for (std::size_t i = p.out_bytes; i < got.size(); ++i) touched += got[i] != 0xff;
    EXPECT_EQ(touched, 0u) << "the kernel wrote past the end of its output";
  }

  /// Device scratch of the plan's workspace size (none for 0 bytes), poisoned with NaN.
  Result<gpu::DeviceBuffer> workspace_for(const ConvPlan& plan) {
    gpu::DeviceBuffer ws;
    CUACTOR_TRY(upload(std::vector<std::uint8_t>(plan.workspace_size(), std::uint8_t{0xff}), ws));
    return ws;
  }

  Result<ConvPlan> plan_for(const GemmSku& sku, const ConvSpec& spec, std::optional<ConvSplit> split = std::nullopt,
                            int sm_count = 0) const {
    ConvPlanOptions o;
    o.split_override = split;
    o.sku_override = sku;
    o.sm_count = sm_count > 0 ? sm_count : props_.multiprocessors;
    o.device = props_.ordinal;
    if (jit_) return ConvPlan::with_instance(spec, props_.arch, sku, *jit_->abi, jit_->jit, PlanSource::overridden, o);
    return ConvPlan::create(spec, props_.arch, o);
  }

  /// Runs `cs` with catalog kernel `sku` (and wgrad split `split`, else the plan's; on a grid for
  /// `sm_count` multiprocessors, else the device's) on a poisoned workspace of the plan's size and
  /// compares with the fp64 reference.
  void check_case(const GemmSku& sku, const Case& cs, std::mt19937_64& rng,
                  std::optional<ConvSplit> split = std::nullopt, int sm_count = 0) {
    const ConvSpec spec = spec_of(sku, cs);
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(sku, spec, split, sm_count));
    SCOPED_TRACE(::testing::Message() << sku.to_string() << " " << spec.to_string() << " alpha=" << cs.alpha
                                      << " beta=" << cs.beta << " source=" << static_cast<int>(cs.source)
                                      << " split=" << plan.split().to_string());
    ASSERT_EQ(plan.sku(), sku);
    if (split) {
      ASSERT_EQ(plan.split(), *split);
    }
    if (plan.split() == ConvSplit{}) {
      if (spec.operation != ConvOperation::wgrad) {
        ASSERT_EQ(plan.workspace_size(), 0u) << "an unsplit plan needs none";
      }
    } else {
      ASSERT_EQ(plan.workspace_size(), static_cast<std::size_t>(plan.split().slices()) *
                                           static_cast<std::size_t>(spec.result_elements()) * sizeof(float));
    }
    Problem p;
    CUACTOR_ASSERT_OK(prepare(spec, cs, rng, p));
    CUACTOR_ASSERT_OK(plan.check_buffer_sizes(p.x.bytes.size(), p.w.bytes.size(), p.dy.bytes.size(), p.out_bytes,
                                              cs.source != Source::none ? p.out_bytes : 0));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, workspace_for(plan));
    CUACTOR_ASSERT_OK(plan.run(p.tensors, ws.data(), plan.workspace_size(), stream_.get()));
    CUACTOR_ASSERT_OK_AND_ASSIGN(got, download(p));
    expect_matches(sku, p, got);
  }

  /// Every catalog kernel of `op` on every case; on Hopper the catalog must hold each of `types`.
  void check_operation(ConvOperation op, std::initializer_list<DType> types) {
    std::vector<const CatalogEntry*> entries;
    for (const CatalogEntry* e : catalog_entries(family_of(op)))
      if (runs_on(e->sku, props_.arch)) entries.push_back(e);
    bool sm90a_catalog = false;
    for (const CatalogEntry& e : catalog()) sm90a_catalog |= e.sku.arch == kHopper;
    if (props_.arch == kHopper && sm90a_catalog)
      for (DType t : types) {
        bool found = false;
        for (const CatalogEntry* e : entries) found |= e->sku.a == t;
        EXPECT_TRUE(found) << "no sm_90a " << name(family_of(op)) << " " << name(t) << " kernel in the catalog";
      }
    if (entries.empty()) GTEST_SKIP() << "no " << name(family_of(op)) << " kernel runs on " << props_.arch.name();
    std::mt19937_64 rng(20261122);
    for (const CatalogEntry* e : entries)
      for (const Case& cs : cases_for(e->sku)) {
        check_case(e->sku, cs, rng);
        if (HasFatalFailure()) return;
      }
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
  /// A JIT-compiled instance that plan_for() runs instead of the catalog's.
  std::optional<jit::ResolvedInstance> jit_;
};

TEST_F(ConvGpu, FpropMatchesFp64Reference) {
  check_operation(ConvOperation::fprop, {DType::bf16, DType::f16, DType::f32});
}

TEST_F(ConvGpu, DgradMatchesFp64Reference) {
  check_operation(ConvOperation::dgrad, {DType::bf16, DType::f16});
}

TEST_F(ConvGpu, WgradMatchesFp64Reference) {
  check_operation(ConvOperation::wgrad, {DType::bf16, DType::f16});
}

// Wgrad's reduction split into image ranges and row ranges (with padding, stride and dilation at the
// ranges' edges) equals the fp64 reference for every split, the cost model's own included.
TEST_F(ConvGpu, WgradSplitsMatchFp64Reference) {
  std::vector<const CatalogEntry*> entries;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::conv_wgrad))
    if (runs_on(e->sku, props_.arch)) entries.push_back(e);
  if (entries.empty()) GTEST_SKIP() << "no conv_wgrad kernel runs on " << props_.arch.name();
  const Case batched{.n = 5, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}};
  Case strided{.n = 1, .h = 23, .w = 11, .c = 32, .k = 24, .filter = {3, 3}, .pad = {1, 1}, .stride = {2, 2}};
  Case dilated{.n = 2, .h = 19, .w = 9, .c = 24, .k = 40, .filter = {3, 3}, .pad = {2, 1}, .dilation = {2, 1}};
  Case tall{.n = 1, .h = 30, .w = 7, .c = 40, .k = 24, .filter = {7, 3}, .pad = {3, 1}};
  Case unpadded{.n = 2, .h = 17, .w = 9, .c = 24, .k = 40, .filter = {3, 3}};
  const std::pair<Case, std::vector<ConvSplit>> plans[] = {
      {batched, {{1, 1}, {2, 1}, {3, 1}, {5, 1}, {5, 2}, {5, 6}}},
      {scaled(batched, Source::separate), {{4, 1}, {5, 3}}},
      {scaled(batched, Source::aliased), {{5, 6}}},
      {strided, {{1, 2}, {1, 5}, {1, 11}}},
      {dilated, {{2, 2}, {2, 7}, {2, 15}}},
      {tall, {{1, 3}, {1, 4}, {1, 30}}},
      {unpadded, {{2, 4}, {2, 15}}},
  };
  std::mt19937_64 rng(20261124);
  for (const CatalogEntry* e : entries)
    for (const auto& [cs, splits] : plans) {
      check_case(e->sku, cs, rng);  // the cost model's split
      if (HasFatalFailure()) return;
      for (const ConvSplit& split : splits) {
        check_case(e->sku, cs, rng, split);
        if (HasFatalFailure()) return;
      }
    }
}

// Fprop's input channels split into ranges of whole K steps (the last range ending at C, not a
// multiple of 64; 3x3 filters with padding and stride at every range) equal the fp64 reference for
// every split and for the plan's own, on the kernels that split channels.
TEST_F(ConvGpu, FpropChannelSplitsMatchFp64Reference) {
  std::vector<const CatalogEntry*> entries;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::conv_fprop))
    if (runs_on(e->sku, props_.arch) && e->sku.arch.arch_specific && e->sku.tile == Shape3{64, 64, 64} &&
        e->sku.schedule == GemmSchedule::warpspecialized && size_bits(e->sku.d) == 16)
      entries.push_back(e);
  if (entries.empty()) GTEST_SKIP() << "no conv_fprop kernel that splits channels runs on " << props_.arch.name();
  const Case deep{.n = 2, .h = 7, .w = 9, .c = 264, .k = 40, .filter = {3, 3}, .pad = {1, 1}};  // 5 K steps
  const Case pointwise{.n = 1, .h = 7, .w = 7, .c = 2048, .k = 72};                             // 32 K steps
  const Case strided{.n = 2, .h = 11, .w = 9, .c = 200, .k = 24, .filter = {3, 3}, .pad = {1, 1}, .stride = {2, 2}};
  const std::pair<Case, std::vector<ConvSplit>> plans[] = {
      {deep, {{.channels = 2}, {.channels = 3}, {.channels = 5}}},
      {scaled(deep, Source::separate), {{.channels = 4}}},
      {scaled(deep, Source::aliased), {{.channels = 5}}},
      {pointwise, {{.channels = 8}, {.channels = 16}}},
      {strided, {{.channels = 2}, {.channels = 4}}},
  };
  std::mt19937_64 rng(20261126);
  for (const CatalogEntry* e : entries)
    for (const auto& [cs, splits] : plans) {
      check_case(e->sku, cs, rng);  // the plan's split (deep: 5 slices of 9 K steps; pointwise: 16 of 2)
      if (HasFatalFailure()) return;
      for (const ConvSplit& split : splits) {
        check_case(e->sku, cs, rng, split);
        if (HasFatalFailure()) return;
      }
    }
}

// Pointwise fprop on the dense GEMM kernels that ConvPlan routes it to (1x1, unit stride, unpadded, on
// few tiles): tails in pixels (M), filters (N) and channels (K), alpha/beta with a separate and an
// aliased source; and the heuristic's own choice of that kernel for such a spec.
TEST_F(ConvGpu, PointwiseFpropOnDenseKernelsMatchesFp64Reference) {
  // The kernels of pointwise_problem's layouts and of the conv kernels' types (output = input): the
  // catalog's other 64x32x64 kernels are split-K slices with float32 output (the swapped ones also
  // store D column-major), which the pointwise route never takes.
  std::vector<const CatalogEntry*> entries;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::dense))
    if (runs_on(e->sku, props_.arch) && e->sku.arch.arch_specific && e->sku.tile == Shape3{64, 32, 64} &&
        e->sku.layout_a == MatrixLayout::row && e->sku.layout_b == MatrixLayout::col &&
        e->sku.layout_c == MatrixLayout::row && e->sku.d == e->sku.a &&
        e->sku.epilogue == GemmEpilogue::linear_combination)
      entries.push_back(e);
  if (entries.empty()) {
    // A whole sm_90a catalog holds them (bf16 and f16): losing them must not pass as a skip.
    if (catalog_scope() == CatalogScope::full && props_.arch == kHopper)
      FAIL() << "the whole catalog has no dense pingpong 64x32x64 kernel for pointwise convolutions";
    GTEST_SKIP() << "no dense 64x32x64 pointwise kernel (output = input, row-major D) runs on " << props_.arch.name()
                 << " (" << name(catalog_scope()) << " scope)";
  }
  const Case deep{.n = 1, .h = 7, .w = 7, .c = 2048, .k = 72};  // 49 pixels, 3 tiles of filters, 32 K steps
  const Case tails{.n = 3, .h = 5, .w = 9, .c = 136, .k = 40};  // 135 pixels, a K step of 8 channels
  const Case few_tiles{.n = 1, .h = 5, .w = 7, .c = 1032, .k = 40};
  std::mt19937_64 rng(20261127);
  for (const CatalogEntry* e : entries)
    for (const Case& cs : {deep, tails, scaled(deep, Source::separate), scaled(tails, Source::aliased), few_tiles}) {
      check_case(e->sku, cs, rng);
      if (HasFatalFailure()) return;
    }
  for (const CatalogEntry* e : entries) {
    const ConvSpec spec = spec_of(e->sku, few_tiles);  // 2 tiles of 64x32 over 17 K steps
    ConvPlanOptions o;
    o.sm_count = props_.multiprocessors;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, ConvPlan::create(spec, props_.arch, o));
    EXPECT_EQ(plan.sku(), e->sku) << spec.to_string() << " -> " << plan.sku().to_string();
  }
}

// A split's sum adds the slices in slice order whatever order they finished in: repeated runs give the
// same bits, also on a workspace that a run left or that holds garbage (the slices overwrite it).
TEST_F(ConvGpu, WgradSplitSumIsDeterministic) {
  std::vector<const CatalogEntry*> entries;
  for (const CatalogEntry* e : catalog_entries(GemmFamily::conv_wgrad))
    if (runs_on(e->sku, props_.arch) && e->sku.arch.arch_specific) entries.push_back(e);
  if (entries.empty()) GTEST_SKIP() << "no sm_90a conv_wgrad kernel runs on " << props_.arch.name();
  const Case cs =
      scaled({.n = 5, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}}, Source::separate);
  std::mt19937_64 rng(20261126);
  const cudaStream_t s = stream_.get();
  for (const CatalogEntry* e : entries) {
    const ConvSpec spec = spec_of(e->sku, cs);
    SCOPED_TRACE(e->sku.to_string());
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(e->sku, spec, ConvSplit{5, 6}));
    Problem p;
    CUACTOR_ASSERT_OK(prepare(spec, cs, rng, p));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, workspace_for(plan));
    CUACTOR_ASSERT_OK(plan.run(p.tensors, ws.data(), plan.workspace_size(), s));
    CUACTOR_ASSERT_OK_AND_ASSIGN(first, download(p));
    expect_matches(e->sku, p, first);
    for (int again = 0; again < 3; ++again) {
      CUACTOR_ASSERT_OK(gpu::memset_async(p.dout.data(), 0xff, p.dout.size(), s));
      if (again == 2) CUACTOR_ASSERT_OK(gpu::memset_async(ws.data(), 0x5a, plan.workspace_size(), s));
      CUACTOR_ASSERT_OK(plan.run(p.tensors, ws.data(), plan.workspace_size(), s));
      CUACTOR_ASSERT_OK_AND_ASSIGN(next, download(p));
      EXPECT_TRUE(next == first) << "run " << again + 2 << " differs from the first";
    }
  }
}

// The persistent pingpong kernels on a grid of 3 CTAs (a plan for 3 multiprocessors): every CTA takes
// many tiles, its two consumer warpgroups alternate, and wgrad slices of unequal reductions follow
// one another in one CTA's pipeline.
TEST_F(ConvGpu, PersistentKernelsOnFewMultiprocessorsMatchFp64Reference) {
  std::vector<const CatalogEntry*> entries;
  for (const CatalogEntry& e : catalog())
    if (is_conv(e.sku.family) && e.sku.schedule == GemmSchedule::pingpong && runs_on(e.sku, props_.arch))
      entries.push_back(&e);
  if (entries.empty()) GTEST_SKIP() << "no persistent conv kernel runs on " << props_.arch.name();
  const Case batched{.n = 5, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}};
  std::mt19937_64 rng(20261126);
  for (const CatalogEntry* e : entries) {
    for (const Case& cs : cases_for(e->sku)) {
      check_case(e->sku, cs, rng, std::nullopt, 3);
      if (HasFatalFailure()) return;
    }
    if (e->sku.family != GemmFamily::conv_wgrad) continue;
    for (const ConvSplit& split : {ConvSplit{5, 1}, ConvSplit{5, 6}, ConvSplit{2, 1}}) {
      check_case(e->sku, batched, rng, split, 3);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(ConvGpu, HeuristicChoosesAKernelOfTheOperation) {
  for (const CatalogEntry* e : conv_entries(props_.arch)) {
    ConvSpec spec = base_spec(operation_of(e->sku.family), e->sku.a);
    spec.output = e->sku.d;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, ConvPlan::create(spec, props_.arch));
    EXPECT_EQ(plan.sku().family, e->sku.family) << plan.sku().to_string();
    EXPECT_EQ(plan.sku().a, e->sku.a) << plan.sku().to_string();
    EXPECT_TRUE(runs_on(plan.sku(), props_.arch)) << plan.sku().to_string();
  }
  // With both fprop tiles compiled in, a 64-channel output takes the 128x64 tile and a 512-channel
  // one the 128x128 tile (the wave heuristic by class, not by listed shape). Devices before Hopper
  // have only the catalog's sm_80 dgrad.
  bool fprop_runs = false;
  for (const CatalogEntry* e : conv_entries(props_.arch))
    fprop_runs |= e->sku.family == GemmFamily::conv_fprop && e->sku.a == DType::bf16;
  if (!fprop_runs) return;
  ConvSpec narrow = base_spec();
  narrow.n = 32;
  narrow.h = narrow.w = 56;
  CUACTOR_ASSERT_OK_AND_ASSIGN(small, ConvPlan::create(narrow, props_.arch));
  ConvSpec wide = narrow;
  wide.c = wide.k = 512;
  CUACTOR_ASSERT_OK_AND_ASSIGN(large, ConvPlan::create(wide, props_.arch));
  if (find_in_catalog(ConvPlan::sku_for(narrow, kHopper, {128, 64, 64})) != nullptr && props_.arch == kHopper) {
    EXPECT_EQ(small.sku().tile.n, 64) << small.sku().to_string();
    EXPECT_EQ(large.sku().tile.n, 128) << large.sku().to_string();
  }
}

TEST_F(ConvGpu, CapturedGraphEqualsEager) {
  const Case cs =
      scaled({.n = 3, .h = 13, .w = 11, .c = 24, .k = 40, .filter = {3, 3}, .pad = {1, 1}}, Source::separate);
  // Deep enough for an fprop channel split (5 K steps) on the kernels that split channels.
  const Case deep =
      scaled({.n = 2, .h = 7, .w = 9, .c = 320, .k = 40, .filter = {3, 3}, .pad = {1, 1}}, Source::separate);
  std::mt19937_64 rng(11);
  const auto check = [&](const GemmSku& sku, const Case& c, std::optional<ConvSplit> split) {
    const ConvSpec spec = spec_of(sku, c);
    SCOPED_TRACE(sku.to_string() + " split " + (split ? split->to_string() : std::string("(plan's)")));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(sku, spec, split));
    Problem p;
    CUACTOR_ASSERT_OK(prepare(spec, c, rng, p));
    CUACTOR_ASSERT_OK_AND_ASSIGN(ws, workspace_for(plan));
    const cudaStream_t s = stream_.get();
    CUACTOR_ASSERT_OK(plan.run(p.tensors, ws.data(), plan.workspace_size(), s));
    CUACTOR_ASSERT_OK_AND_ASSIGN(eager, download(p));
    expect_matches(sku, p, eager);
    CUACTOR_ASSERT_OK(gpu::memset_async(p.dout.data(), 0xff, p.dout.size(), s));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    CUACTOR_ASSERT_OK(gpu::begin_stream_capture(s, gpu::CaptureMode::global));
    const Status captured = plan.run(p.tensors, ws.data(), plan.workspace_size(), s);
    auto graph = gpu::end_stream_capture(s);
    CUACTOR_ASSERT_OK(captured);
    ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
    CUACTOR_ASSERT_OK_AND_ASSIGN(exec, gpu::GraphExec::instantiate(*graph));
    for (int replay = 0; replay < 2; ++replay) {
      CUACTOR_ASSERT_OK(exec.launch(s));
      CUACTOR_ASSERT_OK_AND_ASSIGN(replayed, download(p));
      EXPECT_TRUE(replayed == eager) << "graph replay " << replay << " differs from the eager run";
      CUACTOR_ASSERT_OK(gpu::memset_async(p.dout.data(), 0xff, p.dout.size(), s));
    }
  };
  for (const CatalogEntry* e : conv_entries(props_.arch)) {
    check(e->sku, cs, std::nullopt);
    if (HasFatalFailure()) return;
    if (e->sku.family == GemmFamily::conv_fprop && e->sku.arch.arch_specific && e->sku.tile == Shape3{64, 64, 64} &&
        e->sku.schedule == GemmSchedule::warpspecialized && size_bits(e->sku.d) == 16) {
      check(e->sku, deep, ConvSplit{.channels = 5});
      if (HasFatalFailure()) return;
    }
  }
}

// The sm_80 (CUTLASS 2.x) kernels of every operation, compiled by the JIT (the catalog holds only
// the strided-dgrad ones): the path of devices before Hopper, run here on whatever device this is.
class ConvJitGpu : public ConvGpu {
 protected:
  void SetUp() override { set_up_device(); }
};

TEST_F(ConvJitGpu, Sm80KernelsOfEveryOperationMatchFp64Reference) {
  if (!runs_on(ConvPlan::sku_for(ConvSpec{}, kAmpere, {128, 128, 64}, {1, 1, 1}, GemmSchedule::multistage, 3),
               props_.arch))
    GTEST_SKIP() << "sm_80 kernels need sm_80 or later, not " << props_.arch.name();
  CUACTOR_ASSERT_OK_AND_ASSIGN(engine, test_support::gpu_test_jit_engine(3));
  jit::GemmJit gemm(engine);
  std::vector<GemmSku> skus;
  for (ConvOperation op : kOperations) {
    ConvSpec spec;
    spec.operation = op;
    skus.push_back(ConvPlan::sku_for(spec, kAmpere, {128, 128, 64}, {1, 1, 1}, GemmSchedule::multistage, 3));
  }
  std::vector<jit::JitFuture<jit::JitInstance>> futures;
  // Compiled in parallel, as SASS for this device (an sm_80 SKU's code is portable to later GPUs),
  // even where the catalog has the SKU (its dgrad), so that the JIT's instance is what runs.
  const GpuArch device{props_.arch.major, props_.arch.minor, false};
  for (const GemmSku& sku : skus) futures.push_back(gemm.compile(sku, device));
  std::mt19937_64 rng(20261124);
  for (std::size_t i = 0; i < skus.size(); ++i) {
    const auto& compiled = futures[i].get();
    ASSERT_TRUE(compiled.has_value()) << skus[i].to_string() << ": " << compiled.error().to_string();
    jit_ = jit::ResolvedInstance{&(*compiled)->abi(), *compiled};
    for (const Case& cs : cases_for(skus[i])) {
      check_case(skus[i], cs, rng);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace cuactor::kernels
