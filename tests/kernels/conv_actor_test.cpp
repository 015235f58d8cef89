// Convolution requests on the device actor ([K7] through [R5]): fprop, dgrad and wgrad on GpuRefs
// against an fp64 host reference, cached plans, typed rejections that leave the actor healthy, and a
// conv recorded into a graph through the actor that replays like the eager request.
#include "cuactor/kernels/conv_actor.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuactor/gpu/device.hpp"
#include "cuactor/graph/actor_capture.hpp"
#include "cuactor/graph/capture_pool.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "support/actor_test.hpp"
#include "support/bf16_data.hpp"
#include "support/conv_reference.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::kernels {
namespace {

namespace asio = boost::asio;
using bf16 = __nv_bfloat16;
using runtime::GpuRef;
using test_support::conv_reference;
using test_support::random_bf16;
using test_support::relative_error;
using test_support::to_f64;
using test_support::wait_reply;

/// A 3x3 convolution with padding 1 over a small batch (every output pixel on the border reads
/// padding); c and k keep the 16-byte channel rows that bf16 tensors need.
ConvSpec small_spec(ConvOperation op) {
  ConvSpec s;
  s.operation = op;
  s.n = 2;
  s.h = 9;
  s.w = 11;
  s.c = 16;
  s.k = 32;
  s.r = 3;
  s.s = 3;
  s.pad_h = s.pad_w = 1;
  return s;
}

class ConvActorGpu : public test_support::ActorGpuTest {
 protected:
  void SetUp() override {
    ActorGpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    arch_ = props->arch;
  }

  /// Empty when the catalog holds a bf16 kernel of `op` that runs on this device, else why a test
  /// of `op` is skipped.
  std::string missing_kernel(ConvOperation op) const { return test_support::missing_bf16_kernel(family_of(op), arch_); }

  /// Uploads random tensors for the inputs of `spec`'s operation (and a poisoned output).
  ConvOperands<bf16, bf16> random_operands(const ConvSpec& spec, unsigned seed) {
    ConvOperands<bf16, bf16> ops;
    const auto in = reads_of(spec.operation);
    if (in.x) ops.x = upload(random_bf16(static_cast<std::size_t>(spec.activation_elements()), seed));
    if (in.w) ops.w = upload(random_bf16(static_cast<std::size_t>(spec.filter_elements()), seed + 1));
    if (in.dy) ops.dy = upload(random_bf16(static_cast<std::size_t>(spec.output_elements()), seed + 2));
    ops.out = upload(std::vector<bf16>(static_cast<std::size_t>(spec.result_elements()), __float2bfloat16(NAN)));
    return ops;
  }

  /// The fp64 accumulator of `spec` on the current contents of `ops`' inputs.
  std::vector<double> reference(const ConvSpec& spec, const ConvOperands<bf16, bf16>& ops) {
    const auto in = reads_of(spec.operation);
    return conv_reference(spec, in.x ? to_f64(download(ops.x)) : std::vector<double>{},
                          in.w ? to_f64(download(ops.w)) : std::vector<double>{},
                          in.dy ? to_f64(download(ops.dy)) : std::vector<double>{});
  }

  GpuArch arch_;
  ConvPlanCache plans_;
};

TEST_F(ConvActorGpu, FpropMatchesReferenceAndReusesThePlan) {
  if (auto why = missing_kernel(ConvOperation::fprop); !why.empty()) GTEST_SKIP() << why;
  const ConvSpec spec = small_spec(ConvOperation::fprop);
  auto ops = random_operands(spec, 1);
  const auto source = random_bf16(static_cast<std::size_t>(spec.output_elements()), 9);
  ops.source = upload(source);
  ops.alpha = 0.5f;
  ops.beta = -1.0f;
  auto want = reference(spec, ops);
  const auto src = to_f64(source);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] - src[i];
  for (int round = 0; round < 3; ++round) {
    auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, ops, asio::use_future));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(sku.family, GemmFamily::conv_fprop);
    EXPECT_EQ(sku.a, DType::bf16);
    EXPECT_LT(relative_error(download(ops.out), want), 8e-3) << "round " << round;
  }
  EXPECT_EQ(plans_.size(), 1u);
  EXPECT_EQ(plans_.misses(), 1u);
  EXPECT_EQ(plans_.hits(), 2u);
}

