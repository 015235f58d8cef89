// ConvPlan ([K7]). Without a device: spec arithmetic, SKUs, every plan-time rule with the field it
// names (create() against the catalog, with_instance() against a fake instance so that a build
// without kernels reaches every rule too), tensor checks, buffer sizes and the arguments run() hands
// the kernel. On a GPU: every sm_90a catalog convolution against an fp64 host reference of the
// cross-correlation, with tails in every extent, padding, stride, dilation, non-square filters,
// alpha/beta with a source (also aliasing the output), poisoned outputs with a guard past their
// end, no workspace, and CUDA-graph replays bit-identical to the eager run.
#include "cuactor/kernels/conv_plan.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/graph.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "kernels/conv_instance_abi.h"
#include "support/conv_reference.hpp"
#include "support/gpu_test.hpp"
#include "support/host_elements.hpp"

namespace cuactor::kernels {
namespace {

// ---- Helpers: specs, catalog look-ups, errors, fake addresses and a fake instance ----

constexpr GpuArch kHopper{9, 0, true};
constexpr GpuArch kAmpere{8, 0, false};
constexpr Shape3 kTile{128, 128, 64};
constexpr ConvOperation kOperations[] = {ConvOperation::fprop, ConvOperation::dgrad, ConvOperation::wgrad};

/// A valid spec: 2 x 16 x 16 x 64 activations, 64 filters of 3 x 3, "same" padding.
ConvSpec base_spec(ConvOperation op = ConvOperation::fprop, DType t = DType::bf16) {
  ConvSpec spec;
  spec.operation = op;
  spec.element = spec.output = t;
  spec.n = 2;
  spec.h = spec.w = 16;
  spec.c = spec.k = 64;
  spec.r = spec.s = 3;
  spec.pad_h = spec.pad_w = 1;
  return spec;
}

/// The operation a convolution SKU family computes.
ConvOperation operation_of(GemmFamily f) {
  for (ConvOperation op : kOperations)
    if (family_of(op) == f) return op;
  ADD_FAILURE() << name(f) << " is not a convolution family";
  return ConvOperation::fprop;
}

/// Conv entries of the catalog (every family) that run on `arch`.
std::vector<const CatalogEntry*> conv_entries(GpuArch arch) {
  std::vector<const CatalogEntry*> out;
  for (ConvOperation op : kOperations)
    for (const CatalogEntry* e : catalog_entries(family_of(op)))
      if (runs_on(e->sku, arch)) out.push_back(e);
  return out;
}

/// A fake device address with the given misalignment; nothing dereferences it.
const void* fake(std::uintptr_t offset = 0) {
  return reinterpret_cast<const void*>(0x7f0000000000ull + offset);
}
void* fake_mut(std::uintptr_t offset = 0) {
  return reinterpret_cast<void*>(0x7f0000100000ull + offset);
}

void expect_error(const Status& s, errc code, const std::string& mentions) {
  ASSERT_FALSE(s.has_value()) << "expected an error mentioning '" << mentions << "'";
  EXPECT_EQ(s.error(), code) << s.error().to_string();
  EXPECT_NE(s.error().message().find(mentions), std::string::npos) << s.error().message();
}

template <class T>
void expect_error(const Result<T>& r, errc code, const std::string& mentions) {
  expect_error(r.has_value() ? Status{} : Status{::cuda::std::unexpected<Error>(r.error())}, code, mentions);
}

/// Stands in for a compiled convolution instance: accepts every problem, asks for `workspace`
/// bytes and records its launches; it never touches a device.
struct FakeKernel {
  static inline cuactor_conv_args last{};
  static inline int launches = 0;
  static inline std::size_t workspace = 0;

