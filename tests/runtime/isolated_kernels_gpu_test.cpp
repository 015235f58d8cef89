/// @file
/// GEMM, grouped GEMM, convolution and capture/replay on an isolated device ([R10]): the same request
/// functions as in-process (kernels::async_dense_gemm, async_grouped_gemm[_device_sized],
/// async_conv), run by the real cuactor-worker, against fp64 host references; a captured sequence
/// held in the worker replays like the same requests run eagerly.
#include <cuda_bf16.h>

#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>

#include "cuactor/gpu/device.hpp"
#include "cuactor/graph/worker_capture.hpp"
#include "cuactor/kernels/catalog.hpp"
#include "cuactor/kernels/conv_actor.hpp"
#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "cuactor/kernels/grouped_actor.hpp"
#include "support/bf16_data.hpp"
#include "support/conv_reference.hpp"
#include "support/gpu_test.hpp"
#include "support/plan_checks.hpp"

namespace cuactor::runtime {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
using bf16 = __nv_bfloat16;
using test_support::f64;
using test_support::random_bf16;
using test_support::relative_error;

template <class R>
std::tuple<std::error_code, R> wait(std::future<std::tuple<std::error_code, R>> f) {
  if (f.wait_for(120s) != std::future_status::ready) {
    ADD_FAILURE() << "no answer within 120 s (a hang)";
    return {make_error_code(errc::timeout), R{}};
  }
  return f.get();
}

/// D rows of the grouped reference: rows of group g times expert g (N x K, "TN").
std::vector<double> grouped_reference(const std::vector<bf16>& a, const std::vector<bf16>& b,
                                      const std::vector<int>& rows, int n, int k) {
  std::vector<double> d;
  std::size_t row = 0;
  for (std::size_t g = 0; g < rows.size(); ++g)
    for (int r = 0; r < rows[g]; ++r, ++row)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int q = 0; q < k; ++q) acc += f64(a[row * k + q]) * f64(b[(g * n + j) * k + q]);
        d.push_back(acc);
      }
  return d;
}

std::vector<std::int32_t> offsets_of(const std::vector<int>& rows) {
  std::vector<std::int32_t> offs;
  std::int32_t end = 0;
  for (int r : rows) offs.push_back(end += r);
  return offs;
}