// dgrad accumulating into its own output (source is out): dx = conv_transpose(dy, w) + dx.
TEST_F(ConvActorGpu, DgradAccumulatesInPlace) {
  if (auto why = missing_kernel(ConvOperation::dgrad); !why.empty()) GTEST_SKIP() << why;
  const ConvSpec spec = small_spec(ConvOperation::dgrad);
  auto ops = random_operands(spec, 11);
  const auto before = random_bf16(static_cast<std::size_t>(spec.activation_elements()), 19);
  ops.out = upload(before);
  ops.source = ops.out;
  ops.beta = 1.0f;
  auto want = reference(spec, ops);
  const auto old = to_f64(before);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += old[i];
  auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, ops, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(sku.family, GemmFamily::conv_dgrad);
  EXPECT_LT(relative_error(download(ops.out), want), 8e-3);
}

// wgrad ignores the filter it is given (it reads dy and x): an unrelated w is neither used nor tracked.
TEST_F(ConvActorGpu, WgradMatchesReference) {
  if (auto why = missing_kernel(ConvOperation::wgrad); !why.empty()) GTEST_SKIP() << why;
  const ConvSpec spec = small_spec(ConvOperation::wgrad);
  auto ops = random_operands(spec, 21);
  ops.w = upload(std::vector<bf16>(4));  // ignored: wrong size on purpose
  const auto want = reference(spec, ops);
  auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, ops, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(sku.family, GemmFamily::conv_wgrad);
  EXPECT_LT(relative_error(download(ops.out), want), 8e-3);
}

// Rejections that need no kernel: a stale handle (checked before the request runs) and a malformed
// spec (checked before a kernel is chosen).
TEST_F(ConvActorGpu, RejectsStaleHandlesAndMalformedSpecs) {
  const ConvSpec spec = small_spec(ConvOperation::fprop);
  auto ops = random_operands(spec, 31);
  // A handle minted by another device state (its device or context is not this actor's).
  auto other = std::make_shared<runtime::DeviceState>(7);
  other->advance_generation();
  other->set_accepting_ops(true);
  ConvOperands<bf16, bf16> stale = ops;
  stale.w = GpuRef<bf16>(
      std::make_shared<runtime::DeviceAllocation>(ops.w.allocation()->data(), ops.w.size_bytes(), other, nullptr));
  auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, stale, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::stale_handle)) << ec.message();
  // bf16 channel rows of 12 elements (24 bytes) break the 16-byte alignment.
  ConvSpec bad = spec;
  bad.c = 12;
  auto [ec2, sku2] = wait_reply(async_conv(*actor_, plans_, bad, ops, asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::invalid_argument)) << ec2.message();
  EXPECT_EQ(plans_.size(), 0u);  // failures are not cached
  EXPECT_EQ(actor_->stats().circuit, runtime::CircuitState::closed);
}