  static int can_implement(const void*) { return CUACTOR_KERNEL_OK; }
  static std::size_t workspace_size(const void*) { return workspace; }
  static int run(const void* args, void*, std::size_t, void*) {
    last = *static_cast<const cuactor_conv_args*>(args);
    ++launches;
    return CUACTOR_KERNEL_OK;
  }
};

const cuactor_gemm_instance& fake_instance() {
  static const cuactor_gemm_instance instance = {
      CUACTOR_KERNEL_ABI_VERSION,
      sizeof(cuactor_conv_args),
      {"conv_fprop", "sm_90a", "bf16", "bf16", "bf16", "bf16", "f32", "nhwc", "krsc", "nhwc", 128, 128, 64, 1, 1, 1, 0,
       "warpspecialized", "linear_combination"},
      &FakeKernel::can_implement,
      &FakeKernel::workspace_size,
      &FakeKernel::run,
  };
  return instance;
}

/// A plan of `spec` on sm_90a running the fake instance under the SKU the spec needs.
Result<ConvPlan> fake_plan(const ConvSpec& spec, const ConvPlanOptions& options = {}) {
  return ConvPlan::with_instance(spec, kHopper, ConvPlan::sku_for(spec, kHopper, kTile), fake_instance(), nullptr,
                                 PlanSource::tuned, options);
}

/// Both create() and with_instance() reject `spec` on `arch` with `code`, naming `mentions`.
void expect_rejected(const ConvSpec& spec, errc code, const std::string& mentions, GpuArch arch = kHopper) {
  SCOPED_TRACE(spec.to_string());
  expect_error(ConvPlan::create(spec, arch), code, mentions);
  expect_error(ConvPlan::with_instance(spec, arch, ConvPlan::sku_for(spec, kHopper, kTile), fake_instance(), nullptr,
                                       PlanSource::overridden),
               code, mentions);
}

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
  spec.operation = operation_of(sku.family);
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
/// for fprop and wgrad (dgrad has no strided kernel), dilation 2, alpha/beta with a source.
std::vector<Case> cases_for(ConvOperation op, DType element) {
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

// ---- ConvSpec: extents, flops, text, names, hashing ----

TEST(ConvSpec, OutputExtentsAndFlops) {
  ConvSpec spec = base_spec();
  EXPECT_EQ(spec.p(), 16);
  EXPECT_EQ(spec.q(), 16);
  EXPECT_EQ(spec.activation_elements(), 2 * 16 * 16 * 64);
  EXPECT_EQ(spec.filter_elements(), 64 * 3 * 3 * 64);
  EXPECT_EQ(spec.output_elements(), 2 * 16 * 16 * 64);
  EXPECT_DOUBLE_EQ(spec.flops(), 2.0 * 2 * 16 * 16 * 64 * 64 * 3 * 3);
  spec.h = 56;
  spec.w = 9;
  spec.s = 7;
  spec.pad_w = 3;
  spec.stride_h = spec.stride_w = 2;
  spec.k = 40;
  EXPECT_EQ(spec.p(), 28);  // (56 + 2 - 2 - 1) / 2 + 1
  EXPECT_EQ(spec.q(), 5);   // (9 + 6 - 6 - 1) / 2 + 1
  EXPECT_EQ(spec.output_elements(), 2 * 28 * 5 * 40);
  EXPECT_DOUBLE_EQ(spec.flops(), 2.0 * 2 * 28 * 5 * 40 * 64 * 3 * 7);
  spec = base_spec();
  spec.h = 9;
  spec.pad_h = 2;
  spec.dilation_h = 2;
  EXPECT_EQ(spec.p(), 9);  // (9 + 4 - 4 - 1) / 1 + 1
  {
    ConvSpec overhang = base_spec();  // H=2, R=3, stride 2, no padding: the filter hangs past the input
    overhang.h = 2;
    overhang.pad_h = 0;
    overhang.stride_h = 2;
    EXPECT_EQ(overhang.p(), 0) << "floor, not truncation: (2 - 2 - 1) / 2 + 1 would count one window";
  }
  spec.h = 2;
  spec.r = 5;
  spec.pad_h = 0;
  spec.dilation_h = 1;
  EXPECT_LE(spec.p(), 0);  // the filter is larger than the padded input
}

TEST(ConvSpec, ResultIsTheTensorTheOperationWrites) {
  ConvSpec spec = base_spec();
  spec.c = 24;
  spec.k = 40;
  spec.stride_h = 2;
  EXPECT_EQ(spec.result_elements(), spec.output_elements());
  spec.operation = ConvOperation::dgrad;
  EXPECT_EQ(spec.result_elements(), spec.activation_elements());
  spec.operation = ConvOperation::wgrad;
  EXPECT_EQ(spec.result_elements(), spec.filter_elements());
}

TEST(ConvSpec, ToStringNamesEveryField) {
  ConvSpec spec = base_spec();
  spec.n = 32;
  spec.h = spec.w = 56;
  EXPECT_EQ(spec.to_string(), "fprop bf16->bf16 n=32 h=56 w=56 c=64 k=64 r=3 s=3 pad=1,1 stride=1,1 dilation=1,1");
  spec.operation = ConvOperation::wgrad;
  spec.element = spec.output = DType::f16;
  spec.pad_w = 0;
  spec.stride_h = 2;
  spec.dilation_w = 3;
  EXPECT_EQ(spec.to_string(), "wgrad f16->f16 n=32 h=56 w=56 c=64 k=64 r=3 s=3 pad=1,0 stride=2,1 dilation=1,3");
}

TEST(ConvSpec, OperationNamesRoundTrip) {
  for (ConvOperation op : kOperations) {
    EXPECT_EQ(parse_conv_operation(name(op)), op) << name(op);
    EXPECT_TRUE(is_conv(family_of(op)));
    EXPECT_EQ(name(family_of(op)), "conv_" + std::string(name(op)));
  }
  EXPECT_EQ(name(ConvOperation::fprop), "fprop");
  EXPECT_EQ(name(ConvOperation::dgrad), "dgrad");
  EXPECT_EQ(name(ConvOperation::wgrad), "wgrad");
  EXPECT_FALSE(parse_conv_operation("bprop").has_value());
  EXPECT_FALSE(parse_conv_operation("").has_value());
  EXPECT_FALSE(parse_conv_operation("Fprop").has_value());
}

TEST(ConvSpec, HashSeparatesFields) {
  const ConvSpec a = base_spec();
  EXPECT_EQ(hash_value(a), hash_value(base_spec()));
  EXPECT_EQ(std::hash<ConvSpec>{}(a), hash_value(a));
  ConvSpec b = a;
  b.operation = ConvOperation::dgrad;
  EXPECT_NE(hash_value(a), hash_value(b));
  b = a;
  b.pad_w = 2;
  EXPECT_NE(hash_value(a), hash_value(b));
  b = a;
  b.dilation_h = 2;
  EXPECT_NE(hash_value(a), hash_value(b));
  b = a;
  b.output = DType::f32;
  EXPECT_NE(hash_value(a), hash_value(b));
  EXPECT_NE(a, b);
}

// ---- SKUs: what the JIT compiles for a spec, and what the catalog holds ----

TEST(ConvSku, SkuForNamesFamilyTypesLayoutsAndSchedule) {
  const std::pair<ConvSpec, std::string> expected[] = {
      {base_spec(ConvOperation::fprop),
       "conv_fprop:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s0:warpspecialized:"
       "linear_combination"},
      {base_spec(ConvOperation::dgrad),
       "conv_dgrad:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s0:warpspecialized:"
       "linear_combination"},
      {base_spec(ConvOperation::wgrad),
       "conv_wgrad:sm_90a:bf16,bf16,bf16,bf16,f32:nhwc,nhwc,krsc:128x128x64:1x1x1:s0:warpspecialized:"
       "linear_combination"},
      {base_spec(ConvOperation::fprop, DType::f16),
       "conv_fprop:sm_90a:f16,f16,f16,f16,f32:nhwc,krsc,nhwc:128x128x64:1x1x1:s0:warpspecialized:"
       "linear_combination"},
  };
  for (const auto& [spec, text] : expected) {
    const GemmSku sku = ConvPlan::sku_for(spec, kHopper, kTile);
    EXPECT_EQ(sku.to_string(), text);
    CUACTOR_ASSERT_OK_AND_ASSIGN(parsed, GemmSku::parse(sku.to_string()));
    EXPECT_EQ(parsed, sku);
  }
  const GemmSku clustered = ConvPlan::sku_for(base_spec(), kHopper, {64, 128, 64}, {2, 1, 1});
  EXPECT_EQ(clustered.tile, (Shape3{64, 128, 64}));
  EXPECT_EQ(clustered.cluster, (Shape3{2, 1, 1}));
  EXPECT_NE(clustered.to_string().find(":64x128x64:2x1x1:"), std::string::npos) << clustered.to_string();
  // fp32 tensors: tf32 arithmetic, fp32 accumulation; the text parses back as well.
  const GemmSku f32 = ConvPlan::sku_for(base_spec(ConvOperation::fprop, DType::f32), kHopper, {128, 128, 32});
  EXPECT_EQ(f32.accumulator, DType::f32);
  EXPECT_EQ(f32.d, DType::f32);
  CUACTOR_ASSERT_OK_AND_ASSIGN(f32_parsed, GemmSku::parse(f32.to_string()));
  EXPECT_EQ(f32_parsed, f32);
  // Every operation gets its own symbol.
  EXPECT_NE(ConvPlan::sku_for(base_spec(ConvOperation::fprop), kHopper, kTile).symbol_name(),
            ConvPlan::sku_for(base_spec(ConvOperation::dgrad), kHopper, kTile).symbol_name());
}

TEST(ConvSku, CatalogEntriesAreWhatSkuForAsks) {
  const auto entries = conv_entries(kHopper);
  if (entries.empty()) GTEST_SKIP() << "no sm_90a convolution kernels in this build's catalog";
  for (const CatalogEntry* e : entries) {
    SCOPED_TRACE(e->sku.to_string());
    EXPECT_EQ(e->sku.arch, kHopper);
    EXPECT_EQ(e->sku.schedule, GemmSchedule::warpspecialized);
    EXPECT_EQ(e->sku.epilogue, GemmEpilogue::linear_combination);
    EXPECT_EQ(e->sku.accumulator, DType::f32);
    EXPECT_EQ(e->sku.a, e->sku.d) << "catalog convolutions write their element type";
    // The catalog (kernels/catalog.cmake tokens) and the JIT's sku_for agree on the identity.
    ConvSpec spec = base_spec(operation_of(e->sku.family), e->sku.a);
    spec.output = e->sku.d;
    EXPECT_EQ(ConvPlan::sku_for(spec, e->sku.arch, e->sku.tile, e->sku.cluster), e->sku);
    CUACTOR_ASSERT_OK_AND_ASSIGN(parsed, GemmSku::parse(e->sku.to_string()));
    EXPECT_EQ(parsed, e->sku);
  }
}

// ---- ConvPlan::create: choices and overrides ----

TEST(ConvPlanCreate, WithoutKernelsSaysCatalogElseChoosesOne) {
  for (ConvOperation op : kOperations) {
    const ConvSpec spec = base_spec(op);
    auto plan = ConvPlan::create(spec, kHopper);
    bool in_catalog = false;
    for (const CatalogEntry* e : catalog_entries(family_of(op))) in_catalog |= e->sku.a == DType::bf16;
    if (!in_catalog) {
      expect_error(plan, errc::unsupported, "catalog");
      continue;
    }
    ASSERT_TRUE(plan.has_value()) << plan.error().to_string();
    EXPECT_EQ(plan->sku().family, family_of(op));
    EXPECT_EQ(plan->source(), PlanSource::heuristic);
    EXPECT_EQ(plan->spec(), spec);
    EXPECT_EQ(plan->device_arch(), kHopper);
    EXPECT_EQ(plan->workspace_size(), 0u);
    EXPECT_DOUBLE_EQ(plan->flops(), spec.flops());
  }
}

TEST(ConvPlanCreate, OverrideIsHonoured) {
  const auto entries = conv_entries(kHopper);
  if (entries.empty()) GTEST_SKIP() << "no sm_90a convolution kernels in this build's catalog";
  for (const CatalogEntry* e : entries) {
    ConvSpec spec = base_spec(operation_of(e->sku.family), e->sku.a);
    spec.output = e->sku.d;
    ConvPlanOptions o;
    o.sku_override = e->sku;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, ConvPlan::create(spec, kHopper, o));
    EXPECT_EQ(plan.sku(), e->sku);
    EXPECT_EQ(plan.source(), PlanSource::overridden);
  }
}

TEST(ConvPlanCreate, OverrideRules) {
  ConvPlanOptions o;
  o.sku_override = GemmSku{};  // a dense GEMM SKU
  expect_error(ConvPlan::create(base_spec(), kHopper, o), errc::invalid_argument, "dense");
  o.sku_override = ConvPlan::sku_for(base_spec(ConvOperation::dgrad), kHopper, kTile);
  expect_error(ConvPlan::create(base_spec(), kHopper, o), errc::invalid_argument, "conv_dgrad");
  o.sku_override = ConvPlan::sku_for(base_spec(ConvOperation::fprop, DType::f16), kHopper, kTile);
  expect_error(ConvPlan::create(base_spec(), kHopper, o), errc::invalid_argument, "f16");
  o.sku_override = ConvPlan::sku_for(base_spec(), kHopper, kTile);
  expect_error(ConvPlan::create(base_spec(), kAmpere, o), errc::unsupported, "sm_80");
  o.sku_override = ConvPlan::sku_for(base_spec(), kHopper, {192, 96, 32});  // never compiled ahead of time
  expect_error(ConvPlan::create(base_spec(), kHopper, o), errc::unsupported, "catalog");
}

// ---- ConvPlan rejections: each names the field and the rule, before any catalog search ----

TEST(ConvPlanRejects, NonPositiveExtents) {
  const std::pair<std::int64_t ConvSpec::*, const char*> fields[] = {
      {&ConvSpec::n, "n"}, {&ConvSpec::h, "h"}, {&ConvSpec::w, "w"}, {&ConvSpec::c, "c"},
      {&ConvSpec::k, "k"}, {&ConvSpec::r, "r"}, {&ConvSpec::s, "s"},
  };
  for (const auto& [field, field_name] : fields)
    for (std::int64_t bad : {0, -3}) {
      ConvSpec spec = base_spec();
      spec.*field = bad;
      expect_rejected(spec, errc::invalid_argument, std::string(field_name) + "=" + std::to_string(bad));
    }
}

TEST(ConvPlanRejects, NegativePaddingZeroStrideZeroDilation) {
  const std::pair<std::int64_t ConvSpec::*, const char*> pads[] = {{&ConvSpec::pad_h, "pad_h"},
                                                                   {&ConvSpec::pad_w, "pad_w"}};
  for (const auto& [field, field_name] : pads) {
    ConvSpec spec = base_spec();
    spec.*field = -1;
    expect_rejected(spec, errc::invalid_argument, std::string(field_name) + "=-1");
  }
  const std::pair<std::int64_t ConvSpec::*, const char*> steps[] = {{&ConvSpec::stride_h, "stride_h"},
                                                                    {&ConvSpec::stride_w, "stride_w"},
                                                                    {&ConvSpec::dilation_h, "dilation_h"},
                                                                    {&ConvSpec::dilation_w, "dilation_w"}};
  for (const auto& [field, field_name] : steps)
    for (std::int64_t bad : {0, -2}) {
      ConvSpec spec = base_spec();
      spec.*field = bad;
      expect_rejected(spec, errc::invalid_argument, std::string(field_name) + "=" + std::to_string(bad));
    }
}

TEST(ConvPlanRejects, EmptyOutput) {
  ConvSpec spec = base_spec();
  spec.h = 2;
  spec.r = 5;
  spec.pad_h = 0;  // a 5-row filter over 2 rows
  expect_rejected(spec, errc::invalid_argument, "the output is 0x16");
  spec = base_spec();
  spec.w = 4;
  spec.s = 3;
  spec.pad_w = 0;
  spec.dilation_w = 3;  // the dilated filter spans 7 columns
  expect_rejected(spec, errc::invalid_argument, "the output is 16x0");
}

TEST(ConvPlanRejects, ChannelsBreakingSixteenByteAlignment) {
  for (ConvOperation op : kOperations) {
    ConvSpec spec = base_spec(op);
    spec.c = 12;
    expect_rejected(spec, errc::invalid_argument, "c=12");
    expect_error(fake_plan(spec), errc::invalid_argument, "multiple of 8");
    spec = base_spec(op, DType::f16);
    spec.k = 20;
    expect_rejected(spec, errc::invalid_argument, "k=20");
  }
  ConvSpec f32 = base_spec(ConvOperation::fprop, DType::f32);
  f32.c = 6;
  expect_rejected(f32, errc::invalid_argument, "c=6");
  expect_error(fake_plan(f32), errc::invalid_argument, "multiple of 4");
  f32.c = 12;  // 48 bytes: fine for fp32
  f32.k = 20;
  CUACTOR_ASSERT_OK(fake_plan(f32));
}

TEST(ConvPlanRejects, TensorsPastInt32Extents) {
  ConvSpec spec = base_spec();
  spec.n = 65536;
  spec.h = spec.w = 256;
  spec.c = 8;  // 2^35 activation elements
  expect_rejected(spec, errc::invalid_argument, "2147483647");
  spec = base_spec();
  spec.h = std::int64_t{1} << 31;
  expect_rejected(spec, errc::invalid_argument, "h=2147483648");
  spec = base_spec();
  spec.k = 65536;
  spec.c = 65536;  // 2^32 x 9 filter elements
  expect_rejected(spec, errc::invalid_argument, "2147483647");
}

TEST(ConvPlanRejects, ProductsAndStepsPastInt32) {
  // Every extent fits int32, but N H W C and N P Q K are 2^64: the element counts must not wrap.
  ConvSpec spec = base_spec();
  spec.n = std::int64_t{1} << 20;
  spec.h = spec.w = std::int64_t{1} << 18;
  spec.c = spec.k = 256;
  spec.r = spec.s = 1;
  spec.pad_h = spec.pad_w = 0;
  expect_rejected(spec, errc::invalid_argument, "2147483647");
  // The kernel takes int strides: 2^32 + 1 must not reach it as 1 (P = 16 rows written into a
  // buffer sized for P = 1).
  spec = base_spec();
  spec.stride_h = (std::int64_t{1} << 32) + 1;
  expect_rejected(spec, errc::invalid_argument, "stride_h=4294967297");
}

TEST(ConvPlanRejects, WhatNoKernelComputes) {
  ConvSpec spec = base_spec();
  spec.groups = 2;
  expect_rejected(spec, errc::unsupported, "groups=2");
  spec = base_spec(ConvOperation::dgrad);
  spec.stride_h = 2;
  expect_rejected(spec, errc::unsupported, "stride");
  spec = base_spec(ConvOperation::dgrad);
  spec.stride_w = 2;
  expect_rejected(spec, errc::unsupported, "stride");
  spec = base_spec(ConvOperation::fprop, DType::e4m3);
  spec.output = DType::bf16;
  expect_rejected(spec, errc::unsupported, "e4m3");
  // Dtype pairs without a catalog kernel (the catalog writes the element type).
  spec = base_spec();
  spec.output = DType::f32;
  expect_error(ConvPlan::create(spec, kHopper), errc::unsupported, "f32");
  spec = base_spec(ConvOperation::wgrad, DType::f16);
  spec.output = DType::bf16;
  expect_error(ConvPlan::create(spec, kHopper), errc::unsupported, "f16");
  spec = base_spec(ConvOperation::dgrad, DType::f32);  // fp32 runs only as fprop
  expect_error(ConvPlan::create(spec, kHopper), errc::unsupported, "");
}

TEST(ConvPlanRejects, TmaIm2colLimits) {
  ConvSpec spec = base_spec();
  spec.pad_h = 257;
  expect_rejected(spec, errc::unsupported, "pad_h=257 exceeds 128");
  spec = base_spec();
  spec.pad_w = 300;
  expect_rejected(spec, errc::unsupported, "pad_w=300 exceeds 128");
  spec = base_spec();
  spec.h = 600;
  spec.dilation_h = 128;  // (R - 1) * dilation = 256: past the im2col filter offset range
  expect_rejected(spec, errc::unsupported, "(R-1)*dilation_h=256");
  spec = base_spec();
  spec.w = 600;
  spec.s = 256;  // (S - 1) * dilation = 255
  expect_rejected(spec, errc::unsupported, "(S-1)*dilation_w=255");
}

TEST(ConvPlanRejects, TmaIm2colCornersAtPlanTime) {
  // CUTLASS 4.2's sm_90a conv mainloop needs the im2col box corners of a 2-D convolution in
  // [-128, 127] (-pad and pad - (R - 1) * dilation): create() names the field and the rule instead
  // of run() failing later.
  ConvSpec spec = base_spec();
  spec.pad_h = 200;
  expect_rejected(spec, errc::unsupported, "pad_h=200 exceeds 128");
  spec.pad_h = 128;
  spec.h = 8;
  const auto edge = ConvPlan::create(spec, kHopper);  // pad 128: the last corner inside the limit
  if (!edge.has_value()) {
    EXPECT_NE(edge.error().message().find("catalog"), std::string::npos) << edge.error().message();
  }
  spec = base_spec();
  spec.h = 600;
  spec.pad_h = 0;
  spec.dilation_h = 100;  // upper corner 0 - 200
  expect_rejected(spec, errc::unsupported, "pad_h=0 minus the dilated filter extent 200 is -200, outside [-128, 127]");
}

TEST(ConvPlanRejects, ArchitecturesWithoutConvolutionKernels) {
  expect_rejected(base_spec(), errc::unsupported, "sm_80", kAmpere);
  expect_error(ConvPlan::create(base_spec(ConvOperation::wgrad), GpuArch{8, 9, false}), errc::unsupported, "sm_89");
}

// ---- Tensors, buffer sizes and kernel arguments, through a fake instance (no device) ----

class ConvFakePlan : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeKernel::last = {};
    FakeKernel::launches = 0;
    FakeKernel::workspace = 0;
  }

