/// @file
/// Test support: the base fixture of GPU tests of sm_90a-only kernels (epilogue trees, swiglu).
#pragma once

#include <gtest/gtest.h>

#include <utility>

#include "cuactor/core/arch.hpp"
#include "cuactor/gpu/device.hpp"
#include "cuactor/gpu/memory.hpp"
#include "cuactor/gpu/stream.hpp"
#include "support/gpu_test.hpp"

namespace cuactor::test_support {

/// Device 0's properties, a stream and the device's default pool; skips, naming the device, where
/// device 0 is not sm_90a (and like GpuTest where there is no device).
class HopperGpuTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto props = gpu::device_properties(0);
    ASSERT_TRUE(props.has_value()) << props.error().to_string();
    props_ = *props;
    if (props_.arch != GpuArch{9, 0, true})
      GTEST_SKIP() << "these kernels run on sm_90a; this device is " << props_.arch.name();
    auto stream = gpu::Stream::create(0);
    ASSERT_TRUE(stream.has_value()) << stream.error().to_string();
    stream_ = std::move(*stream);
    auto pool = gpu::MemPool::device_default(0);
    ASSERT_TRUE(pool.has_value()) << pool.error().to_string();
    pool_ = std::move(*pool);
  }

  gpu::DeviceProperties props_;
  gpu::Stream stream_;
  gpu::MemPool pool_;
};

}  // namespace cuactor::test_support