TEST_F(ConvActorGpu, RejectsWrongSizesMissingInputsAndAliasingWithTypedErrors) {
  if (auto why = missing_kernel(ConvOperation::fprop); !why.empty()) GTEST_SKIP() << why;
  const ConvSpec spec = small_spec(ConvOperation::fprop);
  auto ops = random_operands(spec, 41);
  const auto expect_invalid = [&](ConvOperands<bf16, bf16> o, const char* what) {
    auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, std::move(o), asio::use_future));
    EXPECT_EQ(ec, make_error_code(errc::invalid_argument)) << what << ": " << ec.message();
  };
  ConvOperands<bf16, bf16> small_w = ops;
  small_w.w = upload(random_bf16(static_cast<std::size_t>(spec.filter_elements()) - 8, 42));
  expect_invalid(small_w, "w one channel row short");
  ConvOperands<bf16, bf16> small_out = ops;
  small_out.out = upload(std::vector<bf16>(static_cast<std::size_t>(spec.output_elements()) / 2));
  expect_invalid(small_out, "out half the size");
  ConvOperands<bf16, bf16> no_x = ops;
  no_x.x = {};
  expect_invalid(no_x, "x missing");
  ConvOperands<bf16, bf16> no_source = ops;
  no_source.beta = 1.0f;  // beta != 0 needs a source
  expect_invalid(no_source, "beta without source");
  ConvOperands<bf16, bf16> in_place = ops;  // x and y have different shapes, but the same buffer is rejected first
  in_place.out = ops.x;
  expect_invalid(in_place, "out aliases x");
  // The actor is unharmed: the well-formed request runs.
  auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, ops, asio::use_future));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(actor_->stats().circuit, runtime::CircuitState::closed);
}

// A conv request submitted while the actor's stream captures is recorded (its tensors go into the
// graph's pool and its read/write sets); each replay computes what the eager request computes on the
// inputs' current contents, bit for bit.
TEST_F(ConvActorGpu, CapturedConvReplaysLikeTheEagerRequest) {
  if (auto why = missing_kernel(ConvOperation::fprop); !why.empty()) GTEST_SKIP() << why;
  const ConvSpec spec = small_spec(ConvOperation::fprop);
  auto eager = random_operands(spec, 51);
  ConvOperands<bf16, bf16> captured = eager;
  captured.out = upload(std::vector<bf16>(static_cast<std::size_t>(spec.output_elements()), __float2bfloat16(NAN)));
  {
    CUACTOR_ASSERT_OK_AND_ASSIGN(capture, graph::ActorCapture::begin(*actor_, graph::CaptureMode::global));
    auto [ec, sku] = wait_reply(async_conv(*actor_, plans_, spec, captured, asio::use_future));  // once recorded
    ASSERT_FALSE(ec) << ec.message();
    CUACTOR_ASSERT_OK_AND_ASSIGN(recorded, capture.end_capture());
    ASSERT_EQ(recorded.buffers_written().size(), 1u);
    EXPECT_EQ(recorded.buffers_written()[0], captured.out.allocation());
    EXPECT_EQ(recorded.buffers_read().size(), 2u);  // x and w
    EXPECT_GE(recorded.pool_buffer_count(), 3u);
    auto graph = std::make_shared<graph::CapturedGraph>(std::move(recorded));
    for (int round = 0; round < 2; ++round) {
      if (round > 0) {
        ASSERT_FALSE(
            wait_reply(actor_->copy_to_device(eager.x, std::span<const bf16>(random_bf16(eager.x.size(), 60 + round)),
                                              asio::use_future))
                .first);
        ASSERT_FALSE(wait_reply(actor_->fill(captured.out, __float2bfloat16(NAN), asio::use_future)).first);
      }
      auto [ee, s] = wait_reply(async_conv(*actor_, plans_, spec, eager, asio::use_future));
      ASSERT_FALSE(ee) << ee.message();
      auto [er, done] = wait_reply(graph::replay(*actor_, graph, asio::use_future));
      ASSERT_FALSE(er) << er.message();
      const auto want = download(eager.out), got = download(captured.out);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0) << "replay " << round;
      EXPECT_LT(relative_error(got, reference(spec, eager)), 8e-3) << "replay " << round;
    }
    EXPECT_EQ(graph->num_replays(), 2u);
  }
  actor_->shutdown();
  auto released = graph::wait_for_released_pools(std::chrono::seconds(10));
  EXPECT_TRUE(released.has_value()) << released.error().to_string();
}

}  // namespace
}  // namespace cuactor::kernels
