// Grouped GEMM requests on the device actor: packed MoE operands as GpuRefs, cached plans, host-known
// rows and device-resident offsets, checked against an fp64 host reference.
#include "cuactor/kernels/grouped_actor.hpp"

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <cmath>
#include <future>
#include <numeric>
#include <random>
#include <vector>

#include "cuactor/kernels/catalog.hpp"
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

class GroupedActorGpu : public cuactor::test_support::GpuTest {
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

  /// Relative norm error of packed D against the fp64 reference of rows[g] x n x k per group.
  double check(const std::vector<__nv_bfloat16>& a, const std::vector<__nv_bfloat16>& b,
               const std::vector<__nv_bfloat16>& d, const std::vector<int>& rows, int n, int k) {
    double num = 0, den = 0;
    std::size_t start = 0;
    for (std::size_t g = 0; g < rows.size(); ++g) {
      for (int r = 0; r < rows[g]; ++r)
        for (int c = 0; c < n; ++c) {
          double ref = 0;
          for (int q = 0; q < k; ++q)
            ref += double(__bfloat162float(a[(start + r) * k + q])) * double(__bfloat162float(b[(g * n + c) * k + q]));
          const double got = __bfloat162float(d[(start + r) * n + c]);
          num += (got - ref) * (got - ref);
          den += ref * ref;
        }
      start += rows[g];
    }
    return std::sqrt(num / den);
  }

  std::optional<DeviceActor> actor_;
  GroupedPlanCache plans_;
};

TEST_F(GroupedActorGpu, HostRowsAndDeviceOffsetsMatchReference) {
  constexpr int kN = 128, kK = 96, kCapacity = 320;
  const std::vector<int> rows{37, 0, 130, 9, 100};
  const int groups = static_cast<int>(rows.size());
  auto a_host = random_bf16(std::size_t{kCapacity} * kK, 1);
  auto b_host = random_bf16(std::size_t(groups) * kN * kK, 2);
  std::vector<__nv_bfloat16> poison(std::size_t{kCapacity} * kN, __float2bfloat16(NAN));
  auto a = upload(a_host);
  auto b = upload(b_host);
  auto d = upload(poison);
  GroupedGemmSpec spec;  // sm_count 0: arch and SM count from the actor's device
  PackedGroupedOperands<__nv_bfloat16, __nv_bfloat16> ops{a, b, d, kN, kK};
  auto [ec, out] = wait(async_grouped_gemm(*actor_, plans_, spec, ops, rows, GroupedScalars{}, asio::use_future));
  ASSERT_FALSE(ec) << ec.message();
  auto [ec2, d_host] = wait(actor_->copy_to_host(out, asio::use_future));
  ASSERT_FALSE(ec2) << ec2.message();
  EXPECT_LT(check(a_host, b_host, d_host, rows, kN, kK), 5e-3);
  EXPECT_EQ(plans_.size(), 1u);

  // Same operands, rows from device offsets; a second request reuses the cached plan.
  std::vector<std::int32_t> ends(rows.size());
  std::partial_sum(rows.begin(), rows.end(), ends.begin());
  auto offsets = upload(ends);
  auto d2 = upload(poison);
  ops.d = d2;
  auto [ec3, out2] = wait(async_grouped_gemm_device_sized(*actor_, plans_, spec, ops, offsets, kCapacity,
                                                          GroupedScalars{}, asio::use_future));
  ASSERT_FALSE(ec3) << ec3.message();
  auto [ec4, d2_host] = wait(actor_->copy_to_host(out2, asio::use_future));
  ASSERT_FALSE(ec4) << ec4.message();
  EXPECT_LT(check(a_host, b_host, d2_host, rows, kN, kK), 5e-3);
}

TEST_F(GroupedActorGpu, RejectsOperandsTooSmallForTheRows) {
  auto a = upload(random_bf16(64 * 64, 3));
  auto b = upload(random_bf16(2 * 64 * 64, 4));
  auto d = upload(random_bf16(64 * 64, 5));
  PackedGroupedOperands<__nv_bfloat16, __nv_bfloat16> ops{a, b, d, 64, 64};
  auto [ec, out] = wait(async_grouped_gemm(*actor_, plans_, GroupedGemmSpec{}, ops, std::vector<int>{40, 40},
                                           GroupedScalars{}, asio::use_future));
  EXPECT_EQ(ec, make_error_code(errc::invalid_argument));
}

}  // namespace
}  // namespace cuactor::kernels