  /// 2 x 9 x 7 x 24 activations, 40 filters of 3 x 3, padding 1: x 6048 bytes, w 17280, y 10080.
  static ConvSpec spec(ConvOperation op) {
    ConvSpec s = base_spec(op);
    s.h = 9;
    s.w = 7;
    s.c = 24;
    s.k = 40;
    return s;
  }

  /// The operation's inputs and output at distinct aligned fake addresses, the rest null.
  static ConvTensors tensors(ConvOperation op) {
    ConvTensors t;
    if (op != ConvOperation::dgrad) t.x = fake(0x10000);
    if (op != ConvOperation::wgrad) t.w = fake(0x20000);
    if (op != ConvOperation::fprop) t.dy = fake(0x30000);
    t.out = fake_mut();
    return t;
  }
};

TEST_F(ConvFakePlan, WithInstanceKeepsSkuAndSource) {
  ConvPlanOptions o;
  o.sm_count = 100;
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, fake_plan(spec(ConvOperation::fprop), o));
  EXPECT_EQ(plan.sku(), ConvPlan::sku_for(spec(ConvOperation::fprop), kHopper, kTile));
  EXPECT_EQ(plan.source(), PlanSource::tuned);
  EXPECT_EQ(plan.workspace_size(), 0u);
  // with_instance checks that the kernel computes the spec.
  expect_error(ConvPlan::with_instance(spec(ConvOperation::fprop), kHopper, GemmSku{}, fake_instance(), nullptr,
                                       PlanSource::tuned),
               errc::invalid_argument, "dense");
  expect_error(ConvPlan::with_instance(spec(ConvOperation::fprop), kHopper,
                                       ConvPlan::sku_for(spec(ConvOperation::wgrad), kHopper, kTile), fake_instance(),
                                       nullptr, PlanSource::tuned),
               errc::invalid_argument, "conv_wgrad");
  expect_error(ConvPlan::with_instance(spec(ConvOperation::fprop), kHopper,
                                       ConvPlan::sku_for(base_spec(ConvOperation::fprop, DType::f16), kHopper, kTile),
                                       fake_instance(), nullptr, PlanSource::tuned),
               errc::invalid_argument, "f16");
}

