// Dense GEMM requests on the device actor: GpuRef operands, cached plans, write tracking, checked
// against an fp64 host reference; rejections reply with typed errors naming the operand.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <future>
#include <random>
#include <vector>

#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "support/bf16_data.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::kernels {
namespace {

namespace asio = boost::asio;
using runtime::DeviceActor;
using runtime::GpuRef;
using test_support::random_bf16;

template <class R>
std::pair<std::error_code, R> wait(std::future<std::tuple<std::error_code, R>> f) {
  auto [ec, v] = f.get();
  return {ec, std::move(v)};
}

DenseGemmShape shape_of(std::int64_t m, std::int64_t n, std::int64_t k) {
  DenseGemmShape s;
  s.m = m;
  s.n = n;
  s.k = k;
  return s;
}

class DenseActorGpu : public cuactor::test_support::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto a = DeviceActor::create(0);
    ASSERT_TRUE(a.has_value()) << a.error().to_string();
    actor_.emplace(std::move(*a));
  }

  template <class T>
  GpuRef<T> upload(const std::vector<T>& host) {
    auto [ec, ref] = wait(actor_->allocate<T>(host.size(), asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    auto [ec2, same] = wait(actor_->copy_to_device(ref, std::span<const T>(host), asio::use_future));
    EXPECT_FALSE(ec2) << ec2.message();
    return same;
  }

  std::optional<DeviceActor> actor_;
  GemmPlanCache plans_;
};

TEST_F(DenseActorGpu, GemmMatchesReferenceAndReusesThePlan) {
  constexpr int m = 200, n = 264, k = 328;  // tails in every dimension
  const auto a = random_bf16(std::size_t{m} * k, 1), b = random_bf16(std::size_t{n} * k, 2);
  const auto c = random_bf16(std::size_t{m} * n, 3);
  DenseGemmOperands<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16> ops;
  ops.a = upload(a);
  ops.b = upload(b);  // N x K: "TN"
  ops.c = upload(c);
  ops.d = upload(std::vector<__nv_bfloat16>(std::size_t{m} * n, __float2bfloat16(NAN)));  // poisoned
  ops.alpha = 0.5f;
  ops.beta = -1.0f;
  const DenseGemmShape shape = shape_of(m, n, k);
  for (int round = 0; round < 3; ++round) {
    auto [ec, sku] = wait(async_dense_gemm(*actor_, plans_, shape, ops, asio::use_future));
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(sku.a, DType::bf16);
    auto [ec2, d] = wait(actor_->copy_to_host(ops.d, asio::use_future));
    ASSERT_FALSE(ec2) << ec2.message();
    double num = 0, den = 0;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int q = 0; q < k; ++q)
          acc +=
              double(__bfloat162float(a[std::size_t(i) * k + q])) * double(__bfloat162float(b[std::size_t(j) * k + q]));
        const double ref = 0.5 * acc - double(__bfloat162float(c[std::size_t(i) * n + j]));
        const double got = __bfloat162float(d[std::size_t(i) * n + j]);
        num += (got - ref) * (got - ref);
        den += ref * ref;
      }
    EXPECT_LT(std::sqrt(num / den), 8e-3) << "round " << round;
  }
  EXPECT_EQ(plans_.size(), 1u);
  EXPECT_EQ(plans_.misses(), 1u);
  EXPECT_EQ(plans_.hits(), 2u);
}

TEST_F(DenseActorGpu, RejectsBuffersTooSmallNamingTheOperand) {
  DenseGemmOperands<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16> ops;
  ops.a = upload(random_bf16(64 * 64, 4));
  ops.b = upload(random_bf16(64 * 32, 5));  // needs 64 x 64
  ops.d = upload(random_bf16(64 * 64, 6));
  auto [ec, sku] = wait(async_dense_gemm(*actor_, plans_, shape_of(64, 64, 64), ops, asio::use_future));
  EXPECT_EQ(ec, errc::invalid_argument) << ec.message();
}

TEST_F(DenseActorGpu, RejectsMisalignedLeadingDimension) {
  DenseGemmOperands<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16> ops;
  ops.a = upload(random_bf16(64 * 72, 7));
  ops.b = upload(random_bf16(64 * 64, 8));
  ops.d = upload(random_bf16(64 * 64, 9));
  ops.lda = 68;  // not a multiple of 8 bf16 elements
  auto [ec, sku] = wait(async_dense_gemm(*actor_, plans_, shape_of(64, 64, 64), ops, asio::use_future));
  EXPECT_EQ(ec, errc::invalid_argument) << ec.message();
}

}  // namespace
}  // namespace cuactor::kernels