class IsolatedKernelsGpu : public test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    arch_ = props->arch;
    ActorOptions o;
    o.isolation = Isolation::worker;
    o.worker_path = CUACTOR_WORKER_EXE;
    auto a = DeviceActor::create(0, std::move(o));
    ASSERT_TRUE(a.has_value()) << a.error().to_string();
    actor_.emplace(std::move(*a));
  }
  void TearDown() override {
    if (actor_) actor_->shutdown();
  }
  template <class T>
  GpuRef<T> upload(const std::vector<T>& host) {
    auto [ec, ref] = wait(actor_->allocate<T>(host.size(), asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    auto [ec2, same] = wait(actor_->copy_to_device(ref, std::span<const T>(host), asio::use_future));
    EXPECT_FALSE(ec2) << ec2.message();
    return same;
  }
  template <class T>
  std::vector<T> download(const GpuRef<T>& ref) {
    auto [ec, v] = wait(actor_->copy_to_host(ref, asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    return v;
  }

  std::optional<DeviceActor> actor_;
  GpuArch arch_{};
  kernels::GemmPlanCache unused_plans_;  // an isolated actor plans in its worker
  kernels::GroupedPlanCache unused_grouped_;
  kernels::ConvPlanCache unused_conv_;
};

TEST_F(IsolatedKernelsGpu, DenseGemmRunsInTheWorkerAndMatchesTheReference) {
  if (auto why = test_support::missing_bf16_kernel(kernels::GemmFamily::dense, arch_); !why.empty())
    GTEST_SKIP() << why;
  constexpr int m = 200, n = 264, k = 328;  // tails in every dimension
  const auto a = random_bf16(std::size_t{m} * k, 1), b = random_bf16(std::size_t{n} * k, 2);
  const auto c = random_bf16(std::size_t{m} * n, 3);
  kernels::DenseGemmOperands<bf16, bf16, bf16> ops;
  ops.a = upload(a);
  ops.b = upload(b);
  ops.c = upload(c);
  ops.d = upload(std::vector<bf16>(std::size_t{m} * n, __float2bfloat16(NAN)));  // poisoned
  ops.alpha = 0.5f;
  ops.beta = -1.0f;
  kernels::DenseGemmShape shape;
  shape.m = m;
  shape.n = n;
  shape.k = k;
  auto [ec, sku] = wait(kernels::async_dense_gemm(*actor_, unused_plans_, shape, ops, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(sku.a, DType::bf16);
  EXPECT_EQ(unused_plans_.size(), 0u);
  std::vector<double> ref(std::size_t{m} * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int q = 0; q < k; ++q) acc += f64(a[std::size_t(i) * k + q]) * f64(b[std::size_t(j) * k + q]);
      ref[std::size_t(i) * n + j] = 0.5 * acc - f64(c[std::size_t(i) * n + j]);
    }
  EXPECT_LT(relative_error(download(ops.d), ref), 8e-3);
  // A D too small is the worker's typed error; the worker stays.
  ops.d = upload(std::vector<bf16>(16));
  auto [ec2, s2] = wait(kernels::async_dense_gemm(*actor_, unused_plans_, shape, ops, asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::invalid_argument));
  EXPECT_EQ(actor_->stats().worker_restarts, 0u);
}

TEST_F(IsolatedKernelsGpu, GroupedGemmHostAndDeviceSizedMatchTheReference) {
  if (auto why = test_support::missing_bf16_kernel(kernels::GemmFamily::grouped, arch_); !why.empty())
    GTEST_SKIP() << why;
  const std::vector<int> rows = {0, 37, 130, 1, 64};  // an empty group and tails
  constexpr int n = 192, k = 128;
  const int groups = static_cast<int>(rows.size());
  const std::int64_t total = 232;
  const auto a = random_bf16(std::size_t(total) * k, 4), b = random_bf16(std::size_t(groups) * n * k, 5);
  kernels::PackedGroupedOperands<bf16, bf16> ops;
  ops.a = upload(a);
  ops.b = upload(b);
  ops.d = upload(std::vector<bf16>(std::size_t(total) * n, __float2bfloat16(NAN)));
  ops.n = n;
  ops.k = k;
  const auto ref = grouped_reference(a, b, rows, n, k);
  kernels::GroupedGemmSpec spec;
  auto [ec, d] = wait(kernels::async_grouped_gemm(*actor_, unused_grouped_, spec, ops, rows, {}, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_LT(relative_error(download(d), ref), 8e-3);
  ops.d = upload(std::vector<bf16>(std::size_t(total) * n, __float2bfloat16(NAN)));
  auto offsets = upload(offsets_of(rows));
  auto [ec2, d2] = wait(kernels::async_grouped_gemm_device_sized(*actor_, unused_grouped_, spec, ops, offsets, total,
                                                                 {}, asio::use_future));
  ASSERT_FALSE(ec2) << ec2.message();
  EXPECT_LT(relative_error(download(d2), ref), 8e-3);
  // fp8 scales given as raw device pointers cannot cross to the worker.
  kernels::GroupedScalars raw;
  static const float one = 1.0f;
  raw.scale_b = &one;
  auto [ec3, d3] = wait(kernels::async_grouped_gemm(*actor_, unused_grouped_, spec, ops, rows, raw, asio::use_future));
  EXPECT_EQ(ec3, make_error_code(errc::unsupported));
}

TEST_F(IsolatedKernelsGpu, CapturedSequenceHeldByTheWorkerReplaysLikeEagerForNewRoutings) {
  if (auto why = test_support::missing_bf16_kernel(kernels::GemmFamily::grouped, arch_); !why.empty())
    GTEST_SKIP() << why;
  constexpr int n = 128, k = 64, groups = 4;
  constexpr std::int64_t capacity = 256;
  const auto a = random_bf16(std::size_t(capacity) * k, 6), b = random_bf16(std::size_t(groups) * n * k, 7);
  kernels::PackedGroupedOperands<bf16, bf16> ops;
  ops.a = upload(a);
  ops.b = upload(b);
  ops.d = upload(std::vector<bf16>(std::size_t(capacity) * n));
  ops.n = n;
  ops.k = k;
  auto offsets = upload(offsets_of({10, 20, 30, 40}));
  kernels::GroupedGemmSpec spec;
  spec.rows_per_group_hint = 64;

  auto capture = graph::WorkerCapture::begin(*actor_);
  ASSERT_TRUE(capture.has_value()) << capture.error().to_string();
  // Recorded: poison D, then the device-sized grouped GEMM over it.
  auto [ef, f] = wait(actor_->fill(ops.d, __float2bfloat16(NAN), asio::use_future));
  ASSERT_FALSE(ef) << ef.message();
  auto [eg, g] = wait(kernels::async_grouped_gemm_device_sized(*actor_, unused_grouped_, spec, ops, offsets, capacity,
                                                               {}, asio::use_future));
  ASSERT_FALSE(eg) << eg.message();
  // Copies through the staging region are refused while capturing; the capture goes on.
  auto [ec, c] = wait(actor_->copy_to_device(offsets, std::vector<std::int32_t>{1, 2, 3, 4}, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::unsupported));
  auto graph = capture->end_capture();
  ASSERT_TRUE(graph.has_value()) << graph.error().to_string();
  std::shared_ptr<const graph::WorkerGraph> held = *graph;

  for (const std::vector<int>& rows : {std::vector<int>{64, 0, 100, 92}, std::vector<int>{1, 2, 3, 250}}) {
    auto [eo, o] = wait(actor_->copy_to_device(offsets, offsets_of(rows), asio::use_future));
    ASSERT_FALSE(eo) << eo.message();
    auto [er, r] = wait(graph::replay(*actor_, held, asio::use_future));
    ASSERT_FALSE(er) << er.message();
    auto replayed = download(ops.d);
    EXPECT_LT(relative_error({replayed.begin(), replayed.begin() + std::ptrdiff_t(capacity) * n},
                             grouped_reference(a, b, rows, n, k)),
              8e-3);
    // The same two requests eagerly give the same bits.
    auto [ef2, f2] = wait(actor_->fill(ops.d, __float2bfloat16(NAN), asio::use_future));
    auto [eg2, g2] = wait(kernels::async_grouped_gemm_device_sized(*actor_, unused_grouped_, spec, ops, offsets,
                                                                   capacity, {}, asio::use_future));
    ASSERT_FALSE(ef2 || eg2);
    auto eager = download(ops.d);
    EXPECT_EQ(0, std::memcmp(eager.data(), replayed.data(), eager.size() * sizeof(bf16)));
  }
  EXPECT_EQ(actor_->stats().worker_restarts, 0u);
}

TEST_F(IsolatedKernelsGpu, ConvRunsInTheWorkerAndMatchesTheReference) {
  if (auto why = test_support::missing_bf16_kernel(kernels::GemmFamily::conv_fprop, arch_); !why.empty())
    GTEST_SKIP() << why;
  kernels::ConvSpec spec;  // 3x3, padding 1: the border reads padding
  spec.n = 2, spec.h = 9, spec.w = 11, spec.c = 16, spec.k = 32, spec.r = 3, spec.s = 3, spec.pad_h = spec.pad_w = 1;
  const auto x = random_bf16(std::size_t(spec.activation_elements()), 71);
  const auto w = random_bf16(std::size_t(spec.filter_elements()), 72);
  kernels::ConvOperands<bf16, bf16> ops;
  ops.x = upload(x);
  ops.w = upload(w);
  ops.out = upload(std::vector<bf16>(std::size_t(spec.output_elements()), __float2bfloat16(NAN)));
  ops.source = ops.out;  // in place (beta 0): y = 2 conv(x, w); out is only written
  ops.alpha = 2.0f;
  auto ref = test_support::conv_reference(spec, test_support::to_f64(x), test_support::to_f64(w), {});
  for (double& v : ref) v *= 2.0;
  auto [ec, sku] = wait(kernels::async_conv(*actor_, unused_conv_, spec, ops, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(sku.family, kernels::GemmFamily::conv_fprop);
  EXPECT_EQ(unused_conv_.size(), 0u);
  EXPECT_LT(relative_error(download(ops.out), ref), 8e-3);
  // An output too small is the worker's typed error; the worker stays.
  ops.out = upload(std::vector<bf16>(16));
  ops.source = {};
  auto [ec2, s2] = wait(kernels::async_conv(*actor_, unused_conv_, spec, ops, asio::use_future));
  EXPECT_EQ(ec2, make_error_code(errc::invalid_argument));
  EXPECT_EQ(actor_->stats().worker_restarts, 0u);
}

}  // namespace
}  // namespace cuactor::runtime