TEST_F(ConvFakePlan, ValidateAcceptsTheOperationsTensorsAndIgnoresTheOthers) {
  for (ConvOperation op : kOperations) {
    SCOPED_TRACE(name(op));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, fake_plan(spec(op)));
    ConvTensors t = tensors(op);
    CUACTOR_ASSERT_OK(plan.validate(t));
    // The tensor the operation ignores may be anything.
    if (op == ConvOperation::fprop) t.dy = fake(2);
    if (op == ConvOperation::dgrad) t.x = fake(2);
    if (op == ConvOperation::wgrad) t.w = fake(2);
    CUACTOR_ASSERT_OK(plan.validate(t));
    // A source, separate or in place.
    t = tensors(op);
    t.beta = 0.5f;
    t.source = fake(0x40000);
    CUACTOR_ASSERT_OK(plan.validate(t));
    t.source = t.out;
    CUACTOR_ASSERT_OK(plan.validate(t));
  }
}

TEST_F(ConvFakePlan, ValidateRejectsEachRuleNamingTheTensor) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(fprop, fake_plan(spec(ConvOperation::fprop)));
  ConvTensors t = tensors(ConvOperation::fprop);
  t.x = nullptr;
  expect_error(fprop.validate(t), errc::invalid_argument, "tensor x: pointer is null");
  t = tensors(ConvOperation::fprop);
  t.w = nullptr;
  expect_error(fprop.validate(t), errc::invalid_argument, "tensor w:");
  t = tensors(ConvOperation::fprop);
  t.out = nullptr;
  expect_error(fprop.validate(t), errc::invalid_argument, "tensor out:");
  t = tensors(ConvOperation::fprop);
  t.x = fake(0x10000 + 2);
  expect_error(fprop.validate(t), errc::invalid_argument, "16-byte");
  t = tensors(ConvOperation::fprop);
  t.out = fake_mut(8);
  expect_error(fprop.validate(t), errc::invalid_argument, "16-byte");
  t = tensors(ConvOperation::fprop);
  t.beta = 0.5f;
  expect_error(fprop.validate(t), errc::invalid_argument, "source");
  t.source = fake(0x40000 + 4);
  expect_error(fprop.validate(t), errc::invalid_argument, "source");

  CUACTOR_ASSERT_OK_AND_ASSIGN(dgrad, fake_plan(spec(ConvOperation::dgrad)));
  t = tensors(ConvOperation::dgrad);
  t.dy = nullptr;
  expect_error(dgrad.validate(t), errc::invalid_argument, "tensor dy:");
  t = tensors(ConvOperation::dgrad);
  t.w = fake(0x20000 + 2);
  expect_error(dgrad.validate(t), errc::invalid_argument, "tensor w:");

  CUACTOR_ASSERT_OK_AND_ASSIGN(wgrad, fake_plan(spec(ConvOperation::wgrad)));
  t = tensors(ConvOperation::wgrad);
  t.x = nullptr;
  expect_error(wgrad.validate(t), errc::invalid_argument, "tensor x:");
  t = tensors(ConvOperation::wgrad);
  t.dy = fake(0x30000 + 2);
  expect_error(wgrad.validate(t), errc::invalid_argument, "tensor dy:");
}

