/// @file
/// GPU test support: GPU tests skip with a visible reason where there is no CUDA device, and fail
/// instead when CUACTOR_REQUIRE_GPU=1 (set by scripts/gpu-check) so a broken GPU machine cannot pass.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuactor/core/expected.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::test_support {

/// True if CUACTOR_REQUIRE_GPU is set to a non-empty value other than 0.
inline bool gpu_required() {
  const char* v = std::getenv("CUACTOR_REQUIRE_GPU");
  return v && *v && std::string(v) != "0";
}

/// Base fixture for tests that need a CUDA device.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::device_count() > 0) return;
    if (gpu_required()) FAIL() << "CUACTOR_REQUIRE_GPU is set but no CUDA device is visible";
    GTEST_SKIP() << "no CUDA device: GPU test skipped (run scripts/gpu-check on a GPU machine)";
  }
};

}  // namespace cuactor::test_support

/// Asserts that a Result/Status holds a value, printing the error otherwise.
#define CUACTOR_ASSERT_OK(expr)                                                             \
  do {                                                                                      \
    auto&& cuactor_r_ = (expr);                                                             \
    ASSERT_TRUE(cuactor_r_.has_value()) << #expr << ": " << cuactor_r_.error().to_string(); \
  } while (false)

/// Evaluates a Result<T>, asserts success and binds its value to `lhs`.
#define CUACTOR_ASSERT_OK_AND_ASSIGN(lhs, expr)                                                 \
  auto lhs##_result_ = (expr);                                                                  \
  ASSERT_TRUE(lhs##_result_.has_value()) << #expr << ": " << lhs##_result_.error().to_string(); \
  auto lhs = std::move(*lhs##_result_)
