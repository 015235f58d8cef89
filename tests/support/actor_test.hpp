/// @file
/// Test support for requests on a device actor: a fixture owning an actor on device 0 with upload
/// and download helpers, and a wait that turns a use_future reply into a pair. Include from .cpp
/// test files only (Boost.Asio).
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/use_future.hpp>
#include <future>
#include <optional>
#include <span>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "cuactor/runtime/device_actor.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::test_support {

/// Waits for a use_future reply and returns (error, value).
template <class R>
std::pair<std::error_code, R> wait_reply(std::future<std::tuple<std::error_code, R>> f) {
  auto [ec, v] = f.get();
  return {ec, std::move(v)};
}

/// A GPU test with a device actor on device 0.
class ActorGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto a = runtime::DeviceActor::create(0);
    ASSERT_TRUE(a.has_value()) << a.error().to_string();
    actor_.emplace(std::move(*a));
  }

  /// A new buffer holding `host`.
  template <class T>
  runtime::GpuRef<T> upload(const std::vector<T>& host) {
    auto [ec, ref] = wait_reply(actor_->allocate<T>(host.size(), boost::asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    auto [ec2, same] = wait_reply(actor_->copy_to_device(ref, std::span<const T>(host), boost::asio::use_future));
    EXPECT_FALSE(ec2) << ec2.message();
    return same;
  }
  /// The contents of `ref`.
  template <class T>
  std::vector<T> download(const runtime::GpuRef<T>& ref) {
    auto [ec, host] = wait_reply(actor_->copy_to_host(ref, boost::asio::use_future));
    EXPECT_FALSE(ec) << ec.message();
    return host;
  }

  std::optional<runtime::DeviceActor> actor_;
};

}  // namespace cuactor::test_support