TEST_F(ConvFakePlan, BufferSizesNameTheTensorAndBothSizes) {
  CUACTOR_ASSERT_OK_AND_ASSIGN(fprop, fake_plan(spec(ConvOperation::fprop)));
  CUACTOR_ASSERT_OK(fprop.check_buffer_sizes(6048, 17280, 0, 10080, 0));
  CUACTOR_ASSERT_OK(fprop.check_buffer_sizes(6048, 17280, 0, 10080, 10080));
  CUACTOR_ASSERT_OK(fprop.check_buffer_sizes(1 << 20, 1 << 20, 0, 1 << 20, 0));  // larger is fine
  expect_error(fprop.check_buffer_sizes(6047, 17280, 0, 10080, 0), errc::invalid_argument, "needs 6048");
  expect_error(fprop.check_buffer_sizes(6047, 17280, 0, 10080, 0), errc::invalid_argument, "6047");
  expect_error(fprop.check_buffer_sizes(6048, 100, 0, 10080, 0), errc::invalid_argument, "tensor w");
  expect_error(fprop.check_buffer_sizes(6048, 17280, 0, 10079, 0), errc::invalid_argument, "needs 10080");
  expect_error(fprop.check_buffer_sizes(6048, 17280, 0, 10080, 10078), errc::invalid_argument, "source");

  CUACTOR_ASSERT_OK_AND_ASSIGN(dgrad, fake_plan(spec(ConvOperation::dgrad)));
  CUACTOR_ASSERT_OK(dgrad.check_buffer_sizes(0, 17280, 10080, 6048, 0));
  expect_error(dgrad.check_buffer_sizes(0, 17280, 10079, 6048, 0), errc::invalid_argument, "tensor dy");
  expect_error(dgrad.check_buffer_sizes(0, 17280, 10080, 6047, 0), errc::invalid_argument, "needs 6048");

  CUACTOR_ASSERT_OK_AND_ASSIGN(wgrad, fake_plan(spec(ConvOperation::wgrad)));
  CUACTOR_ASSERT_OK(wgrad.check_buffer_sizes(6048, 0, 10080, 17280, 0));
  expect_error(wgrad.check_buffer_sizes(6048, 0, 10080, 17279, 0), errc::invalid_argument, "needs 17280");
  expect_error(wgrad.check_buffer_sizes(0, 0, 10080, 17280, 0), errc::invalid_argument, "tensor x");

  ConvSpec f32 = spec(ConvOperation::fprop);
  f32.element = f32.output = DType::f32;
  CUACTOR_ASSERT_OK_AND_ASSIGN(f32_plan, fake_plan(f32));
  CUACTOR_ASSERT_OK(f32_plan.check_buffer_sizes(12096, 34560, 0, 20160, 0));
  expect_error(f32_plan.check_buffer_sizes(6048, 34560, 0, 20160, 0), errc::invalid_argument, "needs 12096");
}

TEST_F(ConvFakePlan, RunPassesTheImplicitGemmOperandsOfEachOperation) {
  ConvPlanOptions o;
  o.sm_count = 100;
  for (ConvOperation op : kOperations) {
    SCOPED_TRACE(name(op));
    ConvSpec s = spec(op);
    s.pad_w = 2;
    if (op != ConvOperation::dgrad) s.stride_h = 2;
    s.dilation_w = 2;
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, fake_plan(s, o));
    ConvTensors t = tensors(op);
    t.alpha = 1.5f;
    CUACTOR_ASSERT_OK(plan.run(t, nullptr, 0, nullptr));
    ASSERT_EQ(FakeKernel::launches, 1);
    FakeKernel::launches = 0;
    const cuactor_conv_args& a = FakeKernel::last;
    EXPECT_EQ(a.n, 2);
    EXPECT_EQ(a.h, 9);
    EXPECT_EQ(a.w, 7);
    EXPECT_EQ(a.c, 24);
    EXPECT_EQ(a.k, 40);
    EXPECT_EQ(a.r, 3);
    EXPECT_EQ(a.s, 3);
    EXPECT_EQ(a.pad_h, 1);
    EXPECT_EQ(a.pad_w, 2);
    EXPECT_EQ(a.stride_h, op != ConvOperation::dgrad ? 2 : 1);
    EXPECT_EQ(a.stride_w, 1);
    EXPECT_EQ(a.dilation_h, 1);
    EXPECT_EQ(a.dilation_w, 2);
    // A = x (fprop) or dy; B = w (fprop, dgrad) or x (wgrad).
    EXPECT_EQ(a.a, op == ConvOperation::fprop ? t.x : t.dy);
    EXPECT_EQ(a.b, op == ConvOperation::wgrad ? t.x : t.w);
    EXPECT_EQ(a.d, t.out);
    EXPECT_EQ(a.c_source, t.out) << "without a source the kernel still needs a valid C: the output";
    EXPECT_EQ(a.alpha, 1.5f);
    EXPECT_EQ(a.beta, 0.0f);
    EXPECT_EQ(a.sm_count, 100);
    EXPECT_EQ(a.device, 0);
    t.beta = 0.25f;
    t.source = fake(0x40000);
    CUACTOR_ASSERT_OK(plan.run(t, nullptr, 0, nullptr));
    EXPECT_EQ(FakeKernel::last.c_source, t.source);
    EXPECT_EQ(FakeKernel::last.beta, 0.25f);
    FakeKernel::launches = 0;
  }
}

TEST_F(ConvFakePlan, RunChecksTensorsAndWorkspaceBeforeLaunching) {
  FakeKernel::workspace = 4096;
  CUACTOR_ASSERT_OK_AND_ASSIGN(plan, fake_plan(spec(ConvOperation::fprop)));
  EXPECT_EQ(plan.workspace_size(), 4096u);
  ConvTensors t = tensors(ConvOperation::fprop);
  expect_error(plan.run(t, nullptr, 0, nullptr), errc::workspace_too_small, "4096");
  expect_error(plan.run(t, fake_mut(0x200000), 4095, nullptr), errc::workspace_too_small, "4095");
  t.w = nullptr;
  expect_error(plan.run(t, fake_mut(0x200000), 4096, nullptr), errc::invalid_argument, "tensor w:");
  EXPECT_EQ(FakeKernel::launches, 0);
  t = tensors(ConvOperation::fprop);
  CUACTOR_ASSERT_OK(plan.run(t, fake_mut(0x200000), 4096, nullptr));
  EXPECT_EQ(FakeKernel::launches, 1);
}

// ---- On a GPU: every sm_90a catalog convolution against the fp64 reference ----

class ConvGpu : public test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    if (conv_entries(props_.arch).empty()) {
      bool sm90a_catalog = false;
      for (const CatalogEntry& e : catalog()) sm90a_catalog |= e.sku.arch == kHopper;
      if (sm90a_catalog && props_.arch == kHopper) FAIL() << "the catalog has sm_90a kernels but no convolution";
      GTEST_SKIP() << "no convolution kernel in this build's catalog runs on " << props_.arch.name()
                   << " (sm_90a only; CUACTOR_KERNEL_ARCHS selects the compiled families)";
    }
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

  Result<ConvPlan> plan_for(const GemmSku& sku, const ConvSpec& spec) const {
    ConvPlanOptions o;
    o.sku_override = sku;
    o.sm_count = props_.multiprocessors;
    o.device = props_.ordinal;
    return ConvPlan::create(spec, props_.arch, o);
  }

  /// Runs `cs` with catalog kernel `sku` on no workspace and compares with the fp64 reference.
  void check_case(const GemmSku& sku, const Case& cs, std::mt19937_64& rng) {
    const ConvSpec spec = spec_of(sku, cs);
    SCOPED_TRACE(::testing::Message() << sku.to_string() << " " << spec.to_string() << " alpha=" << cs.alpha
                                      << " beta=" << cs.beta << " source=" << static_cast<int>(cs.source));
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(sku, spec));
    ASSERT_EQ(plan.sku(), sku);
    ASSERT_EQ(plan.workspace_size(), 0u) << "today's convolution kernels need no workspace";
    Problem p;
    CUACTOR_ASSERT_OK(prepare(spec, cs, rng, p));
    CUACTOR_ASSERT_OK(plan.check_buffer_sizes(p.x.bytes.size(), p.w.bytes.size(), p.dy.bytes.size(), p.out_bytes,
                                              cs.source != Source::none ? p.out_bytes : 0));
    CUACTOR_ASSERT_OK(plan.run(p.tensors, nullptr, 0, stream_.get()));
    CUACTOR_ASSERT_OK_AND_ASSIGN(got, download(p));
    expect_matches(sku, p, got);
  }

  /// Every catalog kernel of `op` on every case; on Hopper the catalog must hold each of `types`.
  void check_operation(ConvOperation op, std::initializer_list<DType> types) {
    std::vector<const CatalogEntry*> entries;
    for (const CatalogEntry* e : catalog_entries(family_of(op)))
      if (runs_on(e->sku, props_.arch)) entries.push_back(e);
    if (props_.arch == kHopper)
      for (DType t : types) {
        bool found = false;
        for (const CatalogEntry* e : entries) found |= e->sku.a == t;
        EXPECT_TRUE(found) << "no sm_90a " << name(family_of(op)) << " " << name(t) << " kernel in the catalog";
      }
    if (entries.empty()) GTEST_SKIP() << "no " << name(family_of(op)) << " kernel runs on " << props_.arch.name();
    std::mt19937_64 rng(20261122);
    for (const CatalogEntry* e : entries)
      for (const Case& cs : cases_for(op, e->sku.a)) {
        check_case(e->sku, cs, rng);
        if (HasFatalFailure()) return;
      }
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
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
  // one the 128x128 tile (the wave heuristic by class, not by listed shape).
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
  std::mt19937_64 rng(11);
  for (const CatalogEntry* e : conv_entries(props_.arch)) {
    const ConvSpec spec = spec_of(e->sku, cs);
    SCOPED_TRACE(e->sku.to_string());
    CUACTOR_ASSERT_OK_AND_ASSIGN(plan, plan_for(e->sku, spec));
    Problem p;
    CUACTOR_ASSERT_OK(prepare(spec, cs, rng, p));
    const cudaStream_t s = stream_.get();
    CUACTOR_ASSERT_OK(plan.run(p.tensors, nullptr, 0, s));
    CUACTOR_ASSERT_OK_AND_ASSIGN(eager, download(p));
    expect_matches(e->sku, p, eager);
    CUACTOR_ASSERT_OK(gpu::memset_async(p.dout.data(), 0xff, p.dout.size(), s));
    CUACTOR_ASSERT_OK(stream_.synchronize());
    CUACTOR_ASSERT_OK(gpu::begin_stream_capture(s, gpu::CaptureMode::global));
    const Status captured = plan.run(p.tensors, nullptr, 0, s);
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
  }
}

}  // namespace
}  // namespace cuactor::kernels
